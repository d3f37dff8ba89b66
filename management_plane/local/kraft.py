"""What the local provider adds for a KRaft cluster (Kafka 4.x), pure: which VMs run a
controller, each controller's facts, the quorum's endpoints, the config files by name, the
storage format and JVM command lines. The files themselves come from the renderer
(planner.contracts.vm_config.kraft).

A new local cluster's first controllers are its initial voters: their metadata dirs are
formatted with --initial-controllers (--standalone for one), each with a directory id made
here; every broker is formatted with --no-initial-controllers and finds the quorum through
controller.quorum.bootstrap.servers.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath

from management_plane.errors import KaasError
from management_plane.local import render
from management_plane.local.layout import ClusterLayout, VmLayout, zookeeper_participants
from planner.contracts.kafka_release import KRAFT_QUORUM_SIZES
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import server_properties_text
from planner.contracts.vm_config.class_archive import class_path_options
from planner.contracts.vm_config.jolokia import CONTROLLER_JOLOKIA_PROPERTIES, jolokia_agent_option
from planner.contracts.vm_config.kraft import (
    ControllerFacts,
    InitialVoter,
    StorageFormat,
    controller_node_id,
    format_arguments,
    log_file_option,
    render_controller_properties,
    render_kafka_log4j2,
    render_kafka_tools_log4j2,
    render_kraft_broker_properties,
    storage_format,
)

CONTROLLER_PROPERTIES = "controller.properties"
KAFKA_LOG4J2 = "kafka-log4j2.properties"
KAFKA_TOOLS_LOG4J2 = "kafka-tools-log4j2.properties"
CONTROLLER_HEAP = ("-Xms192m", "-Xmx192m")
STORAGE_TOOL = "kafka.tools.StorageTool"
METADATA_QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"


def quorum_size(nodes: int) -> int:
    """How many of a local cluster's first VMs run a voting controller: as many as vote in
    ZooKeeper (1, 3 or 5), the same rule for both quorums."""
    return zookeeper_participants(nodes)


def local_kraft_spec(layout: ClusterLayout, kafka_version: str) -> ClusterSpec:
    spec = render.local_spec(layout, kafka_version)
    # During a controller VM's replacement both VMs run a controller: the quorum keeps its size.
    hosted = len(controller_vms(layout))
    return replace(
        spec, kraft_controllers=max(s for s in KRAFT_QUORUM_SIZES if s <= max(hosted, 1))
    )


def controller_vms(layout: ClusterLayout) -> tuple[VmLayout, ...]:
    if layout.controllers is None:
        return layout.vms[: quorum_size(len(layout.vms))]
    return tuple(vm for vm in layout.vms if vm.name in layout.controllers)


def with_controllers(layout: ClusterLayout, count: int) -> ClusterLayout:
    """`layout` whose first `count` VMs run a controller (a new cluster's initial voters)."""
    if count not in KRAFT_QUORUM_SIZES or count > len(layout.vms):
        sizes = ", ".join(str(s) for s in KRAFT_QUORUM_SIZES)
        raise KaasError(
            f"a controller quorum of {count} on {len(layout.vms)} VMs cannot be: one of "
            f"{sizes}, at most one controller per VM"
        )
    return replace(layout, controllers=tuple(vm.name for vm in layout.vms[:count]))


def is_controller_vm(layout: ClusterLayout, vm: VmLayout) -> bool:
    return vm in controller_vms(layout)


def controller_facts(vm: VmLayout) -> ControllerFacts:
    return ControllerFacts(
        node_id=controller_node_id(vm.broker_id),
        listener_address=vm.address,
        port=vm.ports.kafka_controller,
        metadata_dir=str(vm.controller_data_dir),
    )


def bootstrap_endpoints(layout: ClusterLayout) -> tuple[str, ...]:
    return tuple(controller_facts(vm).endpoint for vm in controller_vms(layout))


def controller_roles(
    layout: ClusterLayout, replicas: tuple[QuorumReplica, ...]
) -> dict[str, str | None]:
    """Each VM's controller role as the quorum states it: leader, voter, observer, or absent
    (a controller VM the quorum does not list); None for a VM that runs no controller."""
    roles: dict[str, str | None] = {}
    for vm in layout.vms:
        if not is_controller_vm(layout, vm):
            roles[vm.name] = None
            continue
        node_id = controller_facts(vm).node_id
        found = {r.role for r in replicas if r.node_id == node_id}
        if QuorumRole.LEADER in found:
            roles[vm.name] = "leader"
        elif QuorumRole.FOLLOWER in found:
            roles[vm.name] = "voter"
        elif QuorumRole.OBSERVER in found:
            roles[vm.name] = "observer"
        else:
            roles[vm.name] = "absent"
    return roles


def config_files(layout: ClusterLayout, vm: VmLayout, kafka_version: str) -> dict[str, str]:
    """Every Kafka file of a KRaft VM's config folder (ZooKeeper's come from render.py: the
    ensemble stays KaaS's own coordination store)."""
    spec = local_kraft_spec(layout, kafka_version)
    bootstrap = bootstrap_endpoints(layout)
    broker = render.broker_facts(layout, vm)
    files = {
        render.SERVER_PROPERTIES: server_properties_text(
            render_kraft_broker_properties(spec, broker, bootstrap)
        ),
        KAFKA_LOG4J2: render_kafka_log4j2(spec.log_limits),
        KAFKA_TOOLS_LOG4J2: render_kafka_tools_log4j2(),
    }
    if is_controller_vm(layout, vm):
        files[CONTROLLER_PROPERTIES] = server_properties_text(
            render_controller_properties(spec, broker, controller_facts(vm), bootstrap)
        )
        files.update(render.jolokia_files(vm, controller=True))
    return files


def initial_voters(
    layout: ClusterLayout, directory_ids: dict[str, str]
) -> tuple[InitialVoter, ...]:
    """The new quorum's voters: each controller VM with the directory id made for it
    (`directory_ids`: VM name -> id)."""
    return tuple(
        InitialVoter(
            controller_facts(vm).node_id, controller_facts(vm).endpoint, directory_ids[vm.name]
        )
        for vm in controller_vms(layout)
    )


def format_commands(
    java: str,
    libs: str,
    layout: ClusterLayout,
    vm: VmLayout,
    cluster_id: str,
    voters: tuple[InitialVoter, ...],
    joining: bool = False,
) -> list[list[str]]:
    """The `kafka-storage format` runs of one VM: its controller's metadata dir (an initial
    voter of a new cluster; an observer when `joining` a running one), then its broker's
    log dir."""
    commands = []
    tool = [java, *tool_jvm_options(vm), *class_path_options(libs), STORAGE_TOOL]
    if is_controller_vm(layout, vm):
        how = storage_format(joining, True, len(voters))
        commands.append(
            tool
            + format_arguments(cluster_id, str(vm.config_dir / CONTROLLER_PROPERTIES), how, voters)
        )
    commands.append(
        tool
        + format_arguments(
            cluster_id,
            str(vm.config_dir / render.SERVER_PROPERTIES),
            StorageFormat.NO_INITIAL_CONTROLLERS,
        )
    )
    return commands


def tool_jvm_options(vm: VmLayout) -> list[str]:
    return [
        "-Xmx128m",
        "-XX:+UseSerialGC",
        # A tool runs for a second or two: the C1 compiler alone starts it sooner and spends
        # less CPU, which the shared cores of local VMs feel when six format runs start at once.
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile=file:{vm.config_dir / KAFKA_TOOLS_LOG4J2}",
    ]


def _kafka_jvm(java: str, heap: tuple[str, ...], vm: VmLayout, controller: bool) -> list[str]:
    return [
        *render.kafka_jvm(
            java, heap, vm, f"-Dlog4j2.configurationFile=file:{vm.config_dir / KAFKA_LOG4J2}"
        ),
        log_file_option(controller),
    ]


def controller_command(java: str, vm: VmLayout, libs: str, jolokia_agent: str) -> list[str]:
    return [
        *_kafka_jvm(java, CONTROLLER_HEAP, vm, controller=True),
        jolokia_agent_option(PurePath(jolokia_agent), vm.config_dir, CONTROLLER_JOLOKIA_PROPERTIES),
        *class_path_options(libs),
        "kafka.Kafka",
        str(vm.config_dir / CONTROLLER_PROPERTIES),
    ]


def broker_command(java: str, vm: VmLayout, libs: str, jolokia_agent: str) -> list[str]:
    return [
        *_kafka_jvm(java, render.KAFKA_HEAP, vm, controller=False),
        jolokia_agent_option(PurePath(jolokia_agent), vm.config_dir),
        *class_path_options(libs),
        "kafka.Kafka",
        str(vm.config_dir / render.SERVER_PROPERTIES),
    ]


def metadata_quorum_command(
    java: str,
    vm: VmLayout,
    libs: str,
    bootstrap_controllers: str,
    command_config: str,
    *arguments: str,
) -> list[str]:
    """Kafka's own kafka-metadata-quorum tool, run from the image's jars. `command_config`:
    the client settings file (TLS and the identity; no bootstrap.servers, which the tool
    refuses beside --bootstrap-controller)."""
    return [
        java,
        *tool_jvm_options(vm),
        *class_path_options(libs),
        METADATA_QUORUM_TOOL,
        "--bootstrap-controller",
        bootstrap_controllers,
        "--command-config",
        command_config,
        *arguments,
    ]
