"""The agent on a KRaft cluster (Kafka 4.x): its settings, the broker's and the controller's
rendered config, the process commands, and healing of a dead controller through whole cycles
against the fakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.broker_config import ConfigChange, ConfigDiff
from agent.broker_config.rendering import (
    controller_bootstrap,
    desired_controller_properties,
    desired_server_properties,
)
from agent.controller_restart import ControllerRestartSettings, restart_controller
from agent.decide import BrokerView, ConfigChanges, Snapshot, decide
from agent.kraft_keeper import rest_caught_up
from agent.member_state import member_state
from agent.ports import RUNNING, STOPPED
from agent.settings import parse_settings
from agent.supervisor import KafkaProcess, LocalProcessSupervisor
from planner.contracts.kafka_state import broker_id_in_meta_properties
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole
from planner.contracts.member import MemberState
from planner.contracts.spec import ClusterSpec

pytestmark = pytest.mark.unit

LEADER, FOLLOWER, OBSERVER = QuorumRole.LEADER, QuorumRole.FOLLOWER, QuorumRole.OBSERVER


def replica(node: int, role: QuorumRole, ago: int | None = 100) -> QuorumReplica:
    return QuorumReplica(node, f"dir-{node}", 50, role, ago)


BASE = {
    "cluster": "c",
    "zookeeper_hosts": "127.0.1.1:2181",
    "vm_id": "vm1",
    "address": "127.0.1.1",
    "zone": "zone-a",
    "data_dir": "/data/kafka",
    "config_dir": "/etc/kaas/kafka",
}
KRAFT = {
    **BASE,
    "controller_bootstrap": "127.0.1.1:9093, 127.0.1.2:9093,127.0.1.3:9093",
    "controller_port": 9093,
    "controller_data_dir": "/data/metadata",
}
SPEC = ClusterSpec(
    cluster="c",
    kafka_version="4.3.1",
    broker_count=3,
    zones=("zone-a",),
    generation=1,
    kraft_controllers=3,
)


def test_kraft_settings() -> None:
    zk_mode = parse_settings(BASE)
    assert not zk_mode.kraft and not zk_mode.runs_controller
    broker_only = parse_settings({**KRAFT, "controller_port": None, "controller_data_dir": None})
    assert broker_only.kraft and not broker_only.runs_controller
    settings = parse_settings(KRAFT)
    assert settings.runs_controller
    assert controller_bootstrap(settings) == ("127.0.1.1:9093", "127.0.1.2:9093", "127.0.1.3:9093")


def test_kraft_broker_and_controller_render_from_the_claimed_id() -> None:
    settings = parse_settings(KRAFT)
    broker = desired_server_properties(settings, 2, SPEC)
    assert broker["node.id"] == "2"
    assert "broker.id" not in broker
    assert broker["process.roles"] == "broker"
    assert broker["controller.quorum.bootstrap.servers"] == (
        "127.0.1.1:9093,127.0.1.2:9093,127.0.1.3:9093"
    )
    assert not any(key.startswith("zookeeper.") for key in broker)
    controller = desired_controller_properties(settings, 2, SPEC)
    assert controller is not None
    assert controller["node.id"] == "3002"
    assert controller["process.roles"] == "controller"
    assert controller["log.dirs"] == "/data/metadata"
    assert controller["listeners"].endswith("127.0.1.1:9093")
    broker_only = parse_settings({**KRAFT, "controller_port": None, "controller_data_dir": None})
    assert desired_controller_properties(broker_only, 2, SPEC) is None


def test_zookeeper_mode_renders_as_before() -> None:
    spec = ClusterSpec(
        cluster="c", kafka_version="3.9.2", broker_count=3, zones=("zone-a",), generation=1
    )
    properties = desired_server_properties(parse_settings(BASE), 1, spec)
    assert properties["broker.id"] == "1"
    assert properties["zookeeper.connect"].endswith("/kafka/c")


def test_process_commands(tmp_path: Path) -> None:
    settings = parse_settings({**KRAFT, "state_dir": str(tmp_path)})
    broker = LocalProcessSupervisor(settings)
    controller = LocalProcessSupervisor(settings, KafkaProcess.CONTROLLER)
    assert broker.pid_file == tmp_path / "kafka.pid"
    assert controller.pid_file == tmp_path / "controller.pid"
    # kafka_libs reads the image manifest: give it one.
    manifest = tmp_path / "image" / "opt" / "kaas" / "image.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"kafka_versions": {"4.3.1": "opt/kaas/kafka/4.3.1/libs"}}')
    settings = parse_settings(
        {**KRAFT, "state_dir": str(tmp_path), "image_root": str(manifest.parents[2])}
    )
    broker_command = LocalProcessSupervisor(settings).command("4.3.1")
    controller_command = LocalProcessSupervisor(settings, KafkaProcess.CONTROLLER).command("4.3.1")
    assert broker_command[-1] == "/etc/kaas/kafka/server.properties"
    assert controller_command[-1] == "/etc/kaas/kafka/controller.properties"
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in broker_command)
    assert any(a.endswith("=config=/etc/kaas/kafka/jolokia.properties") for a in broker_command)
    # The controller's own Jolokia (its own port): the controller-only MBeans live there.
    assert any(
        a.startswith("-javaagent:")
        and a.endswith("=config=/etc/kaas/kafka/jolokia-controller.properties")
        for a in controller_command
    )
    assert "-Xmx192m" in controller_command


def test_kraft_meta_properties_name_the_node() -> None:
    assert broker_id_in_meta_properties("version=1\nnode.id=4\ncluster.id=x\n") == 4
    assert broker_id_in_meta_properties("version=0\nbroker.id=2\n") == 2
    assert broker_id_in_meta_properties("version=1\ncluster.id=x\n") is None


def test_the_agent_starts_and_heals_its_controller(tmp_path: Path) -> None:
    from tests.unit.agent_fakes import make_rig

    rig = make_rig(
        tmp_path,
        SPEC,
        controller_bootstrap="127.0.1.1:9093",
        controller_port=9093,
        controller_data_dir=str(tmp_path / "metadata"),
    )
    assert rig.controller is not None
    first = rig.agent.run_cycle()
    assert "controller process gone, starting it" in first
    assert rig.controller.starts == ["4.3.1"]
    written = (tmp_path / "config" / "controller.properties").read_text()
    assert f"node.id={3000 + rig.agent.broker_id}" in written
    # Then the broker, as on any VM.
    assert "broker process gone, starting it" in rig.agent.run_cycle()
    rig.controller.process_state = STOPPED  # killed
    assert "controller process gone" in rig.agent.run_cycle()
    assert len(rig.controller.starts) == 2
    assert len(rig.zookeeper.journaled("start_controller")) == 2


def test_a_broker_only_vm_supervises_no_controller(tmp_path: Path) -> None:
    from tests.unit.agent_fakes import make_rig

    rig = make_rig(tmp_path, SPEC, controller_bootstrap="127.0.1.1:9093")
    assert rig.controller is None
    assert "broker process gone, starting it" in rig.agent.run_cycle()
    assert not (tmp_path / "config" / "controller.properties").exists()


def kraft_snap(**changes: object) -> Snapshot:
    base: dict[str, object] = {
        "broker_id": 1,
        "zk_connected": True,
        "spec": SPEC,
        "broker": BrokerView(RUNNING, registered=True, responsive=True),
        "controller": RUNNING,
        "controller_node_id": 3001,
        "controller_changed": ("offsets.retention.minutes",),
        "controller_properties": {"node.id": "3001"},
        "quorum_leader_id": 3000,
        "quorum_caught_up": True,
    }
    base.update(changes)
    return Snapshot(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("snapshot", "kind", "sentence"),
    [
        (kraft_snap(), "restart_controller", "controller config changed (offsets.retention"),
        (
            kraft_snap(brokers_awaiting_restart=frozenset({0, 2})),
            "none",
            "controller restarts after the brokers, waiting for brokers 0, 2",
        ),
        (
            kraft_snap(brokers_awaiting_restart=frozenset({1})),
            "restart_controller",
            "restarting the controller",
        ),
        # A broker its restart stopped and started, not answering yet, awaits no restart
        # but is not back: the controllers wait for it (run 6 rolled them past it).
        (
            kraft_snap(brokers_unsettled=frozenset({2})),
            "none",
            "controller restarts after the brokers, waiting for brokers 2",
        ),
        (
            kraft_snap(
                brokers_awaiting_restart=frozenset({0}), brokers_unsettled=frozenset({1, 2})
            ),
            "none",
            "controller restarts after the brokers, waiting for brokers 0, 2",
        ),
        (
            kraft_snap(quorum_leader_id=3001, controllers_awaiting_restart=frozenset({0, 1})),
            "none",
            "the active controller restarts last, waiting for the controllers of 0",
        ),
        (
            kraft_snap(quorum_leader_id=3001, controllers_awaiting_restart=frozenset({1})),
            "restart_controller",
            "restarting the controller",
        ),
        (
            kraft_snap(controllers_awaiting_restart=frozenset({0, 2})),
            "restart_controller",
            "restarting the controller",
        ),
        (
            kraft_snap(quorum_caught_up=False),
            "none",
            "waits until the rest of the quorum has caught up",
        ),
        (
            kraft_snap(
                config=ConfigChanges(
                    rendered={"node.id": "1"},
                    diff=ConfigDiff(read_only=(ConfigChange("x", "1", "2"),)),
                )
            ),
            "restart",
            "read-only config changed (x)",
        ),
        (kraft_snap(controller_changed=()), "none", "healthy"),
        (
            kraft_snap(
                controller=STOPPED, controller_restarting=True, long_action="controller restart 2/3"
            ),
            "none",
            "controller restart 2/3",
        ),
        (kraft_snap(controller=STOPPED), "start_controller", "controller process gone"),
    ],
)
def test_the_roller_order_in_kraft(snapshot: Snapshot, kind: str, sentence: str) -> None:
    action = decide(snapshot)
    assert action.kind == kind
    assert sentence in action.reason
    if kind == "restart_controller":
        assert member_state(snapshot, action, None) is MemberState.RESTARTING
    if kind == "none" and snapshot.controller_changed:
        assert member_state(snapshot, action, None) is MemberState.AWAITING_RESTART


@pytest.mark.parametrize(
    ("replicas", "mine", "expected"),
    [
        ((replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER)), 3001, True),
        (
            (replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER, None)),
            3001,
            False,
        ),
        (
            (replica(3000, LEADER), replica(3001, FOLLOWER, None), replica(3002, FOLLOWER)),
            3001,
            True,
        ),
        ((replica(3000, FOLLOWER), replica(3001, FOLLOWER)), 3001, False),  # no leader
        ((replica(3000, LEADER), replica(3002, OBSERVER, None)), 3000, True),
    ],
)
def test_rest_caught_up(replicas: tuple[QuorumReplica, ...], mine: int, expected: bool) -> None:
    assert rest_caught_up(replicas, mine, 5000) is expected


class _Lock:
    def __init__(self) -> None:
        self.events: list[str] = []

    def acquire(self, timeout: float) -> bool:
        self.events.append("acquire")
        return True

    def holders(self) -> list[str]:
        return []

    def release(self) -> None:
        self.events.append("release")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_controller_restart_waits_for_the_quorum_then_for_its_controller(tmp_path: Path) -> None:
    from tests.unit.agent_fakes import FakeProcess

    lagging = (replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER, None))
    ready = (replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER))
    looks = iter([lagging, lagging, ready, (replica(3000, LEADER),), ready])
    lock, clock, controller = _Lock(), _Clock(), FakeProcess()
    controller.process_state = RUNNING
    progress: list[str] = []
    result = restart_controller(
        ControllerRestartSettings(3001, tmp_path / "controller.properties", 5000),
        lock,
        controller,
        lambda: (3000, next(looks)),
        {"node.id": "3001"},
        "4.3.1",
        clock,
        progress.append,
    )
    assert result == "done, caught up"
    assert lock.events == ["acquire", "release"]
    assert controller.starts == ["4.3.1"]
    assert "node.id=3001" in (tmp_path / "controller.properties").read_text()
    assert progress[-1].startswith("controller restart 3/3")
    assert clock.now == 6.0  # two looks at a lagging quorum, one at an absent controller


def test_a_controller_restart_is_abandoned_while_the_quorum_lags(tmp_path: Path) -> None:
    from tests.unit.agent_fakes import FakeProcess

    lagging = (replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER, None))
    lock, controller = _Lock(), FakeProcess()
    controller.process_state = RUNNING
    result = restart_controller(
        ControllerRestartSettings(3001, tmp_path / "c.properties", 5000, quorum_wait_s=10),
        lock,
        controller,
        lambda: (3000, lagging),
        {},
        "4.3.1",
        _Clock(),
        lambda _: None,
    )
    assert result.startswith("abandoned: the rest of the quorum did not catch up")
    assert controller.starts == []
    assert lock.events == ["acquire", "release"]
