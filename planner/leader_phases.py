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
        for b in sorted(self.active_brokers, key=lambda b: (-s.leaders[b], self.tiebreak[b])):
            while s.leaders[b] > high and self._give(b):
                changes += 1
        for b in sorted(self.active_brokers, key=lambda b: (s.leaders[b], self.tiebreak[b])):
            while s.leaders[b] < low and self._take(b):
                changes += 1
        changes += self._augment()
        return changes

    def _give(self, b: int) -> bool:
        s = self.s
        low, high = s.leader_range.low, s.leader_range.high
        best, best_key = None, None
        for p in self._led(b):
            for f in s.replicas[p][1:]:
                if not s.active[f] or s.leaders[f] >= high:
                    continue
                key = (self._cost(p, f), s.leaders[f] >= low, self._load_key(p, b, f), s.leaders[f])
                if best_key is None or key < best_key:
                    best, best_key = (p, f), key
        if best is None:
            return False
        s.make_leader(best[0], best[1])
        return True

    def _take(self, b: int) -> bool:
        s = self.s
        low = s.leader_range.low
        best, best_key = None, None
        for p in s.hosted[b]:
            leader = s.replicas[p][0]
            if leader == b or s.leaders[leader] <= low:
                continue
            key = (self._cost(p, b), -s.leaders[leader], self._load_key(p, leader, b), p)
            if best_key is None or key < best_key:
                best, best_key = p, key
        if best is None:
            return False
        s.make_leader(best, b)
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
            self.s.make_leader(p, new_leader)
        return len(path)

    # ----- soft goal 5: leader bytes in and out -----------------------------------------

    def balance_load(self) -> int:
        s = self.s
        target = s.leader_load_target
        if target <= 0:
            return 0
        tol = s.settings.leader_bytes_tolerance
        changes = 0
        for _ in range(4):
            outside = sorted(
                (b for b in self.active_brokers if abs(s.leader_load[b] / target - 1) > tol),
                key=lambda b: (-abs(s.leader_load[b] / target - 1), self.tiebreak[b]),
            )
            done = 0
            for b in outside:
                for _ in range(8):
                    step = self._even_load(b)
                    if not step:
                        break
                    done += step
            changes += done
            if not done:
                break
        return changes

    def _excess(self, b: int) -> float:
        """Leader load by which b is outside the tolerance band (0 inside it)."""
        s = self.s
        tol = s.settings.leader_bytes_tolerance
        target = s.leader_load_target
        load = s.leader_load[b]
        return max(0.0, load - target * (1 + tol), target * (1 - tol) - load)

    def _window(self, giver: int, taker: int) -> tuple[float, float, float] | None:
        """(least, best, most) leader load worth handing from giver to taker: a tenth of
        their excess at least, never pushing either outside the band on the other side."""
        s = self.s
        tol = s.settings.leader_bytes_tolerance
        target = s.leader_load_target
        most = min(
            s.leader_load[giver] - target * (1 - tol), target * (1 + tol) - s.leader_load[taker]
        )
        excess = self._excess(giver) + self._excess(taker)
        if most <= 0 or excess <= 0:
            return None
        least = 0.1 * excess
        best = min(max(self._excess(giver), self._excess(taker)), most)
        return (least, best, most) if least <= most else None

    def _even_load(self, b: int) -> int:
        """One leadership change (or a swap of two) that takes b's leader load toward the
        target without taking a leader count out of range."""
        s = self.s
        low, high = s.leader_range.low, s.leader_range.high
        weight = s.leader_weight
        best_changes: list[tuple[int, int]] = []
        best_gap = float("inf")
        windows: dict[tuple[int, int], tuple[float, float, float] | None] = {}

        def window(giver: int, taker: int) -> tuple[float, float, float] | None:
            key = (giver, taker)
            if key not in windows:
                windows[key] = self._window(giver, taker)
            return windows[key]

        if s.leader_load[b] > s.leader_load_target:
            # Partitions b follows, by their leader: the other half of a swap.
            follows: dict[int, list[int]] = {}
            for q in s.hosted[b]:
                if s.replicas[q][0] != b:
                    follows.setdefault(s.replicas[q][0], []).append(q)
            for p in self._led(b):
                for f in s.replicas[p][1:]:
                    bounds = window(b, f) if s.active[f] else None
                    if bounds is None:
                        continue
                    least, aim, most = bounds
                    if (
                        s.leaders[b] > low
                        and s.leaders[f] < high
                        and least <= weight[p] <= most
                        and abs(weight[p] - aim) < best_gap
                    ):
                        best_changes, best_gap = [(p, f)], abs(weight[p] - aim)
                    for q in follows.get(f, ()):
                        amount = weight[p] - weight[q]
                        # A swap is two changes: it must beat a single one clearly.
                        gap = abs(amount - aim) * 1.5
                        if least <= amount <= most and gap < best_gap:
                            best_changes, best_gap = [(p, f), (q, b)], gap
        else:
            for p in s.hosted[b]:
                giver = s.replicas[p][0]
                if giver == b or not s.active[giver]:
                    continue
                if s.leaders[giver] <= low or s.leaders[b] >= high:
                    continue
                bounds = window(giver, b)
                if bounds is None:
                    continue
                least, aim, most = bounds
                if least <= weight[p] <= most and abs(weight[p] - aim) < best_gap:
                    best_changes, best_gap = [(p, b)], abs(weight[p] - aim)
        for p, new_leader in best_changes:
            s.make_leader(p, new_leader)
        return len(best_changes)
