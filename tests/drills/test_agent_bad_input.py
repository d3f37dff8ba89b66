"""Bad input in ZooKeeper: the agents refuse it with a clear sentence, keep the last good
spec, and restart nothing because of it. Which values are refused, and with which words, is
table-tested against fakes (tests/unit/test_agent_cycle.py); here one of them goes through
real ZooKeeper to real agents and brokers."""

from __future__ import annotations

import time

import pytest

from planner.contracts.journal import parse_journal_entry
from planner.contracts.paths import ClusterPaths
from tests.harness import ClusterHandle, agent_sentences, wait_for_healthy_agents, wait_until

pytestmark = pytest.mark.drill


BAD_SPECS = [
    (
        b'{"schema_version": 1, "cluster": "agents", "kafka_version": "3.9.2", "broker_count": "three",'
        b' "zones": ["zone-a"]}',
        "spec.broker_count must be an integer, got str",
    ),
]


def test_malformed_spec_is_refused_and_nothing_restarts(
    fresh_cluster_with_agents: ClusterHandle,
) -> None:
    cluster = fresh_cluster_with_agents
    paths = ClusterPaths(cluster.layout.name)
    zk = cluster.zookeeper()
    zk.start(timeout=15)
    try:

        def sentences() -> list[str]:
            return agent_sentences(zk, cluster.layout.name)

        wait_for_healthy_agents(zk, cluster.layout.name)
        good, _ = zk.get(paths.spec)
        pids = [(vm.directory / "kafka.pid").read_text() for vm in cluster.layout.vms]
        journal_before = len(zk.get_children(paths.journal))
        for bad_value, reason in BAD_SPECS:
            zk.set(paths.spec, bad_value)
            expected = reason
            wait_until(
                lambda expected=expected: all(expected in s for s in sentences()),  # type: ignore[misc]
                30,
                f"every agent to refuse the spec ({reason})",
            )
            assert all(
                "keeping the last good one" in s or "nothing applied" in s for s in sentences()
            )
            time.sleep(4)  # a few more cycles
            zk.set(paths.spec, good)  # the operator repairs it: the refusal disappears
            wait_until(
                lambda: not any("refused" in s for s in sentences()),
                30,
                "the agents to accept the repaired spec",
            )
        assert [(vm.directory / "kafka.pid").read_text() for vm in cluster.layout.vms] == pids
        new_entries = [
            parse_journal_entry(zk.get(f"{paths.journal}/{c}")[0])
            for c in sorted(zk.get_children(paths.journal))[journal_before:]
        ]
        assert [e for e in new_entries if e.action in ("start", "restart", "apply_dynamic")] == []
    finally:
        zk.stop()
        zk.close()
