"""The gauges beside the metrics record: ZooKeeper's `mntr`, the agent's own figures,
consumer lag per group, and their names."""

from __future__ import annotations

import pytest

from agent.decide import ActionKind
from agent.metrics.agent_stats import AgentStats
from agent.metrics.gauges import extra_gauges
from agent.metrics.lag import GroupLag, group_lag
from agent.metrics.zookeeper import zookeeper_gauges
from planner.contracts.plan_status import PlanState, PlanStatus

pytestmark = pytest.mark.unit

MNTR = (
    "zk_version\t3.9.3-abc, built on 2024\n"
    "zk_server_state\tfollower\n"
    "zk_avg_latency\t0.4321\n"
    "zk_max_latency\t12\n"
    "zk_outstanding_requests\t3\n"
    "zk_znode_count\t154\n"
    "zk_watch_count\t7\n"
    "zk_num_alive_connections\t5\n"
    "zk_approximate_data_size\t12345\n"
)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            MNTR,
            {
                "avg_latency_ms": 0.4321,
                "max_latency_ms": 12.0,
                "outstanding_requests": 3.0,
                "znode_count": 154.0,
                "watch_count": 7.0,
                "alive_connections": 5.0,
                "data_size_bytes": 12345.0,
                "is_leader": 0.0,
                "is_follower": 1.0,
                "is_observer": 0.0,
                "is_standalone": 0.0,
                "up": 1.0,
            },
        ),
        # a leader also reports its synced followers
        (
            "zk_server_state\tleader\nzk_synced_followers\t2\n",
            {
                "synced_followers": 2.0,
                "is_leader": 1.0,
                "is_follower": 0.0,
                "is_observer": 0.0,
                "is_standalone": 0.0,
                "up": 1.0,
            },
        ),
        # values that are not numbers, lines without a tab: left out
        ("zk_avg_latency\tfast\nrubbish line\n", {"up": 1.0}),
    ],
)
def test_mntr_becomes_gauges(answer: str, expected: dict[str, float]) -> None:
    assert zookeeper_gauges(answer) == expected


@pytest.mark.parametrize(
    ("committed", "ends", "expected"),
    [
        ({}, {}, GroupLag(0, 0, 0)),
        ({("t", 0): 5, ("t", 1): 10}, {("t", 0): 8, ("t", 1): 10}, GroupLag(3, 3, 2)),
        # nothing committed (-1) and unknown ends do not count; an end read before the commit
        # is no negative lag
        ({("t", 0): -1, ("t", 1): 12, ("u", 0): 4}, {("t", 0): 8, ("t", 1): 10}, GroupLag(0, 0, 1)),
    ],
)
def test_group_lag(
    committed: dict[tuple[str, int], int], ends: dict[tuple[str, int], int], expected: GroupLag
) -> None:
    assert group_lag(committed, ends) == expected


def test_agent_stats_count_an_interval_and_reset() -> None:
    stats = AgentStats()
    stats.record_cycle(0.010, ActionKind.NONE)
    stats.record_cycle(0.030, ActionKind.RESTART)
    stats.record_cycle(0.020, ActionKind.APPLY_DYNAMIC)
    stats.record_plan(
        True, PlanStatus(PlanState.EXECUTING, plan_id=3, completed_batches=1, batch_count=4)
    )
    taken = stats.take()
    assert taken == pytest.approx(
        {
            "cycles": 3.0,
            "actions": 2.0,
            "restarts": 1.0,
            "is_planner": 1.0,
            "cycle_time_ms": 20.0,
            "cycle_time_ms_max": 30.0,
            "plan_batches_done": 1.0,
            "plan_batches": 4.0,
            "plan_progress": 0.25,
        }
    )
    stats.record_plan(False, None)
    assert stats.take() == {"cycles": 0.0, "actions": 0.0, "restarts": 0.0, "is_planner": 0.0}


def test_extra_gauge_names() -> None:
    gauges = extra_gauges(
        "my.cluster",
        2,
        {"avg_latency_ms": 0.5},
        {"cycles": 3.0},
        {"orders.readers": GroupLag(7, 5, 2)},
    )
    assert gauges == [
        ("my_cluster.brokers.2.zookeeper.avg_latency_ms", 0.5),
        ("my_cluster.brokers.2.agent.cycles", 3.0),
        ("my_cluster.groups.orders_readers.lag", 7.0),
        ("my_cluster.groups.orders_readers.max_partition_lag", 5.0),
        ("my_cluster.groups.orders_readers.partitions", 2.0),
    ]
