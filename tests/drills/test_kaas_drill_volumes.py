"""The drills that destroy or fill a broker's log directory, or lose a VM outright, each
checked as every other drill is (tests/drills/test_kaas_drill.py), on a cluster of their own
so that the broker's rebuild from its replicas holds up no other drill. The lost VM goes
last: its replacement changes the cluster's VMs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from management_plane.drills.local_cluster import LocalFaultCluster
from management_plane.drills.local_plane import BackgroundPlane
from management_plane.local import probes
from management_plane.local.background_service import running_service
from management_plane.local.state import require_state
from management_plane.service.client import ApiClient
from planner.zookeeper_ensemble import parse_ensemble_config
from tests import harness
from tests.drills import test_kaas_drill as drills
from tests.drills.test_kaas_drill import VOLUME_DRILLS, drill_cluster, management_plane
from tests.harness import ClusterHandle

pytestmark = pytest.mark.drill

__all__ = ["drill_cluster"]  # the module-scoped cluster, one instance for this file

LOSS_THRESHOLD_S = 20


@pytest.mark.parametrize("name", VOLUME_DRILLS)
def test_volume_drill_is_valid_and_reports_its_recovery(
    drill_cluster: ClusterHandle, name: str, tmp_path: Path
) -> None:
    drills.run_and_check(drill_cluster, name, tmp_path)


def _zone_of(home: Path, vm: str) -> str:
    return require_state(home).layout.vm(vm).zone


def _api(home: Path) -> ApiClient:
    service = running_service(home)
    assert service is not None, "the management plane is not running"
    return ApiClient(service.url, service.admin_key_file.read_text().strip(), service.trust_bundle)


def _lost_vm_operations(api: ApiClient, cluster: str) -> list[dict[str, Any]]:
    operations = api.call("GET", f"/v1/operations?cluster={cluster}")
    return [op for op in operations if op["kind"] == "replace_lost_vm"]


def test_a_lost_vm_is_replaced_by_the_management_plane_keeping_its_broker_id(
    drill_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """The lost-vm drill under load with the management plane beside the cluster (a short
    loss threshold): a healthy cluster is left alone past the threshold; the lost VM is
    noticed no sooner than the threshold, recycled and replaced by a new VM at a new address
    keeping its broker id, which holds every replica the lost broker held, in sync; the
    voting ensemble is back at three without the lost VM's server; no acknowledged write
    lost, no produce error."""
    home = drill_cluster.home
    cluster = LocalFaultCluster(home)
    name = cluster.name

    def zone(vm: str) -> str:
        return _zone_of(home, vm)

    with management_plane(home, "--broker-loss-after", str(LOSS_THRESHOLD_S)):
        api = _api(home)
        time.sleep(LOSS_THRESHOLD_S + 6)
        assert _lost_vm_operations(api, name) == []  # a healthy cluster is left alone
        before = {vm: cluster.vm_address(vm) for vm in cluster.vm_names()}
        zones = {vm: zone(vm) for vm in before}
        by_id = {b: cluster.broker_vm(b) for b in cluster.broker_ids()}
        try:
            result = drills.run_and_check(
                drill_cluster, "lost-vm", tmp_path, plane=BackgroundPlane(home, name)
            )
        finally:
            harness.remember(home)  # the new VM's processes, for the end-of-session check
        (outcome,) = result.outcomes
        lost = outcome.target.split(" ")[0]
        lost_id = next(b for b, vm in by_id.items() if vm == lost)
        (op,) = _lost_vm_operations(api, name)
        op = api.call("GET", f"/v1/operations/{op['op_id']}")
        assert outcome.settled == (
            f"operation {op['op_id']} (replace_lost_vm) replaced {lost} and succeeded"
        )
        assert result.report["summary"]["failed_sends"] == 0, result.report["summary"]

    noticed_s = op["created_at"] - outcome.started_s
    assert noticed_s >= LOSS_THRESHOLD_S, "replaced before the whole threshold of absence"
    journal = [(j["step"], j["outcome"]) for j in op["journal"]]
    assert journal[0] == ("decide", "detected"), journal
    assert "agent and broker both gone" in op["journal"][0]["message"]
    assert ("wait_replicated:0", "done") in journal and journal[-1] == ("finish", "done")
    assert op["params"] == {"vm_id": f"{name}/{lost}", "broker_id": lost_id}

    after = {vm: cluster.vm_address(vm) for vm in cluster.vm_names()}
    assert lost not in after and len(after) == 3, after
    new_vm = cluster.broker_vm(lost_id)
    assert new_vm not in before and after[new_vm] != before[lost]
    assert zone(new_vm) == zones[lost]
    metadata = probes.admin_client(cluster.kafka).list_topics(timeout=10)
    partitions = [p for t in metadata.topics.values() for p in t.partitions.values()]
    assert any(lost_id in p.replicas for p in partitions)
    assert all(sorted(p.replicas) == sorted(p.isrs) for p in partitions)

    zk = drill_cluster.zookeeper(",".join(f"{a}:2181" for a in after.values()))
    zk.start(timeout=15)
    try:
        config = zk.get("/zookeeper/config")[0].decode()
    finally:
        zk.stop()
        zk.close()
    assert len(parse_ensemble_config(config).participants) == 3, config
    assert before[lost] + ":" not in config, config
    print(
        f"\nlost VM: noticed {noticed_s:.0f}s after the loss (threshold {LOSS_THRESHOLD_S}s), "
        f"{lost} replaced by {new_vm}"
    )
