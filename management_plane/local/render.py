"""What the local provider adds to the renderer (planner.contracts.vm_config), pure: a local
VM's facts and ensemble as the renderer's inputs, the local spec, the JVM command lines with
their heaps, and the agent's settings file. The configuration files themselves come from
the renderer only. Six JVMs share two cores here: hence the small heaps and the "local"
sizing profile, passed to the renderer as an input.
"""

from __future__ import annotations

from pathlib import Path, PurePath

from management_plane.errors import KaasError
from management_plane.local.layout import ClusterLayout, VmLayout, zookeeper_participants
from management_plane.local.tls import vm_identity
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.spec import ClusterSpec
from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.contracts.vm_config import (
    BrokerFacts,
    EnsembleServer,
    SizingProfile,
    ZookeeperRole,
    ZookeeperSecurity,
    ZookeeperTlsFiles,
    render_kafka_log4j,
    render_server_properties,
    render_zoo_cfg,
    render_zookeeper_dynamic,
    render_zookeeper_logback,
    server_properties_text,
    sizing_properties,
    voting_roles,
)
from planner.contracts.vm_config.class_archive import class_path_options
from planner.contracts.vm_config.jolokia import (
    CONTROLLER_JOLOKIA_PROPERTIES,
    JOLOKIA_POLICY,
    JOLOKIA_PROPERTIES,
    JolokiaTls,
    jolokia_agent_option,
    render_jolokia_access_policy,
    render_jolokia_properties,
)
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.pki.authority import Role, role_distinguished_name

HOST_SIZING = SizingProfile.LOCAL
KAFKA_HEAP = ("-Xms512m", "-Xmx512m")
ZOOKEEPER_HEAP = ("-Xms128m", "-Xmx256m")


def local_spec(
    layout: ClusterLayout, kafka_version: str, monitoring: MonitoringTargets | None = None
) -> ClusterSpec:
    """The spec of a local cluster as `kaas up` starts it: the first spec it writes to
    ZooKeeper for the agents, and the spec it renders for the brokers it starts itself."""
    nodes = len(layout.vms)
    return ClusterSpec(
        cluster=layout.name,
        kafka_version=kafka_version,
        broker_count=nodes,
        zones=tuple(dict.fromkeys(vm.zone for vm in layout.vms)),
        zookeeper_participants=zookeeper_participants(nodes),
        monitoring=monitoring,
        transport_security=layout.transport,
    )


def broker_tls_files(vm: VmLayout) -> TlsFiles:
    identity = vm_identity(vm)
    return TlsFiles(str(identity.keystore), str(identity.trust_bundle))


def broker_facts(layout: ClusterLayout, vm: VmLayout) -> BrokerFacts:
    """What the renderer needs to know about a local VM: the same facts its agent derives
    from the settings agent_settings writes (the broker id is the one `kaas up` assigns)."""
    return BrokerFacts(
        broker_id=vm.broker_id,
        rack=vm.zone,
        listener_address=vm.address,
        port=vm.ports.kafka_internal,
        tenant_port=vm.ports.kafka_tenant,
        advertised_address=vm.address,
        log_dirs=(str(vm.kafka_data_dir),),
        zookeeper_connect=layout.zookeeper_connect,
        host_sizing=sizing_properties(HOST_SIZING),
        tls=broker_tls_files(vm),
    )


def node_tls_files(vm: VmLayout) -> ZookeeperTlsFiles:
    identity = vm_identity(vm)
    return ZookeeperTlsFiles(keystore=identity.keystore, trust_bundle=identity.trust_bundle)


def zookeeper_security(vm: VmLayout) -> ZookeeperSecurity:
    """The nodes' identity is ZooKeeper's super user: their agents run the reconfigs."""
    return ZookeeperSecurity(node_tls_files(vm), role_distinguished_name(Role.NODE))


def ensemble_server(
    vm: VmLayout, role: ZookeeperRole = ZookeeperRole.PARTICIPANT
) -> EnsembleServer:
    p = vm.ports
    return EnsembleServer(
        vm.index,
        vm.address,
        p.zookeeper_peer,
        p.zookeeper_election,
        role,
    )


def ensemble(layout: ClusterLayout) -> tuple[EnsembleServer, ...]:
    """The first VMs vote, as many as the spec's ensemble size; the rest observe."""
    roles = voting_roles([vm.index for vm in layout.vms], zookeeper_participants(len(layout.vms)))
    return tuple(ensemble_server(vm, roles[vm.index]) for vm in layout.vms)


# A local VM's configuration files, by name in its config folder (the JVM command lines below
# name them); myid is in ZooKeeper's data folder.
SERVER_PROPERTIES = "server.properties"
KAFKA_LOG4J = "kafka-log4j.properties"
ZOO_CFG = "zoo.cfg"
ZOOKEEPER_DYNAMIC = "zoo.cfg.dynamic"
ZOOKEEPER_LOGBACK = "zookeeper-logback.xml"


def jolokia_files(
    vm: VmLayout, controller: bool = False, transport: TransportSecurity = DEFAULT_TRANSPORT
) -> dict[str, str]:
    """What the VM's agent writes before it starts the broker (agent.broker_config.rendering
    .jolokia_files, from the settings agent_settings writes); `kaas up` writes it first.
    `controller`: the VM runs a KRaft controller, which gets a Jolokia of its own."""
    identity = vm_identity(vm)
    tls = JolokiaTls(identity.trust_bundle, identity.certificate, identity.key)
    policy = vm.config_dir / JOLOKIA_POLICY
    node = role_distinguished_name(Role.NODE)
    files = {
        JOLOKIA_PROPERTIES: render_jolokia_properties(
            vm.address, vm.ports.jolokia, tls, policy, node, transport
        ),
        JOLOKIA_POLICY: render_jolokia_access_policy(),
    }
    if controller:
        files[CONTROLLER_JOLOKIA_PROPERTIES] = render_jolokia_properties(
            vm.address, vm.ports.controller_jolokia, tls, policy, node
        )
    return files


def zoo_cfg(vm: VmLayout, dynamic_file: Path, transport: TransportSecurity) -> str:
    """The VM's zoo.cfg naming `dynamic_file`: the one `kaas up` writes first, and, once
    ZooKeeper has renamed its dynamic file after a reconfig, the one a change of transport
    (a conversion's phase) writes again."""
    return render_zoo_cfg(
        vm.zookeeper_data_dir,
        dynamic_file,
        zookeeper_security(vm),
        vm.ports.zookeeper_client,
        vm.address,
        transport,
    )


def current_dynamic_file(vm: VmLayout) -> Path:
    """The dynamic file the VM's zoo.cfg names now (ZooKeeper renames it after a reconfig)."""
    for line in (vm.config_dir / ZOO_CFG).read_text().splitlines():
        if line.startswith("dynamicConfigFile="):
            return Path(line.split("=", 1)[1])
    raise KaasError(f"{vm.config_dir / ZOO_CFG} names no dynamicConfigFile")


def config_files(layout: ClusterLayout, vm: VmLayout, kafka_version: str) -> dict[str, str]:
    """Every file of a local VM's config folder, rendered by the one renderer."""
    spec = local_spec(layout, kafka_version)
    return {
        **jolokia_files(vm, transport=spec.transport_security),
        ZOO_CFG: zoo_cfg(vm, vm.config_dir / ZOOKEEPER_DYNAMIC, spec.transport_security),
        ZOOKEEPER_DYNAMIC: render_zookeeper_dynamic(ensemble(layout)),
        ZOOKEEPER_LOGBACK: render_zookeeper_logback(spec.log_limits),
        SERVER_PROPERTIES: server_properties_text(
            render_server_properties(spec, broker_facts(layout, vm))
        ),
        KAFKA_LOG4J: render_kafka_log4j(spec.log_limits),
    }


def joining_dynamic_file(live_lines: list[str], vm: VmLayout) -> str:
    """The dynamic file of a VM joining a running ensemble: the ensemble as it states itself,
    then this VM's server, which its agent adds by reconfig."""
    return render_zookeeper_dynamic([ensemble_server(vm)], live_lines)


def kafka_jvm(java: str, heap: tuple[str, ...], vm: VmLayout, logging_option: str) -> list[str]:
    """A Kafka JVM (broker or KRaft controller) up to its agent and class path: the heap,
    G1 tuned for short pauses, the VM's log folder; `logging_option` names the logging
    config (log4j for 3.x, log4j2 for 4.x)."""
    return [
        java,
        *heap,
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={vm.logs_dir}",
        logging_option,
    ]


def kafka_command(
    java: str, cluster: ClusterLayout, vm: VmLayout, libs: str, jolokia_agent: str
) -> list[str]:
    return [
        *kafka_jvm(
            java, KAFKA_HEAP, vm, f"-Dlog4j.configuration=file:{vm.config_dir / KAFKA_LOG4J}"
        ),
        jolokia_agent_option(PurePath(jolokia_agent), vm.config_dir),
        *class_path_options(libs),
        "kafka.Kafka",
        str(vm.config_dir / SERVER_PROPERTIES),
    ]


def zookeeper_command(java: str, vm: VmLayout, lib: str) -> list[str]:
    return [
        java,
        *ZOOKEEPER_HEAP,
        "-XX:+UseSerialGC",
        f"-Dzookeeper.log.dir={vm.logs_dir}",
        f"-Dlogback.configurationFile={vm.config_dir / ZOOKEEPER_LOGBACK}",
        *class_path_options(lib),
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(vm.config_dir / ZOO_CFG),
    ]


def agent_settings(
    cluster: ClusterLayout,
    vm: VmLayout,
    image_root: str,
    java: str,
    controllers: tuple[str, ...] = (),
    runs_controller: bool = False,
) -> dict[str, object]:
    """The kaas-agent settings file of a local VM (see agent/settings.py for every field).
    `controllers`: a KRaft cluster's controller endpoints (empty: ZooKeeper mode);
    `runs_controller`: this VM's agent supervises a controller too."""
    kraft_agent_settings: dict[str, object] = {}
    if controllers:
        kraft_agent_settings["controller_bootstrap"] = ",".join(controllers)
        # Each look at the quorum is two short JVMs; the local VMs share a few cores.
        kraft_agent_settings["quorum_check_interval_s"] = 15
    if controllers and runs_controller:
        kraft_agent_settings["controller_port"] = vm.ports.kafka_controller
        kraft_agent_settings["controller_data_dir"] = str(vm.controller_data_dir)
    return {
        "cluster": cluster.name,
        "zookeeper_hosts": cluster.zookeeper_hosts,
        "vm_id": vm.name,
        "address": vm.address,
        "zone": vm.zone,
        "data_dir": str(vm.kafka_data_dir),
        "config_dir": str(vm.config_dir),
        "logs_dir": str(vm.logs_dir),
        "broker_log_config": str(vm.config_dir / KAFKA_LOG4J),
        "zookeeper_log_config": str(vm.config_dir / ZOOKEEPER_LOGBACK),
        "state_dir": str(vm.directory),
        "tls_dir": str(vm_identity(vm).directory),
        "image_root": image_root,
        "java": java,
        "kafka_port": vm.ports.kafka_internal,
        "kafka_tenant_port": vm.ports.kafka_tenant,
        "jolokia_port": vm.ports.jolokia,
        "controller_jolokia_port": vm.ports.controller_jolokia,
        "mirror_rest_port": vm.ports.mirror_rest,
        "kafka_heap": " ".join(KAFKA_HEAP),
        "host_sizing": HOST_SIZING.value,
        "loop_interval_s": 2,
        "isr_check_interval_s": 1,
        "zookeeper_server_id": vm.index,
        "zookeeper_peer_port": vm.ports.zookeeper_peer,
        "zookeeper_election_port": vm.ports.zookeeper_election,
        "zookeeper_client_port": vm.ports.zookeeper_client,
        # Local VMs are cheap to restart and tests should not wait a minute: shorter than the default.
        "zookeeper_gone_s": 20,
        # A server seen serving is looked at again after this: well inside the gone threshold,
        # so a server killed for the drills' 30 s is removed before it comes back.
        "zookeeper_probe_interval_s": 4,
        "metrics_interval_s": 10,
        # A drain is a chain of short batches, each waiting for the next planner tick: on cheap
        # local VMs a shorter tick makes replacements minutes shorter.
        "plan_interval_s": 3,
        **kraft_agent_settings,
    }
