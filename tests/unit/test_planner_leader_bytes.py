"""The leader-bytes phase spreads a hot topic's leaders with measured load, as the drill
tests/drills/test_measured_load_loop.py does on a real cluster: three brokers, a hot topic
of six partitions (RF 3) all led by one broker, a cold topic of twelve, and KaaS's own
`_kaas_metrics` and `_kaas_logs` (six partitions each, RF 3). The drill measured 924,113
B/s of leader bytes in over the hot topic and a few hundred over everything else; its plan
left the hot leaders 4-2-0 (615,068 / 309,188 / 295 B/s), and later 3-3-0: the third broker
led four `_kaas_metrics` partitions, whose bytes out (each direction scaled by its own
mean) made its bytes in plus out read even with none of the hot topic's bytes in."""

from __future__ import annotations

import pytest

from planner.model import Broker, Cluster, Partition
from planner.plan import make_plan

pytestmark = pytest.mark.unit

FIRST, SECOND, THIRD = 1, 2, 3
BROKERS = (FIRST, SECOND, THIRD)
HOT = "loop-hot"
HOT_IN = 924_113 / 6
"""Each hot partition's measured bytes in per second (the drill's total, split evenly)."""
QUIET_IN = {"loop-cold": 10.0, "_kaas_metrics": 20.0, "_kaas_logs": 1.0}
METRICS_READ = 20.0
"""Bytes out per second of a `_kaas_metrics` partition: the balance job reads the topic."""


def _hot_leaders(start: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The drill's hot replica lists ([first, third, second] for even partitions, [first,
    second, third] for odd), with partition n's leader moved to start[n]."""
    lists = []
    for n in range(6):
        replicas = [FIRST, SECOND, THIRD] if n % 2 else [FIRST, THIRD, SECOND]
        replicas.remove(start[n])
        lists.append((start[n], *replicas))
    return lists


def _cluster(
    start: tuple[int, ...], hot_out: float, metrics_out: float, logs_out: float
) -> Cluster:
    parts = [
        Partition(HOT, n, replicas, 10**8, HOT_IN, hot_out)
        for n, replicas in enumerate(_hot_leaders(start))
    ]
    cold_orders = [
        (SECOND, THIRD, FIRST),
        (SECOND, FIRST, THIRD),
        (THIRD, FIRST, SECOND),
        (THIRD, SECOND, FIRST),
    ]
    parts += [
        Partition("loop-cold", n, cold_orders[n % 4], 1000, QUIET_IN["loop-cold"], 0.0)
        for n in range(12)
    ]
    # Kafka's own round-robin placement of a topic it creates.
    round_robin = [(FIRST, SECOND, THIRD), (SECOND, THIRD, FIRST), (THIRD, FIRST, SECOND)]
    for topic, out in (("_kaas_metrics", metrics_out), ("_kaas_logs", logs_out)):
        parts += [
            Partition(topic, n, round_robin[n % 3], 10**5, QUIET_IN[topic], out) for n in range(6)
        ]
    return Cluster(tuple(Broker(b, "default") for b in BROKERS), tuple(parts))


ALL_ON_FIRST = (FIRST,) * 6
FOUR_ONE_ONE = (FIRST, FIRST, FIRST, FIRST, SECOND, THIRD)


@pytest.mark.parametrize(
    ("start", "hot_out", "metrics_out", "logs_out"),
    [
        pytest.param(ALL_ON_FIRST, 0.0, 0.0, 0.0, id="no-bytes-out-anywhere"),
        pytest.param(ALL_ON_FIRST, 0.0, METRICS_READ, 0.0, id="metrics-read-by-the-balance-job"),
        pytest.param(ALL_ON_FIRST, 0.0, 0.5, 0.0, id="metrics-read-at-half-a-byte-per-second"),
        pytest.param(ALL_ON_FIRST, 0.0, 0.0, METRICS_READ, id="logs-read"),
        pytest.param(FOUR_ONE_ONE, 0.0, METRICS_READ, 0.0, id="hot-leaders-4-1-1-metrics-read"),
        pytest.param(ALL_ON_FIRST, HOT_IN, METRICS_READ, 0.0, id="hot-topic-consumed-too"),
    ],
)
def test_six_equal_hot_partitions_end_led_two_by_each_broker(
    start: tuple[int, ...], hot_out: float, metrics_out: float, logs_out: float
) -> None:
    cluster = _cluster(start, hot_out, metrics_out, logs_out)
    plan = make_plan(cluster)
    hot_led = dict.fromkeys(BROKERS, 0)
    leader_in = dict.fromkeys(BROKERS, 0.0)
    for partition in plan.target.partitions:
        leader_in[partition.replicas[0]] += partition.bytes_in_per_s
        hot_led[partition.replicas[0]] += partition.topic == HOT
    assert hot_led == {FIRST: 2, SECOND: 2, THIRD: 2}, leader_in
    mean = sum(leader_in.values()) / len(BROKERS)
    assert all(abs(v / mean - 1) <= 0.1 for v in leader_in.values()), leader_in
    # The plan never makes its own leader_bytes term worse.
    before = plan.score_before.goals["leader_bytes"]
    assert plan.score_after.goals["leader_bytes"] >= before, leader_in


def _led_by(leader: int, n: int) -> tuple[int, ...]:
    followers = [b for b in BROKERS if b != leader]
    return (leader, *(followers if n % 2 else followers[::-1]))


def _settled_cluster(hot: tuple[int, ...], metrics: tuple[int, ...]) -> Cluster:
    """The drill's topics with the given hot and `_kaas_metrics` leaders, each broker
    leading ten partitions in all: no cold traffic, `_kaas_metrics` written a little and
    read (so its partitions weigh as much out as a hot one in)."""
    rest = (FIRST,) * 6 + (SECOND,) * 6 + (THIRD,) * 6
    parts = [Partition(HOT, n, _led_by(b, n), 10**8, HOT_IN, 0.0) for n, b in enumerate(hot)]
    parts += [
        Partition("_kaas_metrics", n, _led_by(b, n), 10**5, QUIET_IN["_kaas_metrics"], METRICS_READ)
        for n, b in enumerate(metrics)
    ]
    parts += [
        Partition("loop-cold", n, _led_by(b, n), 1000, 0.0, 0.0) for n, b in enumerate(rest[:12])
    ]
    parts += [
        Partition("_kaas_logs", n, _led_by(b, n), 10**5, 0.0, 0.0) for n, b in enumerate(rest[12:])
    ]
    return Cluster(tuple(Broker(b, "default") for b in BROKERS), tuple(parts))


@pytest.mark.parametrize(
    ("hot", "metrics"),
    [
        # In + out, each scaled by its own mean, reads 20 on every broker: the third leads no
        # hot partition but four metrics ones, each weighing as much as a hot one.
        pytest.param(
            (FIRST,) * 3 + (SECOND,) * 3,
            (FIRST, SECOND, THIRD, THIRD, THIRD, THIRD),
            id="hot-3-3-0-metrics-1-1-4",
        ),
        pytest.param(
            (FIRST,) * 4 + (SECOND,) * 2,
            (SECOND, SECOND, THIRD, THIRD, THIRD, THIRD),
            id="hot-4-2-0-metrics-0-2-4",
        ),
    ],
)
def test_each_direction_is_evened_on_its_own_when_their_sum_reads_even(
    hot: tuple[int, ...], metrics: tuple[int, ...]
) -> None:
    plan = make_plan(_settled_cluster(hot, metrics))
    hot_led = dict.fromkeys(BROKERS, 0)
    led = dict.fromkeys(BROKERS, 0)
    leader_in = dict.fromkeys(BROKERS, 0.0)
    leader_out = dict.fromkeys(BROKERS, 0.0)
    for partition in plan.target.partitions:
        leader = partition.replicas[0]
        led[leader] += 1
        hot_led[leader] += partition.topic == HOT
        leader_in[leader] += partition.bytes_in_per_s
        leader_out[leader] += partition.bytes_out_per_s
    assert hot_led == {FIRST: 2, SECOND: 2, THIRD: 2}, (leader_in, leader_out)
    for direction in (leader_in, leader_out):
        mean = sum(direction.values()) / len(BROKERS)
        assert all(abs(v / mean - 1) <= 0.1 for v in direction.values()), direction
    assert max(led.values()) - min(led.values()) <= 1, led
    before = plan.score_before.goals["leader_bytes"]
    assert plan.score_after.goals["leader_bytes"] > before
