"""The agents' part of a migration to KRaft: where their Kafka readings come from in each
phase, which VMs run a controller, its format with Kafka's cluster id and its stop on a
rollback, table-tested on the pure core and driven through whole cycles against the fakes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agent.broker_config.rendering import desired_controller_properties, jolokia_files
from agent.decide import (
    BrokerView,
    DoNothing,
    RestartBroker,
    RestartController,
    Snapshot,
    StartController,
    StopController,
    decide,
)
from agent.kraft_keeper import QuorumKeeper
from agent.kraft_migration import (
    KafkaCleanup,
    format_cluster_id,
    is_stray,
    kafka_cleanup,
    kafka_reads_kraft,
    storage_format_command,
    wants_controller,
)
from agent.kraft_quorum_tool import MetadataQuorumTool, MigrationQuorumTool, QuorumToolError
from agent.member_state import member_state
from agent.ports import PAUSED, RUNNING, STOPPED, ProcessState
from agent.settings import parse_settings
from agent.supervisor import KafkaProcess, LocalProcessSupervisor
from planner.contracts.kraft_migration import KraftMigration, MigrationPhase
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole, QuorumStatus
from planner.contracts.member import MemberRecord, MemberRole, MemberState
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.jolokia import CONTROLLER_JOLOKIA_PROPERTIES
from planner.contracts.vm_config.migration import MIGRATION_FLAG
from planner.pki.authority import Role
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles
from tests.unit.agent_fakes import make_rig, settings_for

pytestmark = pytest.mark.unit

P = MigrationPhase
VOTERS = ("3000@127.0.1.1:9093", "3001@127.0.1.2:9093", "3002@127.0.1.3:9093")
ZK_SPEC = ClusterSpec(
    cluster="c", kafka_version="3.9.2", broker_count=3, zones=("zone-a",), generation=1
)


def in_phase(phase: MigrationPhase | None, generation: int = 2) -> ClusterSpec:
    migration = KraftMigration(phase, "ZkClusterId", VOTERS) if phase is not None else None
    return replace(ZK_SPEC, migration=migration, generation=generation)


# -- where the agent's Kafka readings come from --------------------------------------------


@pytest.mark.parametrize(
    ("settings_kraft", "phase", "expected"),
    [
        (False, None, False),  # ZooKeeper mode: Kafka's znodes
        (False, P.CONTROLLERS, False),
        (False, P.BROKERS_MIGRATING, False),  # migrating brokers still register in ZooKeeper
        (False, P.BROKERS_KRAFT, True),  # KRaft brokers register with the controllers only
        (False, P.FINALIZED, True),
        (False, P.ROLLBACK_CONTROLLERS_STOPPED, False),
        (True, None, True),  # a KRaft cluster
    ],
)
def test_the_readings_follow_the_phase(
    settings_kraft: bool, phase: MigrationPhase | None, expected: bool
) -> None:
    assert kafka_reads_kraft(settings_kraft, in_phase(phase)) is expected


# -- which VMs run a controller ------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "broker_id", "wanted"),
    [
        (None, 0, False),
        (P.CONTROLLERS, 0, True),
        (P.CONTROLLERS, 2, True),
        (P.CONTROLLERS, 3, False),  # a fourth VM: no voter there
        (P.BROKERS_MIGRATING, 1, True),
        (P.BROKERS_KRAFT, 1, True),
        (P.FINALIZED, 1, True),
        (P.ROLLBACK_CONTROLLERS_STOPPED, 1, False),
    ],
)
def test_a_voters_vm_runs_a_controller_while_the_phase_has_them(
    phase: MigrationPhase | None, broker_id: int, wanted: bool
) -> None:
    spec = in_phase(phase)
    assert wants_controller(False, broker_id, spec) is wanted
    assert wants_controller(True, broker_id, spec)  # a KRaft cluster's controller VM
    expected_format = "ZkClusterId" if wanted else None
    assert format_cluster_id(False, broker_id, spec, formatted=False) == expected_format
    assert format_cluster_id(False, broker_id, spec, formatted=True) is None
    assert format_cluster_id(True, broker_id, spec, formatted=False) is None


@pytest.mark.parametrize(
    ("wanted", "process", "stray"),
    [
        (False, RUNNING, True),
        (False, PAUSED, True),
        (False, STOPPED, False),
        (False, None, False),
        (True, RUNNING, False),
    ],
)
def test_a_stray_controller_is_one_running_unwanted(
    wanted: bool, process: ProcessState | None, stray: bool
) -> None:
    assert is_stray(wanted, process) is stray


# -- decide ---------------------------------------------------------------------------------


HEALTHY = BrokerView(RUNNING, True, True)


@pytest.mark.parametrize(
    ("snapshot", "expected", "words"),
    [
        (
            Snapshot(
                0,
                True,
                in_phase(P.CONTROLLERS),
                broker=HEALTHY,
                controller=STOPPED,
                controller_format_cluster_id="ZkClusterId",
            ),
            StartController,
            "formatting and starting",
        ),
        (
            Snapshot(0, True, in_phase(P.CONTROLLERS), broker=HEALTHY, controller=STOPPED),
            StartController,
            "controller process gone",
        ),
        (
            Snapshot(
                0,
                True,
                in_phase(P.ROLLBACK_CONTROLLERS_STOPPED),
                broker=HEALTHY,
                stray_controller=True,
            ),
            StopController,
            "rollback_controllers_stopped runs no controller",
        ),
        (
            Snapshot(0, True, in_phase(None), broker=HEALTHY, stray_controller=True),
            StopController,
            "ZooKeeper mode runs no controller",
        ),
        (
            # A broker restart runs: the stop waits for it.
            Snapshot(
                0,
                True,
                in_phase(P.ROLLBACK_CONTROLLERS_STOPPED),
                broker=HEALTHY,
                stray_controller=True,
                long_action="restart 2/3: starting broker",
            ),
            DoNothing,
            "restart 2/3",
        ),
        (
            Snapshot(0, False, in_phase(P.CONTROLLERS), broker=HEALTHY, controller=STOPPED),
            DoNothing,
            "ZooKeeper unreachable",
        ),
    ],
)
def test_decide_runs_the_phases_controller(snapshot: Snapshot, expected: type, words: str) -> None:
    action = decide(snapshot)
    assert isinstance(action, expected)
    assert words in action.reason
    if isinstance(action, StartController):
        assert action.format_cluster_id == snapshot.controller_format_cluster_id
        assert action.kafka_version == "3.9.2"
    if isinstance(action, StopController):
        assert member_state(snapshot, action, None) is MemberState.RESTARTING


# -- rendering and commands -----------------------------------------------------------------


def test_a_voters_controller_renders_in_migration_mode(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)  # a ZooKeeper-mode VM: no controller in its settings
    properties = desired_controller_properties(settings, 1, in_phase(P.CONTROLLERS))
    assert properties is not None
    assert properties["node.id"] == "3001"
    assert properties["listeners"] == "CONTROLLER://127.0.1.1:9093"
    assert properties["log.dirs"] == str(tmp_path / "kraft-controller")
    assert properties[MIGRATION_FLAG] == "true"
    assert properties["controller.quorum.voters"] == ",".join(VOTERS)
    assert properties["zookeeper.connect"].endswith("/kafka/c")
    finalised = desired_controller_properties(settings, 1, in_phase(P.FINALIZED))
    assert finalised is not None and MIGRATION_FLAG not in finalised
    assert not any(k.startswith("zookeeper.") for k in finalised)
    assert desired_controller_properties(settings, 3, in_phase(P.CONTROLLERS)) is None
    assert desired_controller_properties(settings, 1, in_phase(None)) is None
    stopped = in_phase(P.ROLLBACK_CONTROLLERS_STOPPED)
    assert desired_controller_properties(settings, 1, stopped) is None
    assert CONTROLLER_JOLOKIA_PROPERTIES in jolokia_files(settings, controller=True)
    assert CONTROLLER_JOLOKIA_PROPERTIES not in jolokia_files(settings)


def test_the_format_names_kafkas_cluster_id_and_no_quorum_flag(tmp_path: Path) -> None:
    manifest = tmp_path / "image" / "opt" / "kaas" / "image.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"kafka_versions": {"3.9.2": "opt/kaas/kafka/3.9.2/libs"}}')
    settings = settings_for(tmp_path, image_root=str(tmp_path / "image"))
    config = tmp_path / "config" / "controller.properties"
    command = storage_format_command(settings, "3.9.2", "ZkClusterId", config)
    assert command[command.index("--cluster-id") + 1] == "ZkClusterId"
    assert command[command.index("--config") + 1] == str(config)
    assert "kafka.tools.StorageTool" in command
    assert str(tmp_path / "image" / "opt/kaas/kafka/3.9.2/libs") + "/*" in command
    flags = {"--standalone", "--initial-controllers", "--no-initial-controllers"}
    assert not flags & set(command)
    # Log4j 1 names one file: the controller's goes to a folder of its own.
    controller = LocalProcessSupervisor(settings, KafkaProcess.CONTROLLER).command("3.9.2")
    broker = LocalProcessSupervisor(settings).command("3.9.2")
    assert f"-Dkafka.logs.dir={settings.logs_dir / 'controller'}" in controller
    assert f"-Dkafka.logs.dir={settings.logs_dir}" in broker
    assert controller[-1].endswith("controller.properties")


# -- the static quorum ----------------------------------------------------------------------


class CountingQuorum:
    def __init__(self) -> None:
        self.describes = 0
        self.changes: list[str] = []

    def describe(self) -> tuple[QuorumStatus, tuple[QuorumReplica, ...]]:
        self.describes += 1
        replicas = (
            QuorumReplica(3000, "d0", 10, QuorumRole.LEADER, 0),
            QuorumReplica(3001, "d1", 10, QuorumRole.FOLLOWER, 100),
            QuorumReplica(3002, "d2", 10, QuorumRole.FOLLOWER, None),  # not caught up
        )
        return QuorumStatus(3000, 10), replicas

    def add_controller(self) -> None:
        self.changes.append("add")

    def remove_controller(self, node_id: int, directory_id: str) -> None:
        self.changes.append(f"remove {node_id}")

    def unregister_broker(self, broker_id: int) -> None:
        self.changes.append(f"unregister {broker_id}")


@pytest.mark.parametrize(
    ("phase", "describes"),
    [(None, 0), (P.CONTROLLERS, 1), (P.FINALIZED, 1), (P.ROLLBACK_CONTROLLERS_STOPPED, 0)],
)
def test_the_keeper_watches_a_migrations_quorum_and_never_changes_it(
    phase: MigrationPhase | None, describes: int
) -> None:
    quorum = CountingQuorum()
    clock = iter(range(0, 10_000, 100))
    keeper = QuorumKeeper(
        quorum,
        lambda: None,
        lambda: in_phase(phase),
        lambda: True,  # the elected agent, which would remove a voter gone long
        lambda: frozenset({0, 1, 2}),
        lambda: frozenset({0, 1, 2}),
        lambda action, reason, result: None,
        lambda: float(next(clock)),
        gone_threshold_s=0.0,
        caught_up_within_ms=5000,
        static_only=True,
    )
    for _ in range(3):
        assert keeper.tick() is None
    assert quorum.describes == 3 * describes
    assert quorum.changes == []
    assert keeper.state.leader_id == (3000 if describes else None)
    if describes:
        assert f"({phase.value if phase else ''}): leader 3000" in keeper.sentence
    else:
        assert keeper.sentence == ""


def test_a_migrations_quorum_is_described_through_the_spec_voters(tmp_path: Path) -> None:
    commands: list[list[str]] = []

    def runner(command: object) -> str:
        commands.append(list(command))  # type: ignore[call-overload]
        if "--status" in commands[-1]:
            return "ClusterId: x\nLeaderId: 3001\nLeaderEpoch: 3\nHighWatermark: 77\n"
        return (
            "NodeId DirectoryId LogEndOffset Lag LastFetchTimestamp LastCaughtUpTimestamp Status\n"
        )

    client = InternalClient("127.0.1.1:9092", IdentityFiles(tmp_path / "client", Role.ADMIN))
    tool = MetadataQuorumTool("java", "/libs", "/log4j2", "", client, None, lambda: 0, runner)
    spec: list[ClusterSpec | None] = [in_phase(P.CONTROLLERS)]
    quorum = MigrationQuorumTool(tool, lambda: spec[0], lambda version: f"/image/{version}")
    status, _ = quorum.describe()
    assert status.leader_id == 3001
    bootstrap = commands[0][commands[0].index("--bootstrap-controller") + 1]
    assert bootstrap == "127.0.1.1:9093,127.0.1.2:9093,127.0.1.3:9093"
    assert commands[0][commands[0].index("-cp") + 1] == "/image/3.9.2/*", "the cluster's tools"
    with pytest.raises(QuorumToolError, match="static"):
        quorum.add_controller()
    spec[0] = ZK_SPEC
    with pytest.raises(QuorumToolError, match="no migration"):
        quorum.describe()


# -- whole cycles against the fakes ---------------------------------------------------------


def test_a_voters_agent_runs_its_controller_through_the_phases(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, ZK_SPEC, migration_controller=True)
    assert rig.controller is not None and rig.storage is not None
    rig.agent.run_cycle()  # starts the ZooKeeper-mode broker
    rig.agent.run_cycle()
    assert rig.broker.starts == ["3.9.2"]
    assert rig.controller.starts == [], "no migration: no controller"

    rig.zookeeper.set_spec(in_phase(P.CONTROLLERS, 2))
    sentence = rig.agent.run_cycle()
    assert "formatting and starting" in sentence
    assert rig.storage.formats == [("ZkClusterId", "3.9.2")]
    assert rig.controller.starts == ["3.9.2"]
    written = (tmp_path / "config" / "controller.properties").read_text()
    assert "zookeeper.metadata.migration.enable=true" in written
    assert rig.zookeeper.journaled("start_controller")[-1]["result"] == (
        "done, formatted and started"
    )
    rig.agent.run_cycle()
    assert rig.broker.stops == [], "the controllers phase leaves the brokers alone"

    # The brokers join the migration: a read-only change, rolled through the restart lock.
    rig.zookeeper.set_spec(in_phase(P.BROKERS_MIGRATING, 3))
    action = decide(rig.agent.snapshot()[0])
    assert isinstance(action, RestartBroker)
    assert MIGRATION_FLAG in action.keys
    rig.agent.run_cycle()
    assert rig.broker.calls[-2:] == ["stop", "start"]
    server = (tmp_path / "config" / "server.properties").read_text()
    assert "zookeeper.metadata.migration.enable=true" in server
    assert "controller.quorum.voters=" in server

    # A controller that dies is started again, not formatted again.
    rig.controller.process_state = STOPPED
    sentence = rig.agent.run_cycle()
    assert "controller process gone" in sentence
    assert len(rig.storage.formats) == 1 and len(rig.controller.starts) == 2

    # The rollback stops it and discards its metadata log.
    rig.zookeeper.set_spec(in_phase(P.ROLLBACK_CONTROLLERS_STOPPED, 4))
    sentence = rig.agent.run_cycle()
    assert "runs no controller on this VM, stopping it" in sentence
    assert rig.controller.process_state == STOPPED
    assert rig.storage.discards == 1
    assert rig.zookeeper.journaled("stop_controller")[-1]["result"].startswith("done")
    rig.agent.run_cycle()
    assert rig.storage.discards == 1, "stopped once"


def test_finalising_restarts_the_controller_once_the_quorum_caught_up(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, in_phase(P.BROKERS_KRAFT, 2), migration_controller=True)
    for _ in range(3):
        rig.agent.run_cycle()
    assert rig.controller is not None and rig.controller.starts == ["3.9.2"]
    rig.zookeeper.set_spec(in_phase(P.FINALIZED, 3))
    snap, _ = rig.agent.snapshot()
    assert MIGRATION_FLAG in snap.controller_changed
    action = decide(snap)
    # No quorum keeper looked yet: the rest of the quorum is not known to have caught up.
    assert isinstance(action, DoNothing)
    assert "waits until the rest of the quorum has caught up" in action.reason
    assert snap.controller_node_id == 3000
    caught_up = replace(snap, quorum_caught_up=True, quorum_leader_id=3001)
    restart = decide(caught_up)
    assert isinstance(restart, RestartController)
    assert restart.controller_properties.get(MIGRATION_FLAG) is None
    # The brokers go first: a broker awaiting its restart holds the controller back.
    assert isinstance(
        decide(replace(caught_up, brokers_awaiting_restart=frozenset({1}))), DoNothing
    )


def test_a_vm_beyond_the_voters_runs_no_controller(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, in_phase(P.CONTROLLERS), migration_controller=True, vm_id="vm-3")
    rig.zookeeper.claimed = {"a": 0, "b": 1, "c": 2}
    rig.agent.broker_id = 3
    rig.broker.broker_id = 3
    for _ in range(3):
        rig.agent.run_cycle()
    assert rig.controller is not None and rig.controller.starts == []
    assert rig.storage is not None and rig.storage.formats == []
    assert not isinstance(decide(rig.agent.snapshot()[0]), (StartController, RestartController))


def test_parse_settings_of_a_zookeeper_mode_vm_need_no_controller_fields(tmp_path: Path) -> None:
    settings = parse_settings(
        {
            "cluster": "c",
            "zookeeper_hosts": "127.0.0.1:2181",
            "vm_id": "vm-0",
            "address": "127.0.1.1",
            "zone": "zone-a",
            "data_dir": str(tmp_path / "data"),
            "config_dir": str(tmp_path / "config"),
        }
    )
    assert not settings.kraft and not settings.runs_controller


@pytest.mark.parametrize(
    ("still_starting", "result"),
    [(False, "done, ISR complete"), (True, "restart: broker did not answer within")],
)
def test_a_restart_holds_until_the_broker_itself_runs(
    tmp_path: Path, still_starting: bool, result: str
) -> None:
    """Another broker's metadata may still list a restarting broker: the restart is done
    only when the broker's own state says it runs."""
    rig = make_rig(tmp_path, in_phase(P.CONTROLLERS), migration_controller=True)
    rig.agent.run_cycle()
    rig.agent.run_cycle()
    rig.broker.starting = still_starting
    rig.zookeeper.set_spec(in_phase(P.BROKERS_MIGRATING, 3))
    rig.agent.run_cycle()
    restart = rig.zookeeper.journaled("restart")
    assert restart[-1]["result"].startswith(result)
    assert rig.broker.serving_reads > 0


# -- Kafka's znodes the elected agent deletes ------------------------------------------------


def member(broker_id: int, generation: int = 5, **changes: object) -> MemberRecord:
    record = MemberRecord(
        broker_id,
        f"vm{broker_id}",
        "127.0.1.1",
        "https://j/",
        "0.1.0",
        MemberState.HEALTHY,
        "healthy",
        True,
        generation,
        False,
        MemberRole.MEMBER,
        0,
    )
    return replace(record, **changes)  # type: ignore[arg-type]


SETTLED = {b: member(b) for b in (0, 1, 2)}


@pytest.mark.parametrize(
    ("phase", "elected", "members", "expected"),
    [
        (P.FINALIZED, True, SETTLED, KafkaCleanup.CHROOT),
        (P.ROLLBACK_CONTROLLERS_STOPPED, True, SETTLED, KafkaCleanup.KRAFT_CONTROLLER_STATE),
        (P.FINALIZED, False, SETTLED, None),  # only the elected agent
        (P.BROKERS_KRAFT, True, SETTLED, None),  # dual write: ZooKeeper still kept
        (None, True, SETTLED, None),
        (P.FINALIZED, True, {0: SETTLED[0], 1: SETTLED[1]}, None),  # an agent missing
        (P.FINALIZED, True, {**SETTLED, 2: member(2, generation=4)}, None),
        (P.FINALIZED, True, {**SETTLED, 2: member(2, controller_pending_restart=True)}, None),
        (P.FINALIZED, True, {**SETTLED, 2: member(2, state=MemberState.RESTARTING)}, None),
    ],
)
def test_the_elected_agent_deletes_kafkas_znodes_once_the_phase_settled(
    phase: MigrationPhase | None,
    elected: bool,
    members: dict[int, MemberRecord],
    expected: KafkaCleanup | None,
) -> None:
    spec = in_phase(phase, generation=5)
    assert kafka_cleanup(False, spec, elected, members, 3) is expected
    assert kafka_cleanup(True, spec, elected, members, 3) is None  # a KRaft cluster's agent


class FakeKafkaZnodes:
    def __init__(self) -> None:
        self.present = {"chroot", "controller"}

    def delete_kafka_chroot(self) -> list[str]:
        found = ["/kafka/c"] if "chroot" in self.present else []
        self.present = set()
        return found

    def delete_kraft_controller_state(self) -> list[str]:
        found = ["/kafka/c/controller"] if "controller" in self.present else []
        self.present.discard("controller")
        return found


def test_a_finalised_cluster_loses_kafkas_chroot_through_its_elected_agent(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, replace(in_phase(P.FINALIZED, 2), broker_count=1))
    znodes = FakeKafkaZnodes()
    rig.agent.ports = replace(rig.agent.ports, kafka_znodes=znodes)
    rig.seat.elected = True
    for _ in range(3):
        rig.agent.run_cycle()
    assert znodes.present == set()
    entries = rig.zookeeper.journaled("kafka_cleanup")
    assert [e["result"] for e in entries] == ["deleted /kafka/c"], "deleted once"
