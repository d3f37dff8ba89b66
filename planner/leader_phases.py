"""The phases that only reorder replica lists: preferred leaders per broker (soft goal 2)
and leader bytes in and out (soft goal 5). A leadership change copies no data, so these run
after the replicas are placed and never move a replica.

Among equally good choices, a partition already in the plan (its replicas moved, or its
leader already changed) is preferred, and giving a partition back its original leader
costs nothing: the plan then lists as few pure leadership changes as it can.
"""

from __future__ import annotations

from collections import deque

from planner.state import PlacementState


class LeaderPhases:
    def __init__(self, state: PlacementState, tiebreak: list[float]) -> None:
        self.s = state
        self.tiebreak = tiebreak
        self.active_brokers = [b for b, a in enumerate(state.active) if a]

    def _led(self, b: int) -> list[int]:
        return sorted(self.s.led[b])

    def _count_topic_leaders(self) -> None:
        """Preferred leaders per broker and topic, for the tie between otherwise equal
        leadership changes: the one that evens a topic's leaders out wins, so that no
        topic ends led mostly by some brokers (`__consumer_offsets` with 6, 6 and 0 over
        three brokers) while the totals are even."""
        s = self.s
        self.topic_leaders: list[dict[int, int]] = [{} for _ in s.broker_ids]
        partitions = [0] * len(s.topic_names)
        for p, reps in enumerate(s.replicas):
            if reps:
                led = self.topic_leaders[reps[0]]
                led[s.topic_of[p]] = led.get(s.topic_of[p], 0) + 1
                partitions[s.topic_of[p]] += 1
        brokers = max(1, len(self.active_brokers))
        self.topic_even = [(n // brokers, -(-n // brokers)) for n in partitions]

    def _topic_key(self, p: int, giver: int, taker: int) -> tuple[int, int]:
        """Smaller when the change evens p's topic's leaders: first, whether it takes the
        giver under the topic's even share or the taker over it; then how many more of the
        topic the taker leads than the giver."""
        t = self.s.topic_of[p]
        given, taken = self.topic_leaders[giver].get(t, 0), self.topic_leaders[taker].get(t, 0)
        low, high = self.topic_even[t]
        return (given - 1 < low) + (taken + 1 > high), taken - given

    def _make_leader(self, p: int, b: int) -> None:
        s = self.s
        t, giver = s.topic_of[p], s.replicas[p][0]
        self.topic_leaders[giver][t] -= 1
        self.topic_leaders[b][t] = self.topic_leaders[b].get(t, 0) + 1
        s.make_leader(p, b)

    def _cost(self, p: int, new_leader: int) -> int:
        """1 when handing p's leadership to new_leader adds a leadership change to the plan."""
        s = self.s
        if s.original[p][0] == new_leader or s.data_moved(p):
            return 0
        return 0 if s.replicas[p][0] != s.original[p][0] else 1

    # ----- soft goal 2: preferred leaders per broker ----------------------------------

    def balance_counts(self) -> int:
        s = self.s
        low, high = s.leader_range.low, s.leader_range.high
        changes = 0
        self._count_topic_leaders()
        for b in sorted(self.active_brokers, key=lambda b: (-s.leaders[b], self.tiebreak[b])):
            while s.leaders[b] > high and self._give(b):
                changes += 1
        for b in sorted(self.active_brokers, key=lambda b: (s.leaders[b], self.tiebreak[b])):
            while s.leaders[b] < low and self._take(b):
                changes += 1
        changes += self._augment()
        return changes

    def _give(self, b: int) -> bool:
        # Handing over a partition costs no leadership change exactly when it is free (b
        # is not its original leader, or its replicas move anyway), and the cost leads the
        # key: when a free partition has a taker, no costly one can win, so those (most of
        # what b leads) are weighed only when none has. Same choice, a fraction of the scan.
        s = self.s
        changed = s.changed
        free: list[int] = []
        costly: list[int] = []
        for p in self._led(b):
            original = s.original[p]
            if b != original[0] or (p in changed and set(s.replicas[p]) != set(original)):
                free.append(p)
            else:
                costly.append(p)
        best = self._best_give(b, free, 0) or self._best_give(b, costly, 1)
        if best is None:
            return False
        self._make_leader(best[0], best[1])
        return True

    def _best_give(self, b: int, partitions: list[int], cost: int) -> tuple[int, int] | None:
        """The best (partition, taker) among `partitions` b leads, all of the same cost.
        The hot loop of the leader phase (every partition b leads, every follower):
        _load_key is inlined, its part that depends on p alone computed once per
        partition, in the same floating-point order (the same choice)."""
        s = self.s
        low, high = s.leader_range.low, s.leader_range.high
        active, leaders, load = s.active, s.leaders, s.leader_load
        target = s.leader_load_target
        giver_before = abs(load[b] - target)
        best, best_key, best_rest = None, None, None
        for p in partitions:
            reps = s.replicas[p]
            weight = s.leader_weight[p]
            giver_after = abs(load[b] - weight - target)
            for f in reps[1:]:
                if not active[f] or leaders[f] >= high:
                    continue
                before = giver_before + abs(load[f] - target)
                after = giver_after + abs(load[f] + weight - target)
                key = (cost, leaders[f] >= low, after - before)
                if best_key is not None and key > best_key:
                    continue
                # The tie-breaking rest of the key, only for a candidate still in the race.
                rest = (*self._topic_key(p, b, f), s.leaders[f])
                if best_key is None or key < best_key or rest < best_rest:  # type: ignore[operator]
                    best, best_key, best_rest = (p, f), key, rest
        return best

    def _take(self, b: int) -> bool:
        s = self.s
        low = s.leader_range.low
        best, best_key, best_rest = None, None, None
        for p in s.hosted[b]:
            leader = s.replicas[p][0]
            if leader == b or s.leaders[leader] <= low:
                continue
            key = (self._cost(p, b), -s.leaders[leader], self._load_key(p, leader, b))
            if best_key is not None and key > best_key:
                continue
            rest = (*self._topic_key(p, leader, b), p)
            if best_key is None or key < best_key or rest < best_rest:  # type: ignore[operator]
                best, best_key, best_rest = p, key, rest
        if best is None:
            return False
        self._make_leader(best, b)
        return True

    def _load_key(self, p: int, giver: int, taker: int) -> float:
        """Smaller when moving p's leader load from giver to taker evens leader bytes."""
        s = self.s
        target = s.leader_load_target
        weight = s.leader_weight[p]
        before = abs(s.leader_load[giver] - target) + abs(s.leader_load[taker] - target)
        after = abs(s.leader_load[giver] - weight - target) + abs(
            s.leader_load[taker] + weight - target
        )
        return after - before

    def _augment(self) -> int:
        """Brokers still out of range after the direct passes: a chain of leadership
        changes through brokers that each give one and take one (a breadth-first search
        over 'leads a partition the next one follows')."""
        s = self.s
        low, high = s.leader_range.low, s.leader_range.high
        changes = 0
        for b in sorted(self.active_brokers, key=lambda b: self.tiebreak[b]):
            while s.leaders[b] > high:
                path = self._path_from(b, lambda x: s.leaders[x] < high)
                if not path:
                    break
                changes += self._apply(path)
            while s.leaders[b] < low:
                path = self._path_to(b, lambda x: s.leaders[x] > low)
                if not path:
                    break
                changes += self._apply(path)
        return changes

    def _path_from(self, start: int, is_end: object) -> list[tuple[int, int]]:
        """Transfers (partition, new leader) from start to the nearest broker that may
        take one more leader."""
        s = self.s
        came: dict[int, tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            x = queue.popleft()
            for p in self._led(x):
                for f in s.replicas[p][1:]:
                    if f in came or not s.active[f]:
                        continue
                    came[f] = (p, x)
                    if is_end(f):  # type: ignore[operator]
                        return self._unwind(came, f)
                    queue.append(f)
        return []

    def _path_to(self, start: int, is_end: object) -> list[tuple[int, int]]:
        """Transfers ending at start from the nearest broker that may give one leader."""
        s = self.s
        came: dict[int, tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            x = queue.popleft()
            for p in s.hosted[x]:
                leader = s.replicas[p][0]
                if leader == x or leader in came:
                    continue
                came[leader] = (p, x)
                if is_end(leader):  # type: ignore[operator]
                    return self._unwind_reverse(came, leader)
                queue.append(leader)
        return []

    @staticmethod
    def _unwind(came: dict[int, tuple[int, int] | None], end: int) -> list[tuple[int, int]]:
        path = []
        node = end
        while came[node] is not None:
            p, previous = came[node]  # type: ignore[misc]
            path.append((p, node))
            node = previous
        return path  # applied from the end of the chain backwards: each step stays valid

    @staticmethod
    def _unwind_reverse(came: dict[int, tuple[int, int] | None], end: int) -> list[tuple[int, int]]:
        path = []
        node = end
        while came[node] is not None:
            p, taker = came[node]  # type: ignore[misc]
            path.append((p, taker))
            node = taker
        return path

    def _apply(self, path: list[tuple[int, int]]) -> int:
        for p, new_leader in path:
            self._make_leader(p, new_leader)
        return len(path)

    # ----- soft goal 5: leader bytes in and out -----------------------------------------

    def balance_load(self) -> int:
        """Evens leader bytes in and leader bytes out, each on its own band around its own
        target, as the goal's term judges them. On their sum (each scaled by its own mean)
        a broker leading no hot partition but a few read `_kaas_metrics` ones reads even,
        and six equal hot partitions stayed led 3-3-0."""
        s = self.s
        tol = s.settings.leader_bytes_tolerance
        directions = (
            (s.leader_weight_in, s.leader_load_in, s.leader_load_in_target),
            (s.leader_weight_out, s.leader_load_out, s.leader_load_out_target),
        )
        changes = 0
        for _ in range(4):
            done = 0
            for weight, load, target in directions:
                if target <= 0:
                    continue
                outside = sorted(
                    (b for b in self.active_brokers if abs(load[b] / target - 1) > tol),
                    key=lambda b: (-abs(load[b] / target - 1), self.tiebreak[b]),
                )
                for b in outside:
                    for _ in range(8):
                        step = self._even_load(b, weight, load, target)
                        if not step:
                            break
                        done += step
            changes += done
            if not done:
                break
        return changes

    def _even_load(self, b: int, weight: list[float], load: list[float], target: float) -> int:
        """One leadership change (or a swap of two) that takes b's load in one direction
        (`weight`, `load`, `target`: bytes in or bytes out) toward its target without
        taking a leader count out of range or the other direction further off."""
        s = self.s
        low, high = s.leader_range.low, s.leader_range.high
        leaders, active, replicas = s.leaders, s.active, s.replicas
        weight_in, weight_out = s.leader_weight_in, s.leader_weight_out
        tol = s.settings.leader_bytes_tolerance
        band_low, band_high = target * (1 - tol), target * (1 + tol)
        best_changes: list[tuple[int, int]] = []
        best_gap = float("inf")
        # The window of amounts that may move between b and another broker, by the other.
        windows: dict[int, tuple[float, float, float] | None] = {}

        def window(giver: int, taker: int, other: int) -> tuple[float, float, float] | None:
            if other in windows:
                return windows[other]
            most = min(load[giver] - band_low, band_high - load[taker])
            excess_giver = max(0.0, load[giver] - band_high, band_low - load[giver])
            excess_taker = max(0.0, load[taker] - band_high, band_low - load[taker])
            excess = excess_giver + excess_taker
            bounds = None
            if most > 0 and excess > 0:
                least = 0.1 * excess
                if least <= most:
                    bounds = (least, min(max(excess_giver, excess_taker), most), most)
            windows[other] = bounds
            return bounds

        def evens(p: int, q: int | None, giver: int, taker: int) -> bool:
            moved_in, moved_out = weight_in[p], weight_out[p]
            if q is not None:
                moved_in, moved_out = moved_in - weight_in[q], moved_out - weight_out[q]
            return self._evens_directions(giver, taker, moved_in, moved_out)

        # (partition, the other broker) for each change between b and another broker and,
        # when b gives, the partitions b follows by their leader: the other half of a swap.
        giving = load[b] > target
        follows: dict[int, list[int]] = {}
        pairs: list[tuple[int, int]] = []
        if giving:
            pairs = [(p, f) for p in self._led(b) for f in replicas[p][1:]]
            for q in s.hosted[b]:
                if replicas[q][0] != b:
                    follows.setdefault(replicas[q][0], []).append(q)
        elif leaders[b] < high:
            pairs = [(p, replicas[p][0]) for p in s.hosted[b] if replicas[p][0] != b]
        for p, other in pairs:
            if not active[other]:
                continue
            giver, taker = (b, other) if giving else (other, b)
            bounds = window(giver, taker, other)
            if bounds is None:
                continue
            least, aim, most = bounds
            wp = weight[p]
            if leaders[giver] > low and leaders[taker] < high and least <= wp <= most:
                gap = abs(wp - aim)
                if gap < best_gap and evens(p, None, giver, taker):
                    best_changes, best_gap = [(p, taker)], gap
            for q in follows.get(other, ()):
                amount = wp - weight[q]
                # A swap is two changes: it must beat a single one clearly.
                if least <= amount <= most:
                    gap = abs(amount - aim) * 1.5
                    if gap < best_gap and evens(p, q, giver, taker):
                        best_changes, best_gap = [(p, taker), (q, giver)], gap
        for p, new_leader in best_changes:
            s.make_leader(p, new_leader)
        return len(best_changes)

    def _evens_directions(self, giver: int, taker: int, moved_in: float, moved_out: float) -> bool:
        """Whether handing `moved_in` of bytes-in and `moved_out` of bytes-out load from
        giver to taker brings the two brokers' bytes in and bytes out closer to their
        targets in all: one direction is never evened by taking the other further off."""
        s = self.s
        load_in, load_out = s.leader_load_in, s.leader_load_out
        target_in, target_out = s.leader_load_in_target, s.leader_load_out_target
        before = (
            abs(load_in[giver] - target_in)
            + abs(load_in[taker] - target_in)
            + abs(load_out[giver] - target_out)
            + abs(load_out[taker] - target_out)
        )
        after = (
            abs(load_in[giver] - moved_in - target_in)
            + abs(load_in[taker] + moved_in - target_in)
            + abs(load_out[giver] - moved_out - target_out)
            + abs(load_out[taker] + moved_out - target_out)
        )
        return after < before
