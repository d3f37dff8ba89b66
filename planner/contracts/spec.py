"""The desired cluster spec: written by the management plane to /kaas/<cluster>/spec, read
by every agent. Pure: parsing and validation of the JSON value, nothing else.

A value that fails validation is never acted on: the reader keeps its last good spec and
reports the problem (SpecError names the field).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from planner.contracts.fields import ContractError
from planner.contracts.kafka_release import (
    DEFAULT_KRAFT_QUORUM_SIZE,
    KafkaMode,
    UnknownKafkaVersion,
    kafka_mode,
    kraft_quorum_size_problem,
)
from planner.contracts.kraft_migration import (
    MIGRATION_SOURCE_LINE,
    KraftMigration,
    effective_mode,
    parse_migration,
)
from planner.contracts.log_limits import DEFAULT_LOG_LIMITS, LogLimits, parse_log_limits
from planner.contracts.monitoring import MonitoringTargets, parse_monitoring
from planner.contracts.transport_security import (
    DEFAULT_TRANSPORT,
    TransportSecurity,
    parse_transport,
)

SPEC_SCHEMA_VERSION = 1
ZOOKEEPER_ENSEMBLE_SIZES = (1, 3, 5)


class SpecError(ContractError):
    """A spec value that must not be acted on; the message names the offending field."""


@dataclass(frozen=True)
class ReassignmentBudget:
    """How much data movement the agents may run at once (Yelp kafka-utils style limits)."""

    throttle_bytes_per_s: int = 50 * 1024 * 1024
    max_partitions_per_broker: int = 5
    max_bytes_in_flight: int = 10 * 1024**3
    max_leadership_changes: int = 50


@dataclass(frozen=True)
class ClusterSpec:
    cluster: str
    kafka_version: str
    broker_count: int
    zones: tuple[str, ...]
    zookeeper_participants: int = 3
    broker_config: dict[str, str] = field(default_factory=dict)
    draining_broker_ids: frozenset[int] = frozenset()
    budget: ReassignmentBudget = ReassignmentBudget()
    generation: int = 0  # bumped by the writer on every change; agents report what they applied
    # KRaft (Kafka 4.x) only: how many of the first VMs run a voting controller.
    kraft_controllers: int = DEFAULT_KRAFT_QUORUM_SIZE

    monitoring: MonitoringTargets | None = None  # absent: the agents' own statsd setting
    # A ZooKeeper-mode cluster migrating to KRaft: the phase it is asked to run.
    migration: KraftMigration | None = None
    logs: LogLimits | None = None  # absent: LogLimits()'s defaults
    # TLS on every channel unless the cluster runs the legacy plaintext listeners or is
    # being converted from them.
    transport_security: TransportSecurity = DEFAULT_TRANSPORT

    @property
    def kafka_mode(self) -> KafkaMode:
        """The mode the cluster runs once its spec is applied: a 3.9 cluster whose migration
        is finalised runs KRaft."""
        return effective_mode(self.kafka_version, self.migration)

    @property
    def log_limits(self) -> LogLimits:
        return self.logs or DEFAULT_LOG_LIMITS

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SPEC_SCHEMA_VERSION,
            "cluster": self.cluster,
            "generation": self.generation,
            "kafka_version": self.kafka_version,
            "broker_count": self.broker_count,
            "zones": list(self.zones),
            "zookeeper": {"participants": self.zookeeper_participants},
            "broker_config": dict(sorted(self.broker_config.items())),
            "draining_broker_ids": sorted(self.draining_broker_ids),
            "budget": asdict(self.budget),
            # Written for KRaft clusters only, so a ZooKeeper-mode spec keeps its bytes.
            **(
                {"kraft": {"controllers": self.kraft_controllers}}
                if self.kafka_mode is KafkaMode.KRAFT
                else {}
            ),
            **({"monitoring": self.monitoring.to_json()} if self.monitoring else {}),
            **({"migration": self.migration.to_json()} if self.migration else {}),
            **({"logs": self.logs.to_json()} if self.logs else {}),
            # Written only when not TLS, so a secure cluster's spec keeps its bytes.
            **(
                {"transport_security": self.transport_security.value}
                if self.transport_security is not DEFAULT_TRANSPORT
                else {}
            ),
        }

    def encode(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()


def _require(
    value: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str = "spec"
) -> Any:
    if key not in value:
        raise SpecError(f"{where}.{key} is missing")
    item = value[key]
    if isinstance(item, bool) and kind is not bool:
        raise SpecError(f"{where}.{key} must be {_kind_name(kind)}, got a boolean")
    if not isinstance(item, kind):
        raise SpecError(f"{where}.{key} must be {_kind_name(kind)}, got {type(item).__name__}")
    return item


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {
        int: "an integer",
        str: "a string",
        dict: "an object",
        list: "a list",
        bool: "a boolean",
    }
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)


def parse_spec(raw: bytes | str) -> ClusterSpec:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise SpecError(f"spec is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise SpecError("spec must be a JSON object")
    version = value.get("schema_version")
    if version != SPEC_SCHEMA_VERSION:
        raise SpecError(
            f"spec.schema_version is {version!r}; this agent reads version {SPEC_SCHEMA_VERSION}"
        )
    cluster = _require(value, "cluster", str)
    kafka_version = _require(value, "kafka_version", str)
    try:
        kafka_mode(kafka_version)
    except UnknownKafkaVersion as exc:
        raise SpecError(f"spec.kafka_version: {exc}") from None
    try:
        migration = parse_migration(value["migration"]) if "migration" in value else None
    except ContractError as exc:
        raise SpecError(str(exc)) from None
    if migration is not None and not kafka_version.startswith(MIGRATION_SOURCE_LINE + "."):
        raise SpecError(
            f"spec.migration is set, but Kafka {kafka_version} is not a 3.9 release, "
            "the only one that migrates to KRaft"
        )
    mode = effective_mode(kafka_version, migration)
    broker_count = _require(value, "broker_count", int)
    if broker_count < 1:
        raise SpecError(f"spec.broker_count must be at least 1, got {broker_count}")
    zones = _require(value, "zones", list)
    if not zones or not all(isinstance(z, str) and z for z in zones):
        raise SpecError("spec.zones must be a non-empty list of zone names")
    zookeeper = value.get("zookeeper", {})
    if not isinstance(zookeeper, dict):
        raise SpecError("spec.zookeeper must be an object")
    participants = zookeeper.get("participants", 3)
    if participants not in ZOOKEEPER_ENSEMBLE_SIZES or isinstance(participants, bool):
        raise SpecError(
            f"spec.zookeeper.participants must be one of {ZOOKEEPER_ENSEMBLE_SIZES}, got {participants!r}"
        )
    broker_config = value.get("broker_config", {})
    if not isinstance(broker_config, dict):
        raise SpecError("spec.broker_config must be an object of config names to values")
    config: dict[str, str] = {}
    for key, item in broker_config.items():
        if not isinstance(item, (str, int, float)) or isinstance(item, bool):
            raise SpecError(
                f"spec.broker_config.{key} must be a string or a number, got {type(item).__name__}"
            )
        config[str(key)] = str(item)
    draining = value.get("draining_broker_ids", [])
    if not isinstance(draining, list) or not all(
        isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in draining
    ):
        raise SpecError(
            "spec.draining_broker_ids must be a list of broker ids (non-negative integers)"
        )
    budget_value = value.get("budget", {})
    if not isinstance(budget_value, dict):
        raise SpecError("spec.budget must be an object")
    defaults = asdict(ReassignmentBudget())
    unknown = set(budget_value) - set(defaults)
    if unknown:
        raise SpecError(f"spec.budget has unknown keys: {', '.join(sorted(unknown))}")
    for key, item in budget_value.items():
        if not isinstance(item, int) or isinstance(item, bool) or item < 1:
            raise SpecError(f"spec.budget.{key} must be a positive integer, got {item!r}")
    kraft = value.get("kraft", {})
    if not isinstance(kraft, dict):
        raise SpecError("spec.kraft must be an object")
    if kraft and mode is not KafkaMode.KRAFT:
        raise SpecError(
            f"spec.kraft is set, but Kafka {kafka_version} runs in ZooKeeper mode, not KRaft"
        )
    unknown = set(kraft) - {"controllers"}
    if unknown:
        raise SpecError(f"spec.kraft has unknown keys: {', '.join(sorted(unknown))}")
    controllers = kraft.get("controllers", DEFAULT_KRAFT_QUORUM_SIZE)
    problem = kraft_quorum_size_problem(controllers, "spec.kraft.controllers")
    if problem:
        raise SpecError(problem)
    generation = value.get("generation", 0)
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise SpecError(f"spec.generation must be a non-negative integer, got {generation!r}")
    try:
        monitoring = parse_monitoring(value["monitoring"]) if "monitoring" in value else None
    except ContractError as exc:
        raise SpecError(str(exc)) from None
    try:
        logs = parse_log_limits(value["logs"]) if "logs" in value else None
    except ContractError as exc:
        raise SpecError(str(exc)) from None
    try:
        transport = (
            parse_transport(value["transport_security"])
            if "transport_security" in value
            else DEFAULT_TRANSPORT
        )
    except ContractError as exc:
        raise SpecError(str(exc)) from None
    if transport is not DEFAULT_TRANSPORT and (mode is KafkaMode.KRAFT or migration):
        raise SpecError(
            f"spec.transport_security is {transport.value}, but only ZooKeeper-mode clusters "
            "ran before TLS: a KRaft or migrating cluster runs TLS"
        )
    return ClusterSpec(
        cluster=cluster,
        kafka_version=kafka_version,
        broker_count=broker_count,
        zones=tuple(zones),
        zookeeper_participants=participants,
        broker_config=config,
        draining_broker_ids=frozenset(draining),
        budget=ReassignmentBudget(**{**defaults, **budget_value}),
        generation=generation,
        kraft_controllers=controllers,
        monitoring=monitoring,
        migration=migration,
        logs=logs,
        transport_security=transport,
    )
