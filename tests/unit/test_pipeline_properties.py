"""Properties of the pipelined execution (hypothesis): for every plan of the planner's
property clusters, run by `agent.pipeline` with moves finishing in a random order, every
partition only ever holds one of its planned lists (so every hard goal the planner checks
per step holds at every moment), at most one move per partition runs, the per-broker and
cluster caps hold, a move takes a disk over its limit only when it is the queue's head
starting alone, and the plan always ends at its target."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.pipeline import Caps, PipelineView, Reassigning, decide_pipeline, lists_of
from planner.model import Cluster
from planner.store import StoredPlan
from tests.unit.test_planner_properties import PROPERTY, _plan_or_skip, clusters

pytestmark = pytest.mark.unit

Key = tuple[str, int]


def _used(live: dict[Key, tuple[int, ...]], sizes: dict[Key, int]) -> dict[int, int]:
    used: dict[int, int] = {}
    for key, replicas in live.items():
        for b in replicas:
            used[b] = used.get(b, 0) + sizes[key]
    return used


@PROPERTY
@given(clusters(), st.integers(1, 3), st.integers(1, 4), st.integers(0, 10_000))
def test_the_pipelined_order_keeps_every_hard_goal_at_every_moment(
    cluster: Cluster, per_broker: int, concurrency: int, seed: int
) -> None:
    plan = _plan_or_skip(cluster)
    stored = StoredPlan.from_plan("c", 1, plan)
    rng = random.Random(seed)
    sizes = {(p.topic, p.partition): p.size_bytes for p in cluster.partitions}
    live = {(p.topic, p.partition): p.replicas for p in cluster.partitions}
    target = {(p.topic, p.partition): p.replicas for p in plan.target.partitions}
    start_used, end_used = _used(live, sizes), _used(target, sizes)
    # Tight disks: room for the larger of the start and the end, plus one partition.
    biggest = max(sizes.values())
    limits = {
        b.id: float(max(start_used.get(b.id, 0), end_used.get(b.id, 0)) + biggest)
        for b in cluster.brokers
    }
    lists = {(p.topic, p.partition): lists_of(p) for p in stored.partitions}
    caps = Caps(per_broker=per_broker, cluster=concurrency)
    running: dict[Key, Reassigning] = {}
    level = concurrency
    for _ in range(10_000):
        decision = decide_pipeline(
            PipelineView(
                stored.partitions, live, running, caps, level, sizes=sizes, disk_limits=limits
            )
        )
        level = decision.concurrency
        assert decision.foreign is None
        if decision.done:
            break
        copying_before = sum(1 for r in running.values() if r.adding)
        started_copies = 0
        for topic, number, after in decision.start:
            key = (topic, number)
            assert key not in running, f"{key} started twice"
            before = live[key]
            # A step starts only from the list before it, to the next planned list.
            position = lists[key].index(before)
            assert lists[key][position + 1] == after
            removing = tuple(b for b in before if b not in after)
            adding = tuple(b for b in after if b not in before)
            if not adding:
                live[key] = after  # a new order only: Kafka applies it at once
                continue
            used = _used(live, sizes)
            if any(used.get(b, 0) + sizes[key] > limits[b] for b in adding):
                # Only the queue's head, alone, may go over: nothing else copies.
                assert copying_before == 0 and started_copies == 0, (key, used, limits)
            started_copies += 1
            running[key] = Reassigning((*after, *removing), adding, removing)
            live[key] = (*after, *removing)
        copying = [r for r in running.values() if r.adding]
        assert len(copying) <= max(level, copying_before)
        load: dict[int, int] = {}
        for r in copying:
            for b in (*r.adding, *r.removing):
                load[b] = load.get(b, 0) + 1
        assert max(load.values(), default=0) <= per_broker, load
        if running:
            # Moves end in any order; at least one ends before the next look.
            ending = rng.sample(sorted(running), rng.randint(1, len(running)))
            for key in ending:
                live[key] = running.pop(key).target
                assert live[key] in lists[key]
        else:
            assert decision.start, "nothing runs and nothing starts: the queue is stuck"
    else:
        pytest.fail("the plan never finished")
    assert all(live[key] == target[key] for key in target)
