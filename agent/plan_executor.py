"""The elected planner's work: plan the live cluster, store the plan, and execute it batch by
batch with throttled reassignments, recording progress in ZooKeeper so that any agent elected
later resumes it. Runs on its own thread while this agent holds the planner election.

The decisions are `agent.plan_decide`'s (what to do with the plan) and
`agent.plan_housekeeping`'s (the executor's own memory, a running batch); this module only
reads through its ports and acts.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog

from agent.plan_decide import PlanAction, PlanSnapshot, decide_plan
from agent.plan_housekeeping import (
    CompleteBatch,
    ConfirmBatch,
    ExecutorMemory,
    KeepWaiting,
    Move,
    ReelectController,
    VerifyPending,
    after_confirm,
    check_batch_step,
    lost_moves,
    note_batch_progress,
    note_refusal,
    plan_again,
    plan_finished,
    planning_started,
    smaller_prefix,
)
from agent.ports import (
    AgentZooKeeper,
    Clock,
    ClusterAdmin,
    PlanStorePort,
    ReassignerFactory,
    StoreUnavailable,
)
from agent.reassign import PartitionMove, ReassignToolError
from agent.settings import AgentSettings
from planner.batches import MovementBudget
from planner.contracts.plan_status import PlanStatus
from planner.contracts.spec import ClusterSpec
from planner.feasibility import InfeasibleError
from planner.layout import LayoutError, parse_layout
from planner.live_layout import LiveLayoutError
from planner.model import BrokerState, PlannerSettings
from planner.plan import Plan, make_plan
from planner.store import PlanConflictError, PlanStoreError, PlanTooLargeError, StoredPlan

log = structlog.get_logger("kaas.agent.planner")

Journal = Callable[[str, str, str], None]


def _moves(steps: tuple[Move, ...] | list[Move]) -> list[PartitionMove]:
    return [PartitionMove(t, p, r) for t, p, r in steps]


class PlanExecutor:
    def __init__(
        self,
        settings: AgentSettings,
        zookeeper: AgentZooKeeper,
        store: PlanStorePort,
        read_spec: Callable[[], tuple[ClusterSpec | None, str | None]],
        cluster_admin: Callable[[], ClusterAdmin],
        reassigner: ReassignerFactory,
        journal: Journal,
        clock: Clock,
    ) -> None:
        self.settings = settings
        self.zookeeper = zookeeper
        self.store = store
        self.read_spec = read_spec
        self.cluster_admin = cluster_admin
        self.reassigner = reassigner
        self.journal = journal
        self.clock = clock
        self.memory = ExecutorMemory()
        self.sentence = ""
        self.status: PlanStatus | None = None

    # -- snapshot -------------------------------------------------------------------------

    def snapshot(self) -> tuple[PlanSnapshot, ClusterSpec | None, ExecutorMemory]:
        """One read of everything the tick decides on, and the memory it leaves (applied by
        the tick, so reading has no effect of its own)."""
        spec, _ = self.read_spec()
        plan: StoredPlan | None = None
        progress = None
        error = None
        try:
            plan = self.store.read()
            progress = self.store.read_progress()
        except PlanStoreError as exc:
            error = str(exc)
        # Every topic, Kafka's internal ones too: the planner balances them like any other.
        live, registered = self.cluster_admin().assignment()
        now = self.clock.time()
        memory, last_progress_at = note_batch_progress(self.memory, plan, progress, live, now)
        snap = PlanSnapshot(
            spec_ok=spec is not None,
            spec_generation=spec.generation if spec else -1,
            draining=spec.draining_broker_ids if spec else frozenset(),
            plan=plan,
            plan_error=error,
            progress=progress,
            live=live,
            registered=registered,
            restart_lock_held=self.zookeeper.restart_lock_held(),
            now=now,
            last_planned_at=memory.last_planned_at,
            planned_for=memory.planned_for,
            replan_interval_s=self.settings.replan_interval_s,
            stall_s=self.settings.reassignment_stall_s,
            last_progress_at=last_progress_at,
        )
        return snap, spec, memory

    # -- one tick -------------------------------------------------------------------------

    def tick(self) -> str:
        snap, spec, self.memory = self.snapshot()
        action = decide_plan(snap)
        sentence = self._act(action, snap, spec)
        if sentence != self.sentence:
            log.info(sentence, action=action.kind)
        self.sentence = sentence
        self.status = self.store.read_status()
        return sentence

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
            self.memory = plan_finished(self.memory)
            self.journal("plan_done", action.reason, "done")
        elif kind == "supersede":
            self._advance(snap, state="superseded", detail=action.reason)
            self.memory = plan_again(self.memory)
            self.journal("plan_superseded", action.reason, "replanning")
        elif kind == "refuse":
            self.memory, new = note_refusal(self.memory, action.reason)
            if new:
                self.journal("plan_refused", action.reason, "not executed")
        return f"planner: {action.reason}"

    def _make_plan(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec) -> str:
        self.memory = planning_started(
            self.memory, snap.now, snap.spec_generation, snap.registered, snap.live
        )
        try:
            document = self.cluster_admin().read_layout()
            cluster = parse_layout(document)
        except (LiveLayoutError, LayoutError) as exc:
            self.memory = plan_again(self.memory)
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
            self.memory, new = note_refusal(self.memory, str(exc))
            if new:
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
            self.memory = plan_again(self.memory)
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
        self, plan: Plan, plan_id: int, inputs: dict[str, Any], previous: StoredPlan | None
    ) -> StoredPlan | None:
        """The plan, or as many of its first batches as one ZooKeeper transaction holds;
        None when someone else wrote a plan since it was read."""
        expected = previous.meta_version if previous is not None else None
        max_batches: int | None = None
        while True:
            stored = StoredPlan.from_plan(
                self.settings.cluster, plan_id, plan, inputs, max_batches=max_batches
            )
            try:
                return self.store.write(stored, expected)
            except PlanTooLargeError:
                max_batches = smaller_prefix(stored.batch_count)
                if max_batches is None:
                    raise
            except PlanConflictError as exc:
                log.warning("plan_write_conflict", error=str(exc))
                return None

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
            moves = _moves(action.moves)
            try:
                self.reassigner(spec.kafka_version).execute(moves, spec.budget.throttle_bytes_per_s)
            except ReassignToolError as exc:
                return f"planner: {action.reason}: Kafka refused: {exc}"
            self.journal("reassign", action.reason, f"{len(moves)} partitions submitted")
        self.memory = replace(self.memory, last_verify_at=snap.now)
        return f"planner: {action.reason}"

    def _check_batch(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec) -> str:
        plan = snap.plan
        assert plan is not None
        in_live = [m for m in plan.batch(action.batch) if (m[0], m[1]) in snap.live]
        self.memory, next_step = check_batch_step(self.memory, action, in_live, snap.now)
        if isinstance(next_step, ConfirmBatch):
            try:
                # Verify also removes the throttles of a complete batch.
                result = self.reassigner(spec.kafka_version).verify(_moves(next_step.moves))
            except ReassignToolError as exc:
                return f"planner: {action.reason}; verify failed: {exc}"
            next_step = after_confirm(action, next_step.moves, result.complete)
            if isinstance(next_step, KeepWaiting):
                return f"planner: {action.reason}; Kafka still finishing"
        if isinstance(next_step, CompleteBatch):
            # A reordered replica list changes the preferred leader, not the leader: elect
            # it now rather than at Kafka's next automatic rebalance (up to 5 minutes later).
            self.cluster_admin().elect_preferred_leaders([(t, p) for t, p, _ in next_step.moves])
            self._advance(snap, state="executing", completed=next_step.batch + 1)
            return f"planner: {action.reason}: batch done"
        if isinstance(next_step, ReelectController):
            self._reelect_controller(snap, action)
            return f"planner: {action.reason}: stalled, controller re-election requested"
        if isinstance(next_step, VerifyPending):
            self._resubmit_lost(action, next_step.moves, spec)
        return f"planner: {action.reason}"

    def _resubmit_lost(
        self, action: PlanAction, pending: tuple[Move, ...], spec: ClusterSpec
    ) -> None:
        tool = self.reassigner(spec.kafka_version)
        try:
            in_progress: tuple[tuple[str, int], ...] | None = tool.verify(
                _moves(pending)
            ).in_progress
        except ReassignToolError:
            in_progress = None  # Kafka knows of no reassignment for them
        lost = lost_moves(pending, in_progress)
        if lost:
            with contextlib.suppress(ReassignToolError):
                tool.execute(_moves(lost), spec.budget.throttle_bytes_per_s)
                self.journal("reassign", action.reason, f"{len(lost)} partitions resubmitted")

    def _reelect_controller(self, snap: PlanSnapshot, action: PlanAction) -> None:
        """A stuck reassignment is picked up again by a new controller."""
        self.zookeeper.request_controller_election()
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


def start_plan_executor(
    executor: PlanExecutor, is_planner: Callable[[], bool], stop: threading.Event
) -> threading.Thread:
    def loop() -> None:
        while not stop.is_set():
            if is_planner():
                try:
                    executor.tick()
                except (StoreUnavailable, ReassignToolError, OSError) as exc:
                    executor.sentence = f"planner: tick failed: {exc}"
                    log.warning("plan_tick_failed", error=str(exc))
                except Exception as exc:  # never let the planner thread die
                    executor.sentence = f"planner: tick failed: {exc}"
                    log.error("plan_tick_failed", error=str(exc))
            else:
                executor.sentence, executor.status = "", None
            stop.wait(executor.settings.plan_interval_s)

    thread = threading.Thread(target=loop, name="agent-planner", daemon=True)
    thread.start()
    return thread
