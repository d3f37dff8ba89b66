"""A tenant's storage budget, enforced through its topics' configs. Pure.

The brokers' disks are shared by every tenant, so each plan holds a budget in bytes and
every tenant topic carries a finite `retention.bytes` (the plan's default when the request
gives none). Kafka applies `retention.bytes` per partition replica, and only under the
`delete` cleanup policy; so a compacted topic must also delete (`compact,delete`), or
nothing would bound it. A topic's share of the budget is partitions x retention.bytes x
replication factor; the sum over the tenant's topics may not exceed the plan's budget.

The share is what retention keeps; a partition's log can outgrow it by up to one segment
(Kafka deletes whole segments), which the budget's headroom absorbs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from management_plane.tenants.model import Problem, Tenant

RETENTION_BYTES: str = "retention.bytes"
CLEANUP_POLICY: str = "cleanup.policy"


@dataclass(frozen=True)
class TopicShare:
    """What one topic may keep on the brokers' disks."""

    name: str
    partitions: int
    replication_factor: int
    retention_bytes: int | None  # per partition; None: unbounded (-1 or not known)

    @property
    def bytes(self) -> int | None:
        if self.retention_bytes is None:
            return None
        return self.partitions * self.replication_factor * self.retention_bytes


def retention_bytes_of(configs: Mapping[str, str], tenant: Tenant) -> int:
    """The retention.bytes a new topic gets: the request's, else the plan's default."""
    given = configs.get(RETENTION_BYTES)
    return int(given) if given is not None else tenant.plan.retention_bytes


def cleanup_policy_problem(configs: Mapping[str, str]) -> Problem | None:
    """A compacted topic that does not also delete: retention.bytes would not bound it."""
    policy = configs.get(CLEANUP_POLICY)
    if policy is None:
        return None
    policies = {item.strip() for item in policy.split(",")}
    if "compact" in policies and "delete" not in policies:
        return Problem(
            f"configs.{CLEANUP_POLICY}",
            f"{CLEANUP_POLICY}={policy!r}: a tenant's compacted topic must also delete "
            f"('compact,delete'), so that its {RETENTION_BYTES} bounds its size",
        )
    return None


def _gib(value: int) -> str:
    return f"{value} bytes ({value / 1024**3:.2f} GiB)"


def storage_problems(
    tenant: Tenant, wanted: TopicShare, others: Sequence[TopicShare]
) -> list[Problem]:
    """Why `wanted` would not fit the tenant's budget beside `others` (its other topics,
    without the one `wanted` replaces); [] when it fits."""
    budget = tenant.plan.storage_bytes
    unbounded = sorted(t.name for t in others if t.bytes is None)
    if unbounded:
        return [
            Problem(
                RETENTION_BYTES,
                f"tenant {tenant.name}'s topics {', '.join(unbounded)} have no finite "
                f"{RETENTION_BYTES}: set one (or delete them) before adding to the tenant's "
                f"storage budget of {_gib(budget)}",
            )
        ]
    used = sum(t.bytes or 0 for t in others)
    asked = wanted.bytes
    assert asked is not None, "a new topic always has a finite retention.bytes"
    if used + asked <= budget:
        return []
    return [
        Problem(
            f"configs.{RETENTION_BYTES}",
            f"topic {wanted.name} would keep {wanted.partitions} partitions x "
            f"{wanted.replication_factor} replicas x {RETENTION_BYTES} "
            f"{wanted.retention_bytes} = {_gib(asked)}; tenant {tenant.name} uses "
            f"{_gib(used)} of its plan's storage budget of {_gib(budget)} "
            f"({_gib(max(budget - used, 0))} left): lower {RETENTION_BYTES}, partitions or "
            "replication_factor",
        )
    ]
