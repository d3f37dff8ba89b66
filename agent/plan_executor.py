"""The elected planner's work: plan the live cluster, store the plan, and execute it as a
pipelined queue of throttled reassignments (KIP-455 through Kafka's admin API), recording
progress in ZooKeeper. Runs on its own thread while this agent holds the planner election,
every few seconds while a plan runs, independent of the agent's cycle.

The decisions are `agent.plan_decide`'s (what to do with the plan), `agent.pipeline`'s
(which moves start, which throttles stay, how many moves at once) and
`agent.plan_housekeeping`'s (the executor's own memory, rate and stall); this module only
reads through its ports and acts. Where each partition stands is read from Kafka (its live
lists and running reassignments), so an agent elected later resumes the plan as it is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import structlog

from agent.errors import AgentError
from agent.pipeline import (
    Caps,
    PipelineDecision,
    PipelineView,
    ThrottleSet,
    decide_pipeline,
    health_of,
    throttle_changes,
    throttles_may_go,
)
from agent.plan_decide import PlanAction, PlanSnapshot, decide_plan
from agent.plan_housekeeping import (
    ExecutorMemory,
    for_plan,
    note_look,
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
    ReassignmentAdminFactory,
    StoreUnavailable,
)
from agent.settings import AgentSettings
from planner.batches import MovementBudget
from planner.contracts.plan_records import ProgressState
from planner.contracts.plan_status import PlanMovement, PlanStatus
from planner.contracts.spec import ClusterSpec
from planner.feasibility import InfeasibleError
from planner.layout import LayoutError, parse_layout
from planner.live_layout import LiveLayoutError
from planner.measured_inputs import traffic_inputs
from planner.model import BrokerState, PlannerSettings
from planner.plan import Plan, make_plan
from planner.store import PlanConflictError, PlanStoreError, PlanTooLargeError, StoredPlan

log = structlog.get_logger("kaas.agent.planner")

Journal = Callable[[str, str, str], None]


@dataclass(frozen=True)
class PlanFacts:
    """What a running plan's pipeline needs that changes slowly: read once per plan."""

    plan_id: int
    sizes: dict[tuple[str, int], int]
    disk_limits: dict[int, float] | None
    min_isr: dict[str, int]


class PlanExecutor:
    def __init__(
        self,
        settings: AgentSettings,
        zookeeper: AgentZooKeeper,
        store: PlanStorePort,
        read_spec: Callable[[], tuple[ClusterSpec | None, str | None]],
        cluster_admin: Callable[[], ClusterAdmin],
        reassignments: ReassignmentAdminFactory,
        journal: Journal,
        clock: Clock,
    ) -> None:
        self.settings = settings
        self.zookeeper = zookeeper
        self.store = store
        self.read_spec = read_spec
        self.cluster_admin = cluster_admin
        self.reassignments = reassignments
        self.journal = journal
        self.clock = clock
        self.memory = ExecutorMemory()
        self.sentence = ""
        self.status: PlanStatus | None = None
        self.facts: PlanFacts | None = None
        self.executing = False
        """Whether the last tick found a plan running: the loop then looks again soon."""
        self.traffic = ""
        """Which input the last planning's traffic goals used (measured load or sizes)."""

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
        memory = self.memory
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
            measured_load_version=self.zookeeper.measured_load_version(),
            planned_load_version=memory.planned_load_version,
        )
        return snap, spec, memory

    # -- one tick -------------------------------------------------------------------------

    def tick(self) -> str:
        snap, spec, self.memory = self.snapshot()
        action = decide_plan(snap)
        self.executing = action.kind == "execute"
        if not self.executing and spec is not None:
            self._clear_leftover_throttles(spec, snap.registered)
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
        if kind == "execute" and spec is not None:
            return self._execute(action, snap, spec)
        if kind == "supersede":
            self._advance(snap, state="superseded", detail=action.reason)
            self.memory = plan_again(self.memory)
            self.journal("plan_superseded", action.reason, "replanning")
        elif kind == "refuse":
            self.memory, new = note_refusal(self.memory, action.reason)
            if new:
                self.journal("plan_refused", action.reason, "not executed")
        elif kind == "hold" and action.reason.startswith("placement balanced") and self.traffic:
            return f"planner: {action.reason}; {self.traffic}"
        return f"planner: {action.reason}"

    def _make_plan(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec) -> str:
        self.memory = planning_started(
            self.memory,
            snap.now,
            snap.spec_generation,
            snap.registered,
            snap.live,
            snap.measured_load_version,
        )
        try:
            document = self.cluster_admin().read_layout()
            traffic = traffic_inputs(
                document,
                self.zookeeper.read_measured_load(),
                datetime.fromtimestamp(snap.now, UTC),
                self.settings.cluster,
                self.settings.measured_load_max_age_s,
            )
            cluster = parse_layout(traffic.layout)
            self.traffic = traffic.sentence
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
            return (
                f"planner: placement balanced (score {plan.score_after.total:.1f}); "
                f"{traffic.sentence}"
            )
        previous = snap.plan
        plan_id = previous.plan_id + 1 if previous is not None else 1
        inputs = {
            "draining": sorted(spec.draining_broker_ids),
            "spec_generation": spec.generation,
            "brokers": sorted(snap.registered),
            "why": action.reason,
            "traffic": traffic.sentence,
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
            f"batches, score {plan.score_before.total:.1f} -> {plan.score_after.total:.1f}; "
            f"{traffic.sentence}",
        )
        return (
            f"planner: stored plan {plan_id} ({stored.batch_count} batches, "
            f"{summary['replicas_moved']} replicas to move); {traffic.sentence}"
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

    # -- a running plan ------------------------------------------------------------------

    def _plan_facts(self, plan: StoredPlan) -> PlanFacts:
        if self.facts is not None and self.facts.plan_id == plan.plan_id:
            return self.facts
        sizes: dict[tuple[str, int], int] = {}
        limits: dict[int, float] | None = None
        try:
            cluster = parse_layout(self.cluster_admin().read_layout())
            sizes = {(p.topic, p.partition): int(p.size_bytes) for p in cluster.partitions}
            share = PlannerSettings().max_disk_share
            limits = {b.id: b.capacity.disk_bytes * share for b in cluster.brokers}
        except (LiveLayoutError, LayoutError) as exc:
            # Without sizes the moves still run, in the plan's order; only the figures and
            # the disk check are missing.
            log.warning("plan_sizes_unread", error=str(exc))
        topics = {p.topic for p in plan.partitions}
        self.facts = PlanFacts(plan.plan_id, sizes, limits, self.reassignments().min_isr(topics))
        return self.facts

    def _execute(self, action: PlanAction, snap: PlanSnapshot, spec: ClusterSpec) -> str:
        plan, progress = snap.plan, snap.progress
        assert plan is not None and progress is not None
        admin = self.reassignments()
        facts = self._plan_facts(plan)
        # Kafka's running moves first, then the lists: a move ending in between is then seen
        # as moving to a list it already has, never as a list the plan does not know.
        reassigning = admin.reassigning()
        live, _ = self.cluster_admin().assignment()
        health = health_of(
            admin.isr(),
            facts.min_isr,
            admin.request_queues(),
            self.settings.request_queue_busy,
            reassigning,
        )
        memory = for_plan(self.memory, plan.plan_id)
        caps = Caps(
            per_broker=spec.budget.max_partitions_per_broker,
            cluster=self.settings.reassignment_concurrency,
        )
        decision = decide_pipeline(
            PipelineView(
                plan.partitions,
                live,
                reassigning,
                caps,
                memory.concurrency or caps.cluster,
                health,
                facts.sizes,
                action.may_start,
                facts.disk_limits,
            )
        )
        label = f"plan {plan.plan_id}"
        if decision.foreign is not None:
            (topic, number), now_at = decision.foreign
            reason = (
                f"{label}: {topic}-{number} has replicas {list(now_at)}, which the plan does "
                "not expect: planning again"
            )
            self.memory = memory
            self._throttle(plan, snap, spec, decision.throttles)
            self._advance(snap, state=ProgressState.SUPERSEDED, detail=reason)
            self.memory = plan_again(self.memory)
            self.journal("plan_superseded", reason, "replanning")
            return f"planner: {reason}"
        self.memory = memory
        # Throttles first, so no move copies unthrottled; cleared as each move ends.
        self._throttle(plan, snap, spec, decision.throttles)
        refused = admin.submit(decision.start) if decision.start else {}
        if decision.start:
            self.journal(
                "reassign",
                action.reason,
                f"{len(decision.start) - len(refused)} partitions submitted"
                + (f", {len(refused)} refused: {sorted(refused.items())[:3]}" if refused else ""),
            )
        elect = sorted(set(decision.finished) - self.memory.elected)
        if elect:
            # A new replica order changes the preferred leader, not the leader: elect it now
            # rather than at Kafka's next automatic rebalance (up to 5 minutes later).
            admin.elect_preferred(elect)
            self.memory = replace(self.memory, elected=self.memory.elected | set(elect))
        look = note_look(self.memory, decision, snap.now, self.settings.reassignment_stall_s)
        self.memory = look.memory
        if look.stalled and not progress.controller_moved:
            self._reelect_controller(snap, action)
            return f"planner: {label}: no move finished for {self.settings.reassignment_stall_s:.0f} s, controller re-election requested"
        if decision.done:
            self._advance(
                snap,
                state=ProgressState.DONE,
                detail=f"{label}: all {decision.steps_total} steps done",
                completed=plan.batch_count,
                movement=look.movement,
            )
            self.memory = plan_finished(self.memory)
            self.journal("plan_done", f"{label}: all {decision.steps_total} steps done", "done")
            return f"planner: {label}: all {decision.steps_total} steps done"
        sentence = _sentence(label, decision, look.movement.rate_bytes_per_s, look.movement.eta_s)
        if not action.may_start:
            sentence = f"{action.reason}; {sentence}"
        self._advance(
            snap,
            state=ProgressState.EXECUTING,
            detail=sentence,
            completed=decision.batches_done,
            movement=look.movement,
            moved_on=look.memory.last_progress_at == snap.now,
        )
        return f"planner: {sentence}"

    def _clear_leftover_throttles(self, spec: ClusterSpec, registered: frozenset[int]) -> None:
        """Moves of a superseded plan keep their throttles while they run; with no plan
        running they are cleared once Kafka runs none of them."""
        if self.memory.throttles is None or self.memory.throttles.empty:
            return
        admin = self.reassignments()
        if not throttles_may_go(self.memory.throttles, admin.reassigning()):
            return
        empty = ThrottleSet()
        admin.write_configs(
            throttle_changes(
                self.memory.throttles,
                empty,
                spec.budget.throttle_bytes_per_s,
                registered=registered,
            )
        )
        self.memory = replace(self.memory, throttles=empty)

    def _throttle(
        self, plan: StoredPlan, snap: PlanSnapshot, spec: ClusterSpec, desired: ThrottleSet
    ) -> None:
        changes = throttle_changes(
            self.memory.throttles,
            desired,
            spec.budget.throttle_bytes_per_s,
            topics={p.topic for p in plan.partitions},
            brokers=snap.registered,
            registered=snap.registered,
        )
        self.reassignments().write_configs(changes)
        self.memory = replace(self.memory, throttles=desired)

    def _reelect_controller(self, snap: PlanSnapshot, action: PlanAction) -> None:
        """A stuck reassignment is picked up again by a new controller."""
        self.zookeeper.request_controller_election()
        progress = snap.progress
        assert progress is not None
        with contextlib.suppress(PlanStoreError):
            self.store.write_progress(replace(progress, controller_moved=True))
        self.journal("controller_reelection", action.reason, "controller znode deleted")

    def _advance(
        self,
        snap: PlanSnapshot,
        state: str,
        detail: str = "",
        completed: int | None = None,
        movement: PlanMovement | None = None,
        moved_on: bool = False,
    ) -> None:
        """`moved_on`: a move finished at this look, so the stall remedy may be used again."""
        progress = snap.progress
        if progress is None:
            return
        update = replace(
            progress,
            state=state,
            detail=detail or progress.detail,
            updated_at=snap.now,
            completed_batches=progress.completed_batches if completed is None else completed,
            started_batch=None,
            movement=movement or progress.movement,
            controller_moved=progress.controller_moved and not moved_on,
        )
        try:
            self.store.write_progress(update)
        except PlanStoreError as exc:
            log.warning("plan_progress_conflict", error=str(exc))


def _gib(value: float) -> str:
    return f"{value / 1024**3:.2f} GiB"


def _sentence(label: str, decision: PipelineDecision, rate: float, eta: float | None) -> str:
    text = (
        f"{label}: {decision.steps_done}/{decision.steps_total} steps done, "
        f"{len(decision.moving)} moving (concurrency {decision.concurrency})"
    )
    if decision.bytes_total:
        text += f", {_gib(decision.bytes_done)} of {_gib(decision.bytes_total)}"
        if rate > 0:
            text += f" at {rate / 1024**2:.1f} MiB/s"
        if eta is not None:
            text += f", about {eta:.0f} s left"
    if decision.waiting_reason and not decision.start:
        text += f"; {decision.waiting_reason}"
    return text


def start_plan_executor(
    executor: PlanExecutor, is_planner: Callable[[], bool], stop: threading.Event
) -> threading.Thread:
    def loop() -> None:
        while not stop.is_set():
            if is_planner():
                try:
                    executor.tick()
                except (StoreUnavailable, AgentError, OSError) as exc:
                    executor.sentence = f"planner: tick failed: {exc}"
                    log.warning("plan_tick_failed", error=str(exc))
                except Exception as exc:  # never let the planner thread die
                    executor.sentence = f"planner: tick failed: {exc}"
                    log.error("plan_tick_failed", error=str(exc))
            else:
                executor.sentence, executor.status, executor.executing = "", None, False
            settings = executor.settings
            stop.wait(
                settings.reassignment_poll_s if executor.executing else settings.plan_interval_s
            )

    thread = threading.Thread(target=loop, name="agent-planner", daemon=True)
    thread.start()
    return thread
