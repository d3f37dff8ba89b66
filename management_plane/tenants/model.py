"""Tenants, their plans and their connection details (customer onboarding). Pure.

A tenant is a SCRAM user of the cluster's SASL listener that owns every topic, consumer group
and transactional id starting with its prefix. Its plan holds its limits (checked by the
management plane before any topic is created) and its quotas (enforced by every broker).
Bad input raises TenantError naming each problem; nothing here does I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from management_plane.errors import Refusal, RequestRefused
from planner.pki.client_settings import SASL_SSL, TENANT_SASL_MECHANISM, TenantClient

TENANT_NAME = re.compile(r"[a-z][a-z0-9-]{1,30}[a-z0-9]")
PREFIX = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}[._-]")
# Names that would read as the platform's own: a tenant called "admin" or "kaas" in an ACL
# listing or the operations log misleads whoever reads it. ANONYMOUS (any case) is the
# internal listener's super user.
RESERVED_NAMES: Final = frozenset(
    {"admin", "anonymous", "kaas", "kafka", "zookeeper", "root", "super", "system", "internal"}
)
# Topic prefixes of the platform and of Kafka itself: a tenant owning one could read or write
# KaaS's own topics (the metrics topic _kaas_metrics), Kafka's internal ones
# (__consumer_offsets, __transaction_state, __cluster_metadata) or Confluent tools' (_schemas,
# _confluent-*). Refused as a tenant prefix and as any prefix overlapping one.
RESERVED_PREFIXES: Final = ("kaas.", "kafka.", "__", "_kaas", "_confluent", "_schemas")


class TenantError(RequestRefused, ValueError):
    """A tenant request that must not reach Kafka. `code` says which kind, for the service's
    HTTP status: invalid (bad input), forbidden (another tenant's resource), conflict (exists
    already), not_found, limit_exceeded (the plan does not allow it)."""

    def __init__(self, code: str, problems: Iterable[Problem]) -> None:
        self.code = code
        self.problems = tuple(problems)
        try:
            refusal = Refusal(code)
        except ValueError:
            refusal = Refusal.INVALID
        super().__init__(refusal, "; ".join(problem.message for problem in self.problems))


@dataclass(frozen=True)
class Problem:
    field: str  # the request field at fault, e.g. "name", "plan.max_topics", "configs.retention.ms"
    message: str


# -- the plan ------------------------------------------------------------------------------

QUOTA_FIELDS: Final = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
STORAGE_FIELDS: Final = ("storage_bytes", "retention_bytes")  # optional in a plan object
_BYTE_RATE_RANGE: Final = (1024, 10 * 1024**3)  # 1 KiB/s to 10 GiB/s per broker
_REQUEST_PERCENTAGE_RANGE: Final = (1.0, 10_000.0)  # 100 = one full I/O or network thread
_RETENTION_BYTES_RANGE: Final = (1024**2, 1024**4)  # per partition: 1 MiB to 1 TiB
_STORAGE_BYTES_RANGE: Final = (1024**2, 1024**5)  # per tenant, replicas counted: to 1 PiB
# A plan object that names no storage figures gets these (management_plane/tenants/storage.py).
DEFAULT_RETENTION_BYTES: Final = 256 * 1024**2
DEFAULT_STORAGE_BYTES: Final = 100 * 1024**3


@dataclass(frozen=True)
class TenantPlan:
    """Limits (whole tenant) and quotas (Kafka's user quotas: per broker, per second)."""

    max_topics: int
    max_partitions: int  # over all the tenant's topics
    producer_byte_rate: int  # bytes/s one broker accepts from the tenant's producers
    consumer_byte_rate: int  # bytes/s one broker serves to the tenant's consumers
    request_percentage: float  # share of one broker's request threads, 100 = one thread
    # Bytes the tenant's topics may keep on the brokers' disks, every replica counted.
    storage_bytes: int = DEFAULT_STORAGE_BYTES
    # The retention.bytes (per partition) of a topic whose request sets none.
    retention_bytes: int = DEFAULT_RETENTION_BYTES

    def problems(self, where: str = "plan") -> tuple[Problem, ...]:
        found = []
        for name, low, high in (
            ("max_topics", 1, 10_000),
            ("max_partitions", 1, 100_000),
            ("producer_byte_rate", *_BYTE_RATE_RANGE),
            ("consumer_byte_rate", *_BYTE_RATE_RANGE),
            ("storage_bytes", *_STORAGE_BYTES_RANGE),
            ("retention_bytes", *_RETENTION_BYTES_RANGE),
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                found.append(Problem(f"{where}.{name}", f"{where}.{name} must be an integer"))
            elif not low <= value <= high:
                found.append(
                    Problem(f"{where}.{name}", f"{where}.{name} must be {low}-{high}, got {value}")
                )
        share = self.request_percentage
        low_share, high_share = _REQUEST_PERCENTAGE_RANGE
        if (
            not isinstance(share, (int, float))
            or isinstance(share, bool)
            or not math.isfinite(share)
        ):
            found.append(
                Problem(
                    f"{where}.request_percentage", f"{where}.request_percentage must be a number"
                )
            )
        elif not low_share <= share <= high_share:
            found.append(
                Problem(
                    f"{where}.request_percentage",
                    f"{where}.request_percentage must be {low_share:g}-{high_share:g} "
                    f"(100 = one request thread), got {share:g}",
                )
            )
        if not found and self.max_partitions < self.max_topics:
            found.append(
                Problem(
                    f"{where}.max_partitions",
                    f"{where}.max_partitions ({self.max_partitions}) is below max_topics "
                    f"({self.max_topics}): every topic needs at least one partition",
                )
            )
        if not found and self.storage_bytes < self.retention_bytes:
            found.append(
                Problem(
                    f"{where}.storage_bytes",
                    f"{where}.storage_bytes ({self.storage_bytes}) is below retention_bytes "
                    f"({self.retention_bytes}): not even one partition would fit",
                )
            )
        return tuple(found)

    def quotas(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in QUOTA_FIELDS}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def plan_from_json(value: object, where: str = "plan") -> TenantPlan:
    """A plan from its JSON object; TenantError (invalid) names every missing, unknown or bad field."""
    if not isinstance(value, Mapping):
        raise TenantError("invalid", [Problem(where, f"{where} must be an object")])
    required = ("max_topics", "max_partitions", *QUOTA_FIELDS)
    fields = (*required, *STORAGE_FIELDS)
    problems = [
        Problem(f"{where}.{k}", f"{where}.{k} is missing") for k in required if k not in value
    ]
    problems += [
        Problem(f"{where}.{k}", f"{where}.{k} is not a plan field (fields: {', '.join(fields)})")
        for k in sorted(set(value) - set(fields))
    ]
    if problems:
        raise TenantError("invalid", problems)
    plan = TenantPlan(**{k: value[k] for k in fields if k in value})
    found = plan.problems(where)
    if found:
        raise TenantError("invalid", found)
    return plan


# Starting points for the service's plan names; a tenant's plan may be any valid TenantPlan.
PLANS: Final[Mapping[str, TenantPlan]] = {
    "small": TenantPlan(10, 60, 1024**2, 2 * 1024**2, 25.0, 100 * 1024**3, 256 * 1024**2),
    "medium": TenantPlan(50, 300, 5 * 1024**2, 10 * 1024**2, 50.0, 500 * 1024**3, 256 * 1024**2),
    "large": TenantPlan(200, 1200, 20 * 1024**2, 40 * 1024**2, 100.0, 2 * 1024**4, 256 * 1024**2),
}


# -- the tenant ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tenant:
    name: str  # also the SCRAM user name
    prefix: str  # of its topics, consumer groups and transactional ids
    plan: TenantPlan

    @property
    def username(self) -> str:
        return self.name

    @property
    def principal(self) -> str:
        return f"User:{self.name}"

    def owns(self, resource_name: str) -> bool:
        return resource_name.startswith(self.prefix) and len(resource_name) > len(self.prefix)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "prefix": self.prefix, "plan": self.plan.to_json()}


def tenant_from_json(value: object) -> Tenant:
    """A stored tenant (Tenant.to_json), checked again: TenantError (invalid) if it is not one."""
    if not isinstance(value, Mapping):
        raise TenantError("invalid", [Problem("tenant", "tenant must be an object")])
    name, prefix = value.get("name"), value.get("prefix")
    problems = list(name_problems(name)) + list(prefix_problems(prefix))
    if problems:
        raise TenantError("invalid", problems)
    assert isinstance(name, str) and isinstance(prefix, str)
    return Tenant(name, prefix, plan_from_json(value.get("plan")))


def name_problems(name: object) -> tuple[Problem, ...]:
    if not isinstance(name, str):
        return (Problem("name", "tenant name must be a string"),)
    if not TENANT_NAME.fullmatch(name):
        return (
            Problem(
                "name",
                f"tenant name {name!r} is invalid: use 3-32 lowercase letters, digits or '-', "
                "starting with a letter and not ending with '-'",
            ),
        )
    if name in RESERVED_NAMES:
        return (Problem("name", f"tenant name {name!r} is reserved for the platform"),)
    return ()


def prefix_problems(prefix: object) -> tuple[Problem, ...]:
    if not isinstance(prefix, str):
        return (Problem("prefix", "prefix must be a string"),)
    if not PREFIX.fullmatch(prefix):
        return (
            Problem(
                "prefix",
                f"prefix {prefix!r} is invalid: 2-64 lowercase letters, digits, '.', '-' or '_', "
                "starting with a letter or digit and ending with '.', '-' or '_' (so that "
                "'acme.' never owns 'acmecorp.x')",
            ),
        )
    return ()


def reserved_prefix_problems(prefix: str) -> tuple[Problem, ...]:
    """A new tenant's prefix that overlaps a reserved one. Not checked on stored tenants:
    one onboarded before a prefix was reserved stays readable, so that it can be deleted."""
    reserved = [r for r in RESERVED_PREFIXES if prefixes_overlap(prefix, r)]
    if reserved:
        return (
            Problem(
                "prefix",
                f"prefix {prefix!r} is reserved: it overlaps {reserved[0]!r}, which the "
                "platform or Kafka itself uses",
            ),
        )
    return ()


def _colliding_form(prefix: str) -> str:
    # Kafka's metric names do not tell '.' from '_': it refuses topics that differ only there.
    return prefix.replace(".", "_")


def prefixes_overlap(one: str, other: str) -> bool:
    """Whether a resource name could start with both prefixes (Kafka's '.'/'_' collision counted)."""
    a, b = _colliding_form(one), _colliding_form(other)
    return a.startswith(b) or b.startswith(a)


def new_tenant(
    name: object, plan: TenantPlan, prefix: object = None, existing: Iterable[Tenant] = ()
) -> Tenant:
    """A tenant to onboard; its prefix defaults to "<name>.". TenantError: invalid (bad name,
    prefix or plan, every problem named) or conflict (the name is taken, or the prefix
    overlaps another tenant's, so that one could read the other's topics)."""
    chosen = f"{name}." if prefix is None else prefix
    problems = [
        *name_problems(name),
        # The default "<name>." is checked too once the name is valid: "kafka" is refused as
        # a name, but its prefix rules apply to every name.
        *(prefix_problems(chosen) if prefix is not None else ()),
        *plan.problems(),
    ]
    if not problems:
        assert isinstance(chosen, str)
        problems += reserved_prefix_problems(chosen)
    if problems:
        raise TenantError("invalid", problems)
    assert isinstance(name, str) and isinstance(chosen, str)
    conflicts = []
    for other in existing:
        if other.name == name:
            conflicts.append(Problem("name", f"tenant {name!r} exists already"))
        elif prefixes_overlap(chosen, other.prefix):
            conflicts.append(
                Problem(
                    "prefix",
                    f"prefix {chosen!r} overlaps tenant {other.name}'s prefix {other.prefix!r}",
                )
            )
    if conflicts:
        raise TenantError("conflict", conflicts)
    return Tenant(name, chosen, plan)


# -- what the tenant is told ---------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionDetails:
    """How a tenant's clients connect. The password is known once, when it is set."""

    bootstrap_servers: str  # the SASL_SSL listener of every broker
    username: str
    topic_prefix: str
    ca_certificate: str = field(
        repr=False
    )  # PEM: the cluster CA the brokers' certificates chain to
    password: str | None = field(default=None, repr=False)  # never in a log line
    security_protocol: str = SASL_SSL
    sasl_mechanism: str = TENANT_SASL_MECHANISM

    def client_config(self, password: str | None = None) -> dict[str, str | int | float | bool]:
        """librdkafka (confluent-kafka) settings; the password given here or the one held."""
        secret = password if password is not None else self.password
        if secret is None:
            raise TenantError(
                "invalid",
                [Problem("password", "the password is shown once, at creation: pass it in")],
            )
        return TenantClient(
            self.bootstrap_servers, self.username, secret, self.ca_certificate
        ).librdkafka()

    def to_json(self) -> dict[str, Any]:
        shown = asdict(self)
        if self.password is None:
            del shown["password"]
        return shown
