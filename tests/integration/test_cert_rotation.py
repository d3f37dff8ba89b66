"""Certificate rotation on a real 3-VM cluster with agents, run by the management plane's
engine (in this process, with the local provider adopting the cluster): under an acks=all
idempotent producer and a consumer, every VM gets a new certificate of a key that never left
it, applied by rolling restarts; no produce fails, nothing acknowledged is lost, and every
TLS port of every VM (Kafka's two listeners, Jolokia, and the ZooKeeper server's secure
client port, which ZooKeeper 3.8 reloads only by a restart) presents the new serial.
On the same cluster: a leaf near its expiry is renewed by its agent with no operator action
(the engine's renewal signer answers). The CA's rotation under load (three rolling rounds,
over four minutes here) is a test of its own that `make drills` runs; its rounds' order
and trust changes are unit-tested in tests/unit/test_cert_rotation.py."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from pathlib import Path

import pytest
from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from agent.cert_keeper import presented_serial
from management_plane.local.tls import vm_identity
from management_plane.providers.local import LocalProvider
from management_plane.security.renewal import RenewalSigner
from management_plane.service.adopt import adopt_local_cluster
from management_plane.service.controller import Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    SUCCEEDED,
    OperationKind,
    StepName,
    expand_steps,
)
from management_plane.workload import create_topic, read_back
from planner.pki.authority import (
    IssuedCertificate,
    Role,
    expires_at,
    issued_by,
    public_key_pem,
    sign,
)
from planner.pki.files import write_identity
from planner.pki.rotation import certificate_hosts, serial_hex
from tests import harness
from tests.drills.test_management_plane import Load
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def patient_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents start their brokers and wait for complete ISRs: on a machine shared by many
    test runs that can take longer than `kaas up`'s own 240 s."""
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


def adopted(cluster: ClusterHandle, tmp_path: Path) -> tuple[Database, LocalProvider, str, Engine]:
    """The cluster, once its agents are healthy, adopted by a management plane whose engine
    this test drives."""
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
    return db, provider, name, Engine(db, Controller(db, provider))


def test_rotating_every_certificate_under_load_loses_nothing(
    fresh_cluster_with_agents: ClusterHandle, tmp_path: Path
) -> None:
    cluster = fresh_cluster_with_agents
    db, provider, name, engine = adopted(cluster, tmp_path)
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

    _a_leaf_near_expiry_is_renewed_by_its_agent(cluster, db, provider, name)


@pytest.mark.long_drill
def test_rotating_the_ca_under_load_loses_nothing(
    fresh_cluster_with_agents: ClusterHandle, tmp_path: Path
) -> None:
    cluster = fresh_cluster_with_agents
    db, provider, name, engine = adopted(cluster, tmp_path)
    _the_ca_is_rotated_under_load(cluster, db, engine, provider, name)


def _a_leaf_near_expiry_is_renewed_by_its_agent(
    cluster: ClusterHandle, db: Database, provider: LocalProvider, name: str
) -> None:
    """vm2's certificate swapped for one of the same key expiring in 10 days (inside the
    agent's 30-day window): its agent asks, the engine's signer answers, the agent installs
    and restarts; every port of vm2 presents a certificate valid for the full term."""
    vm = cluster.layout.vms[1]
    identity = vm_identity(vm)
    authority = provider.cluster_authority(name)
    key = identity.key.read_bytes()
    hosts = certificate_hosts(identity.certificate.read_bytes())
    now = dt.datetime.now(dt.UTC)
    short = sign(authority, public_key_pem(key), Role.NODE, hosts, now, days=10)
    write_identity(identity, IssuedCertificate(key, short), identity.trust_bundle.read_bytes())
    # The watcher `kaas serve`'s engine thread calls between operation steps.
    signer = RenewalSigner(db, provider, interval_s=2.0)

    def renewed() -> bool:
        signer.check_if_due()
        installed = identity.certificate.read_bytes()
        if serial_hex(installed) == serial_hex(short):
            return False
        presented = {p: s for (a, p), s in port_serials(cluster).items() if a == vm.address}
        return set(presented.values()) == {serial_hex(installed)}

    started = time.monotonic()
    harness.wait_until(renewed, 420, "vm2's agent to renew its certificate near expiry", 3)
    renewed_pem = identity.certificate.read_bytes()
    print(f"renewal near expiry: {time.monotonic() - started:.0f} s")
    assert expires_at(renewed_pem) - now > dt.timedelta(days=300)
    assert issued_by(renewed_pem, authority.certificate_pem)


def _the_ca_is_rotated_under_load(
    cluster: ClusterHandle, db: Database, engine: Engine, provider: LocalProvider, name: str
) -> None:
    """`--ca` under load, with clients as an operator keeps them: each round's load is made
    from the client files as the previous round left them (a client made before the rotation
    trusts only the old CA, and one made after the first round still presents an old-CA
    certificate, which the last round stops trusting). No produce fails in any round and
    nothing acknowledged is lost."""
    old_ca = provider.cluster_authority(name).certificate_pem
    kind = OperationKind.ROTATE_CA
    op = db.add_operation(name, kind, {}, expand_steps(kind), "test")
    round_starts = [i for i, step in enumerate(op.steps) if step.name is StepName.CERT_ROUND]
    acknowledged: dict[str, list[tuple[str, int, int, int]]] = {}
    started = time.monotonic()
    for index, first_step in enumerate(round_starts):
        until = round_starts[index + 1] if index + 1 < len(round_starts) else len(op.steps)
        topic = cluster.unique_topic(f"ca-round{index}")
        create_topic(cluster.client_config(), topic, 3)
        with Load(cluster.client_config(), topic) as load:
            time.sleep(3)
            row = advance(db, engine, op.op_id, until)
            time.sleep(3)
        assert load.errors == [], (f"round {index}", load.errors[:5])
        assert load.consumed > 0, f"round {index}: the live consumer read nothing"
        assert row.status == SUCCEEDED or row.step_index >= until > first_step, row.message
        acknowledged[topic] = load.acknowledged
    row = advance(db, engine, op.op_id, len(op.steps) + 1)
    print(f"CA rotation under load: {time.monotonic() - started:.0f} s; {row.message}")
    assert row.status == SUCCEEDED, row.message
    for topic, messages in acknowledged.items():
        check = read_back(cluster.client_config(), topic, messages)
        assert check.missing == 0, f"{topic}: {check.missing} acknowledged messages lost"

    new_ca = provider.cluster_authority(name).certificate_pem
    assert new_ca != old_ca
    after = port_serials(cluster)
    for vm in cluster.layout.vms:
        identity = vm_identity(vm)
        installed = identity.certificate.read_bytes()
        assert issued_by(installed, new_ca) and not issued_by(installed, old_ca), vm.name
        # The old CA is no longer trusted once every leaf is of the new one.
        assert old_ca not in identity.trust_bundle.read_bytes(), vm.name
        for (address, port), serial in after.items():
            if address == vm.address:
                assert serial == serial_hex(installed), (address, port)


def advance(db: Database, engine: Engine, op_id: int, until_step: int) -> OperationRow:
    """Run the engine until the operation reaches step `until_step` or ends."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        # As the service's engine loop does: a step that lost ZooKeeper while the CA round
        # restarts its servers is run again at the next cycle.
        with contextlib.suppress(ConnectionLoss, SessionExpiredError):
            engine.run_once()
        row = db.operation(op_id)
        assert row is not None
        if not row.unfinished or row.step_index >= until_step:
            return row
        time.sleep(2)
    row = db.operation(op_id)
    raise AssertionError(f"operation {op_id} not at step {until_step} in 900 s: {row}")
