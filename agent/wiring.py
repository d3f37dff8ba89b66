"""`build_agent`: the agent with its real adapters (kazoo, confluent-kafka, Jolokia, the
process supervisor, Kafka's reassignment API through kafka-python, the plan store in
ZooKeeper)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from kazoo.client import KazooClient

from agent.adapters import (
    ConfluentBrokerAdmin,
    ConfluentClusterAdmin,
    KazooAgentZooKeeper,
    KraftAgentZooKeeper,
    MigratingAgentZooKeeper,
    SystemClock,
)
from agent.cert_keeper import CertificateKeeper, KazooCertificateExchange, presented_serial
from agent.cycle import Agent, AgentPorts
from agent.kraft_migration import MetadataDirStorage
from agent.kraft_quorum_tool import ControllerQuorum, MetadataQuorumTool, MigrationQuorumTool
from agent.metrics.mirror_offsets import KafkaMirrorOffsets
from agent.mirror_keeper import Journal, MirrorKeeper
from agent.mirror_lag_monitor import MirrorLagMonitor
from agent.mirror_maker import (
    KazooMirrorFlows,
    LocalMirrorProcess,
    SystemdMirrorProcess,
    VmMirrorCredentials,
)
from agent.planner_role import PlannerRole
from agent.ports import BrokerSupervisor, ReassignmentAdmin
from agent.reassign_admin import KafkaReassignmentAdmin
from agent.settings import AgentSettings, SettingsError
from agent.supervisor import (
    CONTROLLER_PROPERTIES,
    KAFKA_LOG4J2,
    KAFKA_TOOLS_LOG4J2,
    KafkaProcess,
    kafka_libs,
    make_supervisor,
)
from agent.zk_ensemble import EnsembleKeeper
from agent.zk_server_restart import (
    LocalZookeeper,
    SystemdZookeeper,
    ZookeeperLooks,
    ZookeeperRestartSettings,
    ZookeeperServer,
    restart_zookeeper_server,
)
from planner.contracts.kafka_release import KAFKA_RELEASES, KafkaMode
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.image import ZOO_CFG as IMAGE_ZOO_CFG
from planner.contracts.vm_config.kraft import render_kafka_log4j2, render_kafka_tools_log4j2
from planner.pki.rotation import serial_hex
from planner.pki.tls import client_context
from planner.store import PlanStore


def newest_kraft_release() -> str:
    releases = [v for v, mode in KAFKA_RELEASES.items() if mode is KafkaMode.KRAFT]
    return max(releases, key=lambda v: tuple(int(part) for part in v.split(".")))


def quorum_tool(settings: AgentSettings) -> MetadataQuorumTool:
    """Kafka's quorum tools with the newest KRaft release of the image (the tools of one
    4.x release talk to every 4.x quorum); their Log4j 2 file keeps stdout for answers."""
    controller_config = settings.config_dir / CONTROLLER_PROPERTIES
    tools_log4j2 = settings.config_dir / KAFKA_TOOLS_LOG4J2
    if not tools_log4j2.exists():
        tools_log4j2.write_text(render_kafka_tools_log4j2())
    return MetadataQuorumTool(
        java=settings.java,
        libs=str(kafka_libs(settings.image_root, newest_kraft_release())),
        log_config=str(tools_log4j2),
        bootstrap_controllers=settings.controller_bootstrap or "",
        kafka=settings.kafka_client,
        controller_config=str(controller_config) if settings.runs_controller else None,
        clock_ms=lambda: int(time.time() * 1000),
    )


def mirror_keeper(settings: AgentSettings, client: KazooClient, journal: Journal) -> MirrorKeeper:
    """MirrorMaker supervision: the agent's child JVM on a local VM, the image's unit
    kaas-mirror-maker.service on a real one."""
    flows = KazooMirrorFlows(client, ClusterPaths(settings.cluster))
    return MirrorKeeper(
        settings.cluster,
        flows,
        LocalMirrorProcess(settings)
        if settings.supervisor == "local"
        else SystemdMirrorProcess(settings),
        VmMirrorCredentials(settings),
        settings.address,
        settings.mirror_rest_port,
        time.monotonic,
        journal,
        lag=MirrorLagMonitor(
            settings.cluster,
            KafkaMirrorOffsets(settings.kafka_client),
            flows,
            time.time,
        ),
    )


def build_agent(settings: AgentSettings, supervisor: BrokerSupervisor | None = None) -> Agent:
    identity = settings.identity
    if not identity.exists():
        # librdkafka would refuse the missing files with a less telling message.
        raise SettingsError(
            f"tls_dir {identity.directory}: the VM's identity is missing (expected "
            f"{identity.trust_bundle.name}, {identity.key.name}, {identity.certificate.name} "
            f"and {identity.keystore.name} from the cluster CA)"
        )
    paths = ClusterPaths(settings.cluster)
    if settings.kraft and not (settings.config_dir / KAFKA_LOG4J2).exists():
        # Kafka 4 logs through Log4j 2; the image carries only the 3.x Log4j file.
        (settings.config_dir / KAFKA_LOG4J2).write_text(render_kafka_log4j2())
    # The agent's Kafka reads that need the whole cluster go over every member's broker; the
    # agent is made below, the ZooKeeper adapter first.
    agents: list[Agent] = []

    def cluster_bootstrap() -> str:
        return agents[0].cluster_bootstrap() if agents else settings.bootstrap

    def spec() -> ClusterSpec | None:
        return agents[0].memory.last_good_spec if agents else None

    # A ZooKeeper-mode cluster's agent follows a migration's phase: its readings of Kafka
    # move to KRaft with the brokers, it runs the phase's controller, formatted on its VM.
    zookeeper: KazooAgentZooKeeper = (
        KraftAgentZooKeeper(
            settings.zookeeper_hosts,
            paths,
            settings.identity,
            settings.kafka_client,
            cluster_bootstrap,
        )
        if settings.kraft
        else MigratingAgentZooKeeper(
            settings.zookeeper_hosts,
            paths,
            settings.identity,
            settings.kafka_client,
            cluster_bootstrap,
            spec,
        )
    )
    quorum: ControllerQuorum = (
        quorum_tool(settings)
        if settings.kraft
        else MigrationQuorumTool(
            quorum_tool(settings),
            spec,
            lambda version: str(kafka_libs(settings.image_root, version)),
        )
    )
    jolokia = client_context(settings.identity)  # every broker's Jolokia takes the nodes' only

    # One admin client per bootstrap list, kept across the executor's looks.
    admins: dict[str, KafkaReassignmentAdmin] = {}

    def reassignments(bootstrap: str) -> ReassignmentAdmin:
        if bootstrap not in admins:
            for stale in admins.values():
                stale.close()
            admins.clear()
            admins[bootstrap] = KafkaReassignmentAdmin(
                settings.kafka_client.with_servers(bootstrap), settings.jolokia_port, jolokia
            )
        return admins[bootstrap]

    def zookeeper_presented() -> str | None:
        return presented_serial(settings.address, settings.zookeeper_client_port, settings.identity)

    # The ensemble keeper journals through the agent, which is made after it.
    ensemble = EnsembleKeeper(
        zookeeper.client,
        settings,
        settings.identity,
        lambda action, reason, result: agents[0].journal(action, reason, result),
    )
    agent = Agent(
        settings,
        AgentPorts(
            zookeeper=zookeeper,
            admin=ConfluentBrokerAdmin(
                settings.kafka_client, settings.java, settings.image_root, jolokia
            ),
            supervisor=supervisor or make_supervisor(settings),
            ensemble=ensemble,
            planner_seat=PlannerRole(zookeeper.client, paths, f"broker-{settings.vm_id}"),
            plan_store=PlanStore(zookeeper.client, settings.cluster),
            cluster_admin=lambda bootstrap: ConfluentClusterAdmin(
                settings.kafka_client.with_servers(bootstrap), settings.jolokia_port, jolokia
            ),
            reassignments=reassignments,
            clock=SystemClock(),
            controller=make_supervisor(settings, KafkaProcess.CONTROLLER)
            if settings.runs_controller or not settings.kraft
            else None,
            quorum=quorum,
            controller_storage=None if settings.kraft else MetadataDirStorage(settings),
            kafka_znodes=zookeeper if isinstance(zookeeper, MigratingAgentZooKeeper) else None,
            certificates=CertificateKeeper(
                settings.identity,
                KazooCertificateExchange(zookeeper.client, settings.cluster),
                lambda: presented_serial(settings.address, settings.kafka_port, settings.identity),
                dt.timedelta(days=settings.certificate_renewal_days),
                lambda: dt.datetime.now(dt.UTC),
                lambda action, reason, result: agents[0].journal(action, reason, result),
                zookeeper_presented=(
                    (lambda: None) if settings.zookeeper_server_id is None else zookeeper_presented
                ),
            ),
            mirror=mirror_keeper(
                settings,
                zookeeper.client,
                lambda action, reason, result: agents[0].journal(action, reason, result),
            ),
            zookeeper_restart=zookeeper_restart(settings, zookeeper, ensemble),
        ),
    )
    agents.append(agent)
    return agent


def zookeeper_restart(
    settings: AgentSettings, zookeeper: KazooAgentZooKeeper, ensemble: EnsembleKeeper
) -> Callable[[Callable[[str], None]], str] | None:
    """The restart of this VM's ZooKeeper server onto its renewed certificate; None: it runs
    none."""
    server_id = settings.zookeeper_server_id
    if server_id is None:
        return None
    server: ZookeeperServer = (
        SystemdZookeeper()
        if settings.supervisor == "systemd"
        else LocalZookeeper(
            settings.config_dir / IMAGE_ZOO_CFG.name,  # a local VM's beside its other files
            settings.local_state_dir,
            settings.logs_dir / "zookeeper.log",
        )
    )
    looks = ZookeeperLooks(
        serving=ensemble.serving_participants,
        presented_serial=lambda: presented_serial(
            settings.address, settings.zookeeper_client_port, settings.identity
        ),
        installed_serial=lambda: serial_hex(settings.identity.certificate.read_bytes()),
    )
    restart_settings = ZookeeperRestartSettings(server_id, lock_poll_s=settings.restart_lock_poll_s)

    def restart(report: Callable[[str], None]) -> str:
        lock = zookeeper.restart_lock(f"zookeeper server {server_id}")
        return restart_zookeeper_server(
            restart_settings, lock, server, looks, SystemClock(), report
        )

    return restart
