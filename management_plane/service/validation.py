"""Validation of what a caller asks of a cluster (pure). Every error names the field and why.

Broker configs are checked by the one definition the agents use too
(planner.contracts.vm_config.validation): a config the API accepts is one every agent will
apply, and one an agent would refuse (an unknown key, a value Kafka refuses, a key KaaS or
the agent owns: listeners, paths, ids, security) is refused here, before anything is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from management_plane.errors import Refusal, RequestRefused
from planner.contracts.fields import ContractError
from planner.contracts.kafka_release import (
    DEFAULT_KRAFT_QUORUM_SIZE,
    KRAFT_QUORUM_SIZES,
    KafkaMode,
    is_kraft,
    kafka_mode,
    kraft_quorum_size_problem,
)
from planner.contracts.log_limits import DEFAULT_LOG_LIMITS, LogLimits, parse_log_limits
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.validation import spec_broker_config_problems

# Explicit ASCII classes and full matches: "abc\n" and other scripts' digits are refused.
CLUSTER_NAME = re.compile(r"[a-z]([a-z0-9-]{0,38}[a-z0-9])?")
MAX_BROKERS = 64
MAX_BATCH = 16

# Configs whose value may not exceed the broker count (a topic's replicas need distinct brokers).
REPLICATION_KEYS = (
    "default.replication.factor",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
)


class ValidationError(RequestRefused, ValueError):
    """Bad input; the message names the field and the problem."""

    def __init__(self, message: str) -> None:
        super().__init__(Refusal.INVALID, message)


@dataclass(frozen=True)
class ClusterRequest:
    name: str
    broker_count: int
    zones: tuple[str, ...]
    instance_type: str
    kafka_version: str
    broker_config: dict[str, str]
    kraft_controllers: int | None = None
    """The KRaft controller quorum's size (None: the default for the VM count, or ZooKeeper
    mode, which has none)."""


def validate_name(name: str, field: str = "name") -> str:
    if not isinstance(name, str) or not CLUSTER_NAME.fullmatch(name):
        shown = name if not isinstance(name, str) or len(name) <= 60 else name[:60] + "..."
        raise ValidationError(
            f"{field} {shown!r} is invalid: 1-40 lower-case letters, digits or '-', "
            "starting with a letter and not ending with '-'"
        )
    return name


def validate_broker_count(count: int, field: str = "broker_count") -> int:
    if isinstance(count, bool) or not isinstance(count, int):
        raise ValidationError(f"{field} must be an integer")
    if count < 1:
        raise ValidationError(f"{field} must be at least 1, got {count}")
    if count > MAX_BROKERS:
        raise ValidationError(f"{field} must be at most {MAX_BROKERS}, got {count}")
    return count


def validate_batch_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_BATCH:
        raise ValidationError(f"batch_size must be an integer from 1 to {MAX_BATCH}, got {size!r}")
    return size


def validated_log_limits(
    value: dict[str, object], current: LogLimits = DEFAULT_LOG_LIMITS
) -> LogLimits:
    """spec.logs from a request, through the spec's own parser: the refusal names the field
    (`logs.files must be an integer 1-100, got 0`). A bound not given keeps `current`'s."""
    try:
        return parse_log_limits({**current.to_json(), **value}, "logs")
    except ContractError as exc:
        raise ValidationError(str(exc)) from None


def validate_kafka_version(version: str, known: tuple[str, ...]) -> str:
    if version not in known:
        raise ValidationError(
            f"kafka_version {version!r} is not available; choose one of {', '.join(known)}"
        )
    return version


def default_kraft_quorum(broker_count: int) -> int:
    """The largest quorum size up to the default that the VMs can host (one controller per
    VM): 1 for one or two VMs, else 3."""
    room = min(broker_count, DEFAULT_KRAFT_QUORUM_SIZE)
    return max(size for size in KRAFT_QUORUM_SIZES if size <= room)


def validate_kraft_controllers(
    controllers: int | None, kafka_version: str, broker_count: int
) -> int | None:
    """The quorum size to store: None in ZooKeeper mode, else `controllers` or the default.
    Refused: a size for a ZooKeeper-mode version, a size that is not 1, 3 or 5 (2 or 4
    tolerate no more failures than one less and need more votes), more controllers than VMs
    (each controller has a VM of its own)."""
    if not is_kraft(kafka_version):
        if controllers is not None:
            raise ValidationError(
                f"kraft_controllers is set, but Kafka {kafka_version} runs in ZooKeeper mode, "
                "which has no controller quorum"
            )
        return None
    if controllers is None:
        return default_kraft_quorum(broker_count)
    problem = kraft_quorum_size_problem(controllers, "kraft_controllers")
    if problem:
        raise ValidationError(problem)
    if controllers > broker_count:
        raise ValidationError(
            f"kraft_controllers is {controllers}, above the broker count {broker_count}: "
            "every controller runs on a VM of its own"
        )
    return controllers


def default_kafka_version(offered: tuple[str, ...]) -> str:
    """What a request naming no version gets: the newest ZooKeeper-mode release offered (new
    clusters move to KRaft by default once every drill passes on it), else the newest."""
    zookeeper_mode = [v for v in offered if not is_kraft(v)]
    return (zookeeper_mode or list(offered))[-1]


def mode_change_refusal(spec: ClusterSpec, version: str) -> str:
    """Why an upgrade of the cluster of `spec` to Kafka `version` cannot run, or "": an upgrade
    keeps the cluster's metadata mode (a ZooKeeper-mode cluster reaches KRaft by migrating,
    and a KRaft cluster has no way back)."""
    target = kafka_mode(version)
    if target is spec.kafka_mode:
        return ""
    if target is KafkaMode.KRAFT:
        return (
            f"Kafka {version} runs in KRaft mode and this cluster keeps its metadata in "
            "ZooKeeper: migrate it first (kaas cluster migrate-to-kraft), then upgrade"
        )
    return f"Kafka {version} runs in ZooKeeper mode and this cluster runs KRaft already"


def validate_zones(zones: tuple[str, ...], known: tuple[str, ...]) -> tuple[str, ...]:
    if not zones:
        raise ValidationError("zones must name at least one zone")
    if len(set(zones)) != len(zones):
        raise ValidationError(f"zones has duplicates: {', '.join(zones)}")
    unknown = [z for z in zones if z not in known]
    if unknown:
        raise ValidationError(
            f"zones {', '.join(unknown)} unknown to the provider; it offers {', '.join(known)}"
        )
    return zones


def validate_instance_type(instance_type: str, known: tuple[str, ...]) -> str:
    if instance_type not in known:
        raise ValidationError(
            f"instance_type {instance_type!r} is not offered; choose one of {', '.join(known)}"
        )
    return instance_type


def validate_broker_config(config: dict[str, str], broker_count: int) -> dict[str, str]:
    """The config to store (values trimmed), or ValidationError naming every refused key."""
    problems = []
    for key in sorted(config):
        problems += [
            p.message
            for p in spec_broker_config_problems({key: config[key]}, f"broker_config.{key}")
        ]
    if problems:
        raise ValidationError("; ".join(problems))
    clean = {key: value.strip() for key, value in config.items()}
    for key in REPLICATION_KEYS:
        if key in clean and int(clean[key]) < 1:
            raise ValidationError(f"broker_config.{key} must be at least 1")
        if key in clean and int(clean[key]) > broker_count:
            raise ValidationError(
                f"broker_config.{key} is {clean[key]}, above the broker count {broker_count}: "
                "every replica needs a broker of its own"
            )
    if "min.insync.replicas" in clean:
        min_isr = int(clean["min.insync.replicas"])
        replication = int(clean.get("default.replication.factor", min(3, broker_count)))
        if min_isr < 1 or min_isr > replication:
            raise ValidationError(
                f"broker_config.min.insync.replicas is {min_isr}; it must be from 1 to the "
                f"replication factor {replication}"
            )
    return clean


def validate_cluster_request(
    request: ClusterRequest,
    known_versions: tuple[str, ...],
    known_zones: tuple[str, ...],
    known_instance_types: tuple[str, ...],
) -> ClusterRequest:
    validate_name(request.name)
    validate_broker_count(request.broker_count)
    validate_zones(request.zones, known_zones)
    validate_instance_type(request.instance_type, known_instance_types)
    validate_kafka_version(request.kafka_version, known_versions)
    controllers = validate_kraft_controllers(
        request.kraft_controllers, request.kafka_version, request.broker_count
    )
    config = validate_broker_config(request.broker_config, request.broker_count)
    return ClusterRequest(
        name=request.name,
        broker_count=request.broker_count,
        zones=request.zones,
        instance_type=request.instance_type,
        kafka_version=request.kafka_version,
        broker_config=config,
        kraft_controllers=controllers,
    )


def zookeeper_participants(broker_count: int) -> int:
    """The ensemble size the agents keep: 1 below three VMs, 3 below five, else 5."""
    return 1 if broker_count < 3 else 3 if broker_count < 5 else 5


def check_scale_down(current: int, target: int, config: dict[str, str]) -> None:
    """A smaller cluster must still hold every replica: refuse going below the replication
    factor the cluster's configs ask for."""
    needed = max([int(config[k]) for k in REPLICATION_KEYS if k in config] or [1])
    if target < needed:
        raise ValidationError(
            f"broker_count {target} is below the replication factor {needed} this cluster's "
            "configs require; lower those first"
        )
    if target >= current:
        raise ValidationError(f"broker_count {target} is not below the current {current}")
