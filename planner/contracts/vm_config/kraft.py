"""A KRaft cluster's configuration (Kafka 4.x): the controller's controller.properties, the
broker's server.properties, Log4j 2's configuration, and how a node's storage is formatted.
Pure.

Controllers run as their own processes (isolated mode) and form a dynamic quorum (KIP-853):
every node finds the quorum through controller.quorum.bootstrap.servers, and the voters are
kept in the metadata log, changed by add-controller and remove-controller, never in a file.

The broker's keys are the ZooKeeper-mode renderer's own (listeners, rack, the tenant
listener's security, the durable defaults, the host's sizing, the spec's broker_config),
without ZooKeeper's keys and with the KRaft ones added, so a change to the shared listeners
reaches both modes. The controller's listener speaks the internal listener's protocol.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Final

from planner.contracts.kafka_release import KafkaMode
from planner.contracts.log_limits import DEFAULT_LOG_LIMITS, LogLimits
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.broker import (
    KAFKA_SERVER_LOG,
    BrokerFacts,
    durable_defaults,
    render_server_properties,
)
from planner.contracts.vm_config.kafka_tls import (
    PRINCIPAL_MAPPING_RULES,
    SUPER_USERS,
    ListenerName,
    TlsFiles,
    internal_listener_security,
)
from planner.contracts.vm_config.validation import BrokerConfigError, ConfigProblem
from planner.contracts.vm_config.zookeeper import LOGGING_RELOAD_S

CONTROLLER_LISTENER: Final = "CONTROLLER"
# A KRaft broker's rendered keys outside KafkaConfig's table, beside the ZooKeeper-mode
# broker's: the controller listener's TLS, which the broker uses as the controllers' client.
KRAFT_RENDERED_OUTSIDE_CATALOG: Final = frozenset(
    internal_listener_security(CONTROLLER_LISTENER, TlsFiles("/k", "/t"))
)
# A VM's controller is a node of its own beside the VM's broker; its id follows from the
# broker id the VM claimed, so one claim (kept with the volume) names both.
CONTROLLER_NODE_ID_OFFSET: Final = 3000
KRAFT_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# Keys the KRaft renderer sets from the VM's facts and the quorum: the spec may not.
KRAFT_OWNED_KEYS: Final = frozenset(
    {
        "process.roles",
        "node.id",
        "controller.listener.names",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "metadata.log.dir",
        "authorizer.class.name",
    }
)

# The shared renderer needs a ZooKeeper connect string with a chroot; a KRaft node drops
# every zookeeper.* key it renders, so this value is never written anywhere.
_UNUSED_ZOOKEEPER_CONNECT: Final = "unused:2181/kraft"


class KraftConfigError(BrokerConfigError):
    """A KRaft node's config that must not be rendered; the message names every problem."""


def controller_node_id(broker_id: int) -> int:
    if not 0 <= broker_id < CONTROLLER_NODE_ID_OFFSET:
        raise KraftConfigError(
            [
                ConfigProblem(
                    "node.id",
                    f"broker id {broker_id} is outside 0-{CONTROLLER_NODE_ID_OFFSET - 1}, "
                    "the range whose controllers have node ids of their own",
                )
            ]
        )
    return CONTROLLER_NODE_ID_OFFSET + broker_id


@dataclass(frozen=True)
class ControllerFacts:
    """What only this VM knows about its controller."""

    node_id: int
    listener_address: str
    port: int
    metadata_dir: str

    @property
    def endpoint(self) -> str:
        return f"{self.listener_address}:{self.port}"

    def problems(self) -> tuple[ConfigProblem, ...]:
        found = []
        if self.node_id < CONTROLLER_NODE_ID_OFFSET:
            found.append(
                ConfigProblem(
                    "node.id",
                    f"a controller's node id must be at least {CONTROLLER_NODE_ID_OFFSET}, "
                    f"got {self.node_id}",
                )
            )
        if not 0 < self.port < 65536:
            found.append(ConfigProblem("listeners", f"port must be 1-65535, got {self.port}"))
        if not self.listener_address.strip() or any(c in self.listener_address for c in ",/ "):
            found.append(
                ConfigProblem("listeners", f"{self.listener_address!r} is not a host or address")
            )
        if not self.metadata_dir.strip() or "," in self.metadata_dir:
            found.append(ConfigProblem("log.dirs", f"{self.metadata_dir!r} is not one path"))
        return tuple(found)


def _quorum_problems(spec: ClusterSpec, bootstrap: tuple[str, ...]) -> tuple[ConfigProblem, ...]:
    found = []
    if spec.kafka_mode is not KafkaMode.KRAFT:
        found.append(
            ConfigProblem(
                "process.roles",
                f"Kafka {spec.kafka_version} runs in ZooKeeper mode: it has no KRaft config",
            )
        )
    if not bootstrap:
        found.append(
            ConfigProblem("controller.quorum.bootstrap.servers", "no controller endpoint given")
        )
    for endpoint in bootstrap:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit() or any(c in endpoint for c in ",/ "):
            found.append(
                ConfigProblem(
                    "controller.quorum.bootstrap.servers", f"{endpoint!r} is not host:port"
                )
            )
    for key in sorted(KRAFT_OWNED_KEYS & set(spec.broker_config)):
        found.append(
            ConfigProblem(key, f"{key!r} is set by KaaS for a KRaft cluster, not by the spec")
        )
    return tuple(found)


def _protocol_map(properties: Mapping[str, str]) -> dict[str, str]:
    """listener name -> security protocol; a listener named after its protocol needs no entry."""
    mapping = {}
    for entry in filter(None, properties.get("listener.security.protocol.map", "").split(",")):
        name, _, protocol = entry.partition(":")
        mapping[name.strip()] = protocol.strip()
    return mapping


def internal_protocol(broker_properties: Mapping[str, str]) -> str:
    """The security protocol of the internal listener, which the controllers speak too."""
    protocol = _protocol_map(broker_properties).get(ListenerName.INTERNAL)
    if protocol is None:
        raise KraftConfigError(
            [
                ConfigProblem(
                    "listener.security.protocol.map",
                    f"names no protocol for the {ListenerName.INTERNAL} listener",
                )
            ]
        )
    return protocol


def _listener_names(properties: Mapping[str, str]) -> list[str]:
    return [entry.split("://", 1)[0] for entry in properties["listeners"].split(",") if entry]


def _kraft_protocol_map(broker_properties: Mapping[str, str], *, with_brokers: bool) -> str:
    mapping = {CONTROLLER_LISTENER: internal_protocol(broker_properties)}
    if with_brokers:
        known = _protocol_map(broker_properties)
        for name in _listener_names(broker_properties):
            mapping[name] = known.get(name, name)
    return ",".join(f"{name}:{protocol}" for name, protocol in mapping.items())


def _shared_broker_properties(spec: ClusterSpec, facts: BrokerFacts) -> dict[str, str]:
    """What the ZooKeeper-mode renderer writes for this VM, without ZooKeeper's keys."""
    problems = tuple(p for p in facts.problems() if p.key != "zookeeper.connect")
    if problems:
        raise KraftConfigError(problems)
    rendered = render_server_properties(
        spec, replace(facts, zookeeper_connect=_UNUSED_ZOOKEEPER_CONNECT)
    )
    return {key: value for key, value in rendered.items() if not key.startswith("zookeeper.")}


def render_kraft_broker_properties(
    spec: ClusterSpec, facts: BrokerFacts, bootstrap: tuple[str, ...]
) -> dict[str, str]:
    """Every key of a KRaft broker's server.properties, in file order: node.id where the
    ZooKeeper-mode broker has broker.id, then the shared keys, then the KRaft ones."""
    problems = _quorum_problems(spec, bootstrap)
    if problems:
        raise KraftConfigError(problems)
    shared = _shared_broker_properties(spec, facts)
    properties = {"node.id": shared.pop("broker.id"), "process.roles": "broker"}
    properties.update(shared)
    properties.update(
        {
            "listener.security.protocol.map": _kraft_protocol_map(shared, with_brokers=True),
            "controller.listener.names": CONTROLLER_LISTENER,
            "controller.quorum.bootstrap.servers": ",".join(bootstrap),
            "authorizer.class.name": KRAFT_AUTHORIZER,
            # The broker is the controllers' client: mutual TLS as on the internal listener.
            **internal_listener_security(CONTROLLER_LISTENER, facts.tls),
        }
    )
    return properties


def _topic_defaults(spec: ClusterSpec, facts: BrokerFacts) -> list[str]:
    """The keys a controller applies when it creates a topic: the durable defaults, the
    host's partition counts and what the spec sets."""
    return [
        *durable_defaults(spec.broker_count),
        *facts.host_sizing,
        *spec.broker_config,
    ]


def render_controller_properties(
    spec: ClusterSpec, broker: BrokerFacts, controller: ControllerFacts, bootstrap: tuple[str, ...]
) -> dict[str, str]:
    """Every key of this VM's controller.properties. `broker` is the same VM's broker, whose
    internal listener's protocol the controller listener takes."""
    problems = controller.problems() + _quorum_problems(spec, bootstrap)
    if problems:
        raise KraftConfigError(problems)
    shared = _shared_broker_properties(spec, broker)
    listener = f"{CONTROLLER_LISTENER}://{controller.endpoint}"
    return {
        "node.id": str(controller.node_id),
        "process.roles": "controller",
        "listeners": listener,
        "advertised.listeners": listener,
        "listener.security.protocol.map": _kraft_protocol_map(shared, with_brokers=False),
        "controller.listener.names": CONTROLLER_LISTENER,
        "controller.quorum.bootstrap.servers": ",".join(bootstrap),
        "log.dirs": controller.metadata_dir,
        # Mutual TLS against the cluster CA, as on the brokers' internal listener; the
        # certificates' subjects map to the role names the super users list.
        **internal_listener_security(CONTROLLER_LISTENER, broker.tls),
        "ssl.principal.mapping.rules": PRINCIPAL_MAPPING_RULES,
        # ACLs live in the metadata log; the brokers forward their changes to the controllers.
        "authorizer.class.name": KRAFT_AUTHORIZER,
        "super.users": SUPER_USERS,
        # A new topic's defaults (replication, min ISR, partitions) are the controller's.
        **{key: shared[key] for key in _topic_defaults(spec, broker) if key in shared},
    }


KRAFT_CONTROLLER_LOG: Final = "controller-server.log"
LOG_FILE_PROPERTY: Final = "kaas.log.file"
"""The JVM property naming the process's log file in kafka.logs.dir: the broker and the
controller of one VM share the Log4j 2 file and the log dir, never a log file."""


def log_file_option(controller: bool) -> str:
    """The JVM option naming the process's rolling log file (see LOG_FILE_PROPERTY)."""
    return f"-D{LOG_FILE_PROPERTY}={KRAFT_CONTROLLER_LOG if controller else KAFKA_SERVER_LOG}"


def render_kafka_log4j2(limits: LogLimits = DEFAULT_LOG_LIMITS) -> str:
    """Kafka 4.x logs through Log4j 2: one size-bounded rolling file per process in Kafka's
    log dir (named by the JVM's kaas.log.file, the broker's server.log by default), as the
    ZooKeeper-mode broker's log4j does, and nothing to the console (the supervisor's capture
    of it is not bounded). Log4j 2 checks the size at every line; the roll keeps `files`. It
    looks at the file again every LOGGING_RELOAD_S, taking the agent's rewrite of it."""
    return f"""monitorInterval = {LOGGING_RELOAD_S}
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = ${{sys:kafka.logs.dir}}/${{sys:{LOG_FILE_PROPERTY}:-{KAFKA_SERVER_LOG}}}
appender.file.filePattern = ${{sys:kafka.logs.dir}}/${{sys:{LOG_FILE_PROPERTY}:-{KAFKA_SERVER_LOG}}}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = {limits.max_file_mb}MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = {limits.files}
appender.file.strategy.fileIndex = min
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
logger.state.name = state.change.logger
logger.state.level = INFO
"""


def render_kafka_tools_log4j2() -> str:
    """Kafka's command-line tools (kafka-storage, kafka-metadata-quorum): warnings only, on
    stderr, so their answer is all that stdout carries."""
    return """rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
"""


class StorageFormat(Enum):
    """How `kafka-storage format` prepares a node's log dir before its first start."""

    INITIAL_CONTROLLERS = "initial-controllers"  # a new cluster's first voters, all at once
    STANDALONE = "standalone"  # a new cluster's single first voter
    NO_INITIAL_CONTROLLERS = "no-initial-controllers"  # a broker, or a controller joining
    # A migration's controllers (Kafka 3.9): the voters are controller.quorum.voters in the
    # properties, so the format takes no quorum flag.
    STATIC_QUORUM = "static-quorum"


@dataclass(frozen=True)
class InitialVoter:
    node_id: int
    endpoint: str  # host:port of its controller listener
    directory_id: str  # the id its metadata dir is formatted with

    @property
    def argument(self) -> str:
        return f"{self.node_id}@{self.endpoint}:{self.directory_id}"


def storage_format(
    joining_running_cluster: bool, is_controller: bool, initial_voters: int
) -> StorageFormat:
    """A new cluster's first controllers are its voters; anything formatted later (every
    broker, a controller joining a running quorum) starts as an observer, and the agents
    make a caught-up controller a voter."""
    if joining_running_cluster or not is_controller:
        return StorageFormat.NO_INITIAL_CONTROLLERS
    if initial_voters == 1:
        return StorageFormat.STANDALONE
    return StorageFormat.INITIAL_CONTROLLERS


def format_arguments(
    cluster_id: str,
    config_file: str,
    how: StorageFormat,
    voters: tuple[InitialVoter, ...] = (),
) -> list[str]:
    """The arguments of `kafka-storage format` (kafka.tools.StorageTool) for one node."""
    arguments = [
        "format",
        "--cluster-id",
        cluster_id,
        "--config",
        config_file,
        "--ignore-formatted",
    ]
    if how is StorageFormat.INITIAL_CONTROLLERS:
        if not voters:
            raise KraftConfigError(
                [ConfigProblem("--initial-controllers", "a new quorum needs its voters")]
            )
        arguments += ["--initial-controllers", ",".join(v.argument for v in voters)]
    elif how is StorageFormat.STANDALONE:
        arguments.append("--standalone")
    elif how is StorageFormat.STATIC_QUORUM:
        pass
    else:
        arguments.append("--no-initial-controllers")
    return arguments


def random_kafka_uuid() -> str:
    """A cluster or directory id as Kafka writes one: 16 random bytes, URL-safe base64 without
    padding, never starting with '-' (Kafka's own rule, so it is never read as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
