"""The phase that takes back movement the other phases did not need: chains.

The greedy phases decide one move at a time, so a broker may end up both giving a replica
away (p: o -> n) and taking another in (q: x -> o). Sending q straight to n instead, and
leaving p on o, gives every broker the same replica count with one move fewer (two fewer
when x is n: a swap taken back). It is done only when the hard goals hold and no soft goal
gets worse on o or n: disk stays within its band (or no further out than it was), no topic
goes over its tolerated most. Leadership follows the position in the list; the leader
phases, which run after, even leaders out again.
"""

from __future__ import annotations

from planner.replica_phases import ReplicaPhases

_STAND_IN_SCAN = 4096
"""Replicas weighed per outgoing replica when looking for a stand-in."""
_STAND_IN_BUDGET = 50_000
"""Replicas weighed for stand-ins in all, per plan: bounds the phase's cost on large
clusters (thousands of chains, where stand-ins save a few moves in ten thousand: 3 of
4,657 on 150 brokers x 15k partitions, for 0.65 s of CPU) while small clusters, where they
matter, never reach it."""


class ChainPhase:
    def __init__(self, replicas: ReplicaPhases) -> None:
        self.r = replicas
        self.s = replicas.s
        self.stand_in_budget = _STAND_IN_BUDGET

    def shorten_chains(self) -> int:
        """Replicas moved fewer after shortening every chain it can; 0 when none."""
        s = self.s
        saved = 0
        stand_ins = False
        while True:
            progress = 0
            incoming: list[list[int]] = [[] for _ in s.broker_ids]
            outgoing: list[list[int]] = [[] for _ in s.broker_ids]
            for p in sorted(s.changed):
                now, before = set(s.replicas[p]), set(s.original[p])
                for b in now - before:
                    incoming[b].append(p)
                for b in before - now:
                    outgoing[b].append(p)
            for o in self.r.active_brokers:
                if not incoming[o] or not outgoing[o]:
                    continue
                progress += self._shorten_at(o, incoming[o], outgoing[o], stand_ins)
            saved += progress
            # Direct chains first, everywhere: a stand-in taken early could use up a replica
            # that a direct chain elsewhere needed.
            if progress:
                stand_ins = False
            elif not stand_ins:
                stand_ins = True
            else:
                return saved

    def _shorten_at(self, o: int, incoming: list[int], outgoing: list[int], stand_ins: bool) -> int:
        """Shorten the chains through o: q arrived at o, p left o."""
        s = self.s
        saved = 0
        used: set[int] = set()
        for p in outgoing:
            if p in used or o in s.replicas[p]:
                continue
            # Where p's replica from o is now: the broker of its list not in its original.
            now = [b for b in s.replicas[p] if b not in s.original[p]]
            for n in now:
                q = self._partner(o, n, p, incoming, used)
                if q is not None:
                    x_was_n = n in s.original[q]
                    self.r._moved(p, n, o)
                    self.r._moved(q, o, n)
                    used.update((p, q))
                    saved += 2 if x_was_n else 1
                    break
                if not stand_ins:
                    continue
                stand_in = self._stand_in(o, n, p, incoming, used)
                if stand_in is not None:
                    q, x, r = stand_in
                    self.r._moved(p, n, o)
                    self.r._moved(q, o, x)
                    self.r._moved(r, x, n)
                    used.update((p, q, r))
                    saved += 1
                    break
        return saved

    def _stand_in(
        self, o: int, n: int, p: int, incoming: list[int], used: set[int]
    ) -> tuple[int, int, int] | None:
        """When q cannot go on to n itself (its size would push a disk out of its band):
        q goes back to x, where it came from, and another replica r of x goes to n. Three
        moves for two, the sizes chosen for the disks. (q, x, r), or None."""
        s = self.s
        if not s.active[o] or not s.active[n] or not s.rack_allows(p, n, o):
            return None
        tol = s.settings.disk_tolerance
        scanned = 0
        if self.stand_in_budget <= 0:
            return None
        for q in incoming:
            if q in used or q == p or o not in s.replicas[q]:
                continue
            for x in s.original[q]:
                if x in s.replicas[q] or x == n or not s.active[x]:
                    continue
                if not s.rack_allows(q, o, x):
                    continue
                # o: +p -q; x: +q -r; n: +r -p.
                if not self._disk_kept(o, s.size[p] - s.size[q], tol):
                    continue
                best, best_gap = None, float("inf")
                for r in s.hosted[x]:
                    scanned += 1
                    if r in used or r in (q, p) or n in s.replicas[r]:
                        continue
                    if n in s.original[r] or not s.rack_allows(r, x, n):
                        continue
                    if not self._disk_kept(x, s.size[q] - s.size[r], tol):
                        continue
                    if not self._disk_kept(n, s.size[r] - s.size[p], tol):
                        continue
                    if not self._topics_kept3(p, q, r, o, x, n):
                        continue
                    gap = abs(s.size[r] - s.size[p])
                    if gap < best_gap:
                        best, best_gap = r, gap
                if best is not None:
                    self.stand_in_budget -= scanned
                    return q, x, best
                if scanned > min(_STAND_IN_SCAN, self.stand_in_budget):
                    self.stand_in_budget -= scanned
                    return None
        self.stand_in_budget -= scanned
        return None

    def _topics_kept3(self, p: int, q: int, r: int, o: int, x: int, n: int) -> bool:
        """o gives q's topic and takes p's; x gives r's, takes q's; n gives p's, takes r's."""
        s = self.s
        for b, gained, lost in ((o, p, q), (x, q, r), (n, r, p)):
            tg, tl = s.topic_of[gained], s.topic_of[lost]
            if tg != tl and s.topic_count[b].get(tg, 0) + 1 > self.r._upper(tg, b):
                return False
        return True

    def _partner(self, o: int, n: int, p: int, incoming: list[int], used: set[int]) -> int | None:
        s = self.s
        if not s.active[o] or not s.active[n]:
            return None
        if not s.rack_allows(p, n, o):
            return None
        best, best_gap = None, float("inf")
        tol = s.settings.disk_tolerance
        for q in incoming:
            if q in used or q == p or n in s.replicas[q] or o not in s.replicas[q]:
                continue
            if not s.rack_allows(q, o, n):
                continue
            delta = s.size[p] - s.size[q]  # o gains delta, n loses it
            if not self._disk_kept(o, delta, tol) or not self._disk_kept(n, -delta, tol):
                continue
            if not self._topics_kept(p, q, o, n):
                continue
            gap = abs(delta)
            if gap < best_gap:
                best, best_gap = q, gap
        return best

    def _disk_kept(self, b: int, delta: float, tol: float) -> bool:
        s = self.s
        after = s.disk[b] + delta
        if after > s.disk_limit[b]:
            return False
        target = s.disk_target[b]
        if target <= 0:
            return True
        deviation_after = abs(after / target - 1)
        return deviation_after <= tol or deviation_after <= abs(s.disk[b] / target - 1)

    def _topics_kept(self, p: int, q: int, o: int, n: int) -> bool:
        """o takes p's topic back and gives q's; n the other way round."""
        s = self.s
        tp, tq = s.topic_of[p], s.topic_of[q]
        if tp == tq:
            return True
        for b, gained in ((o, tp), (n, tq)):
            if s.topic_count[b].get(gained, 0) + 1 > self.r._upper(gained, b):
                return False
        return True
