"""`build_agent`: the agent with its real adapters (kazoo, confluent-kafka, Jolokia, the
process supervisor, Kafka's reassignment tool, the plan store in ZooKeeper)."""

from __future__ import annotations

from agent.adapters import (
    ConfluentBrokerAdmin,
    ConfluentClusterAdmin,
    KazooAgentZooKeeper,
    SystemClock,
)
from agent.cycle import Agent, AgentPorts
from agent.planner_role import PlannerRole
from agent.ports import BrokerSupervisor, Reassigner
from agent.reassign import ReassignmentTool
from agent.settings import AgentSettings, SettingsError
from agent.supervisor import kafka_libs, make_supervisor
from agent.zk_ensemble import EnsembleKeeper
from planner.contracts.paths import ClusterPaths
from planner.store import PlanStore


def build_agent(settings: AgentSettings, supervisor: BrokerSupervisor | None = None) -> Agent:
    identity = settings.kafka_client.identity
    if not identity.exists():
        # librdkafka would refuse the missing files with a less telling message.
        raise SettingsError(
            f"tls_dir {identity.directory}: the VM's identity is missing (expected "
            f"{identity.trust_bundle.name}, {identity.key.name}, {identity.certificate.name} "
            f"and {identity.keystore.name} from the cluster CA)"
        )
    paths = ClusterPaths(settings.cluster)
    admin_secret = None
    if settings.zookeeper_admin_secret_file is not None:
        admin_secret = settings.zookeeper_admin_secret_file.read_text().strip()
    zookeeper = KazooAgentZooKeeper(settings.zookeeper_hosts, paths, admin_secret)

    def reassigner(kafka_version: str, bootstrap: str) -> Reassigner:
        return ReassignmentTool(
            settings.java,
            kafka_libs(settings.image_root, kafka_version),
            settings.kafka_client.with_servers(bootstrap),
        )

    # The ensemble keeper journals through the agent, which is made after it.
    agents: list[Agent] = []
    ensemble = EnsembleKeeper(
        zookeeper.client,
        settings,
        admin_secret is not None,
        lambda action, reason, result: agents[0].journal(action, reason, result),
    )
    agent = Agent(
        settings,
        AgentPorts(
            zookeeper=zookeeper,
            admin=ConfluentBrokerAdmin(settings.kafka_client, settings.java, settings.image_root),
            supervisor=supervisor or make_supervisor(settings),
            ensemble=ensemble,
            planner_seat=PlannerRole(zookeeper.client, paths, f"broker-{settings.vm_id}"),
            plan_store=PlanStore(zookeeper.client, settings.cluster),
            cluster_admin=lambda bootstrap: ConfluentClusterAdmin(
                settings.kafka_client.with_servers(bootstrap), settings.jolokia_port
            ),
            reassigner=reassigner,
            clock=SystemClock(),
        ),
    )
    agents.append(agent)
    return agent
