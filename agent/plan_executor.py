"""The elected planner's work: plan the live cluster, store the plan, and execute it batch by
batch with throttled reassignments (agent/reassign.py), recording progress in ZooKeeper so
that any agent elected later resumes it. Runs on its own thread while this agent holds the
planner election; the decisions are agent.plan_decide's, this module only reads and acts.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from agent.plan_decide import (
    Assignment,
    PlanAction,
    PlanInputs,
    PlanSnapshot,
    decide_plan,
    plan_inputs,
)
from agent.reassign import PartitionMove, ReassignmentError, ReassignmentTool
from agent.settings import AgentSettings
from planner.batches import MovementBudget
from planner.feasibility import InfeasibleError
from planner.layout import LayoutError, parse_layout
from planner.live_layout import LiveLayoutError, read_live_layout
from planner.model import BrokerState, PlannerSettings
from planner.plan import make_plan
from planner.spec import ClusterSpec
from planner.store import (
    PlanConflictError,
    PlanStore,
    PlanStoreError,
    PlanTooLargeError,
    Progress,
    StoredPlan,
)
from planner.zkpaths import ClusterPaths

log = structlog.get_logger("kaas.agent.planner")

VERIFY_EVERY_S = 30.0
"""While a batch moves, how often Kafka's tool is asked about it (each ask is a JVM)."""


@dataclass
class _Memory:
    last_planned_at: float = 0.0
    planned_for: PlanInputs | None = None
    last_verify_at: float = 0.0
    last_refusal: str = ""
    batch_pending: tuple[int, int] = (-1, 0)
    """(batch, partitions still moving) at the last look, to tell when one arrived."""
    last_progress_at: float = 0.0


class PlanExecutor:
    def __init__(
        self,
        settings: AgentSettings,
        zk: KazooClient,
        read_spec: Callable[[], tuple[ClusterSpec | None, str | None]],
        bootstrap: Callable[[], str],
        kafka_libs: Callable[[str], Path],
        journal: Callable[[str, str, str], None],
    ) -> None:
        self.settings = settings
        self.zk = zk
        self.paths = ClusterPaths(settings.cluster)
        self.store = PlanStore(zk, settings.cluster)
        self.read_spec = read_spec
        self.bootstrap = bootstrap
        self.kafka_libs = kafka_libs
        self.journal = journal
        self.memory = _Memory()
        self.sentence = ""
        self.status: dict[str, Any] = {}

    # -- snapshot -------------------------------------------------------------------------

    def snapshot(self) -> tuple[PlanSnapshot, ClusterSpec | None]:
        spec, _ = self.read_spec()
        plan: StoredPlan | None = None
        progress: Progress | None = None
        error = None
        try:
            plan = self.store.read()
            progress = self.store.read_progress()
        except PlanStoreError as exc:
            error = str(exc)
        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": 10000})
        metadata = admin.list_topics(timeout=10)
        # Every topic, Kafka's internal ones too: the planner balances them like any other.
        live = {
            (str(t.topic), p.id): tuple(p.replicas)
            for t in metadata.topics.values()
            for p in t.partitions.values()
        }
        try:
            lock_held = bool(self.zk.get_children(self.paths.restart_lock))
        except NoNodeError:
            lock_held = False
        snap = PlanSnapshot(
            spec_ok=spec is not None,
            spec_generation=spec.generation if spec else -1,
            draining=spec.draining_broker_ids if spec else frozenset(),
            plan=plan,
            plan_error=error,
            progress=progress,
            live=live,
            registered=frozenset(metadata.brokers),
            restart_lock_held=lock_held,
            now=time.time(),
            last_planned_at=self.memory.last_planned_at,
            planned_for=self.memory.planned_for,
            replan_interval_s=self.settings.replan_interval_s,
            stall_s=self.settings.reassignment_stall_s,
            last_progress_at=self._note_progress(plan, progress, live),
        )
        return snap, spec

    def _note_progress(
        self, plan: StoredPlan | None, progress: Progress | None, live: Assignment
    ) -> float:
        """The last time the running batch's count of partitions still moving went down."""
        if plan is None or progress is None or progress.started_batch is None:
            return 0.0
        batch = progress.started_batch
        moving = sum(1 for t, p, r in plan.batch(batch) if (t, p) in live and live[(t, p)] != r)
        seen_batch, seen_moving = self.memory.batch_pending
        if seen_batch != batch or moving < seen_moving:
            # A batch first seen by this agent (also after a takeover) counts from now.
            self.memory.last_progress_at = time.time()
        self.memory.batch_pending = (batch, moving)
        return self.memory.last_progress_at

    # -- one tick -------------------------------------------------------------------------

    def tick(self) -> str:
        snap, spec = self.snapshot()
        action = decide_plan(snap)
        sentence = self._act(action, snap, spec)
        if sentence != self.sentence:
            log.info(sentence, action=action.kind)
        self.sentence = sentence
        self.status = self._status()
        return sentence

    def _status(self) -> dict[str, Any]:
        return self.store.read_status()

    def _act(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec | None) -> str:
        kind = action.kind
        if kind == "make_plan" and spec is not None:
            return self._make_plan(action, snap, spec)
        if kind == "start_batch" and spec is not None:
            return self._start_batch(action, snap, spec)
        if kind == "check_batch" and spec is not None:
            return self._check_batch(action, snap, spec)
        if kind == "finish":
            self._advance(snap, state="done", detail=action.reason)
            # Plan once more at the next tick: a spec change or a broker that came while the
            # plan ran (a drain asked for mid-plan) is planned for at once, not at the next
            # periodic check; with nothing changed the new plan is empty and the planner holds.
            self.memory.last_planned_at = 0.0
            self.memory.planned_for = None
            self.journal("plan_done", action.reason, "done")
            return f"planner: {action.reason}"
        if kind == "supersede":
            self._advance(snap, state="superseded", detail=action.reason)
            self.memory.last_planned_at = 0.0
            self.journal("plan_superseded", action.reason, "replanning")
            return f"planner: {action.reason}"
        if kind == "refuse" and action.reason != self.memory.last_refusal:
            self.memory.last_refusal = action.reason
            self.journal("plan_refused", action.reason, "not executed")
        return f"planner: {action.reason}"

    def _make_plan(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec) -> str:
        self.memory.last_planned_at = snap.now
        self.memory.planned_for = plan_inputs(snap.spec_generation, snap.registered, snap.live)
        try:
            document = read_live_layout(
                self.bootstrap(),
                self.settings.jolokia_port,
                timeout_s=10.0,
            )
            cluster = parse_layout(document)
        except (LiveLayoutError, LayoutError) as exc:
            self.memory.last_planned_at = 0.0
            return f"planner: cannot read the cluster's layout: {exc}"
        cluster = cluster.with_broker_states(
            {b: BrokerState.DRAINING for b in spec.draining_broker_ids}
        )
        budget = MovementBudget(
            spec.budget.max_partitions_per_broker,
            spec.budget.max_bytes_in_flight,
            spec.budget.max_leadership_changes,
        )
        try:
            plan = make_plan(cluster, PlannerSettings(), seed=0, budget=budget)
        except InfeasibleError as exc:
            if str(exc) != self.memory.last_refusal:
                self.memory.last_refusal = str(exc)
                self.journal("plan_infeasible", str(exc), "no plan")
            return f"planner: no plan keeps the hard goals: {exc}"
        if plan.is_empty:
            return f"planner: placement balanced (score {plan.score_after.total:.1f})"
        previous = snap.plan
        plan_id = previous.plan_id + 1 if previous is not None else 1
        inputs = {
            "draining": sorted(spec.draining_broker_ids),
            "spec_generation": spec.generation,
            "brokers": sorted(snap.registered),
            "why": action.reason,
        }
        stored = self._store(plan, plan_id, inputs, previous)
        if stored is None:
            self.memory.last_planned_at = 0.0
            return "planner: the plan changed under this planner; reading it again"
        summary = plan.summary()
        self.journal(
            "plan_stored",
            action.reason,
            f"plan {plan_id}: {summary['replicas_moved']} replicas, "
            f"{summary['leadership_changes']} leadership changes in {stored.batch_count} "
            f"batches, score {plan.score_before.total:.1f} -> {plan.score_after.total:.1f}",
        )
        return (
            f"planner: stored plan {plan_id} ({stored.batch_count} batches, "
            f"{summary['replicas_moved']} replicas to move)"
        )

    def _store(
        self,
        plan: Any,
        plan_id: int,
        inputs: dict[str, Any],
        previous: StoredPlan | None,
    ) -> StoredPlan | None:
        expected = previous.meta_version if previous is not None else None
        max_batches: int | None = None
        while True:
            stored = StoredPlan.from_plan(
                self.settings.cluster, plan_id, plan, inputs, max_batches=max_batches
            )
            try:
                return self.store.write(stored, expected)
            except PlanTooLargeError:
                # Store a prefix; the rest is planned again once it has run.
                count = stored.batch_count
                if count <= 1:
                    raise
                max_batches = count // 2
            except PlanConflictError as exc:
                log.warning("plan_write_conflict", error=str(exc))
                return None

    def _tool(self, spec: ClusterSpec) -> ReassignmentTool:
        return ReassignmentTool(
            self.settings.java, self.kafka_libs(spec.kafka_version), self.bootstrap()
        )

    def _start_batch(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec) -> str:
        progress = snap.progress
        assert progress is not None
        # Recorded first: an agent taking over mid-batch checks it rather than restarting it.
        started = replace(
            progress,
            state="executing",
            started_batch=action.batch,
            batch_started_at=snap.now,
            controller_moved=False,
            detail=action.reason,
            updated_at=snap.now,
        )
        try:
            self.store.write_progress(started)
        except PlanStoreError as exc:
            return f"planner: progress not recorded ({exc}); batch not started"
        if action.moves:
            moves = [PartitionMove(t, p, r) for t, p, r in action.moves]
            try:
                self._tool(spec).execute(moves, spec.budget.throttle_bytes_per_s)
            except ReassignmentError as exc:
                return f"planner: {action.reason}: Kafka refused: {exc}"
            self.journal("reassign", action.reason, f"{len(moves)} partitions submitted")
        self.memory.last_verify_at = snap.now
        return f"planner: {action.reason}"

    def _check_batch(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec) -> str:
        plan = snap.plan
        assert plan is not None
        batch = [PartitionMove(t, p, r) for t, p, r in plan.batch(action.batch)]
        batch = [m for m in batch if (m.topic, m.partition) in snap.live]
        if not action.moves:
            if batch:
                try:
                    result = self._tool(spec).verify(batch)  # also removes the throttles
                except ReassignmentError as exc:
                    return f"planner: {action.reason}; verify failed: {exc}"
                if not result.complete:
                    return f"planner: {action.reason}; Kafka still finishing"
            self._elect_preferred_leaders(batch)
            self._advance(snap, state="executing", completed=action.batch + 1)
            return f"planner: {action.reason}: batch done"
        if action.stalled:
            self._move_controller(snap, action)
            return f"planner: {action.reason}: stalled, controller re-election requested"
        if snap.now - self.memory.last_verify_at >= VERIFY_EVERY_S:
            self.memory.last_verify_at = snap.now
            pending = [PartitionMove(t, p, r) for t, p, r in action.moves]
            tool = self._tool(spec)
            try:
                result = tool.verify(pending)
                lost = [m for m in pending if (m.topic, m.partition) not in result.in_progress]
            except ReassignmentError:
                lost = pending  # Kafka knows of no reassignment for them
            if lost:
                # Recorded as started but not running (the agent stopped between the two):
                # hand them to Kafka again.
                with contextlib.suppress(ReassignmentError):
                    tool.execute(lost, spec.budget.throttle_bytes_per_s)
                    self.journal("reassign", action.reason, f"{len(lost)} partitions resubmitted")
        return f"planner: {action.reason}"

    def _elect_preferred_leaders(self, batch: list[PartitionMove]) -> None:
        """A reordered replica list changes the preferred leader, not the leader: elect it
        now rather than at Kafka's next automatic rebalance (up to 5 minutes later)."""
        if not batch:
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": 10000})
        partitions = [TopicPartition(m.topic, m.partition) for m in batch]
        try:
            results = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(timeout=30)
        except KafkaException as exc:
            log.warning("preferred_leader_election_failed", error=str(exc))
            return
        # ELECTION_NOT_NEEDED is the common answer: the preferred leader already leads.
        failed = {
            f"{tp.topic}-{tp.partition}": str(err)
            for tp, err in results.items()
            if err is not None and _error_code(err) != KafkaError.ELECTION_NOT_NEEDED
        }
        if failed:
            log.warning("preferred_leader_election_partial", failed=failed)

    def _move_controller(self, snap: PlanSnapshot, action: PlanAction) -> None:
        """Seed 002's remedy for a stuck reassignment: a new controller picks it up again."""
        with contextlib.suppress(NoNodeError):
            self.zk.delete(self.paths.kafka_controller)
        progress = snap.progress
        assert progress is not None
        with contextlib.suppress(PlanStoreError):
            self.store.write_progress(replace(progress, controller_moved=True))
        self.journal("controller_reelection", action.reason, "controller znode deleted")

    def _advance(
        self, snap: PlanSnapshot, state: str, detail: str = "", completed: int | None = None
    ) -> None:
        progress = snap.progress
        if progress is None:
            return
        update = replace(
            progress,
            state=state,
            detail=detail or progress.detail,
            updated_at=snap.now,
            completed_batches=progress.completed_batches if completed is None else completed,
            started_batch=progress.started_batch if completed is None else None,
        )
        try:
            self.store.write_progress(update)
        except PlanStoreError as exc:
            log.warning("plan_progress_conflict", error=str(exc))


def _error_code(error: object) -> object:
    """elect_leaders answers KafkaError or KafkaException (wrapping one) per partition."""
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    return error.code() if isinstance(error, KafkaError) else None


def start_plan_executor(
    executor: PlanExecutor, is_planner: Callable[[], bool], stop: threading.Event
) -> threading.Thread:
    def loop() -> None:
        while not stop.is_set():
            if is_planner():
                try:
                    executor.tick()
                except (KazooException, ReassignmentError, OSError) as exc:
                    executor.sentence = f"planner: tick failed: {exc}"
                    log.warning("plan_tick_failed", error=str(exc))
                except Exception as exc:  # never let the planner thread die
                    executor.sentence = f"planner: tick failed: {exc}"
                    log.error("plan_tick_failed", error=str(exc))
            else:
                executor.sentence, executor.status = "", {}
            stop.wait(executor.settings.plan_interval_s)

    thread = threading.Thread(target=loop, name="agent-planner", daemon=True)
    thread.start()
    return thread
