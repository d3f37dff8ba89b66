"""What the local provider adds for KRaft clusters (management_plane/local/kraft.py), and the
cluster file's per-VM processes: pure, no JVM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from management_plane.local import kraft, render
from management_plane.local.kraft_storage import cluster_ids
from management_plane.local.layout import plan_layout
from management_plane.local.state import ClusterState
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole
from planner.contracts.vm_config import parse_server_properties
from planner.contracts.vm_config.kraft import log_file_option

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("nodes", "controllers"), [(1, 1), (2, 1), (3, 3), (4, 3), (5, 5), (7, 5)])
def test_the_first_vms_run_the_controllers(tmp_path: Path, nodes: int, controllers: int) -> None:
    layout = plan_layout("k", tmp_path, nodes, "127.0.9")
    assert [vm.index for vm in kraft.controller_vms(layout)] == list(range(1, controllers + 1))
    assert kraft.local_kraft_spec(layout, "4.3.1").kraft_controllers == controllers


def test_every_vm_is_a_broker_and_the_first_three_are_controllers(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 4, "127.0.9")
    for vm in layout.vms:
        files = kraft.config_files(layout, vm, "4.3.1")
        broker = parse_server_properties(files[render.SERVER_PROPERTIES])
        assert broker["node.id"] == str(vm.broker_id)
        assert broker["broker.rack"] == vm.zone
        assert broker["controller.quorum.bootstrap.servers"] == (
            "127.0.9.1:9093,127.0.9.2:9093,127.0.9.3:9093"
        )
        if vm.index <= 3:
            controller = parse_server_properties(files[kraft.CONTROLLER_PROPERTIES])
            assert controller["node.id"] == str(3000 + vm.broker_id)
            assert controller["listeners"] == f"CONTROLLER://{vm.address}:9093"
            assert controller["log.dirs"] == str(vm.controller_data_dir)
        else:
            assert kraft.CONTROLLER_PROPERTIES not in files


def test_a_new_cluster_formats_its_controllers_as_initial_voters(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 4, "127.0.9")
    cluster_id, directory_ids = cluster_ids(tmp_path, layout)
    assert sorted(directory_ids) == ["vm1", "vm2", "vm3"]
    # Made once: a second call (a stopped cluster started again) names the same ids.
    assert cluster_ids(tmp_path, layout) == (cluster_id, directory_ids)
    voters = kraft.initial_voters(layout, directory_ids)
    first = kraft.format_commands("java", "/libs", layout, layout.vms[0], cluster_id, voters)
    assert len(first) == 2
    assert first[0][-2:] == [
        "--initial-controllers",
        ",".join(
            f"{3000 + i}@127.0.9.{i + 1}:9093:{directory_ids[f'vm{i + 1}']}" for i in range(3)
        ),
    ]
    assert str(layout.vms[0].config_dir / kraft.CONTROLLER_PROPERTIES) in first[0]
    assert first[1][-1] == "--no-initial-controllers"
    fourth = kraft.format_commands("java", "/libs", layout, layout.vms[3], cluster_id, voters)
    assert len(fourth) == 1
    assert fourth[0][-1] == "--no-initial-controllers"


def test_a_single_vm_cluster_formats_its_controller_standalone(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 1, "127.0.9")
    cluster_id, directory_ids = cluster_ids(tmp_path, layout)
    voters = kraft.initial_voters(layout, directory_ids)
    commands = kraft.format_commands("java", "/libs", layout, layout.vms[0], cluster_id, voters)
    assert commands[0][-1] == "--standalone"


def test_a_malformed_ids_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "kraft.json").write_text("{}")
    layout = plan_layout("k", tmp_path, 3, "127.0.9")
    with pytest.raises(Exception, match=r"kraft\.json is malformed"):
        cluster_ids(tmp_path, layout)


def test_controllers_run_on_the_first_vms_only(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 4, "127.0.9")
    kraft_state = ClusterState(layout=layout, kafka_version="4.3.1")
    assert kraft_state.kraft
    assert kraft_state.vm_kinds("vm1") == ("zookeeper", "controller", "kafka")
    assert kraft_state.vm_kinds("vm4") == ("zookeeper", "kafka")
    zookeeper_state = ClusterState(layout=layout, kafka_version="3.9.2")
    assert not zookeeper_state.kraft
    assert zookeeper_state.vm_kinds("vm1") == ("zookeeper", "kafka")


def test_the_cluster_file_keeps_the_controller_port(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 3, "127.0.9")
    value = ClusterState(layout=layout, kafka_version="4.3.1").to_json()
    assert value["vms"][0]["ports"]["kafka_controller"] == 9093
    del value["vms"][0]["ports"]["kafka_controller"]  # a file written before KRaft
    state = ClusterState.from_json(json.loads(json.dumps(value)), tmp_path / "cluster.json")
    assert state.layout.vms[0].ports.kafka_controller == 9093


def test_command_lines_use_log4j2_and_the_config_files(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 3, "127.0.9")
    vm = layout.vms[0]
    controller = kraft.controller_command("java", vm, "/libs", "/jolokia.jar")
    assert controller[-2:] == ["kafka.Kafka", str(vm.config_dir / kraft.CONTROLLER_PROPERTIES)]
    # The controller has a Jolokia of its own (its own port): the controller-only MBeans.
    properties = vm.config_dir / "jolokia-controller.properties"
    assert f"-javaagent:/jolokia.jar=config={properties}" in controller
    broker = kraft.broker_command("java", vm, "/libs", "/jolokia.jar")
    assert broker[-1] == str(vm.config_dir / render.SERVER_PROPERTIES)
    # Jolokia reads its HTTPS settings from the VM's rendered jolokia.properties.
    assert f"-javaagent:/jolokia.jar=config={vm.config_dir / 'jolokia.properties'}" in broker
    for command in (controller, broker):
        assert f"-Dlog4j2.configurationFile=file:{vm.config_dir / kraft.KAFKA_LOG4J2}" in command
    tool = kraft.metadata_quorum_command(
        "java", vm, "/libs", "h:9093", "/c/client.properties", "describe", "--status"
    )
    assert tool[-6:] == [
        "--bootstrap-controller",
        "h:9093",
        "--command-config",
        "/c/client.properties",
        "describe",
        "--status",
    ]


def test_every_kafka_jvm_gets_the_same_options_but_its_logging(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 3, "127.0.9")
    vm = layout.vms[1]
    zookeeper_mode = render.kafka_command("java", layout, vm, "/libs", "/jolokia.jar")
    kraft_broker = kraft.broker_command("java", vm, "/libs", "/jolokia.jar")
    controller = kraft.controller_command("java", vm, "/libs", "/jolokia.jar")
    options = [
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={vm.logs_dir}",
    ]
    assert zookeeper_mode[:8] == kraft_broker[:8] == ["java", *render.KAFKA_HEAP, *options]
    assert controller[:8] == ["java", *kraft.CONTROLLER_HEAP, *options]
    assert zookeeper_mode[8] == f"-Dlog4j.configuration=file:{vm.config_dir / render.KAFKA_LOG4J}"
    assert (
        kraft_broker[8]
        == controller[8]
        == (f"-Dlog4j2.configurationFile=file:{vm.config_dir / kraft.KAFKA_LOG4J2}")
    )
    # Each KRaft process names its own rolling log file.
    assert kraft_broker[9] == log_file_option(controller=False)
    assert controller[9] == log_file_option(controller=True)
    assert zookeeper_mode[9:] == kraft_broker[10:]  # Jolokia, the jars, server.properties


def test_each_vm_shows_its_controllers_role_in_the_quorum(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 5, "127.0.9")
    replicas = (
        QuorumReplica(3000, "a", 9, QuorumRole.FOLLOWER, 10),
        QuorumReplica(3001, "b", 9, QuorumRole.LEADER, 0),
        QuorumReplica(3002, "c", 9, QuorumRole.OBSERVER, 10),
        QuorumReplica(0, "d", 9, QuorumRole.OBSERVER, 10),
    )
    assert kraft.controller_roles(layout, replicas) == {
        "vm1": "voter",
        "vm2": "leader",
        "vm3": "observer",
        "vm4": "absent",  # a controller VM (of five) the quorum does not list
        "vm5": "absent",
    }
    three = plan_layout("k", tmp_path, 4, "127.0.9")
    assert kraft.controller_roles(three, replicas)["vm4"] is None  # runs no controller


def test_agent_settings_name_the_controllers_and_the_vms_own(tmp_path: Path) -> None:
    from agent.settings import parse_settings

    layout = plan_layout("k", tmp_path, 4, "127.0.9")
    endpoints = kraft.bootstrap_endpoints(layout)
    first = parse_settings(
        render.agent_settings(layout, layout.vms[0], "/img", "java", endpoints, True)
    )
    assert first.runs_controller
    assert first.controller_port == layout.vms[0].ports.kafka_controller
    assert first.controller_data_dir == layout.vms[0].controller_data_dir
    assert first.controller_bootstrap == ",".join(endpoints)
    fourth = parse_settings(
        render.agent_settings(layout, layout.vms[3], "/img", "java", endpoints, False)
    )
    assert fourth.kraft and not fourth.runs_controller
    zk_mode = parse_settings(render.agent_settings(layout, layout.vms[0], "/img", "java"))
    assert not zk_mode.kraft


def test_agents_own_the_controller_and_broker_records(tmp_path: Path) -> None:
    layout = plan_layout("k", tmp_path, 4, "127.0.9")
    state = ClusterState(layout=layout, kafka_version="4.3.1", agents=True)
    assert state.vm_kinds("vm1") == ("zookeeper", "agent", "controller", "kafka")
    assert state.vm_kinds("vm4") == ("zookeeper", "agent", "kafka")
    assert state.record("vm1", "controller") is None  # no pid file yet
    zk_mode = ClusterState(layout=layout, kafka_version="3.9.2", agents=True)
    assert zk_mode.vm_kinds("vm1") == ("zookeeper", "agent", "kafka")
