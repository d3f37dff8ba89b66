"""The configuration of a ZooKeeper-mode 3.9 cluster on its way to KRaft (KIP-866): each
migration phase's controller.properties and broker server.properties. Pure.

Kafka 3.9 migrates only onto a static controller quorum (`controller.quorum.voters`); the
controllers run as their own processes beside the brokers, on the same VMs and with the
same TLS identity. Every key shared with the other modes comes from their renderers (the
ZooKeeper-mode broker's listeners, rack, durable defaults, sizing and spec; its ZooKeeper
TLS client), so a migrating cluster keeps what its brokers already run.

  phase                          controllers                   brokers
  controllers                    migration mode (ZK + flag)    ZooKeeper mode, unchanged
  brokers_migrating              migration mode                ZooKeeper mode + flag + quorum
  brokers_kraft                  migration mode                KRaft (process.roles=broker)
  finalized                      KRaft only (no ZooKeeper)     KRaft
  rollback_controllers_stopped   stopped                       ZooKeeper mode + flag + quorum
  (no migration)                 none                          ZooKeeper mode
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from planner.contracts.kafka_release import KafkaMode, kafka_mode
from planner.contracts.kraft_migration import MIGRATION_SOURCE_LINE, MigrationPhase
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.broker import (
    BrokerFacts,
    durable_defaults,
    render_server_properties,
)
from planner.contracts.vm_config.kafka_tls import (
    PRINCIPAL_MAPPING_RULES,
    SUPER_USERS,
    ListenerName,
    internal_listener_security,
)
from planner.contracts.vm_config.kraft import (
    CONTROLLER_LISTENER,
    KRAFT_AUTHORIZER,
    ControllerFacts,
    KraftConfigError,
    internal_protocol,
)
from planner.contracts.vm_config.validation import ConfigProblem

MIGRATION_FLAG: Final = "zookeeper.metadata.migration.enable"
PROTOCOL_KEY: Final = "inter.broker.protocol.version"
# Keys this renderer sets during a migration: the spec may not.
MIGRATION_OWNED_KEYS: Final = frozenset(
    {MIGRATION_FLAG, "controller.quorum.voters", "controller.listener.names", "process.roles"}
)


@dataclass(frozen=True)
class QuorumVoter:
    node_id: int
    endpoint: str  # host:port of its controller listener

    @property
    def entry(self) -> str:
        return f"{self.node_id}@{self.endpoint}"

    @classmethod
    def parse(cls, entry: str) -> QuorumVoter:
        node, _, endpoint = entry.partition("@")
        return cls(int(node) if node.isdigit() else -1, endpoint)


def spec_voters(spec: ClusterSpec) -> tuple[QuorumVoter, ...]:
    """The migration's static quorum, as the spec names it."""
    return tuple(QuorumVoter.parse(v) for v in spec.migration.voters) if spec.migration else ()


def quorum_voters(voters: Sequence[QuorumVoter]) -> str:
    """controller.quorum.voters: the static quorum a migration runs on."""
    return ",".join(v.entry for v in sorted(voters, key=lambda v: v.node_id))


def _problems(spec: ClusterSpec, voters: Sequence[QuorumVoter]) -> list[ConfigProblem]:
    found = []
    if spec.migration is None:
        found.append(ConfigProblem(MIGRATION_FLAG, "the spec asks for no migration to KRaft"))
    if kafka_mode(spec.kafka_version) is not KafkaMode.ZOOKEEPER or not (
        spec.kafka_version.startswith(MIGRATION_SOURCE_LINE + ".")
    ):
        found.append(
            ConfigProblem(
                MIGRATION_FLAG,
                f"Kafka {spec.kafka_version} cannot migrate; only {MIGRATION_SOURCE_LINE} can",
            )
        )
    if not voters:
        found.append(ConfigProblem("controller.quorum.voters", "no controller given"))
    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        found.append(ConfigProblem("controller.quorum.voters", f"node ids repeat: {ids}"))
    for voter in voters:
        host, _, port = voter.endpoint.rpartition(":")
        if (
            voter.node_id < 0
            or not host
            or not port.isdigit()
            or any(c in voter.endpoint for c in ",/@ ")
        ):
            found.append(
                ConfigProblem("controller.quorum.voters", f"{voter.endpoint!r} is not host:port")
            )
    for key in sorted(MIGRATION_OWNED_KEYS & set(spec.broker_config)):
        found.append(ConfigProblem(key, f"{key!r} is set by KaaS during a migration"))
    return found


def _check(spec: ClusterSpec) -> tuple[MigrationPhase, tuple[QuorumVoter, ...]]:
    voters = spec_voters(spec)
    problems = _problems(spec, voters)
    if problems:
        raise KraftConfigError(problems)
    assert spec.migration is not None
    return spec.migration.phase, voters


def _protocol_map(zookeeper_mode: Mapping[str, str]) -> str:
    """The broker's listener map with the controller listener, which speaks the internal
    listener's protocol."""
    existing = zookeeper_mode.get("listener.security.protocol.map", "")
    return f"{existing},{CONTROLLER_LISTENER}:{internal_protocol(zookeeper_mode)}".lstrip(",")


def _quorum_client(facts: BrokerFacts, voters: Sequence[QuorumVoter]) -> dict[str, str]:
    """What every node needs to reach the controllers: the voters, the controller listener's
    name and its mutual TLS with the node's identity."""
    return {
        "controller.quorum.voters": quorum_voters(voters),
        "controller.listener.names": CONTROLLER_LISTENER,
        **internal_listener_security(CONTROLLER_LISTENER, facts.tls),
    }


def render_migration_broker_properties(spec: ClusterSpec, facts: BrokerFacts) -> dict[str, str]:
    """Every key of a broker's server.properties in the spec's migration phase."""
    phase, voters = _check(spec)
    zookeeper_mode = render_server_properties(spec, facts)
    if phase is MigrationPhase.CONTROLLERS:
        return zookeeper_mode
    if not phase.brokers_in_kraft:
        # Still a ZooKeeper-mode broker, which registers with the controllers too; the
        # protocol stays on the bridge release until the brokers leave ZooKeeper.
        return {
            **zookeeper_mode,
            MIGRATION_FLAG: "true",
            PROTOCOL_KEY: MIGRATION_SOURCE_LINE,
            "listener.security.protocol.map": _protocol_map(zookeeper_mode),
            **_quorum_client(facts, voters),
        }
    shared = {
        key: value
        for key, value in zookeeper_mode.items()
        if not key.startswith("zookeeper.") and key not in ("broker.id", PROTOCOL_KEY)
    }
    return {
        "node.id": zookeeper_mode["broker.id"],
        "process.roles": "broker",
        **shared,
        "listener.security.protocol.map": _protocol_map(zookeeper_mode),
        # ACLs now live in the metadata log (the controllers migrated them).
        "authorizer.class.name": KRAFT_AUTHORIZER,
        **_quorum_client(facts, voters),
    }


def render_migration_controller_properties(
    spec: ClusterSpec,
    broker: BrokerFacts,
    controller: ControllerFacts,
) -> dict[str, str] | None:
    """Every key of this VM's controller.properties in the spec's migration phase; None when
    the phase runs no controller. `broker` is the same VM's broker: the controller takes its
    identity, its ZooKeeper client and the listener it reaches the brokers on."""
    phase, voters = _check(spec)
    problems = list(controller.problems())
    if controller.node_id not in {v.node_id for v in voters}:
        problems.append(
            ConfigProblem("node.id", f"controller {controller.node_id} is not among the voters")
        )
    if problems:
        raise KraftConfigError(problems)
    if not phase.runs_controllers:
        return None
    zookeeper_mode = render_server_properties(spec, broker)
    listener = f"{CONTROLLER_LISTENER}://{controller.endpoint}"
    properties = {
        "node.id": str(controller.node_id),
        "process.roles": "controller",
        "listeners": listener,
        "advertised.listeners": listener,
        # The controller sends its requests to the brokers on their internal listener.
        "listener.security.protocol.map": _protocol_map(zookeeper_mode),
        "inter.broker.listener.name": ListenerName.INTERNAL,
        "log.dirs": controller.metadata_dir,
        **_quorum_client(broker, voters),
        "ssl.principal.mapping.rules": PRINCIPAL_MAPPING_RULES,
        "authorizer.class.name": KRAFT_AUTHORIZER,
        "super.users": SUPER_USERS,
        **{
            key: zookeeper_mode[key]
            for key in (*durable_defaults(spec.broker_count), *broker.host_sizing)
            if key in zookeeper_mode
        },
    }
    if phase is not MigrationPhase.FINALIZED:
        # Migration mode: the controller copies ZooKeeper's metadata, then writes every
        # change to both until it is finalised, and sends ZooKeeper-mode brokers their
        # controller requests on the internal listener, as its client (mutual TLS).
        properties.update(internal_listener_security(ListenerName.INTERNAL, broker.tls))
        properties[MIGRATION_FLAG] = "true"
        properties.update(
            {key: value for key, value in zookeeper_mode.items() if key.startswith("zookeeper.")}
        )
    return properties
