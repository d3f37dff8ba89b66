"""The elected planner's agent killed while its plan moves data: the drill gives the planner
something to move (a topic of its own whose replicas sit on two brokers only, filled, and a
slow reassignment budget, so that each move copies for seconds), waits until the plan's
moves run, SIGKILLs the planner's agent and keeps it down until another agent is elected.
Settled when that agent finished the same plan (it picked up the stored plan and the moves
Kafka kept running, rather than planning anew) and every replication throttle is cleared.
The budget and the topic go back as they were afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from management_plane.drills.errors import DrillError
from management_plane.drills.faults import (
    FaultCluster,
    FaultContext,
    ProcessAction,
    ProcessKind,
)
from planner.contracts.spec import ReassignmentBudget

POLL_S = 0.5
PLAN_TIMEOUT_S = 180.0  # for the planner to plan the drill's topic and start its moves
ELECTION_TIMEOUT_S = 120.0
# One move per broker at a time, copying slowly: the planner's moves run for seconds.
SLOW_BUDGET = ReassignmentBudget(
    throttle_bytes_per_s=200_000, max_partitions_per_broker=1
)  # for another agent to be elected once the planner's is gone


@dataclass(frozen=True)
class PlanState:
    plan_id: int
    state: str  # pending | executing | done | superseded | ...
    moving: int  # partition moves running now
    topics: frozenset[str]  # the topics the plan moves


@runtime_checkable
class PlanCluster(FaultCluster, Protocol):
    """What the planner fault needs besides processes (`local_planner.LocalPlanReads` for
    the local provider; a fake in the unit tests)."""

    def broker_ids(self) -> tuple[int, ...]: ...  # registered now

    def planner_vm(self) -> str | None: ...  # whose agent is the elected planner

    def plan_state(self) -> PlanState | None: ...  # the stored plan and its progress

    def throttles(self) -> Mapping[str, str]: ...  # replication throttles set, by where

    def reassignment_budget(self) -> ReassignmentBudget: ...

    def set_reassignment_budget(self, budget: ReassignmentBudget) -> None: ...

    def create_placed_topic(
        self, topic: str, replicas: Mapping[int, Sequence[int]], fill_bytes: int
    ) -> None: ...  # with this assignment, each partition filled with `fill_bytes`

    def delete_topic(self, topic: str) -> None: ...  # idempotent


def _plans(context: FaultContext, fault: str) -> PlanCluster:
    if not isinstance(context.cluster, PlanCluster):
        raise DrillError(f"{fault} needs a cluster whose plan and planner it reads")
    return context.cluster


@dataclass
class PlannerAgentKill:
    name: str = "planner-agent-kill"
    partitions: int = 4
    fill_bytes: int = 1 << 20  # per partition: about 5 s of copying per move at the budget
    budget: ReassignmentBudget = SLOW_BUDGET
    settle_timeout_s: float = 600.0
    topic: str | None = field(default=None, init=False)
    budget_before: ReassignmentBudget | None = field(default=None, init=False)
    plan_id: int | None = field(default=None, init=False)
    victim: str | None = field(default=None, init=False)
    successor: str | None = field(default=None, init=False)
    seen_done: bool = field(default=False, init=False)

    def describe(self) -> str:
        return (
            "the elected planner's agent killed (SIGKILL) while its plan moves a topic's "
            "replicas; another agent is elected, finishes the same plan and clears the throttles"
        )

    def preflight(self, context: FaultContext) -> str | None:
        cluster = context.cluster
        if not isinstance(cluster, PlanCluster):
            return f"{self.name} needs a cluster whose plan and planner this host reads"
        if not cluster.runs_agents():
            return f"{self.name} needs a cluster whose VMs run kaas-agent; this one runs none"
        if len(cluster.vm_names()) < 3:
            return f"{self.name} needs 3 VMs or more: a topic on two of them, one to move to"
        return None

    def inject(self, context: FaultContext) -> str:
        cluster = _plans(context, self.name)
        brokers = sorted(cluster.broker_ids())
        if len(brokers) < 3:
            raise DrillError(f"{self.name} needs 3 registered brokers; {brokers} are")
        self.topic = f"{context.topic}-moves"
        self.budget_before = cluster.reassignment_budget()
        cluster.set_reassignment_budget(self.budget)
        # Every replica on the first two brokers: the planner moves a share onto the others.
        cluster.create_placed_topic(
            self.topic,
            {p: brokers[:2] if p % 2 == 0 else brokers[1::-1] for p in range(self.partitions)},
            self.fill_bytes,
        )
        state = self._wait_for_moves(context, cluster, self.topic)
        self.plan_id = state.plan_id
        victim = cluster.planner_vm()
        if victim is None:
            raise DrillError(f"plan {state.plan_id} runs but no agent is the elected planner")
        cluster.act(victim, ProcessAction.KILL, ProcessKind.AGENT)
        self.victim = victim
        return (
            f"{victim}'s agent (the elected planner; plan {state.plan_id} executing, "
            f"{state.moving} moves running)"
        )

    def _wait_for_moves(self, context: FaultContext, cluster: PlanCluster, topic: str) -> PlanState:
        for _ in range(int(PLAN_TIMEOUT_S / POLL_S)):
            state = cluster.plan_state()
            if (
                state is not None
                and topic in state.topics
                and state.state == "executing"
                and state.moving > 0
            ):
                return state
            context.sleep(POLL_S)
        raise DrillError(f"no plan moved {topic}'s replicas within {PLAN_TIMEOUT_S:.0f}s")

    def hold(self, context: FaultContext) -> None:
        """The duration, and then until another agent is the elected planner."""
        context.sleep(context.duration_s)
        cluster = _plans(context, self.name)
        for _ in range(int(ELECTION_TIMEOUT_S / POLL_S)):
            planner = cluster.planner_vm()
            if planner is not None and planner != self.victim:
                self.successor = planner
                return
            context.sleep(POLL_S)
        raise DrillError(
            f"no other agent was elected planner within {ELECTION_TIMEOUT_S:.0f}s of "
            f"{self.victim}'s agent's death"
        )

    def heal(self, context: FaultContext) -> None:
        if self.victim is not None:
            context.cluster.act(self.victim, ProcessAction.START, ProcessKind.AGENT)
        self.victim = None

    def unsettled(self, context: FaultContext) -> str | None:
        if self.plan_id is None:
            return None
        cluster = _plans(context, self.name)
        if not self.seen_done:
            state = cluster.plan_state()
            if state is None or state.plan_id != self.plan_id:
                found = "no plan" if state is None else f"plan {state.plan_id}"
                raise DrillError(
                    f"{found} stored where plan {self.plan_id} ran: the new planner did not "
                    "finish the stored plan"
                )
            if state.state != "done":
                return f"plan {self.plan_id} {state.state}, {state.moving} moves running"
            self.seen_done = True
        throttles = cluster.throttles()
        if throttles:
            return f"plan {self.plan_id} done; throttles still set: {', '.join(sorted(throttles))}"
        return None

    def settlement(self) -> str:
        return (
            f"{self.successor}'s agent, elected planner, finished plan {self.plan_id}; "
            "every replication throttle cleared"
        )

    def clean_up(self, context: FaultContext) -> None:
        cluster = _plans(context, self.name)
        if self.budget_before is not None:
            if cluster.reassignment_budget() == self.budget:
                cluster.set_reassignment_budget(self.budget_before)
            self.budget_before = None
        if self.topic is not None:
            cluster.delete_topic(self.topic)
            self.topic = None
