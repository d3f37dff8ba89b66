"""Configuration files of a local VM's ZooKeeper server and Kafka broker (pure: text out).

The durable defaults are the ones a production cluster wants: replication factor 3 where
there are three brokers, min.insync.replicas 2, no unclean leader election, no automatic
topic creation, broker.rack set to the VM's zone. The sizing (threads, heaps, internal
topic partitions) is the local one: six JVMs share two cores.
"""

from __future__ import annotations

import base64
import hashlib

from management_plane.local.layout import ClusterLayout, VmLayout, zookeeper_participants
from planner.contracts.spec import durable_defaults

KAFKA_HEAP = ("-Xms512m", "-Xmx512m")
ZOOKEEPER_HEAP = ("-Xms128m", "-Xmx256m")


def zookeeper_server_line(vm: VmLayout, role: str = "participant") -> str:
    p = vm.ports
    return (
        f"server.{vm.index}={vm.address}:{p.zookeeper_peer}:{p.zookeeper_election}:{role};"
        f"{vm.address}:{p.zookeeper_client}"
    )


def render_zookeeper_dynamic(cluster: ClusterLayout) -> str:
    # The first VMs vote, as many as the spec's ensemble size; the rest observe.
    voters = zookeeper_participants(len(cluster.vms))
    return "".join(
        zookeeper_server_line(vm, "participant" if vm.index <= voters else "observer") + "\n"
        for vm in cluster.vms
    )


def render_zoo_cfg(vm: VmLayout) -> str:
    # reconfigEnabled must be the same on every server; standaloneEnabled=false keeps a
    # one-server ensemble a real ensemble that can grow by reconfig.
    return "\n".join(
        [
            "tickTime=2000",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={vm.zookeeper_data_dir}",
            "reconfigEnabled=true",
            "standaloneEnabled=false",
            f"dynamicConfigFile={vm.config_dir / 'zoo.cfg.dynamic'}",
            "4lw.commands.whitelist=srvr,mntr,ruok,conf,stat,isro",
            "admin.enableServer=false",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
            "maxClientCnxns=200",
            "",
        ]
    )


def render_zookeeper_logback() -> str:
    return """<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} [myid:%X{myid}] %-5level [%t] %logger{1} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="CONSOLE"/></root>
</configuration>
"""


def render_server_properties(cluster: ClusterLayout, vm: VmLayout) -> str:
    listeners = f"PLAINTEXT://{vm.kafka_endpoint},SASL_PLAINTEXT://{vm.kafka_sasl_endpoint}"
    properties = {
        "broker.id": str(vm.broker_id),
        "broker.rack": vm.zone,
        "listeners": listeners,
        "advertised.listeners": listeners,
        "log.dirs": str(vm.kafka_data_dir),
        "zookeeper.connect": cluster.zookeeper_connect,
        "zookeeper.session.timeout.ms": "18000",
        "zookeeper.connection.timeout.ms": "30000",
        # The tenants' listener (docs/tenants.md): SCRAM-SHA-512 over SASL_PLAINTEXT; ACLs
        # in ZooKeeper; PLAINTEXT (principal ANONYMOUS) stays internal and super user.
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        ),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
        **durable_defaults(len(cluster.vms)),
        # Local sizing: six JVMs on two cores.
        "num.partitions": "3",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.replica.fetchers": "1",
        "background.threads": "4",
        "offsets.topic.num.partitions": "12",
        "transaction.state.log.num.partitions": "6",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.hours": "24",
    }
    return "".join(f"{key}={value}\n" for key, value in properties.items())


def render_kafka_log4j(vm: VmLayout) -> str:
    return f"""log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.log.LogCleaner=INFO
log4j.logger.state.change.logger=INFO
# broker {vm.broker_id} on {vm.name}
"""


def kafka_command(
    java: str, cluster: ClusterLayout, vm: VmLayout, libs: str, jolokia_agent: str
) -> list[str]:
    return [
        java,
        *KAFKA_HEAP,
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:InitiatingHeapOccupancyPercent=35",
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={vm.logs_dir}",
        f"-Dlog4j.configuration=file:{vm.config_dir / 'kafka-log4j.properties'}",
        f"-javaagent:{jolokia_agent}=host={vm.address},port={vm.ports.jolokia},discoveryEnabled=false",
        "-cp",
        f"{libs}/*",
        "kafka.Kafka",
        str(vm.config_dir / "server.properties"),
    ]


def super_digest(password: str) -> str:
    """ZooKeeper's digest of the super user: base64(sha1("super:<password>"))."""
    return base64.b64encode(hashlib.sha1(f"super:{password}".encode()).digest()).decode()


def zookeeper_command(java: str, vm: VmLayout, lib: str, admin_digest: str) -> list[str]:
    return [
        java,
        *ZOOKEEPER_HEAP,
        # The super user may run reconfig; nobody else may (reconfig is restricted by default).
        f"-Dzookeeper.DigestAuthenticationProvider.superDigest=super:{admin_digest}",
        "-XX:+UseSerialGC",
        f"-Dzookeeper.log.dir={vm.logs_dir}",
        f"-Dlogback.configurationFile={vm.config_dir / 'zookeeper-logback.xml'}",
        "-cp",
        f"{lib}/*",
        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        str(vm.config_dir / "zoo.cfg"),
    ]


def agent_settings(
    cluster: ClusterLayout, vm: VmLayout, image_root: str, java: str, admin_secret_file: str
) -> dict[str, object]:
    """The kaas-agent settings file of a local VM (see agent/settings.py for every field)."""
    return {
        "cluster": cluster.name,
        "zookeeper_hosts": cluster.zookeeper_hosts,
        "vm_id": vm.name,
        "address": vm.address,
        "zone": vm.zone,
        "data_dir": str(vm.kafka_data_dir),
        "config_dir": str(vm.config_dir),
        "logs_dir": str(vm.logs_dir),
        "state_dir": str(vm.directory),
        "image_root": image_root,
        "java": java,
        "kafka_port": vm.ports.kafka,
        "kafka_sasl_port": vm.ports.kafka_sasl,
        "jolokia_port": vm.ports.jolokia,
        "kafka_heap": " ".join(KAFKA_HEAP),
        "loop_interval_s": 2,
        "isr_check_interval_s": 1,
        "zookeeper_server_id": vm.index,
        "zookeeper_peer_port": vm.ports.zookeeper_peer,
        "zookeeper_election_port": vm.ports.zookeeper_election,
        "zookeeper_client_port": vm.ports.zookeeper_client,
        "zookeeper_admin_secret_file": admin_secret_file,
        # Local VMs are cheap to restart and tests should not wait a minute: shorter than the default.
        "zookeeper_gone_s": 20,
        "metrics_interval_s": 10,
        # A drain is a chain of short batches, each waiting for the next planner tick: on cheap
        # local VMs a shorter tick makes replacements minutes shorter.
        "plan_interval_s": 3,
    }
