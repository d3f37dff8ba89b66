"""The phase that takes back movement the other phases did not need: chains.

The greedy phases decide one move at a time, so a broker may end up both giving a replica
away (p: o -> n) and taking another in (q: x -> o). Sending q straight to n instead, and
leaving p on o, gives every broker the same replica count with one move fewer (two fewer
when x is n: a swap taken back). It is done only when the hard goals hold and no soft goal
gets worse on o or n: disk stays within its band (or no further out than it was), no topic
goes over its tolerated most. Leadership follows the position in the list; the leader
phases, which run after, even leaders out again.

When q's bytes do not fit n, a stand-in of x's goes to n instead (q back to x). When p's
bytes do not fit o either (p larger than q: o was sent p to shed bytes), a resized
stand-in also takes back another replica p2 that o gave to n2 and sends one of o's own,
sized for what o must shed, to n2: three moves become two.
"""

from __future__ import annotations

import enum

from planner.replica_phases import ReplicaPhases

_STAND_IN_SCAN = 4096
"""Replicas weighed per outgoing replica when looking for a stand-in."""
_RESIZE_TRIES = 64
"""Candidates (nearest the size wanted first) weighed per replica of a resized stand-in."""
_STAND_IN_BUDGET = 50_000
"""Replicas weighed for stand-ins in all, per plan: bounds the phase's cost on large
clusters (thousands of chains, where stand-ins save a few moves in ten thousand: 3 of
4,657 on 150 brokers x 15k partitions, for 0.65 s of CPU) while small clusters, where they
matter, never reach it."""


class _Stage(enum.Enum):
    DIRECT = 0
    STAND_IN = 1
    RESIZED = 2


class ChainPhase:
    def __init__(self, replicas: ReplicaPhases) -> None:
        self.r = replicas
        self.s = replicas.s
        self.stand_in_budget = _STAND_IN_BUDGET
        self.resize_budget = _STAND_IN_BUDGET

    def shorten_chains(self) -> int:
        """Replicas moved fewer after shortening every chain it can; 0 when none."""
        s = self.s
        saved = 0
        stage = _Stage.DIRECT
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
                progress += self._shorten_at(o, incoming[o], outgoing[o], stage)
            saved += progress
            # Direct chains first, everywhere, then stand-ins, then resized ones: a stand-in
            # taken early could use up a replica that a direct chain elsewhere needed.
            if progress:
                stage = _Stage.DIRECT
            elif stage is _Stage.RESIZED:
                return saved
            else:
                stage = _Stage(stage.value + 1)

    def _shorten_at(self, o: int, incoming: list[int], outgoing: list[int], stage: _Stage) -> int:
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
                if stage is _Stage.DIRECT:
                    continue
                if stage is _Stage.RESIZED:
                    if self._resized_stand_in(o, n, p, incoming, outgoing, used):
                        saved += 1
                        break
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

    def _resized_stand_in(
        self, o: int, n: int, p: int, incoming: list[int], outgoing: list[int], used: set[int]
    ) -> bool:
        """A stand-in whose bytes o cannot keep (p is larger than q): another replica p2
        that o gave away (to n2) is given back and one of o's own, sized for the difference,
        goes to n2 instead. p: o -> n, q: x -> o, p2: o -> n2 become r: x -> n and
        p2': o -> n2 (three moves for two, every count as it was)."""
        s = self.s
        if not s.active[o] or not s.active[n] or self.resize_budget <= 0:
            return False
        for q in incoming:
            if q in used or q == p or o not in s.replicas[q]:
                continue
            for x in s.original[q]:
                if x in s.replicas[q] or x == n or not s.active[x]:
                    continue
                for p2 in outgoing:
                    if p2 in used or p2 in (p, q) or o in s.replicas[p2]:
                        continue
                    for n2 in s.replicas[p2]:
                        if n2 in s.original[p2] or not s.active[n2]:
                            continue
                        if self._try_resized(o, n, p, q, x, p2, n2, used):
                            return True
                        if self.resize_budget <= 0:
                            return False
        return False

    def _try_resized(
        self, o: int, n: int, p: int, q: int, x: int, p2: int, n2: int, used: set[int]
    ) -> bool:
        """Take back p, q and p2, then look for p2' (o -> n2) and r (x -> n); keep all of
        it only when the hard goals hold and no disk or topic of the brokers involved gets
        worse than it was."""
        s = self.s
        undo = [(p, n, o), (q, o, x), (p2, n2, o)]
        for v, src, dst in undo:
            self.r._moved(v, src, dst)
        # o now holds p and p2 again and lacks q: p2' should carry about the bytes o gained.
        want_o = s.size[p] + s.size[p2] - s.size[q]
        ranked = sorted(
            (abs(s.size[c] - want_o), c)
            for c in s.hosted[o]
            if c not in used and c not in (p, q, p2) and o in s.original[c]
        )
        self.resize_budget -= len(ranked)
        for _, c in ranked[:_RESIZE_TRIES]:
            if n2 in s.replicas[c] or not self.r._fits(c, o, n2):
                continue
            self.r._moved(c, o, n2)
            # n lacks p now: r should carry about p's bytes.
            for r in self._sized_from(x, n, s.size[p], (p, q, p2, c), used):
                self.r._moved(r, x, n)
                if self._no_worse([*undo, (c, o, n2), (r, x, n)]):
                    used.update((p, q, p2, c, r))
                    return True
                self.r._moved(r, n, x)
            self.r._moved(c, n2, o)
        for v, src, dst in reversed(undo):
            self.r._moved(v, dst, src)
        return False

    def _sized_from(
        self, x: int, n: int, size: float, taken: tuple[int, ...], used: set[int]
    ) -> list[int]:
        """x's own replicas that may go to n, the size nearest `size` first."""
        s = self.s
        ranked = sorted(
            (abs(s.size[r] - size), r)
            for r in s.hosted[x]
            if r not in used and r not in taken and x in s.original[r]
        )
        self.resize_budget -= len(ranked)
        return [
            r for _, r in ranked[:_RESIZE_TRIES] if n not in s.replicas[r] and self.r._fits(r, x, n)
        ]

    def _no_worse(self, moves: list[tuple[int, int, int]]) -> bool:
        """After `moves` (done): every partition they touch keeps its rack spread, and on
        every broker they touch each disk and each topic they carry is within its band or
        tolerated most, or no further out than before them."""
        s = self.s
        disk_delta: dict[int, float] = {}
        topic_delta: dict[tuple[int, int], int] = {}
        for v, src, dst in moves:
            if not s.rack_valid(v):
                return False
            t = s.topic_of[v]
            disk_delta[src] = disk_delta.get(src, 0.0) - s.size[v]
            disk_delta[dst] = disk_delta.get(dst, 0.0) + s.size[v]
            topic_delta[(src, t)] = topic_delta.get((src, t), 0) - 1
            topic_delta[(dst, t)] = topic_delta.get((dst, t), 0) + 1
        tol = s.settings.disk_tolerance
        for b, delta in disk_delta.items():
            if s.disk[b] > s.disk_limit[b]:
                return False
            target = s.disk_target[b]
            if target > 0:
                after = abs(s.disk[b] / target - 1)
                if after > tol and after > abs((s.disk[b] - delta) / target - 1):
                    return False
        for (b, t), delta in topic_delta.items():
            now = s.topic_count[b].get(t, 0)
            if delta > 0 and now > self.r._upper(t, b):
                return False
        return True

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
