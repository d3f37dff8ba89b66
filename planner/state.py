"""The optimizer's working copy of a cluster: flat lists indexed by broker and partition
number, updated incrementally on every move so that no step rescans the cluster.

Brokers and partitions are numbered 0..n-1 here (`b`, `p`); ids and names are kept only to
translate back. A move replaces one replica of a partition in place (its position, and so
its leadership, goes to the new broker); a leadership change swaps two positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.goals import (
    HARD,
    MoveTest,
    PlacementFacts,
    compile_move_check,
    first_violations,
    rack_bounds,
)
from planner.model import UNLIMITED, Cluster, PlannerSettings


@dataclass(frozen=True)
class CountRange:
    low: int
    high: int


class PlacementState:
    def __init__(self, cluster: Cluster, settings: PlannerSettings) -> None:
        self.cluster = cluster
        self.settings = settings
        brokers = sorted(cluster.brokers, key=lambda b: b.id)
        self.broker_ids = [b.id for b in brokers]
        self.index_of_broker = {broker_id: i for i, broker_id in enumerate(self.broker_ids)}
        self.rack_names = cluster.racks()
        rack_index = {name: i for i, name in enumerate(self.rack_names)}
        self.rack_of = [rack_index[b.rack] for b in brokers]
        self.active = [b.is_active for b in brokers]
        self.disk_capacity = [b.capacity.disk_bytes for b in brokers]
        self.disk_limit = [
            c * settings.max_disk_share if c != UNLIMITED else UNLIMITED for c in self.disk_capacity
        ]
        self.rack_brokers: list[list[int]] = [[] for _ in self.rack_names]
        for b, rack in enumerate(self.rack_of):
            if self.active[b]:
                self.rack_brokers[rack].append(b)

        parts = cluster.partitions
        topic_index: dict[str, int] = {}
        self.topic_names: list[str] = []
        self.topic_of: list[int] = []
        for partition in parts:
            t = topic_index.get(partition.topic)
            if t is None:
                t = topic_index[partition.topic] = len(self.topic_names)
                self.topic_names.append(partition.topic)
            self.topic_of.append(t)
        self.size = [p.size_bytes for p in parts]
        self.bytes_in = [p.bytes_in_per_s for p in parts]
        self.bytes_out = [p.bytes_out_per_s for p in parts]
        index = self.index_of_broker
        self.replicas: list[list[int]] = [[index[r] for r in p.replicas] for p in parts]
        self.original: list[tuple[int, ...]] = [tuple(r) for r in self.replicas]

        # The leader's share of traffic, both directions normalised to the mean partition,
        # so that in and out weigh alike in soft goal 5.
        mean_in = sum(self.bytes_in) / len(parts) if parts else 0.0
        mean_out = sum(self.bytes_out) / len(parts) if parts else 0.0
        self.leader_weight = [
            _on_load_grid(
                (i / mean_in if mean_in > 0 else 0.0) + (o / mean_out if mean_out > 0 else 0.0)
            )
            for i, o in zip(self.bytes_in, self.bytes_out, strict=True)
        ]
        # Each weight's bytes-in and bytes-out parts: the leader-bytes phase evens each
        # direction on its own, as the goal's term judges them. On the grid too: a weight
        # minus its in part is exact.
        self.leader_weight_in = [
            _on_load_grid(i / mean_in if mean_in > 0 else 0.0) for i in self.bytes_in
        ]
        self.leader_weight_out = [
            w - i for w, i in zip(self.leader_weight, self.leader_weight_in, strict=True)
        ]

        n = len(brokers)
        self.count = [0] * n
        self.rack_total = [0] * len(self.rack_names)
        """Replicas on each rack's active brokers."""
        self.leaders = [0] * n
        self.disk = [0.0] * n
        self.leader_load = [0.0] * n
        self.leader_load_in = [0.0] * n
        """The bytes-in part of leader_load (leader_weight_in summed)."""
        self.leader_load_out = [0.0] * n
        """The bytes-out part (leader_weight_out summed): the phase evens each on its own."""
        self.led: list[set[int]] = [set() for _ in range(n)]
        """Partitions each broker is the preferred leader of."""
        self.topic_count: list[dict[int, int]] = [{} for _ in range(n)]
        self.hosted_by_topic: list[dict[int, set[int]]] = [{} for _ in range(n)]
        # Each broker's partitions as a list (random access for sampling) plus each
        # partition's position in it (O(1) removal by swapping with the last).
        self.hosted: list[list[int]] = [[] for _ in range(n)]
        self.hosted_at: list[dict[int, int]] = [{} for _ in range(n)]
        self._add_all()
        self.changed: set[int] = set()
        """Partitions whose replica list differs from the original (kept exact)."""
        self._compute_rack_bounds()
        self._compute_targets()
        # The lists below are updated in place by every move, so the facts and the
        # compiled move check always see the current placement.
        self.facts = PlacementFacts(
            replicas=self.replicas,
            replication_factor=[len(reps) for reps in self.original],
            rack_of=self.rack_of,
            rack_names=self.rack_names,
            active=self.active,
            broker_ids=self.broker_ids,
            broker_states=[b.state for b in brokers],
            size=self.size,
            disk_capacity=self.disk_capacity,
            disk_limit=self.disk_limit,
            max_disk_share=settings.max_disk_share,
            partition_name=lambda p: parts[p].name,
        )
        self.keeps_hard_goals: MoveTest = compile_move_check(
            HARD,
            {
                "replicas": self.replicas,
                "rack_of": self.rack_of,
                "rack_allows": self.rack_allows,
                "active": self.active,
                "disk": self.disk,
                "size": self.size,
                "disk_limit": self.disk_limit,
            },
        )
        """Whether moving p's replica from src to dst keeps every hard goal (p valid now)."""

    # ----- bookkeeping -------------------------------------------------------------

    def _add_all(self) -> None:
        """_add for every replica, inlined: a million replicas at 1,000 brokers."""
        count, disk, rack_total = self.count, self.disk, self.rack_total
        topic_count, by_topic, hosted = self.topic_count, self.hosted_by_topic, self.hosted
        rack_of, active, size, topic_of = self.rack_of, self.active, self.size, self.topic_of
        for p, reps in enumerate(self.replicas):
            t, p_size = topic_of[p], size[p]
            for b in reps:
                count[b] += 1
                disk[b] += p_size
                topics = topic_count[b]
                if t in topics:
                    topics[t] += 1
                    by_topic[b][t].add(p)
                else:
                    topics[t] = 1
                    by_topic[b][t] = {p}
                hosted[b].append(p)
            if reps:
                leader = reps[0]
                self.leaders[leader] += 1
                self.leader_load[leader] += self.leader_weight[p]
                self.leader_load_in[leader] += self.leader_weight_in[p]
                self.leader_load_out[leader] += self.leader_weight_out[p]
                self.led[leader].add(p)
        for b, partitions in enumerate(hosted):
            rack_total[rack_of[b]] += active[b] * count[b]
            self.hosted_at[b] = {p: i for i, p in enumerate(partitions)}

    def _add(self, p: int, b: int, leader: bool) -> None:
        self.count[b] += 1
        self.rack_total[self.rack_of[b]] += self.active[b]
        self.disk[b] += self.size[p]
        topics = self.topic_count[b]
        t = self.topic_of[p]
        topics[t] = topics.get(t, 0) + 1
        by_topic = self.hosted_by_topic[b]
        if t in by_topic:
            by_topic[t].add(p)
        else:
            by_topic[t] = {p}
        self.hosted_at[b][p] = len(self.hosted[b])
        self.hosted[b].append(p)
        if leader:
            self.leaders[b] += 1
            self.leader_load[b] += self.leader_weight[p]
            self.leader_load_in[b] += self.leader_weight_in[p]
            self.leader_load_out[b] += self.leader_weight_out[p]
            self.led[b].add(p)

    def _remove(self, p: int, b: int, leader: bool) -> None:
        self.count[b] -= 1
        self.rack_total[self.rack_of[b]] -= self.active[b]
        self.disk[b] -= self.size[p]
        topics = self.topic_count[b]
        t = self.topic_of[p]
        left = topics[t] - 1
        if left:
            topics[t] = left
            self.hosted_by_topic[b][t].discard(p)
        else:
            del topics[t]
            del self.hosted_by_topic[b][t]
        hosted, at = self.hosted[b], self.hosted_at[b]
        position = at.pop(p)
        last = hosted.pop()
        if last != p:
            hosted[position] = last
            at[last] = position
        if leader:
            self.leaders[b] -= 1
            self.leader_load[b] -= self.leader_weight[p]
            self.leader_load_in[b] -= self.leader_weight_in[p]
            self.leader_load_out[b] -= self.leader_weight_out[p]
            self.led[b].discard(p)

    def _note_change(self, p: int) -> None:
        if tuple(self.replicas[p]) == self.original[p]:
            self.changed.discard(p)
        else:
            self.changed.add(p)

    def move(self, p: int, src: int, dst: int) -> None:
        """Replace the replica of p on src by one on dst, in the same position."""
        reps = self.replicas[p]
        position = reps.index(src)
        self._remove(p, src, leader=position == 0)
        reps[position] = dst
        self._add(p, dst, leader=position == 0)
        self._note_change(p)

    def make_leader(self, p: int, b: int) -> None:
        """Swap b with the current preferred leader of p."""
        reps = self.replicas[p]
        old = reps[0]
        position = reps.index(b)
        reps[0], reps[position] = b, old
        self.leaders[old] -= 1
        self.leader_load[old] -= self.leader_weight[p]
        self.leader_load_in[old] -= self.leader_weight_in[p]
        self.leader_load_out[old] -= self.leader_weight_out[p]
        self.led[old].discard(p)
        self.leaders[b] += 1
        self.leader_load[b] += self.leader_weight[p]
        self.leader_load_in[b] += self.leader_weight_in[p]
        self.leader_load_out[b] += self.leader_weight_out[p]
        self.led[b].add(p)
        self._note_change(p)

    def set_order(self, p: int, order: list[int]) -> None:
        """Reorder p's replicas (same set) to `order`."""
        reps = self.replicas[p]
        if reps[0] != order[0]:
            self.make_leader(p, order[0])
        reps[:] = order
        self._note_change(p)

    def data_moved(self, p: int) -> bool:
        return set(self.replicas[p]) != set(self.original[p])

    # ----- racks: the spread hard goal ----------------------------------------------

    def _compute_rack_bounds(self) -> None:
        """Per replication factor k, how many replicas a rack may hold (goals.rack_bounds)."""
        racks = len(self.rack_names)
        self.rack_low: dict[int, int] = {}
        self.rack_high: dict[int, int] = {}
        for reps in self.replicas:
            k = len(reps)
            if k not in self.rack_low:
                self.rack_low[k], self.rack_high[k] = rack_bounds(k, racks)
        self.rack_allows: MoveTest = _rack_move_test(
            self.replicas, self.rack_of, self.rack_low, self.rack_high
        )
        """Moving p's replica from src to dst keeps p's rack spread valid (p valid now)."""
        # Cross-rack moves can only help when some partition does not have a fixed number
        # of replicas in every rack (k a multiple of R fixes it): skip them otherwise.
        self.any_flexible_partition = any(k % racks for k in self.rack_low)

    def rack_counts(self, p: int) -> dict[int, int]:
        counts: dict[int, int] = {}
        for b in self.replicas[p]:
            rack = self.rack_of[b]
            counts[rack] = counts.get(rack, 0) + 1
        return counts

    def rack_valid(self, p: int) -> bool:
        reps = self.replicas[p]
        k = len(reps)
        rack_of = self.rack_of
        if k <= len(self.rack_names):  # the usual case: k distinct racks
            return len({rack_of[b] for b in reps}) == k
        counts = self.rack_counts(p)
        high, low = self.rack_high[k], self.rack_low[k]
        if any(c > high for c in counts.values()):
            return False
        return len(counts) == len(self.rack_names) and min(counts.values()) >= low

    def broken_hard_goals(self) -> dict[str, str]:
        """Hard goals the current lists break, checked by the goal table's whole-cluster
        checks from the replica lists alone (not from the incremental counters), with
        one example each."""
        return first_violations(self.facts)

    # ----- targets ---------------------------------------------------------------------

    def _compute_targets(self) -> None:
        """Balanced replica counts per broker, by water-filling the racks: every rack gets
        the same replicas per broker unless the spread goal pins its total (a rack of
        fewer brokers must still hold one replica of every RF=R partition)."""
        racks = len(self.rack_names)
        sizes = [len(brokers) for brokers in self.rack_brokers]
        rack_min = [0] * racks
        rack_max = [0] * racks
        for k, partitions in self._rf_histogram():
            for r in range(racks):
                if sizes[r]:
                    rack_min[r] += partitions * self.rack_low[k]
                    rack_max[r] += partitions * min(self.rack_high[k], sizes[r])
        total = sum(len(reps) for reps in self.replicas)
        pinned: dict[int, float] = {}
        while True:
            free = [r for r in range(racks) if sizes[r] and r not in pinned]
            free_brokers = sum(sizes[r] for r in free)
            level = (total - sum(pinned.values())) / free_brokers if free_brokers else 0.0
            newly = {}
            for r in free:
                if level * sizes[r] < rack_min[r]:
                    newly[r] = float(rack_min[r])
                elif level * sizes[r] > rack_max[r]:
                    newly[r] = float(rack_max[r])
            if not newly:
                break
            pinned.update(newly)
        self.per_broker_level = [0.0] * len(self.broker_ids)
        self.count_range: list[CountRange] = [CountRange(0, 0)] * len(self.broker_ids)
        self.rack_total_range: list[CountRange] = []
        for r in range(racks):
            per_broker = pinned[r] / sizes[r] if r in pinned else level
            low, high = _floor(per_broker), _ceil(per_broker)
            self.rack_total_range.append(CountRange(low * sizes[r], high * sizes[r]))
            for b in self.rack_brokers[r]:
                self.per_broker_level[b] = per_broker
                self.count_range[b] = CountRange(low, high)
        self.total_replicas = total

        # Disk: the bytes a rack would hold at its replica level, shared by disk capacity.
        total_bytes = sum(s * len(reps) for s, reps in zip(self.size, self.replicas, strict=True))
        self.disk_target = [0.0] * len(self.broker_ids)
        for r in range(racks):
            brokers = self.rack_brokers[r]
            if not brokers or total == 0:
                continue
            rack_bytes = total_bytes * sum(self.per_broker_level[b] for b in brokers) / total
            finite = all(self.disk_capacity[b] != UNLIMITED for b in brokers)
            weights = [self.disk_capacity[b] if finite else 1.0 for b in brokers]
            for b, weight in zip(brokers, weights, strict=True):
                self.disk_target[b] = rack_bytes * weight / sum(weights)

        active = [b for b in range(len(self.broker_ids)) if self.active[b]]
        led = sum(1 for reps in self.replicas if reps)
        leader_level = led / len(active) if active else 0.0
        self.leader_range = CountRange(_floor(leader_level), _ceil(leader_level))
        total_load = sum(self.leader_weight)
        self.leader_load_target = total_load / len(active) if active else 0.0
        self.leader_load_in_target = sum(self.leader_weight_in) / len(active) if active else 0.0
        self.leader_load_out_target = sum(self.leader_weight_out) / len(active) if active else 0.0

    def _rf_histogram(self) -> list[tuple[int, int]]:
        """(replication factor, number of partitions) pairs."""
        by_k: dict[int, int] = {}
        for reps in self.replicas:
            by_k[len(reps)] = by_k.get(len(reps), 0) + 1
        return sorted(by_k.items())

    def topic_upper(self, t: int, b: int, topic_total: list[int]) -> int:
        """Most replicas of topic t broker b may hold before soft goal 3 counts it uneven:
        10% over its share, and at least 2 over the even share rounded up (Cruise
        Control's topic.replica.count.balance.min.gap), so that one stray replica of a
        small topic does not cost a swap."""
        share = topic_total[t] * self.per_broker_level[b] / self.total_replicas
        tolerated = math.ceil(share * (1 + self.settings.topic_tolerance) - 1e-9)
        return max(tolerated, self.topic_even(t, b, topic_total) + 2)

    def topic_even(self, t: int, b: int, topic_total: list[int]) -> int:
        """The even share of topic t on broker b, rounded up: what choices aim for."""
        share = topic_total[t] * self.per_broker_level[b] / self.total_replicas
        return max(1, math.ceil(share - 1e-9))

    def topic_totals(self) -> list[int]:
        totals = [0] * len(self.topic_names)
        for t, reps in zip(self.topic_of, self.replicas, strict=True):
            totals[t] += len(reps)
        return totals

    def replica_lists_by_id(self) -> list[tuple[int, ...]]:
        ids = self.broker_ids
        return [tuple(ids[b] for b in reps) for reps in self.replicas]


def _rack_move_test(
    replicas: list[list[int]],
    rack_of: list[int],
    rack_low: dict[int, int],
    rack_high: dict[int, int],
) -> MoveTest:
    """The rack spread's move test over the state's lists. A closure, not a method: the
    compiled move check holds it, and a bound method there would make the state a
    reference cycle that only the cycle collector (paused while planning) could free."""

    def rack_allows(p: int, src: int, dst: int) -> bool:
        src_rack, dst_rack = rack_of[src], rack_of[dst]
        if src_rack == dst_rack:
            return True
        reps = replicas[p]
        in_dst = in_src = 0
        for b in reps:
            rack = rack_of[b]
            if rack == dst_rack:
                in_dst += 1
            elif rack == src_rack:
                in_src += 1
        k = len(reps)
        return in_dst + 1 <= rack_high[k] and in_src - 1 >= rack_low[k]

    return rack_allows


def _floor(value: float) -> int:
    return math.floor(value + 1e-9)


def _ceil(value: float) -> int:
    return math.ceil(value - 1e-9)


LOAD_GRID = 2.0**-20
"""Leader weights are multiples of this, so that every sum of them is exact: a broker's
leader load updated move by move equals the same load summed afresh, in any order, as
long as the total stays below 2**33 (weights average 2, so up to 4 billion partitions).
Without it the last bit of a load depends on the order of the moves, and a load that
lands on the edge of the tolerance band reads inside it in one run and outside it when
the result is planned again: the plan would not be a fixed point."""


def _on_load_grid(weight: float) -> float:
    return round(weight / LOAD_GRID) * LOAD_GRID
