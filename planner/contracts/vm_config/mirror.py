"""MirrorMaker 2's properties for one VM of a target cluster (dedicated mode). Pure.

One process per VM runs every active flow into its cluster; the processes of a cluster's VMs
form one Connect group per flow through the target's internal topics, so a process that dies
has its tasks taken over by the others. Followers reach the group's leader through the
internal REST server (dedicated mode's multi-node support), served over mutual TLS with the
VM's own identity.

Choices that differ from MirrorMaker's defaults, and why:
- offset syncs are kept on the target, so the source is only ever read (the source identity
  needs no write right there);
- no heartbeats (they would be written into the source); lag is measured from offsets;
- topics and groups are rediscovered every 10 s instead of every 10 minutes, so a topic
  created on the source is mirrored within seconds;
- consumer group offsets are checkpointed and synced to the target every
  `checkpoint_interval_s`, the bound on what a failed-over group reads again;
- every internal topic gets the flow's replication factor (MirrorMaker's own defaults
  assume 3 brokers or fewer differently per topic).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planner.contracts.fields import ContractError
from planner.contracts.mirror_flow import FlowState, MirrorFlow
from planner.contracts.vm_config.kafka_tls import TLS_PROTOCOLS, TlsFiles

DISCOVERY_INTERVAL_S = 10
TASK_HANDOVER_DELAY_MS = 30_000
MIRROR_SOURCE_CONNECTOR = "MirrorSourceConnector"
MIRROR_CHECKPOINT_CONNECTOR = "MirrorCheckpointConnector"


@dataclass(frozen=True)
class RestStores:
    """The VM's identity as PKCS#12 stores (planner.pki.pkcs12): Connect's REST server reads
    no PEM store."""

    keystore: str
    truststore: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class MirrorEndpoint:
    """How this VM's MirrorMaker reaches one cluster: its brokers' internal listener, the
    CA to trust and the identity to present (PEM files on the VM)."""

    bootstrap_servers: str
    tls: TlsFiles


def _client_tls(prefix: str, endpoint: MirrorEndpoint) -> dict[str, str]:
    return {
        f"{prefix}bootstrap.servers": endpoint.bootstrap_servers,
        f"{prefix}security.protocol": "SSL",
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": endpoint.tls.keystore,
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": endpoint.tls.truststore,
        f"{prefix}ssl.enabled.protocols": TLS_PROTOCOLS,
        f"{prefix}ssl.endpoint.identification.algorithm": "https",
    }


def render_mirror_maker_properties(
    *,
    target_cluster: str,
    target: MirrorEndpoint,
    flows: Sequence[MirrorFlow],
    sources: Mapping[str, MirrorEndpoint],
    rest_address: str,
    rest_port: int,
    rest_stores: RestStores,
) -> dict[str, str]:
    """The properties of this VM's MirrorMaker process for the active `flows` into
    `target_cluster`. `sources` maps each flow's name to how this VM reaches its source;
    The internal REST server listens on the VM's own `rest_address` and `rest_port`. The
    result holds the stores' password: write it to a 0600 file only."""
    active = sorted((f for f in flows if f.state is FlowState.ACTIVE), key=lambda f: f.name)
    if not active:
        raise ContractError(f"cluster {target_cluster} has no active flow to run MirrorMaker for")
    problems = list(target.tls.problems())
    aliases: dict[str, str] = {}
    for flow in active:
        if flow.target_cluster != target_cluster:
            raise ContractError(
                f"flow {flow.name} mirrors into {flow.target_cluster}, not {target_cluster}"
            )
        if flow.source.alias in aliases:
            raise ContractError(
                f"flows {aliases[flow.source.alias]} and {flow.name} both read source "
                f"{flow.source.alias}: one flow per source and target"
            )
        aliases[flow.source.alias] = flow.name
        if flow.name not in sources:
            raise ContractError(f"no connection settings for flow {flow.name}'s source")
        problems.extend(sources[flow.name].tls.problems())
    if problems:
        raise ContractError("; ".join(problems))

    properties: dict[str, str] = {
        "clusters": ",".join([target_cluster, *sorted(aliases)]),
        # Every plugin jar carries its manifest: skip the slow class-path scan at start.
        "plugin.discovery": "service_load",
        **_client_tls(f"{target_cluster}.", target),
        "dedicated.mode.enable.internal.rest": "true",
        # Heartbeats would be written into the sources, and between two sources of one target.
        "emit.heartbeats.enabled": "false",
        # One REST server per process, configured at the top level.
        "listeners": f"https://{rest_address}:{rest_port}",
        "listeners.https.ssl.keystore.type": "PKCS12",
        "listeners.https.ssl.keystore.location": rest_stores.keystore,
        "listeners.https.ssl.keystore.password": rest_stores.password,
        "listeners.https.ssl.key.password": rest_stores.password,
        "listeners.https.ssl.truststore.type": "PKCS12",
        "listeners.https.ssl.truststore.location": rest_stores.truststore,
        "listeners.https.ssl.truststore.password": rest_stores.password,
        "listeners.https.ssl.client.auth": "required",
        "listeners.https.ssl.enabled.protocols": TLS_PROTOCOLS,
        # A VM's process that dies has its tasks handed to the others after this long
        # (Connect's default of 5 minutes waits for it to come back; a restart under the
        # agent takes seconds).
        f"{target_cluster}.scheduled.rebalance.max.delay.ms": str(TASK_HANDOVER_DELAY_MS),
        # The Connect group's own topics live on the target (MirrorMaker names them per source).
        "offset.storage.replication.factor": "-1",
        "config.storage.replication.factor": "-1",
        "status.storage.replication.factor": "-1",
    }
    for flow in active:
        alias = flow.source.alias
        pair = f"{alias}->{target_cluster}."
        back = f"{target_cluster}->{alias}."
        rf = str(flow.replication_factor)
        properties.update(_client_tls(f"{alias}.", sources[flow.name]))
        properties.update(
            {
                f"{pair}enabled": "true",
                f"{pair}topics": flow.topics,
                f"{pair}groups": flow.groups,
                f"{pair}replication.factor": rf,
                f"{pair}offset-syncs.topic.location": "target",
                f"{pair}offset-syncs.topic.replication.factor": rf,
                f"{pair}checkpoints.topic.replication.factor": rf,
                f"{pair}refresh.topics.interval.seconds": str(DISCOVERY_INTERVAL_S),
                f"{pair}refresh.groups.interval.seconds": str(DISCOVERY_INTERVAL_S),
                f"{pair}emit.checkpoints.interval.seconds": str(flow.checkpoint_interval_s),
                f"{pair}sync.group.offsets.enabled": "true",
                f"{pair}sync.group.offsets.interval.seconds": str(flow.checkpoint_interval_s),
                f"{pair}sync.topic.acls.enabled": "false",
                f"{back}enabled": "false",
            }
        )
    return properties


def render_mirror_maker_log4j() -> str:
    """Warnings and MirrorMaker's own progress to stdout (the supervisor keeps the file)."""
    return """log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.connect.mirror=INFO
log4j.logger.org.apache.kafka.connect.runtime.WorkerSourceTask=INFO
log4j.logger.org.apache.kafka.connect.runtime.rest.RestServer=INFO
"""
