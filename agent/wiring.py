"""`build_agent`: the agent with its real adapters (kazoo, confluent-kafka, Jolokia, the
process supervisor, Kafka's reassignment API through kafka-python, the plan store in
ZooKeeper)."""

from __future__ import annotations

import datetime as dt

from agent.adapters import (
    ConfluentBrokerAdmin,
    ConfluentClusterAdmin,
    KazooAgentZooKeeper,
    SystemClock,
)
from agent.cert_keeper import CertificateKeeper, KazooCertificateExchange, presented_serial
from agent.cycle import Agent, AgentPorts
from agent.planner_role import PlannerRole
from agent.ports import BrokerSupervisor, ReassignmentAdmin
from agent.reassign_admin import KafkaReassignmentAdmin
from agent.settings import AgentSettings, SettingsError
from agent.supervisor import make_supervisor
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
    zookeeper = KazooAgentZooKeeper(settings.zookeeper_hosts, paths, settings.identity)
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
    agents: list[Agent] = []
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
            certificates=CertificateKeeper(
                settings.identity,
                KazooCertificateExchange(zookeeper.client, settings.cluster),
                lambda: presented_serial(settings.address, settings.kafka_port, settings.identity),
                dt.timedelta(days=settings.certificate_renewal_days),
                lambda: dt.datetime.now(dt.UTC),
                lambda action, reason, result: agents[0].journal(action, reason, result),
            ),
        ),
    )
    agents.append(agent)
    return agent
