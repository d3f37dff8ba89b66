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
        stall_s=600.0,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def after_batch(k: int) -> dict[tuple[str, int], tuple[int, ...]]:
    live = dict(LIVE)
    for index in range(k + 1):
        for topic, number, replicas in PLAN.batch(index):
            live[(topic, number)] = replicas
    return live


CASES = [
    ("no spec", snap(spec_ok=False), "hold", "no valid spec"),
    ("corrupt plan", snap(plan_error="meta: not JSON"), "refuse", "not executed: meta: not JSON"),
    ("pending plan starts batch 1", snap(), "start_batch", "plan 4 batch 1/"),
    (
        "a rolling restart holds the next batch",
        snap(restart_lock_held=True),
        "hold",
        "rolling restart",
    ),
    (
        "a moving broker not registered holds it",
        snap(registered=frozenset({0, 1, 2})),
        "hold",
        "waiting for broker 3",
    ),
    (
        "someone else moved a partition: supersede",
        snap(live={**LIVE, ("t", 0): (2, 1, 0)}),
        "supersede",
        "t-0 has replicas [2, 1, 0]",
    ),
    (
        "started batch is checked, not restarted",
        snap(progress=Progress(4, 0, "executing", started_batch=0, batch_started_at=990.0)),
        "check_batch",
        "partitions at their new replicas after 10 s",
    ),
    (
        "all batches done: finish",
        snap(progress=Progress(4, PLAN.batch_count, "executing")),
        "finish",
        "all",
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


def test_start_batch_lists_only_what_still_moves() -> None:
    assert PLAN.batch_count >= 1
    first = decide_plan(snap())
    assert first.batch == 0 and {(t, p) for t, p, _ in first.moves} == {
        (t, p) for t, p, _ in PLAN.batch(0)
    }
    # A step already at its list (Kafka finished it before the agent restarted) is skipped.
    done_one = PLAN.batch(0)[0]
    live = {**LIVE, (done_one[0], done_one[1]): done_one[2]}
    again = decide_plan(snap(live=live))
    assert (done_one[0], done_one[1], done_one[2]) not in again.moves


def test_a_finished_batch_has_nothing_pending_and_the_next_checks_its_start() -> None:
    progress = Progress(4, 0, "executing", started_batch=0, batch_started_at=990.0)
    action = decide_plan(snap(progress=progress, live=after_batch(0)))
    assert action.kind == "check_batch" and action.moves == ()
    if PLAN.batch_count > 1:
        nxt = decide_plan(snap(progress=Progress(4, 1, "executing"), live=after_batch(0)))
        assert nxt.kind == "start_batch" and nxt.batch == 1


def test_a_stalled_batch_asks_for_a_new_controller_once() -> None:
    running = Progress(4, 0, "executing", started_batch=0, batch_started_at=0.0)
    assert decide_plan(snap(progress=running)).stalled
    assert not decide_plan(snap(progress=replace(running, controller_moved=True))).stalled
    assert not decide_plan(snap(progress=replace(running, batch_started_at=900.0))).stalled
    # Partitions arriving recently mean progress: not stalled however long the batch runs.
    assert not decide_plan(snap(progress=running, last_progress_at=950.0)).stalled
    assert decide_plan(snap(progress=running, last_progress_at=300.0)).stalled
