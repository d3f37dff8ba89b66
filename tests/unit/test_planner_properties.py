"""Properties of every plan (hypothesis): hard goals kept by the target and by every step
of every batch, no partition below its min ISR because of the plan, a fixed point
(planning the result gives an empty plan), determinism, and minimal movement cases."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from planner.batches import MovementBudget
from planner.feasibility import InfeasibleError
from planner.goals import hard_goal_violations, rack_bounds
from planner.model import Broker, BrokerState, Cluster, Partition, PlannerSettings
from planner.optimizer import target_cluster
from planner.plan import Plan, make_plan
from planner.state import PlacementState

pytestmark = pytest.mark.unit


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    rack_count = draw(st.integers(1, 3))
    broker_count = draw(st.integers(3, 9))
    brokers = []
    for i in range(broker_count):
        state = draw(
            st.sampled_from([BrokerState.ACTIVE] * 6 + [BrokerState.DRAINING, BrokerState.DEAD])
        )
        brokers.append(Broker(i + 1, f"r{i % rack_count}", state))
    ids = [b.id for b in brokers]
    partitions = []
    for t in range(draw(st.integers(1, 3))):
        rf = draw(st.integers(1, 3))
        for number in range(draw(st.integers(1, 12))):
            replicas = draw(st.permutations(ids))[:rf]
            size = draw(st.integers(1, 1000))
            rate = float(draw(st.integers(0, 100)))
            partitions.append(Partition(f"t{t}", number, tuple(replicas), size, rate, rate * 2))
    return Cluster(tuple(brokers), tuple(partitions))


def _plan_or_skip(cluster: Cluster, budget: MovementBudget | None = None, seed: int = 0) -> Plan:
    try:
        return make_plan(cluster, seed=seed, budget=budget)
    except InfeasibleError:
        assume(False)
        raise


def _steps_keep_the_hard_goals(cluster: Cluster, plan: Plan) -> None:
    brokers = cluster.broker_by_id()
    racks = cluster.racks()
    current = {(p.topic, p.partition): p.replicas for p in cluster.partitions}
    min_isr = {
        (p.topic, p.partition): cluster.min_insync_replicas_for(p) for p in cluster.partitions
    }
    target_rf = {(p.topic, p.partition): p.replication_factor for p in cluster.partitions}
    for batch in plan.batches:
        seen = set()
        for step in batch.steps:
            key = (step.topic, step.partition)
            assert key not in seen, f"{key} twice in one batch"
            seen.add(key)
            assert step.previous == current[key]
            replicas = step.replicas
            assert len(replicas) == target_rf[key] and len(set(replicas)) == len(replicas)
            # Replicas still in sync when the step starts, that the step keeps.
            live_before = [b for b in step.previous if brokers[b].state is not BrokerState.DEAD]
            kept = [b for b in live_before if b in replicas]
            # At most max(1, live - min ISR) in-sync replicas leave in one step, so the
            # others stay in the ISR while Kafka copies to the new ones.
            assert len(kept) >= min(min_isr[key], len(live_before) - 1), (key, step)
            per_rack: dict[str, int] = {}
            for b in replicas:
                per_rack[brokers[b].rack] = per_rack.get(brokers[b].rack, 0) + 1
            _, high = rack_bounds(len(replicas), len(racks))
            final = plan.target.partitions[
                [(p.topic, p.partition) for p in plan.target.partitions].index(key)
            ]
            if replicas != final.replicas:
                # An intermediate list keeps the spread where the target does.
                assert max(per_rack.values()) <= max(high, _max_per_rack(current[key], brokers)), (
                    key,
                    step,
                )
            current[key] = replicas
    assert current == {(p.topic, p.partition): p.replicas for p in plan.target.partitions}


def _max_per_rack(replicas: tuple[int, ...], brokers: dict[int, Broker]) -> int:
    per: dict[str, int] = {}
    for b in replicas:
        per[brokers[b].rack] = per.get(brokers[b].rack, 0) + 1
    return max(per.values())


def _cluster_of(
    states: str, rack_count: int, partitions: list[tuple[str, tuple[int, ...], int, int]]
) -> Cluster:
    """A cluster in the shape `clusters()` draws: brokers 1..n (states as letters: a
    active, d draining, x dead) round-robin over the racks; partitions as (topic, replicas,
    size, bytes in per second), numbered in order within their topic."""
    state_of = {"a": BrokerState.ACTIVE, "d": BrokerState.DRAINING, "x": BrokerState.DEAD}
    brokers = tuple(Broker(i + 1, f"r{i % rack_count}", state_of[s]) for i, s in enumerate(states))
    numbers: dict[str, int] = {}
    parts = []
    for topic, replicas, size, rate in partitions:
        number = numbers.get(topic, 0)
        numbers[topic] = number + 1
        parts.append(Partition(topic, number, replicas, size, float(rate), float(rate * 2)))
    return Cluster(brokers, tuple(parts))


# Found by hypothesis: a broker's leader load summed move by move landed exactly on the
# edge of the tolerance band and read as inside it; summed afresh when the result was
# planned again it read as outside, and two leaderships moved.
LEADER_LOAD_ON_THE_BAND_EDGE = _cluster_of(
    "aaadd",
    1,
    [
        *[("t0", r, 1, rate) for r, rate in [((1, 2), 75), ((1, 2), 81), ((2, 1), 88)]],
        *[("t0", r, 1, rate) for r, rate in [((2, 1), 64), ((1, 2), 71), ((1, 2), 29)]],
        *[("t0", r, size, rate) for r, size, rate in [((1, 2), 1, 66), ((1, 2), 2, 97)]],
        *[("t0", r, 1, rate) for r, rate in [((1, 2), 96), ((1, 2), 94), ((1, 3), 57)]],
        ("t0", (2, 3), 1, 97),
        *[("t1", (1, 2), 1, rate) for rate in (3, 22, 33, 86)],
        *[("t1", (1, 3), 1, rate) for rate in (14, 57, 44, 86)],
    ],
)


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(clusters())
@example(LEADER_LOAD_ON_THE_BAND_EDGE)
def test_every_plan_keeps_every_hard_goal_and_is_a_fixed_point(cluster: Cluster) -> None:
    plan = _plan_or_skip(cluster)
    assert hard_goal_violations(plan.target, PlannerSettings(), cluster) == []
    _steps_keep_the_hard_goals(cluster, plan)
    again = make_plan(plan.target)
    assert again.is_empty, again.reassignment_json()


@PROPERTY
@given(clusters(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=60))
def test_leader_load_kept_move_by_move_equals_the_load_summed_afresh(
    cluster: Cluster, changes: list[tuple[int, int]]
) -> None:
    # The leader-load phase decides at the edge of its tolerance band: a load that
    # depended on the order of the moves would read differently when the result is
    # planned again, and the plan would not be a fixed point.
    state = PlacementState(cluster, PlannerSettings())
    brokers = len(state.broker_ids)
    for which, to in changes:
        p = which % len(state.replicas)
        replicas = state.replicas[p]
        dst = to % brokers
        if dst in replicas:
            state.make_leader(p, dst)
        else:
            state.move(p, replicas[which % len(replicas)], dst)
    afresh = PlacementState(target_cluster(state), PlannerSettings())
    assert state.leader_load == afresh.leader_load
    assert state.leader_load_in == afresh.leader_load_in
    assert state.leader_load_out == afresh.leader_load_out
    assert state.leader_load_target == afresh.leader_load_target


@PROPERTY
@given(clusters(), st.integers(1, 3), st.integers(1, 3))
def test_batches_respect_the_budget(cluster: Cluster, per_broker: int, leaders: int) -> None:
    budget = MovementBudget(max_partitions_per_broker=per_broker, max_leadership_changes=leaders)
    plan = _plan_or_skip(cluster, budget)
    unbudgeted = make_plan(cluster)
    assert plan.target == unbudgeted.target
    _steps_keep_the_hard_goals(cluster, plan)
    for batch in plan.batches:
        assert batch.leadership_changes <= leaders
        moving: dict[int, int] = {}
        for step in batch.steps:
            for b in (*step.added, *step.removed):
                moving[b] = moving.get(b, 0) + 1
        assert max(moving.values(), default=0) <= per_broker, moving


@PROPERTY
@given(clusters(), st.integers(0, 1000))
def test_same_input_and_seed_give_the_same_plan(cluster: Cluster, seed: int) -> None:
    first = _plan_or_skip(cluster, seed=seed)
    second = make_plan(cluster, seed=seed)
    assert first.reassignment_json() == second.reassignment_json()
    assert first.batches == second.batches


def test_a_balanced_cluster_gets_an_empty_plan() -> None:
    brokers = tuple(Broker(i, "abc"[i % 3]) for i in range(3))
    parts = tuple(Partition("t", n, tuple((n + j) % 3 for j in range(3))) for n in range(9))
    assert make_plan(Cluster(brokers, parts)).is_empty


def test_leadership_change_is_preferred_over_copying_data() -> None:
    # Replicas even, leaders all on broker 0: reordering fixes it, no byte moves.
    brokers = tuple(Broker(i, "abc"[i]) for i in range(3))
    parts = tuple(Partition("t", n, (0, 1 + n % 2, 2 - n % 2), 10**9) for n in range(6))
    plan = make_plan(Cluster(brokers, parts))
    assert plan.replicas_moved == 0 and plan.bytes_moved == 0
    assert plan.leadership_changes == 4
    leaders = [p.replicas[0] for p in plan.target.partitions]
    assert sorted(leaders.count(b) for b in range(3)) == [2, 2, 2]


def test_draining_moves_exactly_the_drained_replicas() -> None:
    brokers = tuple(Broker(i, "abc"[i % 3]) for i in range(6))
    parts = tuple(Partition("t", n, (n % 6, (n + 1) % 6, (n + 2) % 6)) for n in range(12))
    cluster = Cluster(brokers, parts).with_broker_states({0: BrokerState.DRAINING})
    plan = make_plan(cluster)
    on_drained = sum(1 for p in parts if 0 in p.replicas)
    assert plan.replicas_moved == on_drained
    assert all(0 not in p.replicas for p in plan.target.partitions)


def test_an_added_broker_receives_its_share_with_the_fewest_moves() -> None:
    brokers = tuple(Broker(i, "abc"[i % 3]) for i in range(3))
    parts = tuple(Partition("t", n, (n % 3, (n + 1) % 3, (n + 2) % 3)) for n in range(12))
    grown = Cluster(brokers + tuple(Broker(i, "abc"[i % 3]) for i in range(3, 6)), parts)
    plan = make_plan(grown)
    # 36 replicas over 6 brokers: 6 each; the three new brokers need 18, the lower bound.
    assert plan.replicas_moved == 18


def test_a_crowded_topic_on_a_full_broker_costs_one_move_not_a_swap() -> None:
    # One rack, RF 1, 15 replicas: 5 per broker. Broker 1 holds 2 too many; broker 2 holds
    # its 5 but 5 of topic x's 6 (soft goal 3 tolerates 4); broker 3 lacks 2. Broker 2
    # gives an x to broker 3 and broker 1 refills it: 3 moves. Evening the counts first
    # and then swapping for the topic costs 4.
    brokers = tuple(Broker(i, "a") for i in (1, 2, 3))
    on = {1: ["x", "y", "y", "y", "z", "z", "z"], 2: ["x"] * 5, 3: ["y", "y", "z"]}
    numbers: dict[str, int] = {}
    parts = []
    for broker, topics in on.items():
        for topic in topics:
            numbers[topic] = numbers.get(topic, 0) + 1
            parts.append(Partition(topic, numbers[topic], (broker,)))
    plan = make_plan(Cluster(brokers, tuple(parts)))
    held = {b: [p.topic for p in plan.target.partitions if p.replicas == (b,)] for b in (1, 2, 3)}
    assert sorted(len(t) for t in held.values()) == [5, 5, 5], held
    assert max(t.count("x") for t in held.values()) <= 4, held
    assert plan.replicas_moved == 3
