"""Table-driven tests of the planner agent's pure decision (agent.plan_decide)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.plan_decide import PlanSnapshot, decide_plan, plan_inputs
from planner.contracts.plan_records import Progress
from planner.model import Broker, BrokerState, Cluster, Partition
from planner.plan import make_plan
from planner.store import StoredPlan

pytestmark = pytest.mark.unit

BROKERS = tuple(Broker(i, "abc"[i % 3]) for i in range(4))
SOURCE = Cluster(
    BROKERS, tuple(Partition("t", n, (0, 1, 2) if n % 2 else (1, 2, 0)) for n in range(6))
)
LIVE = {(p.topic, p.partition): p.replicas for p in SOURCE.partitions}
# Broker 0 draining: every partition changes (one step each: one replica of zone-a).
PLAN = StoredPlan.from_plan("c", 4, make_plan(SOURCE.with_broker_states({0: BrokerState.DRAINING})))


def snap(**changes: object) -> PlanSnapshot:
    base = PlanSnapshot(
        spec_ok=True,
        spec_generation=1,
        draining=frozenset({0}),
        plan=PLAN,
        plan_error=None,
        progress=Progress(4, 0, "pending"),
        live=LIVE,
        registered=frozenset({0, 1, 2, 3}),
        restart_lock_held=False,
        now=1000.0,
        last_planned_at=900.0,
        planned_for=plan_inputs(1, frozenset({0, 1, 2, 3}), LIVE),
        replan_interval_s=300.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


CASES = [
    ("no spec", snap(spec_ok=False), "hold", "no valid spec"),
    ("corrupt plan", snap(plan_error="meta: not JSON"), "refuse", "not executed: meta: not JSON"),
    ("pending plan is executed", snap(), "execute", "plan 4: executing"),
    (
        "an executing plan is executed (the pipeline says where it stands)",
        snap(progress=Progress(4, 0, "executing")),
        "execute",
        "plan 4: executing",
    ),
    (
        "done plan, nothing changed: balanced",
        snap(progress=Progress(4, PLAN.batch_count, "done")),
        "hold",
        "balanced (plan 4 done)",
    ),
    (
        "done plan, a broker joined: plan",
        snap(progress=Progress(4, PLAN.batch_count, "done"), registered=frozenset({0, 1, 2, 3, 4})),
        "make_plan",
        "brokers, spec or partitions changed",
    ),
    (
        "done plan, a topic was created: plan",
        snap(
            progress=Progress(4, PLAN.batch_count, "done"),
            live={**LIVE, ("new", 0): (1, 2, 3)},
        ),
        "make_plan",
        "brokers, spec or partitions changed",
    ),
    (
        "no plan yet: first look",
        snap(plan=None, progress=None, last_planned_at=0.0),
        "make_plan",
        "first look",
    ),
    (
        "no plan, periodic check due",
        snap(plan=None, progress=None, now=1300.0),
        "make_plan",
        "periodic",
    ),
    (
        "done plan, a new measured load: plan",
        snap(
            progress=Progress(4, PLAN.batch_count, "done"),
            measured_load_version=3,
            planned_load_version=2,
        ),
        "make_plan",
        "measured load changed",
    ),
    (
        "done plan, the measured load read last time: balanced",
        snap(
            progress=Progress(4, PLAN.batch_count, "done"),
            measured_load_version=3,
            planned_load_version=3,
        ),
        "hold",
        "balanced (plan 4 done)",
    ),
    (
        "replicas on an unregistered broker: no planning",
        snap(plan=None, progress=None, registered=frozenset({1, 2, 3})),
        "hold",
        "broker 0 holds replicas but is not registered",
    ),
]


@pytest.mark.parametrize(("case", "snapshot", "kind", "reason"), CASES, ids=[c[0] for c in CASES])
def test_decide_plan(case: str, snapshot: PlanSnapshot, kind: str, reason: str) -> None:
    action = decide_plan(snapshot)
    assert action.kind == kind, action
    assert reason in action.reason, action.reason
    if kind == "execute":
        assert action.may_start


HOLDS = [
    ("a rolling restart holds new moves", snap(restart_lock_held=True), "rolling restart"),
    (
        "a target broker not registered holds new moves",
        snap(registered=frozenset({0, 1, 2})),
        "waiting for broker 3 to register",
    ),
]


@pytest.mark.parametrize(("case", "snapshot", "reason"), HOLDS, ids=[c[0] for c in HOLDS])
def test_moves_running_continue_but_none_starts(
    case: str, snapshot: PlanSnapshot, reason: str
) -> None:
    action = decide_plan(snapshot)
    assert action.kind == "execute" and not action.may_start
    assert reason in action.reason
