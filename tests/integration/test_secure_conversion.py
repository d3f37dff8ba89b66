"""A cluster made before TLS (`kaas up --insecure-legacy`) converted to TLS on every channel
through the conversion's three phases, under an acks=all producer and a consumer: nothing
lost, no produce error, and `kaas security check` passes afterwards.

The agents do not follow a phase yet, so this cluster runs without them and the test rolls
each VM into each phase as its agent would: Kafka and ZooKeeper stopped, the phase rendered
by the one renderer (server.properties, Jolokia, and zoo.cfg naming ZooKeeper's current
dynamic file), both started, every ISR complete before the next VM. The znodes get their
ACLs by the conversion step's own port (`ClusterIO`) between the clients' phase and the
last. The load is a client as a tenant keeps one: on the plain listener until the clients'
phase is everywhere, then a new one on the TLS listener before the plain one closes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from management_plane.local import probes
from management_plane.local.render import ZOO_CFG, current_dynamic_file, zoo_cfg
from management_plane.local.state import locked, read_state, write_state
from management_plane.local.tls import admin_client
from management_plane.service.cluster_io import ClusterIO
from management_plane.workload import create_topic, durable_producer, produce_keyed, read_back
from planner.contracts.transport_security import CONVERSION_PHASES, TransportSecurity
from tests import harness
from tests.drills.test_management_plane import Load
from tests.harness import ClusterHandle, wait_until

# A conversion rolls every VM three times (about ten minutes): under `make drills` only.
pytestmark = [pytest.mark.integration, pytest.mark.long_drill]

T = TransportSecurity
KAFKA_VERSION = "3.9.2"  # ZooKeeper mode: KaaS ran KRaft with TLS only


@pytest.fixture(scope="module")
def legacy_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    handle = harness.start_cluster(
        tmp_path_factory.mktemp("legacy") / "cluster",
        nodes=3,
        name="legacy",
        address_base=harness.FRESH_CLUSTER_BASE,
        kafka_version=KAFKA_VERSION,
        transport=T.PLAINTEXT_LEGACY,
    )
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


def _roll_into(handle: ClusterHandle, transport: TransportSecurity) -> ClusterHandle:
    """The local cluster's record asks for `transport`, and each VM is rolled into it."""
    with locked(handle.home):
        state = read_state(handle.home)
        assert state is not None
        state.layout = replace(state.layout, transport=transport)
        write_state(state)
    rolled = ClusterHandle(home=handle.home, layout=state.layout)
    for vm in state.layout.vms:
        rolled.vm("stop", vm.name, "--only", "kafka")
        rolled.vm("stop", vm.name, "--only", "zookeeper")
        (vm.config_dir / ZOO_CFG).write_text(zoo_cfg(vm, current_dynamic_file(vm), transport))
        rolled.vm("start", vm.name)

        def in_sync() -> bool:
            try:
                return (
                    sum(probes.under_replicated_by_leader(admin_client(state.layout)).values()) == 0
                )
            except Exception:
                return False

        wait_until(in_sync, 180, f"every ISR complete after {vm.name} rolled into {transport}")
    return rolled


def _security_check(handle: ClusterHandle) -> tuple[int, str]:
    result = harness.kaas_cli("security", "check", "--home", str(handle.home), handle.layout.name)
    return result.returncode, result.stdout


def test_a_plaintext_cluster_is_converted_under_load_losing_nothing(
    legacy_cluster: ClusterHandle,
) -> None:
    started = time.monotonic()
    code, report = _security_check(legacy_cluster)
    assert code != 0 and "OPEN: plaintext" in report, report
    plain = legacy_cluster.client_config()
    assert plain["security.protocol"] == "PLAINTEXT"
    topic = ClusterHandle.unique_topic("convert")
    create_topic(plain, topic, partitions=6)
    seed = produce_keyed(durable_producer(plain), topic, 2000, 20, key_prefix="seed")
    acknowledged = list(seed.acknowledged)

    # Both listeners, then the clients' phase: the tenant's producer stays on the plain one.
    with Load(plain, topic) as load:
        cluster = _roll_into(legacy_cluster, CONVERSION_PHASES[0])
        cluster = _roll_into(cluster, CONVERSION_PHASES[1])
    assert load.errors == [], load.errors[:5]
    assert load.consumed > 0
    acknowledged += load.acknowledged

    # Each load names its batches' keys from 0: the second writes a topic of its own, so
    # that every acknowledged key is checked once.
    tls_topic = ClusterHandle.unique_topic("convert-tls")
    create_topic(plain, tls_topic, partitions=6)
    layout = cluster.layout
    io = ClusterIO(layout.name, [vm.address for vm in layout.vms], cluster.admin_identity)
    io.secure_kaas_znodes()
    io.secure_kafka_znodes(KAFKA_VERSION, cluster.node_identity)

    # The tenant moves to the TLS listener before the plain one closes.
    secure = cluster.client_config()
    assert secure["security.protocol"] == "SSL"
    with Load(secure, tls_topic) as load:
        cluster = _roll_into(cluster, T.TLS)
    assert load.errors == [], load.errors[:5]
    assert load.consumed > 0

    for name, sent in ((topic, acknowledged), (tls_topic, load.acknowledged)):
        check = read_back(secure, name, sent)
        assert check.missing == 0, f"{name}: {check.missing} of {len(sent)} acknowledged lost"
    acknowledged += load.acknowledged
    code, report = _security_check(cluster)
    assert code == 0, report
    print(
        f"conversion under load: {time.monotonic() - started:.0f} s, "
        f"{len(acknowledged)} acknowledged, none lost"
    )
