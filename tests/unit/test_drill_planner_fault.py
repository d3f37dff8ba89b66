"""The planner fault against a fake cluster: the topic it places on two brokers, the budget
it slows and puts back, whose agent it kills and when, how long it holds (until another
agent is elected), what settles it (the same plan done, no throttle left) and what fails it
(a new plan where the stored one ran, no successor)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from management_plane.drills.catalog import find_drill
from management_plane.drills.errors import DrillError
from management_plane.drills.faults import FaultContext, SettlesItself
from management_plane.drills.planner_faults import (
    SLOW_BUDGET,
    PlanCluster,
    PlannerAgentKill,
    PlanState,
)
from planner.contracts.spec import ReassignmentBudget
from tests.unit.test_drill_faults import FakeCluster

pytestmark = pytest.mark.unit


@dataclass
class FakePlanCluster(FakeCluster):
    """vm1's agent is the planner until it is killed; then `successor`'s is, after
    `election_reads` reads. The plan (id 7) moves the drill's topic; each plan read after
    the kill moves it one state on (executing, executing, done)."""

    agents: bool = True
    planner: str | None = "vm1"
    successor: str | None = "vm2"
    election_reads: int = 2
    plan_after_kill: list[PlanState] = field(default_factory=list)
    budget: ReassignmentBudget = field(default_factory=ReassignmentBudget)
    topics: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    throttle_reads: list[dict[str, str]] = field(default_factory=lambda: [{}])

    def broker_ids(self) -> tuple[int, ...]:
        return (2, 0, 1)

    def planner_vm(self) -> str | None:
        if self.planner is None and self.election_reads > 0:
            self.election_reads -= 1
            if self.election_reads == 0:
                self.planner = self.successor
        return self.planner

    def _killed(self) -> bool:
        return ("vm1", "kill", "agent") in self.actions

    def plan_state(self) -> PlanState | None:
        topics = frozenset(self.topics)
        if not self._killed():
            return PlanState(7, "executing", 2, topics)
        if self.plan_after_kill:
            return (
                self.plan_after_kill.pop(0)
                if len(self.plan_after_kill) > 1
                else self.plan_after_kill[0]
            )
        return PlanState(7, "done", 0, topics)

    def act(self, vm: str, action: object, kind: object) -> str:
        message = super().act(vm, action, kind)  # type: ignore[arg-type]
        if (vm, "kill", "agent") == self.actions[-1] and vm == self.planner:
            self.planner = None
        return message

    def throttles(self) -> Mapping[str, str]:
        return (
            self.throttle_reads.pop(0) if len(self.throttle_reads) > 1 else self.throttle_reads[0]
        )

    def reassignment_budget(self) -> ReassignmentBudget:
        return self.budget

    def set_reassignment_budget(self, budget: ReassignmentBudget) -> None:
        self.budget = budget

    def create_placed_topic(
        self, topic: str, replicas: Mapping[int, Sequence[int]], fill_bytes: int
    ) -> None:
        self.topics[topic] = {p: list(r) for p, r in replicas.items()}

    def delete_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)


def planner_context(cluster: FakeCluster) -> FaultContext:
    return FaultContext(cluster=cluster, topic="drill-x", duration_s=3.0, sleep=lambda s: None)


def test_the_planner_drill_is_in_the_catalog_and_settles_itself() -> None:
    (fault,) = find_drill("planner-agent-kill").faults()
    assert isinstance(fault, SettlesItself) and isinstance(fault, PlannerAgentKill)
    assert isinstance(FakePlanCluster(), PlanCluster)


def test_the_planners_agent_is_killed_mid_move_and_its_successor_finishes_the_plan() -> None:
    cluster = FakePlanCluster()
    context = planner_context(cluster)
    fault = PlannerAgentKill()
    assert fault.preflight(context) is None
    target = fault.inject(context)
    assert target == "vm1's agent (the elected planner; plan 7 executing, 2 moves running)"
    # Every replica on brokers 0 and 1 (leaders alternating), none on 2; the budget slowed.
    assert cluster.topics == {"drill-x-moves": {0: [0, 1], 1: [1, 0], 2: [0, 1], 3: [1, 0]}}
    assert cluster.budget == SLOW_BUDGET
    assert cluster.actions == [("vm1", "kill", "agent")]
    fault.hold(context)
    assert fault.successor == "vm2"
    fault.heal(context)
    fault.heal(context)
    assert cluster.actions == [("vm1", "kill", "agent"), ("vm1", "start", "agent")]
    assert fault.unsettled(context) is None
    assert fault.settlement() == (
        "vm2's agent, elected planner, finished plan 7; every replication throttle cleared"
    )
    fault.clean_up(context)
    fault.clean_up(context)
    assert cluster.budget == ReassignmentBudget() and cluster.topics == {}


def test_it_is_unsettled_while_the_plan_runs_and_until_the_throttles_are_cleared() -> None:
    cluster = FakePlanCluster(
        plan_after_kill=[
            PlanState(7, "executing", 1, frozenset()),
            PlanState(7, "done", 0, frozenset()),
        ],
        throttle_reads=[{"broker 0 leader.replication.throttled.rate": "200000"}, {}],
    )
    context = planner_context(cluster)
    fault = PlannerAgentKill()
    fault.inject(context)
    fault.hold(context)
    fault.heal(context)
    assert fault.unsettled(context) == "plan 7 executing, 1 moves running"
    assert fault.unsettled(context) == (
        "plan 7 done; throttles still set: broker 0 leader.replication.throttled.rate"
    )
    assert fault.unsettled(context) is None


def test_a_new_plan_where_the_stored_one_ran_is_a_failure() -> None:
    cluster = FakePlanCluster(plan_after_kill=[PlanState(8, "executing", 1, frozenset())])
    context = planner_context(cluster)
    fault = PlannerAgentKill()
    fault.inject(context)
    fault.hold(context)
    with pytest.raises(DrillError, match="plan 8 stored where plan 7 ran"):
        fault.unsettled(context)


def test_no_successor_elected_fails_the_hold() -> None:
    cluster = FakePlanCluster(successor=None)
    context = planner_context(cluster)
    fault = PlannerAgentKill()
    fault.inject(context)
    with pytest.raises(DrillError, match="no other agent was elected planner"):
        fault.hold(context)
    fault.clean_up(context)  # the interrupted drill's clean-up still puts the budget back
    assert cluster.budget == ReassignmentBudget() and cluster.topics == {}


def test_a_budget_someone_else_changed_meanwhile_is_left_alone() -> None:
    cluster = FakePlanCluster()
    context = planner_context(cluster)
    fault = PlannerAgentKill()
    fault.inject(context)
    operator = ReassignmentBudget(throttle_bytes_per_s=1_000_000)
    cluster.budget = operator
    fault.clean_up(context)
    assert cluster.budget == operator


@pytest.mark.parametrize(
    ("cluster", "problem"),
    [
        (FakePlanCluster(agents=False), "needs a cluster whose VMs run kaas-agent"),
        (FakeCluster(agents=True), "needs a cluster whose plan and planner this host reads"),
    ],
)
def test_the_planner_drill_is_refused_where_it_cannot_run(
    cluster: FakeCluster, problem: str
) -> None:
    fault = PlannerAgentKill()
    refusal = fault.preflight(planner_context(cluster))
    assert refusal is not None and problem in refusal
    assert cluster.actions == []
