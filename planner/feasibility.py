"""Can the hard goals be met at all? Checked before optimizing, so that an impossible layout
fails at once with the reason and what to add ("add 1 broker in zone-c") instead of after
a search.

The checks are necessary conditions computed from counts (brokers per rack, bytes per
rack); the optimizer raises the same error, naming the partition, if placement still
fails on a case these counts do not catch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from planner.errors import PlannerError
from planner.goals import HARD, Precondition, rack_bounds
from planner.model import UNLIMITED, Cluster, PlannerSettings


class InfeasibleError(PlannerError):
    """No plan can keep every hard goal; `recommendation` says what would make one."""

    def __init__(self, reason: str, recommendation: str) -> None:
        super().__init__(f"{reason}; recommendation: {recommendation}")
        self.reason = reason
        self.recommendation = recommendation


def check_feasible(cluster: Cluster, settings: PlannerSettings) -> None:
    """Raise InfeasibleError for the first hard goal, in priority order, whose
    precondition the cluster fails."""
    if not cluster.partitions:
        return
    for goal in HARD:
        if goal.precondition is not None:
            _PRECONDITIONS[goal.precondition](cluster, settings)


def _active_per_rack(cluster: Cluster) -> dict[str, int]:
    active_per_rack = {rack: 0 for rack in cluster.racks()}
    for broker in cluster.brokers:
        if broker.is_active:
            active_per_rack[broker.rack] += 1
    return active_per_rack


def _check_rack_brokers(cluster: Cluster, settings: PlannerSettings) -> None:
    racks = cluster.racks()
    active_per_rack = _active_per_rack(cluster)
    replication_factors = sorted({p.replication_factor for p in cluster.partitions})
    needed: dict[str, int] = {}
    reasons: list[str] = []
    for k in replication_factors:
        for rack, count in _brokers_needed(k, active_per_rack).items():
            if count > active_per_rack[rack]:
                needed[rack] = max(needed.get(rack, 0), count - active_per_rack[rack])
                reasons.append(
                    f"partitions of replication factor {k} need {count} active broker(s) in "
                    f"{rack}, which has {active_per_rack[rack]}"
                )
    if needed:
        raise InfeasibleError(_dedupe(reasons), _add_brokers(needed, racks))


def _brokers_needed(k: int, active_per_rack: Mapping[str, int]) -> dict[str, int]:
    """Active brokers each rack needs for partitions of replication factor k to keep the
    spread goal: k distinct racks when k <= R, otherwise k//R or ceil(k/R) replicas in
    every rack (the racks with the most brokers take the ceilings)."""
    racks = sorted(active_per_rack, key=lambda r: (-active_per_rack[r], r))
    if k <= len(racks):
        usable = [r for r in racks if active_per_rack[r] > 0]
        if len(usable) >= k:
            return {}
        empty = [r for r in sorted(active_per_rack) if active_per_rack[r] == 0]
        return {rack: 1 for rack in empty[: k - len(usable)]}
    low, high = rack_bounds(k, len(racks))
    at_high = k - low * len(racks)
    return {rack: high if i < at_high else low for i, rack in enumerate(racks)}


def _check_disk(cluster: Cluster, settings: PlannerSettings) -> None:
    racks = cluster.racks()
    active_per_rack = _active_per_rack(cluster)
    limit_per_rack = {rack: 0.0 for rack in racks}
    biggest_limit = 0.0
    for broker in cluster.brokers:
        if broker.is_active:
            limit = broker.capacity.disk_bytes * settings.max_disk_share
            limit_per_rack[broker.rack] += limit
            biggest_limit = max(biggest_limit, limit)
    if biggest_limit == UNLIMITED:
        return
    share = f"{settings.max_disk_share:.0%}"
    largest = max(cluster.partitions, key=lambda p: p.size_bytes)
    if largest.size_bytes > biggest_limit:
        raise InfeasibleError(
            f"partition {largest.name} holds {largest.size_bytes} bytes, more than {share} "
            f"of any active broker's disk ({biggest_limit:.0f} bytes)",
            f"add a broker with at least "
            f"{math.ceil(largest.size_bytes / settings.max_disk_share)} bytes of disk",
        )
    # Bytes that must live in each rack: the fewest replicas of every partition a rack
    # may hold.
    fewest = {
        k: rack_bounds(k, len(racks))[0] for k in {p.replication_factor for p in cluster.partitions}
    }
    must_hold = sum(p.size_bytes * fewest[p.replication_factor] for p in cluster.partitions)
    needed: dict[str, int] = {}
    reasons = []
    for rack in racks:
        limit = limit_per_rack[rack]
        if must_hold > limit:
            per_broker = limit / active_per_rack[rack] if active_per_rack[rack] else biggest_limit
            needed[rack] = math.ceil((must_hold - limit) / per_broker)
            reasons.append(
                f"{rack} must hold {must_hold} bytes but its brokers may use {limit:.0f} "
                f"({share} of their disks)"
            )
    if needed:
        raise InfeasibleError(_dedupe(reasons), _add_brokers(needed, racks))
    total = sum(p.size_bytes * p.replication_factor for p in cluster.partitions)
    total_limit = sum(limit_per_rack.values())
    if total > total_limit:
        smallest = min(racks, key=lambda r: (limit_per_rack[r], r))
        active_count = sum(active_per_rack.values())
        per_broker = total_limit / active_count
        raise InfeasibleError(
            f"the replicas hold {total} bytes but the active brokers may use "
            f"{total_limit:.0f} ({share} of their disks)",
            _add_brokers({smallest: math.ceil((total - total_limit) / per_broker)}, racks),
        )


_PRECONDITIONS: dict[Precondition, Callable[[Cluster, PlannerSettings], None]] = {
    Precondition.ACTIVE_BROKERS_PER_RACK: _check_rack_brokers,
    Precondition.DISK_ROOM: _check_disk,
}
"""How each precondition the goal table names is checked."""
if set(_PRECONDITIONS) != set(Precondition):
    raise ImportError(f"preconditions without a check: {set(Precondition) - set(_PRECONDITIONS)}")


def _add_brokers(needed: Mapping[str, int], racks: list[str]) -> str:
    parts = [
        f"add {count} broker{'s' if count != 1 else ''} in {rack}"
        for rack, count in sorted(needed.items(), key=lambda item: racks.index(item[0]))
        if count > 0
    ]
    return ", ".join(parts) if parts else "add brokers"


def _dedupe(reasons: list[str]) -> str:
    return "; ".join(dict.fromkeys(reasons))
