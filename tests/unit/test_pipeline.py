"""The pipelined executor's pure core (agent.pipeline): where a partition stands, what
starts next within the per-broker and cluster caps and the disk limits, the throttles the
moves in flight need and the config writes between two throttle sets, and the concurrency
adjuster."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from agent.pipeline import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    Caps,
    ConfigChange,
    Health,
    PipelineView,
    Position,
    PositionKind,
    Reassigning,
    ResourceKind,
    ThrottleSet,
    adjust_concurrency,
    decide_pipeline,
    position,
    throttle_changes,
    throttles_for,
    throttles_may_go,
)
from planner.contracts.plan_records import PlannedPartition, PlannedStep

pytestmark = pytest.mark.unit


def planned(
    topic: str, number: int, source: tuple[int, ...], *steps: tuple[int, tuple[int, ...]]
) -> PlannedPartition:
    return PlannedPartition(
        topic,
        number,
        source,
        steps[-1][1],
        tuple(PlannedStep(batch, replicas) for batch, replicas in steps),
    )


TWO_STEPS = planned("t", 0, (1, 2, 3), (0, (4, 2, 3)), (1, (4, 5, 3)))


@pytest.mark.parametrize(
    ("live", "reassigning", "expected"),
    [
        ((1, 2, 3), None, Position(PositionKind.AT_STEP, 0)),
        ((4, 2, 3), None, Position(PositionKind.AT_STEP, 1)),
        ((4, 5, 3), None, Position(PositionKind.AT_STEP, 2)),
        ((4, 2, 3, 1), Reassigning((4, 2, 3, 1), (4,), (1,)), Position(PositionKind.MOVING, 1)),
        ((4, 5, 3, 2), Reassigning((4, 5, 3, 2), (5,), (2,)), Position(PositionKind.MOVING, 2)),
        ((2, 1, 3), None, Position(PositionKind.FOREIGN)),
        # Kafka's list answer says done, a broker's metadata still lists both: in transition.
        ((4, 2, 3, 1), None, Position(PositionKind.MOVING, 1)),
        ((4, 5, 3, 2), None, Position(PositionKind.MOVING, 2)),
        ((4, 5, 3, 1), None, Position(PositionKind.FOREIGN)),
        ((9, 2, 3, 1), Reassigning((9, 2, 3, 1), (9,), (1,)), Position(PositionKind.FOREIGN)),
        (None, None, Position(PositionKind.GONE)),
    ],
)
def test_position(
    live: tuple[int, ...] | None, reassigning: Reassigning | None, expected: Position
) -> None:
    assert position(TWO_STEPS, live, reassigning) == expected


SMALL_CAPS = Caps(per_broker=2, cluster=10)


def view(
    partitions: list[PlannedPartition],
    live: Mapping[tuple[str, int], tuple[int, ...]],
    reassigning: dict[tuple[str, int], Reassigning] | None = None,
    caps: Caps = SMALL_CAPS,
    concurrency: int = 10,
    **extra: object,
) -> PipelineView:
    return PipelineView(partitions, live, reassigning or {}, caps, concurrency, **extra)  # type: ignore[arg-type]


def drain(n: int, source: tuple[int, ...] = (1, 2, 3), to: int = 4) -> list[PlannedPartition]:
    return [planned("t", i, source, (0, (to, *source[1:]))) for i in range(n)]


def test_the_queue_starts_in_batch_order_up_to_the_per_broker_cap() -> None:
    parts = [planned("t", 0, (1, 2), (1, (3, 2))), planned("t", 1, (1, 2), (0, (3, 2)))]
    parts.append(planned("t", 2, (1, 2), (0, (3, 2))))
    decision = decide_pipeline(view(parts, {(p.topic, p.partition): p.source for p in parts}))
    # Batch 0 first (partitions 1, 2); the cap of 2 moves per broker keeps partition 0 waiting.
    assert decision.start == (("t", 1, (3, 2)), ("t", 2, (3, 2)))
    assert decision.waiting_reason == "per-broker cap reached"
    assert not decision.done


def test_a_finished_move_frees_its_slot_at_once_no_batch_barrier() -> None:
    parts = drain(3)
    live = {("t", 0): (4, 2, 3), ("t", 1): (4, 2, 3, 1), ("t", 2): (1, 2, 3)}
    moving = {("t", 1): Reassigning((4, 2, 3, 1), (4,), (1,))}
    decision = decide_pipeline(view(parts, live, moving))
    assert decision.start == (("t", 2, (4, 2, 3)),)
    assert decision.moving == (("t", 1), ("t", 2))
    assert decision.finished == (("t", 0),)
    assert (decision.steps_done, decision.steps_total) == (1, 3)


def test_a_partitions_next_step_starts_when_its_previous_one_is_done() -> None:
    decision = decide_pipeline(view([TWO_STEPS], {("t", 0): (4, 2, 3)}))
    assert decision.start == (("t", 0, (4, 5, 3)),)
    moving = {("t", 0): Reassigning((4, 2, 3, 1), (4,), (1,))}
    assert decide_pipeline(view([TWO_STEPS], {("t", 0): (4, 2, 3, 1)}, moving)).start == ()


def test_the_cluster_concurrency_counts_copies_not_reorders() -> None:
    parts = [*drain(3, to=4), planned("u", 0, (1, 2), (0, (2, 1)))]
    live = {(p.topic, p.partition): p.source for p in parts}
    decision = decide_pipeline(view(parts, live, caps=Caps(per_broker=9, cluster=2), concurrency=1))
    # Healthy: the concurrency grows from 1 to 2; the reorder needs no slot.
    assert decision.concurrency == 2
    assert decision.start == (("t", 0, (4, 2, 3)), ("t", 1, (4, 2, 3)), ("u", 0, (2, 1)))
    assert decision.waiting_reason == "concurrency 2 reached"


def test_disk_limits_hold_a_move_until_room_is_made() -> None:
    parts = drain(2)
    live: dict[tuple[str, int], tuple[int, ...]] = {("t", 0): (1, 2, 3), ("t", 1): (1, 2, 3)}
    sizes = {("t", 0): 60, ("t", 1): 60}
    limits = {1: 1000.0, 2: 1000.0, 3: 1000.0, 4: 100.0}
    decision = decide_pipeline(view(parts, live, sizes=sizes, disk_limits=limits))
    assert decision.start == (("t", 0, (4, 2, 3)),)
    assert decision.waiting_reason == "t-1 waits for disk room"
    # Bytes already arriving count: a reassignment lists its new replica in the live list.
    moving = {("t", 0): Reassigning((4, 2, 3, 1), (4,), (1,))}
    live[("t", 0)] = (4, 2, 3, 1)
    assert decide_pipeline(view(parts, live, moving, sizes=sizes, disk_limits=limits)).start == ()


def test_nothing_moving_and_only_disk_in_the_way_starts_the_head_of_the_queue() -> None:
    # The plan's batch order vouches for the head; waiting would wait forever.
    parts = drain(1)
    decision = decide_pipeline(
        view(parts, {("t", 0): (1, 2, 3)}, sizes={("t", 0): 500}, disk_limits={4: 100.0})
    )
    assert decision.start == (("t", 0, (4, 2, 3)),)


def test_a_foreign_list_supersedes_and_starts_nothing() -> None:
    parts = drain(2)
    decision = decide_pipeline(view(parts, {("t", 0): (3, 2, 1), ("t", 1): (1, 2, 3)}))
    assert decision.foreign == (("t", 0), (3, 2, 1))
    assert decision.start == () and not decision.done


def test_done_when_every_partition_is_at_its_target_or_gone() -> None:
    parts = drain(2)
    decision = decide_pipeline(view(parts, {("t", 0): (4, 2, 3)}, sizes={("t", 0): 7, ("t", 1): 5}))
    assert decision.done and decision.start == () and decision.throttles.empty
    assert (decision.bytes_done, decision.bytes_total) == (12, 12)


def test_bytes_count_each_arriving_replica() -> None:
    parts = [TWO_STEPS]
    decision = decide_pipeline(view(parts, {("t", 0): (4, 2, 3)}, sizes={("t", 0): 10}))
    assert (decision.bytes_done, decision.bytes_total) == (10, 20)


def test_throttles_name_the_sources_on_the_leader_side_and_the_new_replicas_as_followers() -> None:
    throttles = throttles_for(
        [("t", 0, (1, 2, 3), (4, 2, 3)), ("t", 1, (2, 3), (3, 2)), ("u", 5, (1,), (5,))]
    )
    assert throttles.leader == {"t": frozenset({(0, 1), (0, 2), (0, 3)}), "u": frozenset({(5, 1)})}
    assert throttles.follower == {"t": frozenset({(0, 4)}), "u": frozenset({(5, 5)})}
    assert throttles.brokers == frozenset({1, 2, 3, 4, 5})


def test_throttle_changes_write_what_differs_and_delete_what_ended() -> None:
    before = throttles_for([("t", 0, (1, 2), (3, 2)), ("u", 0, (1, 2), (1, 4))])
    after = throttles_for([("t", 0, (1, 2), (3, 2))])
    changes = throttle_changes(before, after, rate=100)
    assert changes == (
        ConfigChange(ResourceKind.TOPIC, "u", ((LEADER_REPLICAS, None), (FOLLOWER_REPLICAS, None))),
        ConfigChange(ResourceKind.BROKER, "4", ((LEADER_RATE, None), (FOLLOWER_RATE, None))),
    )
    assert throttle_changes(after, after, rate=100) == ()
    start = throttle_changes(ThrottleSet(), after, rate=100)
    assert start[0] == ConfigChange(
        ResourceKind.TOPIC, "t", ((LEADER_REPLICAS, "0:1,0:2"), (FOLLOWER_REPLICAS, "0:3"))
    )
    assert {c.name for c in start[1:]} == {"1", "2", "3"}
    assert all(c.values == ((LEADER_RATE, "100"), (FOLLOWER_RATE, "100")) for c in start[1:])


def test_no_throttle_write_goes_to_a_broker_that_is_not_registered() -> None:
    # Broker 4 left with its VM while its rate was on: clearing it would be refused by KRaft
    # (UnknownBrokerId) on every tick; the topic's lists still go, and so do the others' rates.
    before = throttles_for([("t", 0, (1, 2), (3, 2)), ("u", 0, (1, 2), (1, 4))])
    changes = throttle_changes(before, ThrottleSet(), rate=100, registered=frozenset({1, 2, 3}))
    assert {c.name for c in changes if c.kind is ResourceKind.BROKER} == {"1", "2", "3"}
    assert {c.name for c in changes if c.kind is ResourceKind.TOPIC} == {"t", "u"}
    fresh = throttle_changes(
        None, ThrottleSet(), rate=100, brokers={1, 4}, registered=frozenset({1})
    )
    assert [c.name for c in fresh if c.kind is ResourceKind.BROKER] == ["1"]


def test_throttles_go_once_none_of_their_moves_runs() -> None:
    throttles = throttles_for([("t", 0, (1, 2), (3, 2))])
    assert not throttles_may_go(throttles, {("t", 0): Reassigning((3, 2, 1), (3,), (1,))})
    assert throttles_may_go(throttles, {("u", 0): Reassigning((3, 2, 1), (3,), (1,))})
    assert throttles_may_go(throttles, {})


def test_unknown_applied_throttles_clear_every_named_topic_and_broker() -> None:
    changes = throttle_changes(None, ThrottleSet(), rate=100, topics=["t"], brokers=[1])
    assert changes == (
        ConfigChange(ResourceKind.TOPIC, "t", ((LEADER_REPLICAS, None), (FOLLOWER_REPLICAS, None))),
        ConfigChange(ResourceKind.BROKER, "1", ((LEADER_RATE, None), (FOLLOWER_RATE, None))),
    )


@pytest.mark.parametrize(
    ("current", "health", "expected"),
    [
        (4, Health(), 5),
        (10, Health(), 10),
        (10, Health(at_min_isr=frozenset({("t", 0)})), 5),
        (10, Health(busy_brokers=frozenset({2})), 5),
        (3, Health(busy_brokers=frozenset({2})), 2),
        (2, Health(at_min_isr=frozenset({("t", 0)})), 2),
    ],
)
def test_adjust_concurrency(current: int, health: Health, expected: int) -> None:
    assert (
        adjust_concurrency(current, Caps(per_broker=5, cluster=10, minimum=2), health) == expected
    )


def test_caps_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="per_broker >= 1"):
        Caps(per_broker=0, cluster=3)
    with pytest.raises(ValueError, match="minimum <= cluster"):
        Caps(per_broker=1, cluster=3, minimum=4)
