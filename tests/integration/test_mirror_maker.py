"""MirrorMaker 2 between two real local clusters over mutual TLS, driven as an operator does:
the shared cluster is the source (given by its bootstrap servers: it runs no agents, so no
service adopts it), a second cluster with agents the target, adopted by a real `kaas serve`.
`kaas mirror create` writes the flow; the target's agents start MirrorMaker on the first two
VMs as a group, reading the source as `kaas-mirror` with only the flow's read-only bindings
(what the create operation gives a KaaS source); every message produced with acks=all
arrives on the target in order per key, also after one process is killed (its agent starts
it again); `kaas mirror delete` stops them. Bad input is refused with the field named and
nothing stored."""

from __future__ import annotations

import datetime as dt
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from management_plane.local.mirror_sources import MirrorSourceStore
from management_plane.local.processes import ProcessRecord, is_alive, send_signal
from management_plane.local.state import mirror_maker_record
from management_plane.local.tls import authority_dir_in
from management_plane.mirror.acls import SourceGrant, mirror_source_grants
from management_plane.mirror.kafka import KafkaSourceAcls
from management_plane.monitoring.graphite import GraphiteReader
from planner.contracts.mirror_flow import (
    MirrorFlow,
    MirrorSource,
    SourceKind,
)
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import parse_spec
from planner.pki.authority import Role, issue
from planner.pki.files import load_authority
from tests import harness
from tests.harness import ClusterHandle, kaas_cli, wait_until
from tests.mp_service import ServiceHandle, free_port

pytestmark = pytest.mark.integration

MESSAGES = 2000
KEYS = 20
FLOW = "to-backup"
TOPICS = "mirrored-.*"
ALIAS = "primary"


@pytest.fixture(scope="module")
def target_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    home = tmp_path_factory.mktemp("mirror-target")
    handle = harness.start_cluster(home, 3, "backup", harness.FRESH_CLUSTER_BASE, agents=True)
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


@pytest.fixture(scope="module")
def service(
    target_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceHandle]:
    handle = ServiceHandle(
        tmp_path_factory.mktemp("mirror-service") / "service",
        free_port(),
        harness.FRESH_CLUSTER_BASE,
        extra_args=(
            "--adopt-local-cluster",
            str(target_cluster.home),
            "--broker-loss-after",
            "0",
        ),
    )
    handle.start()
    try:
        yield handle
    finally:
        handle.stop()


def _kaas(service: ServiceHandle, *args: str) -> tuple[int, str]:
    env = {
        **os.environ,
        "KAAS_API_URL": service.url,
        "KAAS_API_KEY": service.key,
        "KAAS_API_CA": str(service.trust_bundle),
    }
    done = kaas_cli("mirror", *args, env=env, timeout=300)
    return done.returncode, done.stdout + done.stderr


def _give_source_credentials(source: ClusterHandle, target: ClusterHandle) -> list[SourceGrant]:
    """What the operator of an outside source does, as the create operation does it for a
    KaaS source: the flow's read-only bindings for `kaas-mirror` on the source, and a
    `kaas-mirror` certificate of the source's CA with that CA on every VM of the target."""
    flow = MirrorFlow(
        name=FLOW,
        source=MirrorSource(SourceKind.EXTERNAL, ALIAS, source.bootstrap_servers),
        target_cluster=target.layout.name,
        topics=TOPICS,
        groups=".*",
    )
    grants = list(mirror_source_grants(flow))
    KafkaSourceAcls(source.bootstrap_servers, source.admin_identity).grant(grants)
    authority = load_authority(authority_dir_in(source.home))
    issued = issue(authority, Role.MIRROR, (), dt.datetime.now(dt.UTC))
    # Kept in the target's folder too, as the local provider keeps a KaaS source's: a VM
    # added to the target later gets them.
    MirrorSourceStore(target.home).deliver(
        [vm.directory for vm in target.layout.vms],
        FLOW,
        issued.key_pem + issued.certificate_pem,
        source.admin_identity.trust_bundle.read_bytes(),
    )
    return grants


def _mirror_makers(target: ClusterHandle) -> dict[str, ProcessRecord]:
    """The MirrorMaker processes the target's agents run, by VM."""
    found = {}
    for vm in target.layout.vms:
        record = mirror_maker_record(vm)
        if record is not None and is_alive(record):
            found[vm.name] = record
    return found


def _produce(source: ClusterHandle, topic: str, start: int, count: int) -> None:
    producer = Producer(source.client_config(acks="all", **{"enable.idempotence": True}))
    for i in range(start, start + count):
        producer.produce(topic, key=f"k{i % KEYS}", value=str(i))
    assert producer.flush(120) == 0, "the source did not acknowledge every message"


def _fail_a_group_over(
    source: ClusterHandle,
    target: ClusterHandle,
    service: ServiceHandle,
    topic: str,
    started: float,
) -> None:
    """A group reads half the topic on the source and commits; MirrorMaker syncs its
    translated offsets to the target; the group resumes there: no message is skipped, and
    what it reads again is counted."""
    group = f"failover-{topic}"
    mirrored = f"{ALIAS}.{topic}"
    total = 2 * MESSAGES
    on_source: set[int] = set()
    consumer = Consumer(
        source.client_config(
            **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": "false"}
        )
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 120
        while len(on_source) < MESSAGES and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=1):
                if message.error() is None:
                    on_source.add(int(message.value() or b"-1"))
        assert len(on_source) >= MESSAGES, len(on_source)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()  # the group is no longer active on the source
    stopped = time.monotonic()
    source_admin = AdminClient(source.client_config())
    answer = source_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    committed = {
        tp.partition: tp.offset
        for tp in answer[group].result(30).topic_partitions
        if tp.offset >= 0
    }
    assert committed, "the group committed nothing on the source"

    synced: dict[int, int] = {}
    refused: list[str] = []

    def translated() -> bool:
        code, said = _kaas(service, "failover", target.layout.name, FLOW, "--group", group)
        if code != 0:
            refused.append(said)
            return False
        synced.clear()
        for line in said.splitlines()[1:]:
            # "  <topic>[p] source ? -> <mirrored>[p] target <offset> <state>"
            words = line.split()
            partition = int(words[0].rsplit("[", 1)[1].rstrip("]"))
            if words[-2] != "-":
                synced[partition] = int(words[-2])
        return len(synced) == len(committed)

    wait_until(translated, 120, "MirrorMaker to sync the group's offsets to the target")
    code, said = _kaas(service, "failover", target.layout.name, FLOW, "--group", "nobody")
    assert code == 1 and "group 'nobody' has no committed offset" in said, said
    print(
        f"group offsets synced to the target {time.monotonic() - stopped:.1f}s after the "
        f"source consumer stopped; source {sorted(committed.items())} "
        f"target {sorted(synced.items())}"
    )
    # The offsets are not compared as numbers: the target's partitions hold what MirrorMaker
    # wrote again after the kill, so their offsets run ahead of the source's. What the group
    # reads on the target is the check.

    # The source's reset policy: a partition the group never committed is read from its start.
    on_target: list[int] = []
    consumer = Consumer(
        target.client_config(**{"group.id": group, "auto.offset.reset": "earliest"})
    )
    try:
        consumer.subscribe([mirrored])
        deadline = time.monotonic() + 120
        while not on_source | set(on_target) >= set(range(total)) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=1):
                if message.error() is None:
                    on_target.append(int(message.value() or b"-1"))
    finally:
        consumer.close()
    missing = set(range(total)) - on_source - set(on_target)
    assert missing == set(), f"{len(missing)} messages skipped by the failover"
    again = on_source & set(on_target)
    # Offsets translate at the offset syncs MirrorMaker keeps (sparser the older they are), so
    # the group reads some records again, but resumes past its start: fewer than it had read.
    assert len(again) < len(on_source), (len(again), len(on_source))
    print(
        f"failover: {len(on_source)} read on the source, {len(on_target)} on the target, "
        f"{len(again)} read again, 0 skipped; {time.monotonic() - started:.1f}s"
    )


def _lag_of(service: ServiceHandle, target: str) -> dict[str, int]:
    """`kaas mirror get`'s lag per source topic (empty until the agent measured it)."""
    code, said = _kaas(service, "get", target, FLOW)
    assert code == 0, said
    lags = {}
    for line in said.splitlines():
        # "  <topic>: lag <n> (max <m> of <p> partitions...)"
        if line.startswith("  ") and ": lag " in line:
            topic, _, rest = line.strip().partition(": lag ")
            lags[topic] = int(rest.split()[0])
    return lags


def _lag_rises_while_the_flow_stands_and_falls_when_it_runs(
    source: ClusterHandle,
    target: ClusterHandle,
    service: ServiceHandle,
    topic: str,
    started: float,
) -> None:
    """Both MirrorMakers paused (SIGSTOP: their agents see them alive and leave them):
    what is produced meanwhile shows as the flow's lag in `kaas mirror get` and in
    Graphite; resumed, the lag falls back to zero."""
    cluster = target.layout.name
    wait_until(lambda: _lag_of(service, cluster).get(topic) == 0, 90, "the lag to read 0")
    said = _kaas(service, "get", cluster, FLOW)[1]
    # Measured from MirrorMaker's offset syncs: the records it wrote again after the kill
    # would otherwise hide as much lag.
    assert "from offset_syncs" in said, said
    paused = list(_mirror_makers(target).values())
    assert len(paused) == 2, paused
    extra = 500
    try:
        for record in paused:
            assert send_signal(record, signal.SIGSTOP)
        _produce(source, topic, 3 * MESSAGES, extra)
        wait_until(
            lambda: _lag_of(service, cluster).get(topic, 0) >= extra,
            60,
            f"the lag of {topic} to show the {extra} records produced while paused",
        )
        print(f"lag {_lag_of(service, cluster)} while paused: {time.monotonic() - started:.1f}s")
    finally:
        for record in paused:
            send_signal(record, signal.SIGCONT)
    wait_until(lambda: _lag_of(service, cluster).get(topic) == 0, 90, "the lag to fall to 0")
    print(f"lag back to 0: {time.monotonic() - started:.1f}s")
    zk = target.zookeeper()
    zk.start(timeout=30)
    try:
        spec = parse_spec(zk.get(ClusterPaths(cluster).spec)[0])
    finally:
        zk.stop()
        zk.close()
    assert spec.monitoring is not None
    graphite = GraphiteReader(spec.monitoring.graphite_url)
    series = f"kaas.{cluster}.mirror.{FLOW}.lag_records"

    def graphite_saw_it_rise_and_fall() -> bool:
        points = [v for v in graphite.series(series, "-5min").get(series, []) if v is not None]
        return bool(points) and max(points) >= extra and points[-1] == 0

    wait_until(graphite_saw_it_rise_and_fall, 60, f"{series} in Graphite to rise and fall")


def test_bad_flows_are_refused_naming_the_field_and_nothing_is_stored(
    service: ServiceHandle, target_cluster: ClusterHandle
) -> None:
    target = target_cluster.layout.name
    for args, named in (
        (("--source-cluster", target), f"source_cluster: {target} is the target"),
        (("--source-cluster", "nowhere"), "source_cluster: no cluster named 'nowhere'"),
        (("--source-bootstrap", "h:1", "--source-alias", "x", "--topics", "a("), "topics filter"),
    ):
        extra = () if "--topics" in args else ("--topics", ".*")
        code, said = _kaas(service, "create", target, "bad-flow", *args, *extra)
        assert code == 1 and named in said, said
    code, said = _kaas(service, "failover", target, "no-such-flow", "--group", "g")
    assert code == 1 and f"cluster {target} has no flow no-such-flow" in said, said
    code, said = _kaas(service, "list", target)
    assert (code, said.strip()) == (0, f"no flows into {target}")
    status, ops = service.call("GET", f"/v1/operations?cluster={target}")
    assert status == 200 and not [op for op in ops if "mirror" in op["kind"]], ops


def test_a_flow_made_by_kaas_mirror_runs_under_the_agents_and_survives_a_killed_process(
    kafka_cluster: ClusterHandle,
    target_cluster: ClusterHandle,
    service: ServiceHandle,
) -> None:
    started = time.monotonic()
    target = target_cluster.layout.name
    topic = f"mirrored-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_cluster.client_config())  # kept: its handle serves the future
    admin.create_topics([NewTopic(topic, 6, 3)])[topic].result(60)
    grants = _give_source_credentials(kafka_cluster, target_cluster)
    code, said = _kaas(
        service,
        "create",
        target,
        FLOW,
        "--source-bootstrap",
        kafka_cluster.bootstrap_servers,
        "--source-alias",
        ALIAS,
        "--topics",
        TOPICS,
        "--checkpoint-interval",
        "5",
        "--wait",
    )
    assert code == 0 and "succeeded" in said, said
    code, said = _kaas(service, "list", target)
    assert code == 0 and f"{FLOW}" in said and f"{ALIAS} -> {target}" in said, said

    # The first two VMs' agents run it (no placement: two workers), the third does not.
    wait_until(lambda: len(_mirror_makers(target_cluster)) == 2, 60, "two MirrorMakers")
    print(f"MirrorMaker running on two VMs: {time.monotonic() - started:.1f}s")
    time.sleep(5)
    running = _mirror_makers(target_cluster)
    assert len(running) == 2, running

    consumer = Consumer(
        target_cluster.client_config(
            **{"group.id": f"check-{topic}", "auto.offset.reset": "earliest"}
        )
    )
    try:
        _produce(kafka_cluster, topic, 0, MESSAGES)
        consumer.subscribe([f"{ALIAS}.{topic}"])
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
        print(f"first batch mirrored: {time.monotonic() - started:.1f}s")
        killed_vm, killed = sorted(running.items())[0]
        assert send_signal(killed, signal.SIGKILL)  # no chance to hand its tasks over
        _produce(kafka_cluster, topic, MESSAGES, MESSAGES)
        wait_until(lambda: read_until(2 * MESSAGES), 300, "the flow to go on after the kill")
        assert seen == set(range(2 * MESSAGES))
        assert reordered == [], f"messages out of order within a key: {reordered[:5]}"
        print(f"second batch mirrored: {time.monotonic() - started:.1f}s")

        def restarted() -> bool:
            again = _mirror_makers(target_cluster).get(killed_vm)
            return again is not None and again.pid != killed.pid

        wait_until(restarted, 60, f"{killed_vm}'s agent to start MirrorMaker again")
        _fail_a_group_over(kafka_cluster, target_cluster, service, topic, started)
        _lag_rises_while_the_flow_stands_and_falls_when_it_runs(
            kafka_cluster, target_cluster, service, topic, started
        )
        # The read-only bindings are all MirrorMaker needed of the source.
        denied = [
            line
            for vm in target_cluster.layout.vms
            if (vm.logs_dir / "mirror-maker.log").exists()
            for line in (vm.logs_dir / "mirror-maker.log").read_text().splitlines()
            if "AuthorizationException" in line or "Not authorized" in line
        ]
        assert denied == [], denied[:5]
    finally:
        consumer.close()
        # The shared cluster is left as it was found (also when the test fails).
        KafkaSourceAcls(kafka_cluster.bootstrap_servers, kafka_cluster.admin_identity).revoke(
            grants
        )

    code, said = _kaas(service, "delete", target, FLOW, "--wait")
    assert code == 0 and "succeeded" in said, said
    wait_until(lambda: not _mirror_makers(target_cluster), 90, "the agents to stop MirrorMaker")
    code, said = _kaas(service, "list", target)
    assert (code, said.strip()) == (0, f"no flows into {target}")
    print(f"flow deleted, MirrorMaker stopped: {time.monotonic() - started:.1f}s")
