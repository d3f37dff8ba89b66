"""The balance score, 0..100: one definition for the planner (plan before and after) and
for analytics (measured load). Pure functions of plain numbers; docs/planner.md gives the
formula and where its shape comes from.

- A resource's balancedness is ideal peak / actual peak of per-broker utilisation: 1 when
  the busiest broker carries no more than an even share, 0.5 when it carries twice that.
  (For counts, the ideal peak is the even share rounded up: 301 of 300.3 is perfect.)
- A goal's term is its resource's balancedness (leader_bytes: the mean of in and out;
  topic_spread: the mean over topics weighted by their replicas). A hard goal's term is 1
  when it holds and 0 when it does not.
- The total weighs each goal as Cruise Control's balancedness score does: 1.1x per level
  of priority (goal.balancedness.priority.weight) and 1.5x for hard goals
  (goal.balancedness.strictness.weight); score = 100 x sum(weight x term) / sum(weight).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.goals import HARD_GOALS, SOFT_GOALS
from planner.model import UNLIMITED, Cluster, PlannerSettings
from planner.state import PlacementState

PRIORITY_WEIGHT = 1.1
"""Weight ratio between a goal and the next lower one (Cruise Control's default)."""
STRICTNESS_WEIGHT = 1.5
"""Extra weight of a hard goal (Cruise Control's default)."""
INTEGRAL_GOALS = frozenset({"replicas_per_broker", "leaders_per_broker", "topic_spread"})
"""Goals whose values are counts: an even share is judged rounded up."""


@dataclass(frozen=True)
class BalanceScore:
    total: float
    """0..100."""
    goals: dict[str, float]
    """Each goal's term, 0..100."""
    resources: dict[str, float] = field(default_factory=dict)
    """Each resource's balancedness, 0..100 (informative: not part of the total)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": round(self.total, 2),
            "goals": {k: round(v, 2) for k, v in self.goals.items()},
            "resources": {k: round(v, 2) for k, v in self.resources.items()},
        }


def balancedness(
    values: Sequence[float],
    capacities: Sequence[float] | None = None,
    integral: bool = False,
) -> float:
    """0..1: the even share's utilisation over the busiest broker's.

    `capacities` (same length; a broker's size or fair share) turn values into
    utilisations; unlimited or absent capacities count as 1 each. With `integral`, values
    are counts and the ideal peak is the even share rounded up per broker.
    """
    if not values:
        return 1.0
    if capacities is None or any(c == UNLIMITED for c in capacities):
        capacities = [1.0] * len(values)
    if len(capacities) != len(values):
        raise ValueError(f"{len(values)} values but {len(capacities)} capacities")
    if any(c <= 0 for c in capacities):
        raise ValueError("capacities must be > 0")
    total, room = float(sum(values)), float(sum(capacities))
    if total <= 0:
        return 1.0
    mean = total / room
    peak = max(v / c for v, c in zip(values, capacities, strict=True))
    ideal = mean
    if integral:
        ideal = max(math.ceil(mean * c - 1e-9) / c for c in set(capacities))
    return 1.0 if peak <= ideal else ideal / peak


def goal_weights(names: Sequence[str]) -> dict[str, float]:
    """Weights by priority: hard goals first, then soft goals, in their documented order;
    names that are neither follow in the order given."""
    known = [n for n in (*HARD_GOALS, *SOFT_GOALS) if n in names]
    ordered = known + [n for n in names if n not in known]
    count = len(ordered)
    return {
        name: PRIORITY_WEIGHT ** (count - 1 - rank)
        * (STRICTNESS_WEIGHT if name in HARD_GOALS else 1.0)
        for rank, name in enumerate(ordered)
    }


def combine(terms: Mapping[str, float]) -> float:
    """0..100 from per-goal terms in 0..1."""
    if not terms:
        return 100.0
    weights = goal_weights(list(terms))
    return 100.0 * sum(weights[n] * terms[n] for n in terms) / sum(weights.values())


def score_distribution(
    values_by_goal: Mapping[str, Sequence[float]],
    capacities_by_goal: Mapping[str, Sequence[float]] | None = None,
) -> BalanceScore:
    """The score of plain per-broker vectors, one per goal (or resource): what analytics
    uses for measured load. Goal names of planner.goals get their priority weight; counts
    goals (INTEGRAL_GOALS) are judged rounded up."""
    capacities_by_goal = capacities_by_goal or {}
    terms = {
        name: balancedness(values, capacities_by_goal.get(name), integral=name in INTEGRAL_GOALS)
        for name, values in values_by_goal.items()
    }
    return BalanceScore(
        combine(terms),
        {n: 100.0 * t for n, t in terms.items()},
        {n: 100.0 * t for n, t in terms.items()},
    )


def leader_bytes_term(leader_bytes_in: Sequence[float], leader_bytes_out: Sequence[float]) -> float:
    """Soft goal 5's term: the mean of leader bytes in and leader bytes out balancedness."""
    return (balancedness(leader_bytes_in) + balancedness(leader_bytes_out)) / 2


MEASURED_GOALS: dict[str, tuple[str, ...]] = {
    "replicas_per_broker": ("partitions",),
    "leaders_per_broker": ("leaders",),
    "disk_bytes": ("disk_bytes",),
    "leader_bytes": ("leader_bytes_in_per_s", "bytes_out_per_s"),
}
"""The goals measured load can judge, and the per-broker measurements each needs (a
broker's bytes out are its leaders' bytes out: followers fetch through replication, which
Kafka counts apart). Hard goals and topic spread need the placement, not load."""


def score_measured(loads: Mapping[str, Sequence[float]]) -> BalanceScore:
    """The score of measured per-broker load (analytics), with the same terms and weights
    as a plan's score, over the goals whose measurements are all present in `loads`."""
    terms: dict[str, float] = {}
    for goal, needs in MEASURED_GOALS.items():
        if not all(name in loads for name in needs):
            continue
        if goal == "leader_bytes":
            terms[goal] = leader_bytes_term(loads[needs[0]], loads[needs[1]])
        else:
            terms[goal] = balancedness(loads[needs[0]], integral=goal in INTEGRAL_GOALS)
    return BalanceScore(combine(terms), {n: 100.0 * t for n, t in terms.items()})


def score_cluster(cluster: Cluster, settings: PlannerSettings | None = None) -> BalanceScore:
    settings = settings or PlannerSettings()
    return score_state(PlacementState(cluster, settings))


def score_state(state: PlacementState, broken: dict[str, str] | None = None) -> BalanceScore:
    """The score of the optimizer's working state (its targets give the fair shares).
    `broken`: the hard goals the state breaks, when the caller has just checked them."""
    active = [b for b, a in enumerate(state.active) if a]
    levels = [max(state.per_broker_level[b], 1e-9) for b in active]
    disk_targets = [max(state.disk_target[b], 1e-9) for b in active]
    leader_in = [0.0] * len(state.broker_ids)
    leader_out = [0.0] * len(state.broker_ids)
    nw_in = [0.0] * len(state.broker_ids)
    for p, reps in enumerate(state.replicas):
        if not reps:
            continue
        leader_in[reps[0]] += state.bytes_in[p]
        leader_out[reps[0]] += state.bytes_out[p] + state.bytes_in[p] * (len(reps) - 1)
        for b in reps:
            nw_in[b] += state.bytes_in[p]
    pick = lambda values: [values[b] for b in active]  # noqa: E731
    leader_bytes_in = pick(leader_in)
    leader_bytes_out = [sum(state.bytes_out[p] for p in state.led[b]) for b in active]
    if broken is None:
        broken = state.broken_hard_goals()
    terms: dict[str, float] = {goal: 0.0 if goal in broken else 1.0 for goal in HARD_GOALS}
    terms["replicas_per_broker"] = balancedness(pick(state.count), levels, integral=True)
    terms["leaders_per_broker"] = balancedness(pick(state.leaders), integral=True)
    terms["topic_spread"] = _topic_spread(state, active)
    terms["disk_bytes"] = balancedness(pick(state.disk), disk_targets)
    terms["leader_bytes"] = leader_bytes_term(leader_bytes_in, leader_bytes_out)
    resources = {
        "replicas": balancedness(pick(state.count), levels, integral=True),
        "leaders": balancedness(pick(state.leaders), integral=True),
        "disk_bytes": balancedness(pick(state.disk), _capacities(state, active, "disk_bytes")),
        "nw_in_bytes_per_s": balancedness(
            pick(nw_in), _capacities(state, active, "nw_in_bytes_per_s")
        ),
        "nw_out_bytes_per_s": balancedness(
            pick(leader_out), _capacities(state, active, "nw_out_bytes_per_s")
        ),
        "leader_bytes_in_per_s": balancedness(leader_bytes_in),
        "leader_bytes_out_per_s": balancedness(leader_bytes_out),
    }
    return BalanceScore(
        combine(terms),
        {n: 100.0 * t for n, t in terms.items()},
        {n: 100.0 * t for n, t in resources.items()},
    )


def _capacities(state: PlacementState, active: list[int], resource: str) -> list[float] | None:
    brokers = state.cluster.broker_by_id()
    values = [getattr(brokers[state.broker_ids[b]].capacity, resource) for b in active]
    return None if any(v == UNLIMITED for v in values) else values


def _topic_spread(state: PlacementState, active: list[int]) -> float:
    """Mean over topics, weighted by their replicas, of each topic's balancedness."""
    totals = state.topic_totals()
    if not state.total_replicas or not active:
        return 1.0
    levels = {state.per_broker_level[b] for b in active if state.per_broker_level[b] > 0}
    peak = [0.0] * len(totals)
    for b in active:
        level = state.per_broker_level[b]
        if level <= 0:
            continue
        for t, count in state.topic_count[b].items():
            utilisation = count / level
            if utilisation > peak[t]:
                peak[t] = utilisation
    weighted = 0.0
    for t, total in enumerate(totals):
        share = total / state.total_replicas
        ideal = max(math.ceil(share * level - 1e-9) / level for level in levels) if levels else 0.0
        weighted += total * (1.0 if peak[t] <= ideal else ideal / peak[t])
    return weighted / sum(totals)
