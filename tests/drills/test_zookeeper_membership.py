"""A ZooKeeper server gone past the threshold is removed by reconfig, and its VM's agent adds
it back once it runs again: failure and recovery go through the same two steps."""

from __future__ import annotations

import pytest

from planner.contracts.journal import parse_journal_entry
from planner.contracts.paths import ClusterPaths
from planner.zookeeper_ensemble import parse_ensemble_config
from tests.harness import ClusterHandle, wait_until

pytestmark = pytest.mark.drill


def test_gone_server_is_removed_and_rejoins(fresh_cluster_with_agents: ClusterHandle) -> None:
    cluster = fresh_cluster_with_agents
    zk = cluster.zookeeper(",".join(vm.zookeeper_endpoint for vm in cluster.layout.vms[:2]))
    zk.start(timeout=15)
    try:

        def participants() -> list[int]:
            return sorted(
                parse_ensemble_config(zk.get("/zookeeper/config")[0].decode()).participants
            )

        assert participants() == [1, 2, 3]
        cluster.vm("stop", "vm3", "--only", "zookeeper")
        wait_until(
            lambda: participants() == [1, 2], 120, "server 3 to be removed from the ensemble"
        )

        cluster.vm("start", "vm3", "--only", "zookeeper")
        wait_until(lambda: participants() == [1, 2, 3], 120, "vm3's agent to add its server back")

        paths = ClusterPaths(cluster.layout.name)
        entries = [
            parse_journal_entry(zk.get(f"{paths.journal}/{c}")[0])
            for c in sorted(zk.get_children(paths.journal))
        ]
        reconfigs = [e for e in entries if e.action == "zk_reconfig" and e.result == "done"]
        assert any("removing it" in e.reason for e in reconfigs)
        assert any("adding it as participant" in e.reason and e.vm_id == "vm3" for e in reconfigs)
    finally:
        zk.stop()
        zk.close()
