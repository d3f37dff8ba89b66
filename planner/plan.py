"""A plan: the target placement, its batches, what it moves, and the score before and after.

`make_plan` is the planner's one entry point for callers (the command line, the agent).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from planner.batches import Batch, MovementBudget, make_batches
from planner.model import Cluster, PlannerSettings
from planner.optimizer import optimize_state, target_cluster
from planner.score import BalanceScore, score_state
from planner.state import PlacementState


@dataclass(frozen=True)
class Spread:
    """max - min over active brokers, the figure the targets are stated in."""

    replicas: int
    leaders: int
    disk_max_deviation: float
    """Largest |disk / target - 1| over active brokers."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "replicas_max_minus_min": self.replicas,
            "leaders_max_minus_min": self.leaders,
            "disk_max_deviation": round(self.disk_max_deviation, 4),
        }


@dataclass(frozen=True)
class Plan:
    source: Cluster
    target: Cluster
    batches: tuple[Batch, ...]
    score_before: BalanceScore
    score_after: BalanceScore
    spread_before: Spread
    spread_after: Spread
    seconds: float
    seed: int

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def replicas_moved(self) -> int:
        return sum(b.replicas_moved for b in self.batches)

    @property
    def bytes_moved(self) -> int:
        return sum(b.bytes_moved for b in self.batches)

    @property
    def leadership_changes(self) -> int:
        """Partitions that only change their preferred leader (no data copied)."""
        before = {(p.topic, p.partition): p.replicas for p in self.source.partitions}
        return sum(
            1
            for p in self.target.partitions
            if set(p.replicas) == set(before[(p.topic, p.partition)])
            and p.replicas[0] != before[(p.topic, p.partition)][0]
        )

    def final_assignments(self) -> list[tuple[str, int, tuple[int, ...]]]:
        """Each changed partition once, with its target list, in the order of the batch
        that completes it."""
        last: dict[tuple[str, int], tuple[int, tuple[int, ...]]] = {}
        for index, batch in enumerate(self.batches):
            for step in batch.steps:
                last[(step.topic, step.partition)] = (index, step.replicas)
        ordered = sorted(last.items(), key=lambda item: item[1][0])
        return [(topic, number, replicas) for (topic, number), (_, replicas) in ordered]

    def reassignment_json(self) -> dict[str, Any]:
        """Kafka's reassignment format (what kafka-reassign-partitions reads)."""
        return reassignment_document(self.final_assignments())

    def summary(self) -> dict[str, Any]:
        return {
            "replicas_moved": self.replicas_moved,
            "bytes_moved": self.bytes_moved,
            "leadership_changes": self.leadership_changes,
            "partitions_changed": len(self.final_assignments()),
            "batches": len(self.batches),
            "score_before": self.score_before.as_dict(),
            "score_after": self.score_after.as_dict(),
            "spread_before": self.spread_before.as_dict(),
            "spread_after": self.spread_after.as_dict(),
            "seconds": round(self.seconds, 3),
            "seed": self.seed,
        }


def reassignment_document(
    assignments: list[tuple[str, int, tuple[int, ...]]],
) -> dict[str, Any]:
    return {
        "version": 1,
        "partitions": [
            {"topic": topic, "partition": number, "replicas": list(replicas)}
            for topic, number, replicas in assignments
        ],
    }


def spread_of(state: PlacementState) -> Spread:
    active = [b for b, a in enumerate(state.active) if a]
    if not active:
        return Spread(0, 0, 0.0)
    # Racks whose totals the spread goal pins are judged on their own: their brokers'
    # balanced count differs from the other racks'.
    by_range: dict[tuple[int, int], list[int]] = {}
    for b in active:
        r = state.count_range[b]
        by_range.setdefault((r.low, r.high), []).append(b)
    replicas = max(
        max(state.count[b] for b in g) - min(state.count[b] for b in g) for g in by_range.values()
    )
    leaders = max(state.leaders[b] for b in active) - min(state.leaders[b] for b in active)
    deviation = max(
        (abs(state.disk[b] / state.disk_target[b] - 1) for b in active if state.disk_target[b] > 0),
        default=0.0,
    )
    return Spread(replicas, leaders, deviation)


def make_plan(
    cluster: Cluster,
    settings: PlannerSettings | None = None,
    seed: int = 0,
    budget: MovementBudget | None = None,
) -> Plan:
    """Plan `cluster`: raises InfeasibleError when no placement keeps the hard goals."""
    with cycle_collector_paused():
        return _make_plan(cluster, settings or PlannerSettings(), seed, budget)


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Python's cycle collector off while planning, back to its previous state after.

    Planning allocates millions of small tuples and lists, and each allocation burst
    makes the collector walk every object the cluster model holds (hundreds of
    thousands), finding nothing (0 collected in the 1,000-broker benchmark):
    reference counting frees what planning drops, and any cycle is collected once
    the collector is back on. 1,000 brokers x 100k partitions with 100 brokers added:
    10.3 s of CPU with the collector on, 7.5 s with it off. The command line holds it
    off from reading the layout to writing the plan (reading builds as many objects).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _make_plan(
    cluster: Cluster, settings: PlannerSettings, seed: int, budget: MovementBudget | None
) -> Plan:
    started = time.perf_counter()
    state = PlacementState(cluster, settings)
    score_before, spread_before = score_state(state), spread_of(state)
    optimize_state(state, seed)
    target = target_cluster(state)
    batches = make_batches(
        cluster,
        {p: tuple(state.broker_ids[b] for b in state.replicas[p]) for p in sorted(state.changed)},
        settings,
        budget or MovementBudget(),
    )
    # optimize_state raised unless every hard goal holds: no need to check them again.
    score_after, spread_after = score_state(state, broken={}), spread_of(state)
    return Plan(
        cluster,
        target,
        tuple(batches),
        score_before,
        score_after,
        spread_before,
        spread_after,
        time.perf_counter() - started,
        seed,
    )
