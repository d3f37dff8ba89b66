"""A tenant's topic requests checked against its prefix, its plan, the cluster and the topic
config whitelist. Pure.

The checks come in two steps, so that bad input never costs a Kafka call:
`topic_request_problems` needs only the tenant and the request; `check_topic_request` adds
what the adapter reads from Kafka (the tenant's topics, the broker count, the cluster's
min.insync.replicas) and returns the exact topic to create.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from management_plane.tenants.model import Problem, Tenant, TenantError
from management_plane.tenants.storage import (
    RETENTION_BYTES,
    TopicShare,
    cleanup_policy_problem,
    retention_bytes_of,
    storage_problems,
)

TOPIC_NAME_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME = 249  # Kafka's limit
DAY_MS: Final = 24 * 3600 * 1000
MIB: Final = 1024**2
# Upper bounds of a request's integers, far above any plan: a huge number is bad input (400)
# before it is a limit (409). The plans' own maximum of partitions, and the broker cap.
MAX_TOPIC_PARTITIONS: Final = 100_000
MAX_REPLICATION_FACTOR: Final = 64
# No 64-bit config value has more digits; int() of longer strings is never attempted.
MAX_INTEGER_DIGITS: Final = 20


@dataclass(frozen=True)
class ConfigRule:
    """The values one whitelisted topic config may take (Kafka's own checks are wider)."""

    kind: str  # "int", "double", "choice" or "list" (comma-separated choices)
    minimum: float | None = None
    maximum: float | None = None
    also: int | None = None  # one more integer allowed outside the range (-1: unlimited)
    choices: tuple[str, ...] = ()

    def problem(self, key: str, value: str) -> str | None:
        shown = f"{key}={value!r}" if len(value) <= 60 else f"{key}={value[:60]!r}..."
        text = value.strip()
        if self.kind == "int":
            # ASCII digits only: int() would also read other scripts' digits.
            if not re.fullmatch(r"[+-]?[0-9]+", text):
                return f"{shown} is not a whole number"
            if len(text.lstrip("+-")) > MAX_INTEGER_DIGITS:
                return f"{shown} is out of range: it has {len(text)} characters"
            return self._range(shown, int(text), int(text) == self.also)
        if self.kind == "double":
            try:
                number = float(text)
            except ValueError:
                return f"{shown} is not a number"
            if not math.isfinite(number):
                return f"{shown} is not a finite number"
            return self._range(shown, number, False)
        items = [item.strip() for item in text.split(",")] if self.kind == "list" else [text]
        wrong = [item for item in items if item not in self.choices]
        if wrong or not text:
            return f"{shown} is not allowed; valid values: {', '.join(self.choices)}"
        return None

    def canonical(self, value: str) -> str:
        text = value.strip()
        if self.kind == "int":
            return str(int(text))
        if self.kind == "list":
            return ",".join(item.strip() for item in text.split(","))
        return text

    def _range(self, shown: str, number: float, allowed_extra: bool) -> str | None:
        if allowed_extra:
            return None
        low = -math.inf if self.minimum is None else self.minimum
        high = math.inf if self.maximum is None else self.maximum
        if low <= number <= high:
            return None
        extra = f" or {self.also}" if self.also is not None else ""
        return f"{shown} is out of range: {_bound(low)}..{_bound(high)}{extra}"


def _bound(number: float) -> str:
    if math.isinf(number):
        return "" if number > 0 else "-inf"
    return str(int(number)) if float(number).is_integer() else str(number)


# What a tenant may set on its topics. Bounds keep one tenant from hurting the brokers it
# shares: unbounded retention fills disks, tiny segments flood file handles, huge messages
# strain memory. Everything else (unclean election, message format, throttled replicas,
# remote storage, ...) is the platform's.
TOPIC_CONFIG_WHITELIST: Final[Mapping[str, ConfigRule]] = {
    "cleanup.policy": ConfigRule("list", choices=("compact", "delete")),
    "compression.type": ConfigRule(
        "choice", choices=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
    ),
    "delete.retention.ms": ConfigRule("int", 0, 7 * DAY_MS),
    "max.message.bytes": ConfigRule("int", 1024, 8 * MIB),
    "message.timestamp.type": ConfigRule("choice", choices=("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": ConfigRule("double", 0.0, 1.0),
    "min.compaction.lag.ms": ConfigRule("int", 0, 30 * DAY_MS),
    "min.insync.replicas": ConfigRule("int", 1, None),  # and at most the replication factor
    # Finite only: a tenant's topics share its plan's storage budget (tenants/storage.py).
    "retention.bytes": ConfigRule("int", MIB, 1024**4),
    "retention.ms": ConfigRule("int", 60_000, 30 * DAY_MS),
    "segment.bytes": ConfigRule("int", MIB, 1024**3),
    "segment.ms": ConfigRule("int", 600_000, 7 * DAY_MS),
}


@dataclass(frozen=True)
class TopicRequest:
    """A tenant's request for a topic. replication_factor None: the cluster's default
    (3, or the broker count when smaller)."""

    name: str
    partitions: int
    replication_factor: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ExistingTopic:
    name: str
    partitions: int
    replication_factor: int
    retention_bytes: int | None = None  # per partition; None: unbounded or not read

    def share(self) -> TopicShare:
        return TopicShare(self.name, self.partitions, self.replication_factor, self.retention_bytes)


@dataclass(frozen=True)
class TopicToCreate:
    """Exactly what the adapter asks Kafka for, once every check passed."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def topic_name_problem(tenant: Tenant, name: object) -> tuple[str, Problem] | None:
    """(error code, problem) when `name` is not a topic name this tenant may use."""
    if not isinstance(name, str):
        return "invalid", Problem("name", "topic name must be a string")
    if not tenant.owns(name):
        return "forbidden", Problem(
            "name",
            f"topic {name!r} is outside tenant {tenant.name}'s prefix {tenant.prefix!r}",
        )
    if len(name) > MAX_TOPIC_NAME or not TOPIC_NAME_CHARS.fullmatch(name):
        return "invalid", Problem(
            "name",
            f"topic name {name!r} is invalid: at most {MAX_TOPIC_NAME} letters, digits, "
            "'.', '_' or '-'",
        )
    return None


def config_problems(configs: Mapping[str, str]) -> list[Problem]:
    """Every whitelist, value and compaction problem of a tenant's topic configs."""
    if not isinstance(configs, Mapping):
        return [Problem("configs", "configs must be an object of config names to values")]
    problems: list[Problem] = []
    for key in sorted(configs, key=str):
        value = configs[key]
        rule = TOPIC_CONFIG_WHITELIST.get(key)
        if rule is None:
            allowed = ", ".join(TOPIC_CONFIG_WHITELIST)
            problems.append(
                Problem(
                    f"configs.{key}",
                    f"topic config {key!r} is not on the whitelist; tenants may set: {allowed}",
                )
            )
        elif not isinstance(value, str):
            problems.append(
                Problem(f"configs.{key}", f"topic config {key} must be a string, got {value!r}")
            )
        elif (message := rule.problem(key, value)) is not None:
            problems.append(Problem(f"configs.{key}", message))
    policy = cleanup_policy_problem(configs)
    if policy is not None and not any(p.field == policy.field for p in problems):
        problems.append(policy)
    return problems


def topic_request_problems(tenant: Tenant, request: TopicRequest) -> tuple[str, list[Problem]]:
    """Everything wrong with the request on its own: (error code, problems), [] when none."""
    named = topic_name_problem(tenant, request.name)
    if named is not None and named[0] == "forbidden":
        return named[0], [named[1]]
    problems = [] if named is None else [named[1]]
    partitions, replication = request.partitions, request.replication_factor
    if not _is_int(partitions) or partitions < 1:
        problems.append(
            Problem("partitions", f"partitions must be a whole number >= 1, got {partitions!r}")
        )
    elif partitions > MAX_TOPIC_PARTITIONS:
        problems.append(Problem("partitions", f"partitions must be at most {MAX_TOPIC_PARTITIONS}"))
    if replication is not None and (not _is_int(replication) or replication < 1):
        problems.append(
            Problem(
                "replication_factor",
                f"replication_factor must be a whole number >= 1, got {replication!r}",
            )
        )
    elif replication is not None and replication > MAX_REPLICATION_FACTOR:
        problems.append(
            Problem(
                "replication_factor",
                f"replication_factor must be at most {MAX_REPLICATION_FACTOR}",
            )
        )
    problems += config_problems(request.configs)
    return "invalid", problems


def _effective_min_insync(request: TopicRequest, cluster_min_insync: int) -> int:
    explicit = request.configs.get("min.insync.replicas")
    return int(explicit) if explicit is not None else cluster_min_insync


def check_topic_request(
    tenant: Tenant,
    request: TopicRequest,
    existing: Sequence[ExistingTopic],
    broker_count: int,
    cluster_min_insync: int,
) -> TopicToCreate:
    """The topic to create, or TenantError: invalid, forbidden, conflict (the name, or one
    Kafka would call colliding, exists) or limit_exceeded (max_topics, max_partitions).
    `existing` holds the tenant's own topics."""
    code, problems = topic_request_problems(tenant, request)
    if problems:
        raise TenantError(code, problems)
    replication = (
        request.replication_factor
        if request.replication_factor is not None
        else min(3, broker_count)
    )
    if replication > broker_count:
        problems.append(
            Problem(
                "replication_factor",
                f"replication_factor {replication} is above the cluster's {broker_count} brokers",
            )
        )
    min_insync = _effective_min_insync(request, cluster_min_insync)
    if min_insync > replication:
        problems.append(
            Problem(
                "configs.min.insync.replicas"
                if "min.insync.replicas" in request.configs
                else "replication_factor",
                f"min.insync.replicas {min_insync} is above replication_factor {replication}: "
                "producers with acks=all could never write; raise replication_factor or set "
                f"min.insync.replicas to at most {replication}",
            )
        )
    if problems:
        raise TenantError("invalid", problems)
    colliding = request.name.replace(".", "_")
    for topic in existing:
        if topic.name == request.name:
            raise TenantError("conflict", [Problem("name", f"topic {request.name!r} exists")])
        if topic.name.replace(".", "_") == colliding:
            raise TenantError(
                "conflict",
                [
                    Problem(
                        "name",
                        f"topic {request.name!r} collides with {topic.name!r}: Kafka's metric "
                        "names do not tell '.' from '_'",
                    )
                ],
            )
    plan = tenant.plan
    used_partitions = sum(topic.partitions for topic in existing)
    if len(existing) + 1 > plan.max_topics:
        problems.append(
            Problem(
                "name",
                f"tenant {tenant.name} has {len(existing)} topics; its plan allows "
                f"{plan.max_topics}",
            )
        )
    if used_partitions + request.partitions > plan.max_partitions:
        problems.append(
            Problem(
                "partitions",
                f"{request.partitions} more partitions would make {used_partitions + request.partitions}; "
                f"tenant {tenant.name}'s plan allows {plan.max_partitions} "
                f"({plan.max_partitions - used_partitions} left)",
            )
        )
    configs = {
        key: TOPIC_CONFIG_WHITELIST[key].canonical(value)
        for key, value in sorted(request.configs.items())
    }
    configs[RETENTION_BYTES] = str(retention_bytes_of(configs, tenant))
    wanted = TopicShare(
        request.name, request.partitions, replication, int(configs[RETENTION_BYTES])
    )
    problems += storage_problems(tenant, wanted, [topic.share() for topic in existing])
    if problems:
        raise TenantError("limit_exceeded", problems)
    return TopicToCreate(
        request.name, request.partitions, replication, dict(sorted(configs.items()))
    )


def topic_change_problems(
    tenant: Tenant, name: object, changes: Mapping[str, str]
) -> tuple[str, list[Problem]]:
    """Everything wrong with a config change on its own: (error code, problems)."""
    named = topic_name_problem(tenant, name)
    if named is not None:
        return named[0], [named[1]]
    if isinstance(changes, Mapping) and not changes:
        return "invalid", [Problem("configs", "configs must name at least one config to set")]
    return "invalid", config_problems(changes)


def check_topic_config_change(
    tenant: Tenant,
    name: str,
    changes: Mapping[str, str],
    existing: Sequence[ExistingTopic],
    cleanup_policy: str,
) -> dict[str, str]:
    """The configs to set on the tenant's topic `name` (canonical), or TenantError: invalid,
    forbidden, not_found, or limit_exceeded (the new retention.bytes would not fit the
    storage budget). `existing` holds the tenant's topics with their retention.bytes;
    `cleanup_policy` is the topic's current one."""
    code, problems = topic_change_problems(tenant, name, changes)
    if problems:
        raise TenantError(code, problems)
    topic = next((t for t in existing if t.name == name), None)
    if topic is None:
        raise TenantError(
            "not_found", [Problem("name", f"tenant {tenant.name} has no topic {name!r}")]
        )
    canonical = {
        key: TOPIC_CONFIG_WHITELIST[key].canonical(value) for key, value in sorted(changes.items())
    }
    merged_policy = cleanup_policy_problem(
        {"cleanup.policy": canonical.get("cleanup.policy", cleanup_policy)}
    )
    if merged_policy is not None:
        problems.append(merged_policy)
    min_insync = canonical.get("min.insync.replicas")
    if min_insync is not None and int(min_insync) > topic.replication_factor:
        problems.append(
            Problem(
                "configs.min.insync.replicas",
                f"min.insync.replicas {min_insync} is above the topic's replication factor "
                f"{topic.replication_factor}: producers with acks=all could never write",
            )
        )
    retention = canonical.get(RETENTION_BYTES)
    retention_bytes = int(retention) if retention is not None else topic.retention_bytes
    if retention_bytes is None:
        problems.append(
            Problem(
                f"configs.{RETENTION_BYTES}",
                f"topic {name} has no finite {RETENTION_BYTES}: set one in this change",
            )
        )
    if problems:
        raise TenantError("invalid", problems)
    assert retention_bytes is not None
    wanted = TopicShare(name, topic.partitions, topic.replication_factor, retention_bytes)
    others = [t.share() for t in existing if t.name != name]
    over = storage_problems(tenant, wanted, others)
    if over:
        raise TenantError("limit_exceeded", over)
    return canonical


def check_topic_deletion(tenant: Tenant, name: object, existing: Sequence[ExistingTopic]) -> str:
    """The name of the tenant's topic to delete, or TenantError: forbidden, invalid, not_found."""
    named = topic_name_problem(tenant, name)
    if named is not None:
        raise TenantError(named[0], [named[1]])
    assert isinstance(name, str)
    if name not in {topic.name for topic in existing}:
        raise TenantError(
            "not_found", [Problem("name", f"tenant {tenant.name} has no topic {name!r}")]
        )
    return name


def tenant_topics(tenant: Tenant, topics: Sequence[ExistingTopic]) -> tuple[ExistingTopic, ...]:
    """The tenant's own topics out of the cluster's, by name."""
    return tuple(sorted((t for t in topics if tenant.owns(t.name)), key=lambda t: t.name))
