"""MirrorMaker 2 between two real local clusters over mutual TLS: the shared cluster is the
source, a second cluster the target, and two of the target's VMs run MirrorMaker from the
rendered properties as a group. Every message produced with acks=all arrives on the target
in order per key, also after one of the two processes is killed."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from agent.mirror_maker import MirrorMakerFiles, mirror_libs, mirror_maker_command
from management_plane.local.image import find_java, load_image
from management_plane.local.processes import (
    ProcessRecord,
    send_signal,
    start_process,
    wait_gone,
)
from management_plane.local.tls import vm_identity
from planner.contracts.mirror_flow import MirrorFlow, MirrorSource, SourceKind
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.mirror import (
    MirrorEndpoint,
    RestStores,
    render_mirror_maker_properties,
)
from planner.pki.files import IdentityFiles
from planner.pki.pkcs12 import write_pkcs12_stores
from tests import harness
from tests.harness import ClusterHandle, wait_until

pytestmark = pytest.mark.integration

MESSAGES = 2000
KEYS = 20


def _tls(identity: IdentityFiles) -> TlsFiles:
    return TlsFiles(str(identity.keystore), str(identity.trust_bundle))


@pytest.fixture(scope="module")
def target_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    home = tmp_path_factory.mktemp("mirror-target")
    handle = harness.start_cluster(home, 3, "backup", harness.FRESH_CLUSTER_BASE)
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


def _start_mirror_makers(
    source: ClusterHandle, target: ClusterHandle, flow: MirrorFlow, folder: Path
) -> list[ProcessRecord]:
    image = load_image(verify=False)
    libs = mirror_libs(image.root, image.default_kafka_version)
    java = str(find_java())
    records = []
    for vm in target.layout.vms[:2]:
        node = vm_identity(vm)
        stores = write_pkcs12_stores(node, folder / vm.name / "rest")
        properties = render_mirror_maker_properties(
            target_cluster=target.layout.name,
            target=MirrorEndpoint(target.bootstrap_servers, _tls(node)),
            flows=[flow],
            # The source's admin identity, read-only use: MirrorMaker writes nothing there.
            sources={
                flow.name: MirrorEndpoint(source.bootstrap_servers, _tls(source.admin_identity))
            },
            rest_address=vm.address,
            rest_port=vm.ports.mirror_rest,
            rest_stores=RestStores(str(stores.keystore), str(stores.truststore), stores.password),
        )
        files = MirrorMakerFiles(folder / vm.name)
        files.write(properties)
        command = mirror_maker_command(java, libs, files)
        assert not any(stores.password in part for part in command)
        records.append(start_process(command, folder / vm.name / "mm2.log", folder))
    return records


def _produce(source: ClusterHandle, topic: str, start: int, count: int) -> None:
    producer = Producer(source.client_config(acks="all", **{"enable.idempotence": True}))
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i % KEYS}", value=str(i))
    assert producer.flush(120) == 0, "the source did not acknowledge every message"


def test_a_flow_mirrors_everything_in_order_and_survives_a_killed_process(
    kafka_cluster: ClusterHandle, target_cluster: ClusterHandle, tmp_path: Path
) -> None:
    topic = f"mirrored-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_cluster.client_config())  # kept: its handle serves the future
    admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(60)
    flow = MirrorFlow(
        name="to-backup",
        source=MirrorSource(
            SourceKind.KAAS, kafka_cluster.layout.name, kafka_cluster.bootstrap_servers
        ),
        target_cluster=target_cluster.layout.name,
        topics="mirrored-.*",
        groups=".*",
        checkpoint_interval_s=5,
    )
    records = _start_mirror_makers(kafka_cluster, target_cluster, flow, tmp_path / "mm2")
    consumer = Consumer(
        target_cluster.client_config(
            **{"group.id": f"check-{topic}", "auto.offset.reset": "earliest"}
        )
    )
    try:
        _produce(kafka_cluster, topic, 0, MESSAGES)
        consumer.subscribe([flow.mirrored_topic(topic)])
        last_per_key: dict[bytes, int] = {}
        seen: set[int] = set()
        reordered: list[tuple[bytes, int, int]] = []

        def read_until(count: int) -> bool:
            """Everything the consumer has for about a second, then whether `count` arrived."""
            for message in consumer.consume(num_messages=1000, timeout=1):
                if message.error() is not None:
                    continue
                value = int(message.value() or b"-1")
                key = message.key() or b""
                if value in seen:
                    continue  # a redelivery after a task restart
                if last_per_key.get(key, -1) > value:
                    reordered.append((key, last_per_key[key], value))
                last_per_key[key] = value
                seen.add(value)
            return len(seen) >= count

        wait_until(lambda: read_until(MESSAGES), 300, "the flow to mirror the first batch")
        assert send_signal(records[0], signal.SIGKILL)  # no chance to hand its tasks over
        _produce(kafka_cluster, topic, MESSAGES, MESSAGES)
        wait_until(lambda: read_until(2 * MESSAGES), 300, "the remaining MirrorMaker to take over")
        assert seen == set(range(2 * MESSAGES))
        assert reordered == [], f"messages out of order within a key: {reordered[:5]}"
    finally:
        consumer.close()
        for record in records:
            send_signal(record, signal.SIGTERM)
        for record in records:
            if not wait_gone(record, 30):
                send_signal(record, signal.SIGKILL)
