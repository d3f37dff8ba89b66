"""`build_agent`: the agent with its real adapters (kazoo, confluent-kafka, Jolokia, the
process supervisor, Kafka's reassignment API through kafka-python, the plan store in
ZooKeeper)."""

from __future__ import annotations

from agent.adapters import (
    ConfluentBrokerAdmin,
    ConfluentClusterAdmin,
    KazooAgentZooKeeper,
    KraftAgentZooKeeper,
    SystemClock,
)
from agent.cycle import Agent, AgentPorts
from agent.planner_role import PlannerRole
from agent.ports import BrokerSupervisor, ReassignmentAdmin
from agent.reassign_admin import KafkaReassignmentAdmin
from agent.settings import AgentSettings, SettingsError
from agent.supervisor import KafkaProcess, make_supervisor
from agent.zk_ensemble import EnsembleKeeper
from planner.contracts.paths import ClusterPaths
from planner.pki.tls import client_context
from planner.store import PlanStore


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
    # The agent's Kafka reads that need the whole cluster go over every member's broker; the
    # agent is made below, the ZooKeeper adapter first.
    agents: list[Agent] = []
    zookeeper = (
        KraftAgentZooKeeper(
            settings.zookeeper_hosts,
            paths,
            settings.identity,
            settings.kafka_client,
            lambda: agents[0].cluster_bootstrap() if agents else settings.bootstrap,
        )
        if settings.kraft
        else KazooAgentZooKeeper(settings.zookeeper_hosts, paths, settings.identity)
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
            if settings.runs_controller
            else None,
        ),
    )
    agents.append(agent)
    return agent
