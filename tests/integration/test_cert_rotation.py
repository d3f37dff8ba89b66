"""Certificate rotation on a real 3-VM cluster with agents, run by the management plane's
engine (in this process, with the local provider adopting the cluster): under an acks=all
idempotent producer and a consumer, every VM gets a new certificate of a key that never left
it, applied by rolling restarts; no produce fails, nothing acknowledged is lost, and every
TLS port of every VM (Kafka's two listeners, Jolokia, and the ZooKeeper server's secure
client port, which ZooKeeper 3.8 reloads only by a restart) presents the new serial."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent.cert_keeper import presented_serial
from management_plane.local.tls import vm_identity
from management_plane.providers.local import LocalProvider
from management_plane.service.adopt import adopt_local_cluster
from management_plane.service.controller import Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import SUCCEEDED, OperationKind, expand_steps
from management_plane.workload import create_topic, read_back
from planner.pki.authority import issued_by
from planner.pki.rotation import serial_hex
from tests import harness
from tests.drills.test_management_plane import Load
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def patient_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents start their brokers one at a time, each waiting for complete ISRs: on a
    machine shared by many test runs that takes longer than `kaas up`'s own 240 s."""
    monkeypatch.setattr("management_plane.local.vm_processes.BROKERS_READY_TIMEOUT", 600.0)


def run_operation(db: Database, engine: Engine, kind: OperationKind, cluster: str) -> OperationRow:
    op = db.add_operation(cluster, kind, {}, expand_steps(kind), "test")
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        engine.run_once()
        found = db.operation(op.op_id)
        assert found is not None
        if not found.unfinished:
            return found
        time.sleep(2)
    found = db.operation(op.op_id)
    raise AssertionError(f"{kind} not finished in 900 s: {found.message if found else op}")


def port_serials(cluster: ClusterHandle) -> dict[tuple[str, int], str | None]:
    """The serial each TLS port of the VMs presents (Kafka's listeners, Jolokia, ZooKeeper's
    secure client port), read with the first VM's identity."""
    identity = vm_identity(cluster.layout.vms[0])
    ports = cluster.layout.vms[0].ports
    return {
        (vm.address, port): presented_serial(vm.address, port, identity)
        for vm in cluster.layout.vms
        for port in (
            ports.kafka_internal,
            ports.kafka_tenant,
            ports.jolokia,
            ports.zookeeper_client,
        )
    }


def test_rotating_every_certificate_under_load_loses_nothing(
    fresh_cluster_with_agents: ClusterHandle, tmp_path: Path
) -> None:
    cluster = fresh_cluster_with_agents
    zk = cluster.zookeeper()
    zk.start(timeout=30)
    try:
        harness.wait_for_healthy_agents(zk, cluster.layout.name, 3, 240)
    finally:
        zk.stop()
        zk.close()
    db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
    provider = LocalProvider(tmp_path / "provider", (harness.FRESH_CLUSTER_BASE,))
    name = adopt_local_cluster(db, provider, cluster.home)
    engine = Engine(db, Controller(db, provider))
    keys = {vm.name: vm_identity(vm).key.read_bytes() for vm in cluster.layout.vms}
    before = port_serials(cluster)
    assert None not in before.values(), before

    connection = cluster.client_config()
    topic = cluster.unique_topic("rotation")
    create_topic(connection, topic, 6)
    started = time.monotonic()
    with Load(connection, topic) as load:
        time.sleep(5)
        op = run_operation(db, engine, OperationKind.ROTATE_CERTS, name)
        time.sleep(5)
    print(f"leaf rotation under load: {time.monotonic() - started:.0f} s; {op.message}")
    assert op.status == SUCCEEDED, op.message

    assert load.errors == [], load.errors[:5]
    assert load.consumed > 0
    check = read_back(connection, topic, load.acknowledged)
    assert check.missing == 0, f"{check.missing} acknowledged messages lost"

    after = port_serials(cluster)
    authority = provider.cluster_authority(name)
    for vm in cluster.layout.vms:
        identity = vm_identity(vm)
        installed = serial_hex(identity.certificate.read_bytes())
        assert identity.key.read_bytes() != keys[vm.name]  # a new key, made on the VM
        assert issued_by(identity.certificate.read_bytes(), authority.certificate_pem)
        for (address, port), serial in after.items():
            if address == vm.address:
                assert serial == installed != before[(address, port)], (address, port)
