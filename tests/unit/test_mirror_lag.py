"""A mirror flow's lag and rate from end offsets (pure), and its gauges."""

from __future__ import annotations

import pytest

from agent.metrics.mirror_lag import FlowLag, PartitionMirrorLag, flow_lag, mirror_gauges

pytestmark = pytest.mark.unit

SOURCE = {("orders", 0): 100, ("orders", 1): 50}


@pytest.mark.parametrize(
    ("target", "previous", "elapsed", "lags", "rate"),
    [
        ({("primary.orders", 0): 100, ("primary.orders", 1): 50}, None, 10.0, [0, 0], None),
        (
            {("primary.orders", 0): 90, ("primary.orders", 1): 20},
            {("primary.orders", 0): 40, ("primary.orders", 1): 20},
            10.0,
            [10, 30],
            5.0,
        ),
        ({("primary.orders", 0): 90}, None, 10.0, [10, 50], None),  # partition 1 not made yet
        ({("primary.orders", 0): 120}, None, 1.0, [0, 50], None),  # read before the source's
        (
            {("primary.orders", 0): 10, ("other.orders", 0): 999, ("orders", 1): 7},
            {("primary.orders", 0): 30, ("other.orders", 0): 0},
            2.0,
            [90, 50],
            0.0,  # shrank: no negative rate; other prefixes are not this flow's
        ),
        ({("primary.orders", 0): 100}, {("primary.orders", 0): 0}, 0.0, [0, 50], None),
    ],
)
def test_the_lag_is_source_end_minus_mirrored_end_and_the_rate_the_target_growth(
    target: dict[tuple[str, int], int],
    previous: dict[tuple[str, int], int] | None,
    elapsed: float,
    lags: list[int],
    rate: float | None,
) -> None:
    lag = flow_lag("dr", "primary", SOURCE, target, previous, elapsed)
    assert [p.lag_records for p in lag.partitions] == lags
    assert lag.lag_records == sum(lags) and lag.max_partition_lag == max(lags)
    assert lag.records_per_s == rate


def test_the_gauges_name_the_flow_and_each_partition() -> None:
    lag = FlowLag(
        "to.dr",
        (PartitionMirrorLag("a.b", 0, 10, 4), PartitionMirrorLag("a.b", 1, 3, None)),
        2.5,
    )
    assert mirror_gauges("prod", {"to.dr": lag}) == [
        ("prod.mirror.to_dr.lag_records", 9.0),
        ("prod.mirror.to_dr.max_partition_lag", 6.0),
        ("prod.mirror.to_dr.partitions", 2.0),
        ("prod.mirror.to_dr.records_per_s", 2.5),
        ("prod.mirror.to_dr.partitions.a_b.0.lag_records", 6.0),
        ("prod.mirror.to_dr.partitions.a_b.1.lag_records", 3.0),
    ]
