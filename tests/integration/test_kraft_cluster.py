"""A real 3-VM KRaft cluster (Kafka 4.3.1, `kaas up --kafka-version 4.3.1`) run by its agents:
controllers in processes of their own on the first three VMs, every VM a broker, each VM's
agent starting and healing both. One cluster is shared by the tests of this file; a test that
kills a process waits until the agents have healed it."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from agent.kraft_quorum_tool import MetadataQuorumTool, QuorumToolError
from management_plane.local import kraft
from management_plane.local.image import find_java, load_image
from management_plane.local.processes import is_alive
from management_plane.local.state import require_state
from management_plane.local.up_choice import UpChoice
from management_plane.monitoring.graphite import GraphiteReader
from management_plane.monitoring.pipeline import plan_pipeline
from management_plane.monitoring.rules import load_rules
from management_plane.monitoring.series import rule_values
from management_plane.security.probes import probe_tls
from management_plane.security.verdict import TlsOutcome
from management_plane.service.cluster_io import ClusterIO
from management_plane.workload import create_topic
from planner.contracts.journal import JournalAction, JournalEntry, parse_journal_entry
from planner.contracts.kafka_state import PartitionState
from planner.contracts.log_limits import LogLimits
from planner.contracts.member import MemberRecord, MemberState, parse_member
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import parse_spec
from planner.contracts.vm_config.broker import KAFKA_SERVER_LOG
from planner.contracts.vm_config.kraft import KRAFT_CONTROLLER_LOG
from planner.contracts.vm_config.zookeeper import LOGGING_RELOAD_S
from tests import harness
from tests.drills import kraft_drill_checks
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration

KRAFT_VERSION = "4.3.1"


@pytest.fixture(scope="module")
def kraft_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    home = tmp_path_factory.mktemp("kraft-cluster")
    handle = harness.start_cluster(
        home,
        nodes=3,
        name="kraft",
        address_base=harness.FRESH_CLUSTER_BASE,
        kafka_version=KRAFT_VERSION,
        agents=True,
    )
    try:
        yield handle
    finally:
        harness.stop_cluster(handle)


def _quorum_status(handle: ClusterHandle) -> dict[str, str]:
    """`kafka-metadata-quorum describe --status`, Kafka's own tool from the image's jars."""
    vm = handle.layout.vms[0]
    with handle.admin.java_security_file() as command_config:
        command = kraft.metadata_quorum_command(
            str(find_java()),
            vm,
            str(load_image(verify=False).kafka_libs(KRAFT_VERSION)),
            ",".join(kraft.bootstrap_endpoints(handle.layout)),
            str(command_config),
            "describe",
            "--status",
        )
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    status = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(":")
        status[key.strip()] = value.strip()
    return status


def test_the_controller_rules_read_the_controllers_own_metrics(
    kraft_cluster: ClusterHandle,
) -> None:
    """KRaft brokers register no controller MBeans: each VM's agent reads them from its
    controller's own Jolokia, so the shipped active_controllers and offline_partitions rules
    have data (one active controller, nothing offline) over the real render API."""
    handle = kraft_cluster
    pipeline = plan_pipeline(handle.home, handle.layout.vms[0].address.rsplit(".", 1)[0])
    graphite = GraphiteReader(pipeline.graphite_url)
    rules = {r.name: r for r in load_rules().rules}
    cluster = handle.layout.name
    started = time.monotonic()
    seen: dict[str, dict[str, float | None]] = {}
    while time.monotonic() - started < 90:
        seen = {
            name: rule_values(
                rules[name], graphite.timed_series(rules[name].target_for(cluster), "-60s")
            )
            for name in ("active_controllers", "offline_partitions")
        }
        if seen == {"active_controllers": {"cluster": 1.0}, "offline_partitions": {"cluster": 0.0}}:
            break
        time.sleep(2)
    assert seen == {
        "active_controllers": {"cluster": 1.0},
        "offline_partitions": {"cluster": 0.0},
    }, seen
    per_vm = graphite.timed_series(f"kaas.{cluster}.brokers.*.active_controller_count", "-60s")
    assert len(per_vm) == 3, per_vm  # every VM of three runs a controller
    print(f"controller rules with data {time.monotonic() - started:.1f}s into the test")


def test_the_quorum_has_three_voters_and_every_broker_observes(
    kraft_cluster: ClusterHandle,
) -> None:
    status = _quorum_status(kraft_cluster)
    voters = json.loads(status["CurrentVoters"])
    assert sorted(v["id"] for v in voters) == [3000, 3001, 3002]
    assert sorted(e for v in voters for e in v["endpoints"]) == [
        f"CONTROLLER://{vm.address}:9093" for vm in kraft_cluster.layout.vms
    ]
    assert int(status["LeaderId"]) in {3000, 3001, 3002}
    observers = json.loads(status["CurrentObservers"])
    assert sorted(o["id"] for o in observers) == [0, 1, 2]


def test_controllers_and_brokers_are_separate_processes(kraft_cluster: ClusterHandle) -> None:
    state = require_state(kraft_cluster.home)
    assert state.kraft
    controllers = [state.record(vm.name, "controller") for vm in state.layout.vms]
    brokers = [state.record(vm.name, "kafka") for vm in state.layout.vms]
    assert all(is_alive(record) for record in controllers + brokers)
    pids = {record.pid for record in controllers + brokers if record is not None}
    assert len(pids) == 6
    # Each process logs to its own size-bounded rolling file, nothing to the console capture.
    for vm in state.layout.vms:
        assert "INFO" in (vm.logs_dir / KAFKA_SERVER_LOG).read_text(errors="replace")
        assert "INFO" in (vm.logs_dir / KRAFT_CONTROLLER_LOG).read_text(errors="replace")
        for capture in ("kafka.log", "controller.log"):
            text = (vm.logs_dir / capture).read_text(errors="replace")
            assert "] INFO " not in text, (vm.name, capture, text[-500:])
    # No Kafka metadata in ZooKeeper: the ensemble is KaaS's own store only.
    client = kraft_cluster.zookeeper()
    client.start(timeout=30)
    try:
        assert client.exists(f"{kraft_cluster.kafka_chroot}/brokers/ids") is None
    finally:
        client.stop()
        client.close()


def test_the_controller_and_broker_listeners_want_a_client_certificate(
    kraft_cluster: ClusterHandle,
) -> None:
    for vm in kraft_cluster.layout.vms:
        for port in (vm.ports.kafka_controller, vm.ports.kafka_internal):
            assert probe_tls(vm.address, port) is TlsOutcome.CLIENT_CERTIFICATE_REQUIRED
        assert probe_tls(vm.address, vm.ports.kafka_tenant) is (
            TlsOutcome.TLS_WITHOUT_CLIENT_CERTIFICATE
        )


def test_brokers_register_with_their_racks(kraft_cluster: ClusterHandle) -> None:
    admin = AdminClient(kraft_cluster.client_config())
    nodes = admin.describe_cluster(request_timeout=30).result(timeout=60).nodes
    assert {node.id: node.rack for node in nodes} == {
        vm.broker_id: vm.zone for vm in kraft_cluster.layout.vms
    }


def test_the_management_plane_reads_registrations_and_partitions_from_the_metadata(
    kraft_cluster: ClusterHandle,
) -> None:
    """Kafka writes nothing to ZooKeeper in KRaft mode: the service's cluster reads (which a
    replacement waits on) come from the brokers' metadata."""
    vms = kraft_cluster.layout.vms
    io = ClusterIO(
        kraft_cluster.layout.name, [vm.address for vm in vms], kraft_cluster.admin_identity
    )
    assert io.registered_brokers() == {vm.broker_id for vm in vms}
    topic = kraft_cluster.unique_topic("kraft-io")
    create_topic(kraft_cluster.client_config(), topic, 3)

    def read() -> list[PartitionState]:
        return [p for p in io.partitions() if p.topic == topic]

    harness.wait_until(lambda: len(read()) == 3, 60, "the service to read the topic's partitions")
    for state in read():
        assert len(state.replicas) == 3 and set(state.isr) == set(state.replicas), state
    zk = kraft_cluster.zookeeper()
    zk.start(timeout=30)
    try:
        assert not zk.exists(ClusterPaths(kraft_cluster.layout.name).kafka_broker_ids)
    finally:
        zk.stop()
        zk.close()


def test_a_topic_takes_the_durable_defaults_and_a_client_produces_and_consumes(
    kraft_cluster: ClusterHandle,
) -> None:
    topic = kraft_cluster.unique_topic("kraft-produce")
    admin = AdminClient(kraft_cluster.client_config())
    # No replication factor given: the controllers' durable default (3) applies.
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(timeout=60)
    # The broker answering may learn of the topic from the metadata log a moment later.
    harness.wait_until(
        lambda: len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == 3,
        60,
        "every broker to know the new topic",
    )
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
    assert sorted(len(p.replicas) for p in partitions.values()) == [3, 3, 3]

    producer = Producer(kraft_cluster.client_config(acks="all", **{"enable.idempotence": True}))
    errors: list[KafkaError] = []
    sent = [f"m-{i}" for i in range(200)]

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    for value in sent:
        producer.produce(topic, value.encode(), on_delivery=delivered)
    assert producer.flush(60) == 0
    assert errors == []

    consumer = Consumer(
        kraft_cluster.client_config(
            **{"group.id": f"kraft-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
        )
    )
    consumer.subscribe([topic])
    received: list[str] = []
    try:
        harness.wait_until(
            lambda: _poll_into(consumer, received) >= len(sent), 90, "every message consumed"
        )
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(received) == sorted(sent)


def _poll_into(consumer: Consumer, received: list[str]) -> int:
    for message in consumer.consume(num_messages=500, timeout=1.0):
        if message.error() is None:
            received.append(bytes(message.value() or b"").decode())
    return len(received)


def test_kaas_up_again_reuses_the_running_kraft_cluster(kraft_cluster: ClusterHandle) -> None:
    result = kraft_cluster.local.up(
        3, name="kraft", address_base=harness.FRESH_CLUSTER_BASE, kafka_version=KRAFT_VERSION
    )
    assert result.decision.choice is UpChoice.REUSE


def test_kraft_status_lists_each_vms_processes(kraft_cluster: ClusterHandle) -> None:
    status = kraft_cluster.local.status()
    assert status["kafka_version"] == KRAFT_VERSION
    assert status["problems"] == []
    for vm in status["vms"]:
        assert vm["broker_registered"], vm
        assert vm["processes"]["controller"]["state"] == "running"
        assert vm["processes"]["kafka"]["state"] == "running"
    roles = sorted(vm["controller_role"] for vm in status["vms"])
    assert roles == ["leader", "voter", "voter"]
    shown = kraft_cluster.kaas("status")
    assert shown.returncode == 0, shown.stderr
    assert "KRaft controllers: vm1 " in shown.stdout
    # The roles line only: the agents' sentences also speak of voters.
    roles_line = next(
        line for line in shown.stdout.splitlines() if line.startswith("KRaft controllers:")
    )
    assert roles_line.count(" voter") == 2


def test_the_agents_run_the_kraft_cluster_and_report_healthy(
    kraft_cluster: ClusterHandle,
) -> None:
    """Every VM's agent claimed the id its volume was formatted with, started its controller
    and broker, sees its broker registered (through a metadata request: Kafka writes nothing
    to ZooKeeper) and reports healthy."""

    def members() -> dict[int, MemberRecord]:
        client = kraft_cluster.zookeeper()
        client.start(timeout=30)
        try:
            folder = ClusterPaths("kraft").members
            return {
                int(child): parse_member(client.get(f"{folder}/{child}")[0])
                for child in client.get_children(folder)
            }
        finally:
            client.stop()
            client.close()

    harness.wait_until(
        lambda: [m.state for m in members().values()] == [MemberState.HEALTHY] * 3,
        120,
        "three healthy members",
    )
    found = members()
    assert sorted(found) == [vm.broker_id for vm in kraft_cluster.layout.vms]
    assert all(m.registered for m in found.values())
    assert {m.vm_id: b for b, m in found.items()} == {
        vm.name: vm.broker_id for vm in kraft_cluster.layout.vms
    }


def _quorum_tool(handle: ClusterHandle, vm_index: int) -> MetadataQuorumTool:
    vm = handle.layout.vms[vm_index]
    return MetadataQuorumTool(
        java=str(find_java()),
        libs=str(load_image(verify=False).kafka_libs(KRAFT_VERSION)),
        log_config=str(vm.config_dir / kraft.KAFKA_TOOLS_LOG4J2),
        bootstrap_controllers=",".join(kraft.bootstrap_endpoints(handle.layout)),
        kafka=handle.admin,
        controller_config=str(vm.config_dir / kraft.CONTROLLER_PROPERTIES),
        clock_ms=lambda: int(time.time() * 1000),
    )


def test_a_controller_taken_out_of_the_voters_is_added_back_by_its_agent(
    kraft_cluster: ClusterHandle,
) -> None:
    """vm3's controller removed from the voters (by hand, as a half-done replacement would
    leave it) keeps running as an observer; its agent finds it caught up with the quorum
    one voter short of the spec and adds it back (add-controller), journaled."""
    tool = _quorum_tool(kraft_cluster, 2)
    _, replicas = tool.describe()
    mine = next(r for r in replicas if r.node_id == 3002)
    tool.remove_controller(3002, mine.directory_id)
    started = time.monotonic()

    def voters() -> list[int]:
        try:
            found = tool.describe()[1]
        except QuorumToolError:
            return []
        return sorted(r.node_id for r in found if r.role.value != "observer")

    try:
        harness.wait_until(lambda: voters() == [3000, 3001, 3002], 120, "3002 a voter again")
    finally:
        if voters() != [3000, 3001, 3002]:
            harness.wait_until(lambda: _try_add(tool), 60, "controller 3002 back as a voter")
    print(
        f"\ncontroller 3002 re-added by its agent {time.monotonic() - started:.1f}s after removal"
    )
    client = kraft_cluster.zookeeper()
    client.start(timeout=30)
    try:
        entries = harness.journal_entries(client, "kraft")
    finally:
        client.stop()
        client.close()
    added = [e for e in entries if e.action is JournalAction.ADD_CONTROLLER and e.result == "done"]
    assert [e.vm_id for e in added] == [kraft_cluster.layout.vms[2].name]


def _try_add(tool: MetadataQuorumTool) -> bool:
    try:
        tool.add_controller()
    except Exception:
        return False
    return True


@pytest.mark.drill
def test_the_drills_on_kraft_are_valid_and_the_controller_faults_fail_over(
    kraft_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """The KRaft drills under the drills' acks=all idempotent load (short faults here, each
    drill at its full duration under `make drills`): the active controller killed, paused,
    a follower controller killed, the quorum's majority paused, and the drill table's faults
    (the leader and the active controller bounced, the ZooKeeper leader killed, a VM cut
    off; a broker killed too under `make drills`). Every verdict valid, zero loss, nothing
    failed; a leader elected again within 15 s of losing the active one, each killed
    controller started again by its agent, every voter caught up, produce acknowledged within
    5 s of each fault."""
    pairs = kraft_drill_checks.run_kraft_drills(kraft_cluster, tmp_path)
    kraft_drill_checks.check_controller_faults(pairs)
    voters = sorted(
        r.node_id
        for r in _quorum_tool(kraft_cluster, 0).describe()[1]
        if r.role.value != "observer"
    )
    assert voters == [3000, 3001, 3002]


class _AcksAllProducer:
    """Produces acks=all with idempotence on its own thread, recording when each ack came."""

    def __init__(self, handle: ClusterHandle, topic: str) -> None:
        self.producer = Producer(handle.client_config(acks="all", **{"enable.idempotence": True}))
        self.topic = topic
        self.acks: list[float] = []
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is None:
            self.acks.append(time.monotonic())
        else:
            self.errors.append(str(error))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.producer.produce(
                self.topic, f"m-{self.sent}".encode(), on_delivery=self._delivered
            )
            self.sent += 1
            self.producer.poll(0.02)

    def start(self) -> None:
        self._thread.start()

    def first_ack_after(self, moment: float) -> float:
        later = [ack for ack in list(self.acks) if ack > moment]
        return (later[0] - moment) if later else float("inf")

    def stop(self) -> tuple[int, int, list[str]]:
        self._stop.set()
        self._thread.join(timeout=10)
        self.producer.flush(60)
        return self.sent, len(self.acks), self.errors


def _assert_all_consumed(handle: ClusterHandle, topic: str, expected: int) -> None:
    consumer = Consumer(
        handle.client_config(
            **{"group.id": f"kraft-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
        )
    )
    consumer.subscribe([topic])
    received: list[str] = []
    try:
        harness.wait_until(
            lambda: _poll_into(consumer, received) >= expected, 90, "every message consumed"
        )
    finally:
        consumer.close()
    assert len(set(received)) == expected


READ_ONLY_KEY = "offsets.retention.minutes"  # read-only on brokers; in controller.properties too


def test_a_read_only_change_rolls_brokers_then_controllers_the_active_one_last(
    kraft_cluster: ClusterHandle,
) -> None:
    """A read-only key in the spec: each broker restarts under the lock, then the follower
    controllers, the active controller last; an acks=all producer meanwhile loses nothing."""
    tool = _quorum_tool(kraft_cluster, 0)
    leader = tool.describe()[0].leader_id
    paths = ClusterPaths("kraft")
    client = kraft_cluster.zookeeper()
    client.start(timeout=30)
    topic = kraft_cluster.unique_topic("kraft-roll")
    admin = AdminClient(kraft_cluster.client_config())
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(timeout=60)
    producing = _AcksAllProducer(kraft_cluster, topic)
    producing.start()
    try:
        journal_before = set(client.get_children(paths.journal))
        raw, stat = client.get(paths.spec)
        spec = parse_spec(raw)
        rolled = replace(
            spec,
            broker_config={**spec.broker_config, READ_ONLY_KEY: "10081"},
            generation=spec.generation + 1,
        )
        client.set(paths.spec, rolled.encode(), version=stat.version)

        def journaled() -> list[JournalEntry]:
            names = sorted(set(client.get_children(paths.journal)) - journal_before)
            return [parse_journal_entry(client.get(f"{paths.journal}/{n}")[0]) for n in names]

        def restarts() -> list[JournalEntry]:
            return [
                e
                for e in journaled()
                if e.action in (JournalAction.RESTART, JournalAction.RESTART_CONTROLLER)
                and e.result != "started"
                # A restart the min-ISR guard held back is journaled too; it comes again.
                and not e.result.startswith("restart blocked")
            ]

        # The active controller when the controllers' roll begins: under load an election
        # may move it while the brokers restart.
        leader_before: list[int | None] = [leader]

        def controllers_rolled() -> bool:
            if not any(e.action is JournalAction.RESTART_CONTROLLER for e in journaled()):
                leader_before[0] = tool.describe()[0].leader_id
                return False
            done = [e for e in restarts() if e.action is JournalAction.RESTART_CONTROLLER]
            return len(done) >= 3

        harness.wait_until(
            controllers_rolled, 600, "three brokers and then three controllers restarted", 5.0
        )
        leader_vm = next(
            v
            for v in kraft_cluster.layout.vms
            if kraft.controller_facts(v).node_id == leader_before[0]
        )
        done = restarts()
        everything = [(e.action, e.broker_id, e.result) for e in journaled()]
    finally:
        sent, acked, errors = producing.stop()
        client.stop()
        client.close()
    kinds = [(e.action, e.broker_id, e.result) for e in done]
    print("\nroll order:", kinds)
    # The message first and short: a failing run's output is read from a truncated log.
    assert [a for a, _, _ in kinds] == [JournalAction.RESTART] * 3 + [
        JournalAction.RESTART_CONTROLLER
    ] * 3, "journal since the change: " + "; ".join(
        f"{action} {broker} {result[:60]}" for action, broker, result in everything
    )
    assert all(
        result.startswith("done") for a, _, result in kinds if a is JournalAction.RESTART_CONTROLLER
    )
    assert kinds[-1][1] == leader_vm.broker_id  # the active controller last
    for vm in kraft_cluster.layout.vms:
        assert f"{READ_ONLY_KEY}=10081" in (vm.config_dir / "controller.properties").read_text()
        assert f"{READ_ONLY_KEY}=10081" in (vm.config_dir / "server.properties").read_text()
    assert errors == []
    assert acked == sent > 0
    _assert_all_consumed(kraft_cluster, topic, acked)


def test_a_noisy_broker_keeps_its_log_within_the_specs_bound(
    kraft_cluster: ClusterHandle,
) -> None:
    """spec.logs made small on the running cluster: the agents rewrite Kafka's Log4j 2 file,
    the broker takes it without a restart, and with every Kafka logger at TRACE (a broker
    logging megabytes a second) its log files never hold more than (files + 1) x
    max_file_mb, and they roll."""
    limits = LogLimits(max_file_mb=1, files=2)
    bound = limits.bound_bytes + 64 * 1024  # Log4j 2 rolls once a line has crossed the size
    paths = ClusterPaths("kraft")
    client = kraft_cluster.zookeeper()
    client.start(timeout=30)
    vm = next(v for v in kraft_cluster.layout.vms if v.broker_id == 0)
    logger = ConfigResource(ConfigResourceType.BROKER_LOGGER, "0")
    admin = KafkaAdminClient(**kraft_cluster.admin.kafka_python())

    def set_spec_logs(logs: LogLimits | None) -> None:
        raw, stat = client.get(paths.spec)
        spec = parse_spec(raw)
        changed = replace(spec, logs=logs, generation=spec.generation + 1)
        client.set(paths.spec, changed.encode(), version=stat.version)

    def log_files_bytes() -> tuple[int, int]:
        files = [p for p in vm.logs_dir.glob(f"{KAFKA_SERVER_LOG}*") if p.is_file()]
        return sum(p.stat().st_size for p in files), len(files)

    before = parse_spec(client.get(paths.spec)[0]).logs
    broker_pid = require_state(kraft_cluster.home).record(vm.name, "kafka")
    try:
        set_spec_logs(limits)
        log4j2 = vm.config_dir / kraft.KAFKA_LOG4J2
        harness.wait_until(
            lambda: "size = 1MB" in log4j2.read_text(), 120, "the agent to rewrite Log4j 2's file"
        )
        time.sleep(LOGGING_RELOAD_S + 3)  # Log4j 2 looks at its file again
        # Log4j 2's root logger at TRACE: every Kafka class logs everything it can.
        logger.configs = {"root": "TRACE"}
        answer = admin.alter_configs([logger], raise_on_unknown=False)
        assert answer == {"broker_logger": {"0": "OK"}}, answer
        # Watched for 30 s, longer (up to 90 s) until the files have rolled.
        largest, rolled_seen = 0, False
        started = time.monotonic()
        while time.monotonic() - started < 90:
            total, count = log_files_bytes()
            largest = max(largest, total)
            rolled_seen = rolled_seen or count == limits.files + 1
            if rolled_seen and time.monotonic() - started > 30:
                break
            time.sleep(0.05)
    finally:
        logger.configs = {"root": "INFO"}
        admin.alter_configs([logger], raise_on_unknown=False)
        admin.close()
        set_spec_logs(before)
        client.stop()
        client.close()
    after = require_state(kraft_cluster.home).record(vm.name, "kafka")
    print(f"\nnoisy broker: its log files held at most {largest} bytes (bound {bound})")
    assert rolled_seen, f"the broker's log never rolled into {limits.files} rolled files"
    assert largest <= bound, f"{largest} bytes of log files, over the bound of {bound}"
    assert broker_pid is not None and after is not None and after.pid == broker_pid.pid
