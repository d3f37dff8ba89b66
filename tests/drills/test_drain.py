"""A drain under load on a fresh 4-VM cluster with agents, executed by the pipelined
executor through Kafka's admin API: every replica leaves the drained broker within the
throttle's bound (1.3 x N / T + 30 s), the longest acks=all produce stall stays under 2 s
(or within the machine's own stall measured just before, when the machine is loaded),
no throttle config is left behind, and no acknowledged message is lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import harness
from tests.drills.drain_run import drain_under_load, start_drain_cluster
from tests.harness import ClusterHandle

pytestmark = pytest.mark.drill


@pytest.fixture
def drain_cluster(tmp_path: Path) -> Iterator[ClusterHandle]:
    handle = start_drain_cluster(tmp_path / "cluster")
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


def test_a_drain_under_load_moves_at_the_throttles_speed(drain_cluster: ClusterHandle) -> None:
    figures = drain_under_load(drain_cluster, data_mib=256, throttle_mib=20)
    print("\n".join(figures.lines()))
    # The broker holds its share of 24 partitions: about the size asked for.
    assert figures.data_bytes > 128 * 1024 * 1024, "the fill did not land on the broker"
    assert figures.replicas_left == 0
    assert figures.leftover_throttles == {}
    assert figures.seconds <= figures.bound_s, figures.lines()
    # Under 2 s, or no longer than the machine's own stall with nothing moving (a shared,
    # loaded test machine stalls on its own; the drain must not add to it).
    assert figures.longest_stall_s < max(2.0, 1.25 * figures.baseline_stall_s), figures.lines()
    assert figures.produce_errors == 0 and figures.stall_errors == 0
    assert figures.acknowledged > 0 and figures.missing == 0
    # The plan's progress carried its movement figures while it ran (kaas status and the
    # API show them from there): bytes moved toward the total, a rate.
    assert figures.movements, "no movement figures recorded during the drain"
    assert max(int(str(m["bytes_moved"])) for m in figures.movements) > 0
    assert any(float(str(m["rate_bytes_per_s"])) > 0 for m in figures.movements)
    status = drain_cluster.kaas("status")
    assert "plan: " in status.stdout, status.stdout
