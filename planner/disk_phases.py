"""The phase that evens disk bytes (soft goal 4), after the count phase: a move, or a swap
of two replicas of different sizes, between a broker out of its band and one on the other
side of its target.

It moves replicas through ReplicaPhases (its bookkeeping, its hard-goal checks) and never
takes a broker's count out of its range or a topic over its tolerated most. (A pass before
the count phase that let a disk-heavy broker give a large replica to an under-full one and
be refilled by a count move was tried and measured: it moved more replicas in all, since
the refill is not sized for the disk; see docs/planner.md.)
"""

from __future__ import annotations

import bisect
import math

from planner.replica_phases import ReplicaPhases

_NO_SCORE = math.inf


class DiskPhases:
    def __init__(self, replicas: ReplicaPhases) -> None:
        self.r = replicas
        self.s = replicas.s

    # ----- phase 4: disk bytes -----------------------------------------------------------

    def balance_disk(self) -> int:
        s = self.s
        tol = s.settings.disk_tolerance
        moves = 0
        for _ in range(6):
            deviation = {
                b: s.disk[b] / s.disk_target[b] - 1
                for b in self.r.active_brokers
                if s.disk_target[b] > 0
            }
            outside = sorted(
                (b for b, d in deviation.items() if abs(d) > tol),
                key=lambda b: (-abs(deviation[b]), self.r.tiebreak[b]),
            )
            if not outside:
                break
            progress = 0
            for b in outside:
                progress += self._fix_disk(b)
            moves += progress
            if not progress:
                break
        return moves

    def _disk_partners(self, b: int, heavier: bool) -> list[int]:
        s = self.s
        rack = s.rack_of[b]
        partners = [
            d
            for d in self.r.active_brokers
            if d != b
            and s.disk_target[d] > 0
            and ((s.disk[d] > s.disk_target[d]) == heavier)
            and (s.rack_of[d] == rack or s.any_flexible_partition)
        ]
        partners.sort(
            key=lambda d: (
                s.rack_of[d] != rack,
                -abs(s.disk[d] / s.disk_target[d] - 1),
                self.r.tiebreak[d],
            )
        )
        return partners[:6]

    def _fix_disk(self, b: int) -> int:
        s = self.s
        tol = s.settings.disk_tolerance
        moves = 0
        heavy = s.disk[b] > s.disk_target[b]
        for partner in self._disk_partners(b, heavier=not heavy):
            src, dst = (b, partner) if heavy else (partner, b)
            done = self._disk_exchange(src, dst)
            moves += done
            if abs(s.disk[b] / s.disk_target[b] - 1) <= tol:
                break
        return moves

    def _excess(self, b: int) -> float:
        """Bytes by which b is outside its disk tolerance band (0 inside it)."""
        s = self.s
        tol = s.settings.disk_tolerance
        target = s.disk_target[b]
        return max(0.0, s.disk[b] - target * (1 + tol), target * (1 - tol) - s.disk[b])

    def _disk_window(self, src: int, dst: int) -> tuple[float, float, float] | None:
        """(least, best, most) bytes worth sending from src to dst: enough to buy a tenth of
        the two brokers' excess, never pushing either outside the band on the other side."""
        s = self.s
        tol = s.settings.disk_tolerance
        most = min(
            s.disk[src] - s.disk_target[src] * (1 - tol),
            s.disk_target[dst] * (1 + tol) - s.disk[dst],
        )
        excess = self._excess(src) + self._excess(dst)
        if most <= 0 or excess <= 0:
            return None
        least = 0.1 * excess
        best = min(max(self._excess(src), self._excess(dst)), most)
        return (least, best, most) if least <= most else None

    def _disk_exchange(self, src: int, dst: int) -> int:
        """One move (or swap) of bytes from src to dst that keeps counts and topics in
        range; returns the replicas moved."""
        s = self.s
        window = self._disk_window(src, dst)
        if window is None:
            return 0
        least, best, most = window
        chosen, chosen_gap = None, _NO_SCORE
        if s.count[src] > s.count_range[src].low and self.r._room(dst) > 0:
            for p in s.hosted[src]:
                size = s.size[p]
                if not least <= size <= most or abs(size - best) >= chosen_gap:
                    continue
                if self.r._fits(p, src, dst) and not self._topic_worse(p, dst):
                    # Keeping topics at their even share leaves room for later changes.
                    gap = abs(size - best) + (most - least) * self._above_even(p, dst)
                    if gap < chosen_gap:
                        chosen, chosen_gap = p, gap
        if chosen is not None:
            self.r._moved(chosen, src, dst)
            return 1
        swap = self._disk_swap(src, dst, least, best, most)
        if swap is None:
            return 0
        p, q = swap
        self.r._moved(p, src, dst)
        self.r._moved(q, dst, src)
        return 2

    def _above_even(self, p: int, dst: int) -> bool:
        t = self.s.topic_of[p]
        return self.s.topic_count[dst].get(t, 0) + 1 > self.r._even(t, dst)

    def _topic_worse(self, p: int, dst: int) -> bool:
        s, t = self.s, self.s.topic_of[p]
        return s.topic_count[dst].get(t, 0) + 1 > self.r._upper(t, dst)

    def _disk_swap(
        self, src: int, dst: int, least: float, best: float, most: float
    ) -> tuple[int, int] | None:
        s = self.s
        back = sorted((s.size[q], q) for q in s.hosted[dst])
        back_sizes = [size for size, _ in back]
        chosen, chosen_gap = None, _NO_SCORE
        checked: dict[int, bool] = {}
        for p in s.hosted[src]:
            size_p = s.size[p]
            if size_p < least:
                continue
            # Partners whose size leaves a difference in the window, nearest to `best` first.
            lo = bisect.bisect_left(back_sizes, size_p - most)
            hi = bisect.bisect_right(back_sizes, size_p - least)
            if lo >= hi:
                continue
            centre = min(max(bisect.bisect_left(back_sizes, size_p - best), lo), hi - 1)
            for i in range(max(lo, centre - 2), min(hi, centre + 3)):
                size_q, q = back[i]
                gap = abs(size_p - size_q - best)
                if gap >= chosen_gap:
                    continue
                gap += (most - least) * (self._above_even(p, dst) + self._above_even(q, src))
                if gap >= chosen_gap:
                    continue
                if q not in checked:
                    checked[q] = self.r._fits(q, dst, src) and not self._topic_worse(q, src)
                if not checked[q]:
                    continue
                if self.r._fits(p, src, dst) and not self._topic_worse(p, dst):
                    chosen, chosen_gap = (p, q), gap
        return chosen
