"""The failover report of a consumer group (pure): per source partition, the group's
committed offset on the source beside the one MirrorMaker synced to the mirrored partition,
and the refusals of a group the flow does not sync or that committed nothing."""

from __future__ import annotations

import pytest

from management_plane.errors import ApiError
from management_plane.mirror.failover import (
    PartitionFailover,
    PartitionOffsets,
    failover_report,
)
from planner.contracts.mirror_flow import MirrorFlow, MirrorSource, SourceKind

pytestmark = pytest.mark.unit

FLOW = MirrorFlow(
    name="to-backup",
    source=MirrorSource(SourceKind.KAAS, "primary", "127.0.1.1:9092"),
    target_cluster="backup",
    topics="orders-.*",
    groups="billing-.*",
)
T = PartitionFailover.TRANSLATED
N = PartitionFailover.NOT_TRANSLATED
G = PartitionFailover.TARGET_ONLY


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        pytest.param(
            {("orders-eu", 0): 120, ("orders-eu", 1): 80},
            {("primary.orders-eu", 0): 100, ("primary.orders-eu", 1): 80},
            [("orders-eu", 0, 120, 100, T), ("orders-eu", 1, 80, 80, T)],
            id="both-sides",
        ),
        pytest.param(
            {("orders-eu", 0): 120, ("orders-eu", 1): 80},
            {("primary.orders-eu", 1): 80},
            [("orders-eu", 0, 120, None, N), ("orders-eu", 1, 80, 80, T)],
            id="one-not-synced-yet",
        ),
        pytest.param(
            None,
            {("primary.orders-eu", 2): 7},
            [("orders-eu", 2, None, 7, G)],
            id="source-unreadable",
        ),
        pytest.param(
            {("orders-eu", 0): 5, ("payments", 0): 9},
            {("primary.orders-eu", 0): 5, ("orders-eu", 0): 3, ("other.orders-eu", 0): 1},
            [("orders-eu", 0, 5, 5, T)],
            id="topics-outside-the-flow-ignored",
        ),
    ],
)
def test_the_report_pairs_each_source_partition_with_its_mirror(
    source: dict[tuple[str, int], int] | None,
    target: dict[tuple[str, int], int],
    expected: list[tuple[str, int, int | None, int | None, PartitionFailover]],
) -> None:
    assert failover_report(FLOW, "billing-1", source, target) == [
        PartitionOffsets(topic, p, f"primary.{topic}", s, t, state)
        for topic, p, s, t, state in expected
    ]


@pytest.mark.parametrize(
    ("group", "source", "target", "status", "named"),
    [
        ("reports", {("orders-eu", 0): 1}, {}, 409, "does not sync group 'reports'"),
        ("billing-9", {}, {}, 404, "no committed offset"),
        ("billing-9", None, {("orders-eu", 0): 3}, 404, "no committed offset"),
        ("billing-9", {("payments", 0): 4}, {}, 404, "no committed offset"),
        ("", {}, {}, 422, "group must be"),
        ("bill\ning", {}, {}, 422, "group must be"),
    ],
)
def test_a_group_the_flow_does_not_sync_or_that_committed_nothing_is_refused(
    group: str,
    source: dict[tuple[str, int], int] | None,
    target: dict[tuple[str, int], int],
    status: int,
    named: str,
) -> None:
    with pytest.raises(ApiError) as refused:
        failover_report(FLOW, group, source, target)
    assert refused.value.status == status and named in refused.value.message
