"""The broker's configuration files, rendered from the cluster spec and this VM's facts:
server.properties (listeners, rack, the durable defaults, the host's sizing, the spec's
broker_config) and log4j. Pure.

This is the only renderer of a broker's configuration: the agent, `kaas up` with and
without agents, and the image build all call it, so a test cluster runs what production
renders.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath
from types import MappingProxyType
from typing import Final

from planner.contracts.log_limits import DEFAULT_LOG_LIMITS, LogLimits
from planner.contracts.spec import ClusterSpec
from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.contracts.vm_config.kafka_tls import (
    PLAIN_INTERNAL_PORT,
    PLAIN_TENANT_PORT,
    TlsFiles,
    listener_security,
    listeners,
)
from planner.contracts.vm_config.validation import (
    BROKER_CONFIGS,
    BrokerConfigError,
    ConfigProblem,
    broker_config_problems,
    spec_broker_config_problems,
)
from planner.contracts.vm_config.zookeeper_security import (
    ZookeeperTlsFiles,
    broker_zookeeper_client_properties,
)

ZOOKEEPER_SESSION: Final[Mapping[str, str]] = MappingProxyType(
    {
        "zookeeper.session.timeout.ms": "18000",
        "zookeeper.connection.timeout.ms": "30000",
    }
)


def durable_defaults(broker_count: int) -> dict[str, str]:
    """What a production cluster wants whatever its size: replication 3 where there are three
    brokers, min ISR 2, no unclean election, no automatic topic creation."""
    replication = min(3, broker_count)
    return {
        "default.replication.factor": str(replication),
        "min.insync.replicas": str(2 if broker_count >= 3 else 1),
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": str(2 if broker_count >= 3 else 1),
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "false",
        "controlled.shutdown.enable": "true",
        "delete.topic.enable": "true",
    }


@dataclass(frozen=True)
class BrokerFacts:
    """What only this VM knows: the agent-owned keys are rendered from these."""

    broker_id: int  # claimed in ZooKeeper by the agent
    rack: str  # the VM's availability zone
    listener_address: str  # the address the broker binds
    port: int  # the internal listener (mutual TLS)
    tenant_port: int  # the tenants' listener (SASL_SSL, SCRAM)
    advertised_address: str  # the address clients are told (the same on local VMs)
    log_dirs: tuple[str, ...]
    zookeeper_connect: str  # host:port list with Kafka's chroot, e.g. "h1:2181,h2:2181/kafka/c1"
    host_sizing: Mapping[str, str]  # sizing_properties(profile): chosen by whoever starts the VM
    tls: TlsFiles  # the VM's identity, issued by the cluster CA
    # A pre-TLS cluster's PLAINTEXT internal and SASL_PLAINTEXT tenant listeners.
    plain_port: int = PLAIN_INTERNAL_PORT
    plain_tenant_port: int = PLAIN_TENANT_PORT

    @property
    def zookeeper_tls(self) -> ZookeeperTlsFiles:
        """The same identity for the broker's ZooKeeper client."""
        return ZookeeperTlsFiles(PurePath(self.tls.keystore), PurePath(self.tls.truststore))

    def problems(self) -> tuple[ConfigProblem, ...]:
        found = []
        if self.broker_id < 0:
            found.append(
                ConfigProblem("broker.id", f"broker id must be >= 0, got {self.broker_id}")
            )
        ports = (self.port, self.tenant_port, self.plain_port, self.plain_tenant_port)
        for port in ports:
            if not 0 < port < 65536:
                found.append(ConfigProblem("listeners", f"port must be 1-65535, got {port}"))
        if self.port == self.tenant_port:
            found.append(
                ConfigProblem(
                    "listeners",
                    f"the internal and the tenant listener share port {self.port}",
                )
            )
        elif len(set(ports)) != len(ports):
            found.append(
                ConfigProblem("listeners", f"the TLS and the plain listeners share a port: {ports}")
            )
        if not self.rack.strip():
            found.append(ConfigProblem("broker.rack", "rack (zone) must not be empty"))
        for name, address in (
            ("listeners", self.listener_address),
            ("advertised.listeners", self.advertised_address),
        ):
            if not address.strip() or any(c in address for c in ",/ "):
                found.append(ConfigProblem(name, f"{address!r} is not a host name or address"))
        if not self.log_dirs or any(not d.strip() or "," in d for d in self.log_dirs):
            found.append(
                ConfigProblem("log.dirs", f"log dirs must be paths without commas: {self.log_dirs}")
            )
        hosts, slash, chroot = self.zookeeper_connect.partition("/")
        if not hosts or not slash or not chroot:
            found.append(
                ConfigProblem(
                    "zookeeper.connect",
                    f"{self.zookeeper_connect!r} has no chroot: Kafka's data must live under "
                    "/kafka/<cluster>",
                )
            )
        found.extend(ConfigProblem("ssl", problem) for problem in self.tls.problems())
        found.extend(broker_config_problems(self.host_sizing, "host sizing"))
        return tuple(found)


def agent_owned_properties(
    facts: BrokerFacts, transport: TransportSecurity = DEFAULT_TRANSPORT
) -> dict[str, str]:
    plain = (facts.plain_port, facts.plain_tenant_port)
    return {
        "broker.id": str(facts.broker_id),
        "broker.rack": facts.rack,
        "listeners": listeners(
            facts.listener_address, facts.port, facts.tenant_port, transport, plain
        ),
        "advertised.listeners": listeners(
            facts.advertised_address, facts.port, facts.tenant_port, transport, plain
        ),
        "log.dirs": ",".join(facts.log_dirs),
        "zookeeper.connect": facts.zookeeper_connect,
    }


def render_server_properties(spec: ClusterSpec, facts: BrokerFacts) -> dict[str, str]:
    """Every key of this broker's server.properties, in file order.

    Agent-owned keys, the listeners' security, then the durable defaults and host
    sizing; spec.broker_config replaces a default in place and appends new keys in name
    order. A spec key that is unknown, wrongly typed, out of range, agent-owned or part of
    the listeners' security raises BrokerConfigError naming it.
    """
    problems = facts.problems() + spec_broker_config_problems(spec.broker_config)
    if problems:
        raise BrokerConfigError(problems)
    transport = spec.transport_security
    properties = {
        **agent_owned_properties(facts, transport),
        **ZOOKEEPER_SESSION,
        **broker_zookeeper_client_properties(facts.zookeeper_tls, transport),
        **listener_security(facts.tls, transport),
        **durable_defaults(spec.broker_count),
        **facts.host_sizing,
    }
    for key in sorted(spec.broker_config):
        properties[key] = BROKER_CONFIGS[key].canonical(spec.broker_config[key])
    return properties


KAFKA_SERVER_LOG = "server.log"


def render_kafka_log4j(limits: LogLimits = DEFAULT_LOG_LIMITS) -> str:
    """The broker's log4j.properties: one size-bounded rolling file in Kafka's log dir
    (`limits`: the spec's), request logs and the ZooKeeper client quieter. Nothing to
    stdout: the supervisor's capture of it is no rolling file."""
    return f"""log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File=${{kafka.logs.dir}}/{KAFKA_SERVER_LOG}
log4j.appender.file.MaxFileSize={limits.max_file_mb}MB
log4j.appender.file.MaxBackupIndex={limits.files}
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.log.LogCleaner=INFO
log4j.logger.state.change.logger=INFO
"""
