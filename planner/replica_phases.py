"""The phases that move data: hard-goal repair, replicas per broker, topic spread (the
disk phase, planner.disk_phases, moves through this class).

Each phase acts only on a goal out of tolerance and never breaks a goal of higher priority,
so on a balanced cluster none of them moves anything. Which replica to move is chosen among
a seeded sample of the source's replicas (a full scan when the sample has no feasible
one), so a run costs O(moves x sample), not O(moves x replicas); whether a move exists at
all is always decided by the full scan, so a planned cluster is a fixed point.
"""

from __future__ import annotations

import bisect
import heapq
import math
import random

from planner.feasibility import InfeasibleError
from planner.state import PlacementState

_NO_SCORE = math.inf

_Stamp = tuple[int, int, int, int]


class ReplicaPhases:
    def __init__(self, state: PlacementState, rng: random.Random) -> None:
        self.s = state
        self.rng = rng
        self.tiebreak = [rng.random() for _ in state.broker_ids]
        self.topic_total = state.topic_totals()
        sizes = state.size
        self.mean_size = (sum(sizes) / len(sizes)) if sizes else 1.0
        self.active_brokers = [b for b, a in enumerate(state.active) if a]
        self._fits = state.keeps_hard_goals
        """The hard goals' move checks, compiled from the goal table."""
        # Soft goal 3's bounds per topic and rack (a broker's share depends on its rack's
        # replica level only): the even share rounded up, and the tolerated most.
        some_broker = [brokers[0] if brokers else None for brokers in state.rack_brokers]
        self.even_of = [
            [state.topic_even(t, b, self.topic_total) if b is not None else 0 for b in some_broker]
            for t in range(len(state.topic_names))
        ]
        self.upper_of = [
            [state.topic_upper(t, b, self.topic_total) if b is not None else 0 for b in some_broker]
            for t in range(len(state.topic_names))
        ]
        # The same bounds indexed rack first, for the hot loops.
        racks = range(len(state.rack_names))
        self.even_by_rack = [[row[r] for row in self.even_of] for r in racks]
        self.upper_by_rack = [[row[r] for row in self.upper_of] for r in racks]
        # Per broker, the topics it holds more than its even share of: their replicas are
        # the first candidates when the broker has to give one away.
        self.crowded: list[set[int]] = [set() for _ in state.broker_ids]
        for b in self.active_brokers:
            even = [row[state.rack_of[b]] for row in self.even_of]
            self.crowded[b] = {t for t, c in state.topic_count[b].items() if c > even[t]}
        # Per rack, a min-heap of (count, tiebreak, broker) whose entries are checked
        # against the live count when popped ("lazy" heaps: a change pushes a new entry).
        self.light: list[list[tuple[int, float, int]]] = [[] for _ in state.rack_names]
        for b in self.active_brokers:
            self._push_light(b)
        # What a scan between two brokers proved, kept until the placement it read changes:
        # it reads only the two brokers' replicas, counts and disks, and (across racks) the
        # racks of their partitions' other replicas. A broker's version counts the moves
        # onto or off it; its rack version the moves across racks of a partition it holds.
        self.version = [0] * len(state.broker_ids)
        self.rack_version = [0] * len(state.broker_ids)
        self._no_candidate: dict[tuple[int, int], _Stamp] = {}
        """(src, dst) -> the stamp at which no replica of src could move to dst."""
        self._no_partners: dict[tuple[int, int], _Stamp] = {}
        """(src, dst) -> the stamp at which dst had nothing to give src back in a swap."""
        self._open: list[list[int] | None] = [None] * len(state.broker_ids)
        """Per broker (once asked), per rack: its replicas the rack spread lets in."""
        self._rack_member: list[int | None] = [None] * len(state.rack_names)
        """A broker of each rack: the rack spread's test reads only the destination's rack."""
        for b, rack in enumerate(state.rack_of):
            if self._rack_member[rack] is None:
                self._rack_member[rack] = b
        self._movable_into: dict[tuple[int, int], tuple[tuple[int, int], list[int]]] = {}
        """(src, rack) -> the stamp and src's replicas the rack spread lets into rack."""
        """(src, dst) -> the stamp and what dst could give src back in a topic swap."""

    # ----- helpers -----------------------------------------------------------------

    def _push_light(self, b: int) -> None:
        if self.s.active[b]:
            heapq.heappush(self.light[self.s.rack_of[b]], (self.s.count[b], self.tiebreak[b], b))

    def _even(self, t: int, b: int) -> int:
        return self.even_of[t][self.s.rack_of[b]]

    def _upper(self, t: int, b: int) -> int:
        return self.upper_of[t][self.s.rack_of[b]]

    def _stamp(self, src: int, dst: int) -> _Stamp:
        """The placement a scan between src and dst depends on, as four numbers."""
        version = self.version
        if self.s.rack_of[src] == self.s.rack_of[dst]:
            return version[src], version[dst], -1, -1
        rack_version = self.rack_version
        return version[src], version[dst], rack_version[src], rack_version[dst]

    def _moved(self, p: int, src: int, dst: int) -> None:
        s = self.s
        open_counts = self._open
        for b in s.replicas[p]:
            counts = open_counts[b]
            if counts is not None:
                self._count_open(p, b, counts, -1)
        s.move(p, src, dst)
        for b in s.replicas[p]:
            counts = open_counts[b]
            if counts is not None:
                self._count_open(p, b, counts, 1)
        self.version[src] += 1
        self.version[dst] += 1
        if s.rack_of[src] != s.rack_of[dst]:
            for b in s.replicas[p]:
                self.rack_version[b] += 1
            self.rack_version[src] += 1
        self._push_light(src)
        self._push_light(dst)
        t = s.topic_of[p]
        for b in (src, dst):
            if s.active[b] and s.topic_count[b].get(t, 0) > self._even(t, b):
                self.crowded[b].add(t)
            else:
                self.crowded[b].discard(t)

    def _rack_tops(self, rack: int, how_many: int) -> list[int]:
        """The `how_many` least-loaded active brokers of a rack (heap left intact)."""
        heap = self.light[rack]
        found: list[int] = []
        kept: list[tuple[int, float, int]] = []
        while heap and len(found) < how_many:
            entry = heapq.heappop(heap)
            count, _, b = entry
            if count != self.s.count[b] or b in found:
                continue  # stale, or a duplicate of a live entry
            found.append(b)
            kept.append(entry)
        for entry in kept:
            heapq.heappush(heap, entry)
        return found

    def _rack_tops_below(self, rack: int, how_many: int, src: int, t: int, even: int) -> list[int]:
        """The `how_many` least-loaded active brokers of a rack other than src holding less
        than `even` of topic t, least loaded first (ties by tiebreak, as a sort by (count,
        tiebreak) gives); the heap left intact."""
        heap = self.light[rack]
        count, held = self.s.count, self.s.topic_count
        found: list[int] = []
        seen: set[int] = set()
        kept: list[tuple[int, float, int]] = []
        while heap and len(found) < how_many:
            entry = heapq.heappop(heap)
            c, _, b = entry
            if c != count[b] or b in seen:
                continue  # stale, or a duplicate of a live entry
            seen.add(b)
            kept.append(entry)
            if b != src and held[b].get(t, 0) < even:
                found.append(b)
        for entry in kept:
            heapq.heappush(heap, entry)
        return found

    def _room(self, b: int) -> int:
        return self.s.count_range[b].high - self.s.count[b]

    def _deficit(self, b: int) -> int:
        return self.s.count_range[b].low - self.s.count[b]

    def _cross_rack_allowed(self, src: int, dst: int) -> bool:
        s = self.s
        if not s.any_flexible_partition:
            return False
        if not s.active[src]:
            return True
        src_rack, dst_rack = s.rack_of[src], s.rack_of[dst]
        src_total, dst_total = s.rack_total[src_rack], s.rack_total[dst_rack]
        src_range, dst_range = s.rack_total_range[src_rack], s.rack_total_range[dst_rack]
        # A rack out of its range must trade; racks in range may still trade when both stay
        # in it: a broker over its ceiling in one rack then gives straight to one under its
        # floor in another, where staying in the rack would cost a second move.
        return (
            src_total > src_range.high
            or dst_total < dst_range.low
            or (src_total - 1 >= src_range.low and dst_total + 1 <= dst_range.high)
        )

    def _topic_penalty(self, p: int, src: int, dst: int) -> float:
        s, t = self.s, self.s.topic_of[p]
        after = s.topic_count[dst].get(t, 0) + 1
        penalty = 0.0
        if after > self._upper(t, dst):
            penalty += 4.0
        elif after > self._even(t, dst):
            penalty += 2.0
        held = s.topic_count[src].get(t, 0)
        if held > self._upper(t, src):
            penalty -= 4.0  # fixes a soft goal 3 violation for free
        elif held > self._even(t, src):
            penalty -= 0.5
        return penalty

    def _ideal_size(self, src: int, dst: int) -> float:
        """The replica size that takes both brokers' disks toward their targets, spread
        over the replicas each still has to give or take."""
        s = self.s
        wanted = []
        if s.active[src]:
            give = max(1, s.count[src] - s.count_range[src].high)
            wanted.append((s.disk[src] - s.disk_target[src]) / give)
        take = max(1, self._deficit(dst))
        wanted.append((s.disk_target[dst] - s.disk[dst]) / take)
        return max(0.0, sum(wanted) / len(wanted))

    # ----- choosing a replica to move -------------------------------------------------

    def choose_replica(self, src: int, dst: int, exhaustive: bool = False) -> int | None:
        # The hot loop of the count phase (one call per move, tens of candidates each):
        # _topic_penalty is inlined, and so are the hard goals' move checks, specialised
        # for one destination: active[dst] once, the disk room once, the rack check only
        # across racks (a test holds this filter to the goal table's compiled check).
        s = self.s
        hosted = s.hosted[src]
        sample = s.settings.candidate_sample
        same_rack = s.rack_of[src] == s.rack_of[dst]
        rack_checked = False
        if exhaustive and not same_rack:
            # Across racks, only the replicas the rack spread lets into dst's rack (in
            # hosted order, so the choice is the one a full scan would make).
            candidates = self._movable(src, dst)
            rack_checked = True
        elif exhaustive or len(hosted) <= sample:
            candidates = list(hosted)
        elif not same_rack and self._known_closed(src, dst):
            # No replica of src may enter dst's rack: only the sample's draws are made,
            # so the seeded stream, and so the plan, stays the same.
            rand = self.rng.random
            for _ in range(sample):
                rand()
            return None
        else:
            rand, n = self.rng.random, len(hosted)
            candidates = [hosted[int(rand() * n)] for _ in range(sample)]
            by_topic = s.hosted_by_topic[src]
            for t in self.crowded[src]:
                candidates += by_topic[t]
                if len(candidates) >= 2 * sample:
                    break
        # (After the sample is drawn: the seeded stream, and so the plan, stays the same.)
        if self._no_candidate.get((src, dst)) == self._stamp(src, dst):
            return None
        if not same_rack and not rack_checked and self._known_closed(src, dst):
            return None
        if not s.active[dst]:
            return None
        ideal = self._ideal_size(src, dst)
        scale = ideal + self.mean_size
        leader_high = s.leader_range.high
        # A leader travelling with its replica: -0.2 when src leads too many, +0.2 when
        # dst already leads its most.
        leader_bonus = (-0.2 if s.leaders[src] > leader_high else 0.0) + (
            0.2 if s.leaders[dst] >= leader_high else 0.0
        )
        room = s.disk_limit[dst] - s.disk[dst]
        src_rack, dst_rack = s.rack_of[src], s.rack_of[dst]
        skip_rack_test = same_rack or rack_checked
        even_dst, upper_dst = self.even_by_rack[dst_rack], self.upper_by_rack[dst_rack]
        even_src, upper_src = self.even_by_rack[src_rack], self.upper_by_rack[src_rack]
        topics_dst, topics_src = s.topic_count[dst], s.topic_count[src]
        size, replicas, topic_of = s.size, s.replicas, s.topic_of
        best, best_score = None, _NO_SCORE
        for p in candidates:
            reps = replicas[p]
            if size[p] > room or dst in reps:
                continue
            if not skip_rack_test and not s.rack_allows(p, src, dst):
                continue
            t = topic_of[p]
            gap = abs(size[p] - ideal) / scale
            score = 2.0 if gap > 2.0 else gap
            after = topics_dst.get(t, 0) + 1
            if after > upper_dst[t]:
                score += 4.0
            elif after > even_dst[t]:
                score += 2.0
            held = topics_src.get(t, 0)
            if held > upper_src[t]:
                score -= 4.0  # fixes a soft goal 3 violation for free
            elif held > even_src[t]:
                score -= 0.5
            if reps[0] == src:
                score += leader_bonus
            if score < best_score:
                best, best_score = p, score
        if best is None and not exhaustive and len(hosted) > sample:
            return self.choose_replica(src, dst, exhaustive=True)
        if best is None:
            # Every replica of src failed a hard goal's test (the score is always finite):
            # no scan between the two finds one until either broker or a rack changes.
            self._no_candidate[(src, dst)] = self._stamp(src, dst)
        return best

    def _known_closed(self, src: int, dst: int) -> bool:
        """Whether none of src's replicas may enter dst's rack (the rack spread)."""
        return self._open_counts(src)[self.s.rack_of[dst]] == 0

    def _open_counts(self, b: int) -> list[int]:
        """Per rack, how many of b's replicas the rack spread lets into it (b's own rack:
        all of them). Counted once per broker when first asked, then kept by _moved."""
        counts = self._open[b]
        if counts is None:
            counts = [0] * len(self.s.rack_names)
            for p in self.s.hosted[b]:
                self._count_open(p, b, counts, 1)
            self._open[b] = counts
        return counts

    def _count_open(self, p: int, b: int, counts: list[int], sign: int) -> None:
        allows, racks = self.s.rack_allows, self._rack_member
        for rack, member in enumerate(racks):
            if member is not None and allows(p, b, member):
                counts[rack] += sign

    def _movable(self, src: int, dst: int) -> list[int]:
        """src's replicas (in hosted order) whose rack spread allows moving them into dst's
        rack: kept per rack until src's replicas or their racks change."""
        s = self.s
        rack = s.rack_of[dst]
        stamp = (self.version[src], self.rack_version[src])
        known = self._movable_into.get((src, rack))
        if known is not None and known[0] == stamp:
            return known[1]
        if self._open_counts(src)[rack] == 0:
            return []
        allows = s.rack_allows
        movable = [p for p in s.hosted[src] if allows(p, src, dst)]
        self._movable_into[(src, rack)] = (stamp, movable)
        return movable

    def _destinations(self, src: int) -> list[int]:
        """Where src's replicas may go, best first: brokers under their range before those
        merely with room, then the same rack first, then the least loaded."""
        s = self.s
        src_rack = s.rack_of[src]
        candidates = []
        # Other racks only when some partition's replicas may change racks.
        racks = range(len(s.rack_names)) if s.any_flexible_partition else (src_rack,)
        for rack in racks:
            for dst in self._rack_tops(rack, 2):
                if dst == src or self._room(dst) <= 0:
                    continue
                if rack != src_rack and not self._cross_rack_allowed(src, dst):
                    continue
                candidates.append(dst)
        return sorted(
            candidates,
            key=lambda d: (
                self._deficit(d) <= 0,
                s.rack_of[d] != src_rack,
                -self._deficit(d),
                self.tiebreak[d],
            ),
        )

    def _all_destinations(self, src: int) -> list[int]:
        s = self.s
        src_rack = s.rack_of[src]
        return sorted(
            (
                d
                for d in self.active_brokers
                if d != src
                and (self._room(d) > 0 or not s.active[src])
                and (s.rack_of[d] == src_rack or self._cross_rack_allowed(src, d))
            ),
            key=lambda d: (s.rack_of[d] != src_rack, s.count[d], self.tiebreak[d]),
        )

    def _move_one_from(self, src: int) -> bool:
        for dst in self._destinations(src):
            p = self.choose_replica(src, dst)
            if p is not None:
                self._moved(p, src, dst)
                return True
        # The least-loaded brokers took none: every broker with room, in order. Whether a
        # replica may cross racks depends on the two racks only, so a rack none of src's
        # replicas may enter is skipped whole rather than scanned broker by broker (on a
        # hot spot in unequal racks that scan was most of the plan's time).
        s = self.s
        rack_open: dict[int, bool] = {}
        for dst in self._all_destinations(src):
            rack = s.rack_of[dst]
            if rack != s.rack_of[src]:
                if rack not in rack_open:
                    rack_open[rack] = bool(self._movable(src, dst))
                if not rack_open[rack]:
                    continue
            p = self.choose_replica(src, dst, exhaustive=True)
            if p is not None:
                self._moved(p, src, dst)
                return True
        return False

    # ----- phase 1: hard goals ----------------------------------------------------------

    def repair_hard_goals(self) -> int:
        """Replicas off draining and dead brokers, racks spread, disks under their limit."""
        s = self.s
        moves = 0
        for src in range(len(s.broker_ids)):
            while not s.active[src] and s.count[src]:
                if not self._move_one_from(src):
                    self._cannot_place(s.hosted[src][0], src, "off its broker")
                moves += 1
        rack_of, racks = s.rack_of, len(s.rack_names)
        for p, reps in enumerate(s.replicas):
            # The usual case (RF <= racks, every replica in its own rack) without a call.
            if len(reps) <= racks and len({rack_of[b] for b in reps}) == len(reps):
                continue
            while not s.rack_valid(p):
                self._repair_spread(p)
                moves += 1
        for b in self.active_brokers:
            while s.disk[b] > s.disk_limit[b]:
                self._repair_disk(b)
                moves += 1
        return moves

    def _repair_spread(self, p: int) -> None:
        s = self.s
        k = len(s.replicas[p])
        counts = s.rack_counts(p)
        high, low = s.rack_high[k], s.rack_low[k]
        crowded = [b for b in s.replicas[p] if counts[s.rack_of[b]] > high]
        if not crowded:  # k > R and some rack below its share: take from the fullest
            fullest = max(counts, key=lambda r: (counts[r], -r))
            crowded = [b for b in s.replicas[p] if s.rack_of[b] == fullest]
        limit = 1 if low == 0 else high  # k <= R: racks it is not in; else below ceil(k/R)
        wanting = [r for r in range(len(s.rack_names)) if counts.get(r, 0) < limit]
        wanting.sort(key=lambda r: (counts.get(r, 0), r))
        src = crowded[-1]
        for rack in wanting:
            for dst in sorted(s.rack_brokers[rack], key=lambda d: (s.count[d], d)):
                if dst not in s.replicas[p] and s.disk[dst] + s.size[p] <= s.disk_limit[dst]:
                    self._moved(p, src, dst)
                    return
        self._cannot_place(p, src, "to another rack")

    def _repair_disk(self, b: int) -> None:
        s = self.s
        over = s.disk[b] - s.disk_limit[b]
        # The smallest replica that clears the excess, else the largest: fewest moves.
        by_size = sorted(s.hosted[b], key=lambda p: (s.size[p], p))
        sizes = [s.size[p] for p in by_size]
        start = bisect.bisect_left(sizes, over)
        order = by_size[start:] + by_size[:start][::-1]
        others = sorted(
            (d for d in self.active_brokers if d != b),
            key=lambda d: (s.rack_of[d] != s.rack_of[b], s.disk[d] / max(s.disk_limit[d], 1)),
        )
        for p in order:
            for dst in others:
                if self._fits(p, b, dst):
                    self._moved(p, b, dst)
                    return
        raise InfeasibleError(
            f"broker {s.broker_ids[b]} uses {s.disk[b]:.0f} bytes, over its limit of "
            f"{s.disk_limit[b]:.0f}, and no other broker has room for any of its replicas",
            f"add 1 broker in {s.rack_names[s.rack_of[b]]}",
        )

    def _cannot_place(self, p: int, src: int, where: str) -> None:
        s = self.s
        rack = s.rack_names[s.rack_of[src]]
        name = f"{s.topic_names[s.topic_of[p]]}-{s.cluster.partitions[p].partition}"
        raise InfeasibleError(
            f"no active broker can take the replica of {name} on broker "
            f"{s.broker_ids[src]} ({where}) without breaking a hard goal "
            f"(rack spread, one replica per broker, or disk at most "
            f"{s.settings.max_disk_share:.0%})",
            f"add 1 broker in {rack}",
        )

    # ----- phase 2: replicas per broker ------------------------------------------------

    def balance_counts(self) -> int:
        s = self.s
        moves = 0
        stuck: set[int] = set()
        # Brokers above their range give first: each such move is one the lower bound counts.
        over = [
            (-(s.count[b] - s.count_range[b].high), self.tiebreak[b], b)
            for b in self.active_brokers
        ]
        heapq.heapify(over)
        while over:
            excess, _, src = heapq.heappop(over)
            current = s.count[src] - s.count_range[src].high
            if current <= 0 or src in stuck:
                continue
            if -excess != current:
                heapq.heappush(over, (-current, self.tiebreak[src], src))
                continue
            if self._move_one_from(src):
                moves += 1
                heapq.heappush(over, (-(current - 1), self.tiebreak[src], src))
            else:
                stuck.add(src)
        # Then brokers below their range take from the fullest broker that stays in range.
        under = [
            (s.count[b] - s.count_range[b].low, self.tiebreak[b], b) for b in self.active_brokers
        ]
        heapq.heapify(under)
        while under:
            deficit, _, dst = heapq.heappop(under)
            current = s.count[dst] - s.count_range[dst].low
            if current >= 0 or dst in stuck:
                continue
            if deficit != current:
                heapq.heappush(under, (current, self.tiebreak[dst], dst))
                continue
            if self._pull_one_to(dst):
                moves += 1
                heapq.heappush(under, (current + 1, self.tiebreak[dst], dst))
            else:
                stuck.add(dst)
        return moves

    def _pull_one_to(self, dst: int) -> bool:
        s = self.s
        dst_rack = s.rack_of[dst]
        sources = sorted(
            (
                b
                for b in self.active_brokers
                if b != dst
                and s.count[b] > s.count_range[b].low
                and (s.rack_of[b] == dst_rack or self._cross_rack_allowed(b, dst))
            ),
            # Among equally full sources, the heaviest disk: the move then evens bytes too.
            key=lambda b: (s.rack_of[b] != dst_rack, -s.count[b], -self._disk_ratio(b), b),
        )
        for src in sources:
            p = self.choose_replica(src, dst)
            if p is not None:
                self._moved(p, src, dst)
                return True
        return False

    def _disk_ratio(self, b: int) -> float:
        target = self.s.disk_target[b]
        return self.s.disk[b] / target if target > 0 else 1.0

    # ----- phase 3: each topic spread over the brokers ---------------------------------

    def balance_topics(self) -> int:
        """Runs before the count phase: a broker that holds too much of a topic gives it to
        a broker of its rack even when that takes it under its count range, if the rack's
        over-full brokers still have a replica to spare for it (or the receiver was under
        its range, which leaves the rack's shortfall as it was): the count phase then
        refills it with a move it had to make anyway, and the topic costs one move
        instead of a swap of two."""
        s = self.s
        moves = 0
        for b in self.active_brokers:
            for t in sorted(s.topic_count[b]):
                while s.topic_count[b].get(t, 0) > self._upper(t, b):
                    done = self._spread_topic(b, t)
                    if not done:
                        break
                    moves += done
        return moves

    def _spread_topic(self, src: int, t: int) -> int:
        s = self.s
        mine = sorted(s.hosted_by_topic[src][t])
        src_rack = s.rack_of[src]
        targets = self._topic_targets(src, t, below_even=True)
        in_range = s.count[src] > s.count_range[src].low
        spare: int | None = None  # the rack's spare replicas, computed when needed
        for dst in targets:
            if self._room(dst) <= 0:
                continue
            if not in_range:
                if s.rack_of[dst] != src_rack:
                    continue
                if self._deficit(dst) <= 0:
                    spare = self._rack_spare(src_rack) if spare is None else spare
                    if spare <= 0:
                        continue
            p = self._sized_choice(mine, src, dst)
            if p is not None:
                self._moved(p, src, dst)
                return 1
        # A swap, first with a broker under the topic's even share, then with any that
        # stays within its tolerated most (brokers all at their count ceiling leave no
        # other way to meet the goal).
        for dst in targets + self._topic_targets(src, t, below_even=False):
            swap = self._topic_swap(src, dst, mine)
            if swap:
                p, q = swap
                self._moved(p, src, dst)
                self._moved(q, dst, src)
                return 2
        return 0

    def _topic_targets(self, src: int, t: int, below_even: bool) -> list[int]:
        """Brokers that may take one of src's replicas of topic t, its rack first, the
        least loaded first: under the topic's even share, or (not below_even) at or above
        it but under its tolerated most."""
        s = self.s
        src_rack = s.rack_of[src]
        counts = s.topic_count
        targets: list[int] = []
        for rack in sorted(range(len(s.rack_names)), key=lambda r: r != src_rack):
            brokers = s.rack_brokers[rack]
            if not brokers or (rack != src_rack and not s.any_flexible_partition):
                continue
            even = self._even(t, brokers[0])  # alike within a rack
            upper = self._upper(t, brokers[0])
            if below_even:
                # The rack's brokers least loaded first, from its heap, until 20 qualify:
                # most brokers hold less than a topic's even share, so a few pops suffice.
                targets += self._rack_tops_below(rack, 20, src, t, even)
                continue
            room = [d for d in brokers if d != src and even <= counts[d].get(t, 0) < upper]
            targets += heapq.nsmallest(20, room, key=lambda d: (s.count[d], self.tiebreak[d]))
        return targets

    def _rack_spare(self, rack: int) -> int:
        """Replicas the rack's over-full brokers have beyond what its under-full ones
        lack: how many brokers the count phase can still refill for free."""
        s = self.s
        spare = 0
        for b in s.rack_brokers[rack]:
            r = s.count_range[b]
            spare += max(0, s.count[b] - r.high) - max(0, r.low - s.count[b])
        return spare

    def _sized_choice(self, candidates: list[int], src: int, dst: int) -> int | None:
        """The candidate that fits and whose size takes both disks nearest their targets
        (a choice blind to size would cost disk moves later)."""
        s = self.s
        ideal = self._ideal_size(src, dst)
        best, best_gap = None, _NO_SCORE
        for p in candidates:
            gap = abs(s.size[p] - ideal)
            if gap < best_gap and self._fits(p, src, dst):
                best, best_gap = p, gap
        return best

    def _swap_partners(self, src: int, dst: int) -> list[int]:
        """dst's replicas that may go to src without taking src over a topic's even share.
        They do not depend on the topic src gives (src holds more than its even share of
        that one), so a scan that found none holds for every topic until either broker or
        a rack changes. (One that found some is followed by a swap, which changes both.)"""
        s = self.s
        stamp = self._stamp(src, dst)
        if self._no_partners.get((src, dst)) == stamp:
            return []
        topic_of, held = s.topic_of, s.topic_count[src]
        even = self.even_by_rack[s.rack_of[src]]
        partners = [
            q
            for q in s.hosted[dst]
            if held.get(topic_of[q], 0) + 1 <= even[topic_of[q]] and self._fits(q, dst, src)
        ]
        if not partners:
            self._no_partners[(src, dst)] = stamp
        return partners

    def _topic_swap(self, src: int, dst: int, mine: list[int]) -> tuple[int, int] | None:
        s = self.s
        t = s.topic_of[mine[0]]
        # What dst may give back does not depend on p: found once, in dst's order (the
        # same choice as weighing every q for every p, at a fraction of the cost).
        partners: list[int] | None = None
        for p in mine:
            if not self._fits(p, src, dst):
                continue
            if partners is None:
                partners = [q for q in self._swap_partners(src, dst) if s.topic_of[q] != t]
                if not partners:
                    return None
            best, best_gap = None, _NO_SCORE
            for q in partners:
                gap = abs(s.size[p] - s.size[q])
                if gap < best_gap:
                    best, best_gap = q, gap
            if best is not None:
                return p, best
        return None
