"""The planner against the proven minimum: small instances of the optimality benchmark
(benchmarks/planner_optimality.py), each solved exactly by CP-SAT, and the exact model and
the goal judge on clusters whose answer is known by hand."""

from __future__ import annotations

import pytest

from benchmarks.optimality_model import SolveStatus, attainment, missed, solve_optimum
from benchmarks.planner_optimality import SMALL_INSTANCES, TARGET_RATIO, compare
from planner.model import Broker, BrokerState, Cluster, Partition, PlannerSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("instance", SMALL_INSTANCES, ids=lambda i: i.name)
def test_planner_within_target_of_the_proven_optimum(instance) -> None:
    result = compare(instance, seconds_per_level=60.0, workers=2, levels=1)
    assert result.optimum.status is SolveStatus.OPTIMAL
    assert result.optimum.moves is not None and result.optimum.moves > 0
    assert result.ratio <= TARGET_RATIO, (result.planner, result.optimum.moves)
    planner_missed, solver_missed = result.goals()
    assert planner_missed == solver_missed == []


SIX = tuple(Broker(i, f"zone-{'abc'[(i - 1) % 3]}") for i in range(1, 7))
"""1 and 4 in zone-a, 2 and 5 in zone-b, 3 and 6 in zone-c."""


def test_a_draining_broker_costs_exactly_its_replicas() -> None:
    # Twelve partitions, six on each broker; broker 1 drains, and its six replicas can
    # only go to broker 4 (the only other broker of its rack): six moves, no fewer.
    lists = [(1, 2, 3), (4, 5, 6)] * 2 + [(1, 5, 3), (4, 2, 6)] * 2 + [(1, 2, 6), (4, 5, 3)] * 2
    partitions = tuple(Partition("t", n, r, 10) for n, r in enumerate(lists))
    cluster = Cluster(SIX, partitions).with_broker_states({1: BrokerState.DRAINING})
    optimum = solve_optimum(cluster, PlannerSettings(), seconds_per_level=30.0, levels=1)
    assert optimum.status is SolveStatus.OPTIMAL
    assert optimum.moves == 6
    assert optimum.target is not None
    assert missed(attainment(cluster, optimum.target, PlannerSettings())) == []


def test_the_judge_names_each_goal_a_placement_misses() -> None:
    # Every partition of one topic led by broker 1 and stacked on brokers 1-3.
    partitions = tuple(Partition("t", n, (1, 2, 3), 10) for n in range(6))
    cluster = Cluster(SIX, partitions)
    assert missed(attainment(cluster, cluster, PlannerSettings())) == [
        "replicas_per_broker",
        "leaders_per_broker",
        "topic_spread",
        "disk_bytes",
    ]
