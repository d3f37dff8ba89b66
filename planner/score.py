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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planner.balance import balancedness
from planner.goals import (
    GOAL_BY_NAME,
    GOALS,
    HARD,
    SOFT,
    BrokerLoads,
    GoalName,
    leader_bytes_term,
)
from planner.model import UNLIMITED, Cluster, PlannerSettings
from planner.state import PlacementState

__all__ = [
    "MEASURED_GOALS",
    "BalanceScore",
    "balancedness",
    "combine",
    "goal_weights",
    "leader_bytes_term",
    "score_cluster",
    "score_distribution",
    "score_measured",
    "score_state",
]

PRIORITY_WEIGHT = 1.1
"""Weight ratio between a goal and the next lower one (Cruise Control's default)."""
STRICTNESS_WEIGHT = 1.5
"""Extra weight of a hard goal (Cruise Control's default)."""
INTEGRAL_GOALS = frozenset(goal.name for goal in GOALS if goal.counts)
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


def goal_weights(names: Sequence[str]) -> dict[str, float]:
    """Weights by the goal table's priorities (hard goals first); names that are not
    goals follow in the order given."""
    known = [goal.name for goal in GOALS if goal.name in names]
    ordered = known + [n for n in names if n not in known]
    count = len(ordered)
    return {
        name: PRIORITY_WEIGHT ** (count - 1 - rank)
        * (STRICTNESS_WEIGHT if name in GOAL_BY_NAME and GOAL_BY_NAME[name].is_hard else 1.0)
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


MEASURED_GOALS: dict[str, tuple[str, ...]] = {
    GoalName.REPLICAS_PER_BROKER: ("partitions",),
    GoalName.LEADERS_PER_BROKER: ("leaders",),
    GoalName.DISK_BYTES: ("disk_bytes",),
    GoalName.LEADER_BYTES: ("leader_bytes_in_per_s", "bytes_out_per_s"),
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
        if goal == GoalName.LEADER_BYTES:
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
    loads = BrokerLoads(
        replicas=pick(state.count),
        replica_levels=pick(state.per_broker_level),
        leaders=pick(state.leaders),
        disk=pick(state.disk),
        disk_targets=pick(state.disk_target),
        leader_bytes_in=pick(leader_in),
        leader_bytes_out=[sum(state.bytes_out[p] for p in state.led[b]) for b in active],
        topic_counts=pick(state.topic_count),
        topic_totals=state.topic_totals(),
    )
    if broken is None:
        broken = state.broken_hard_goals()
    terms: dict[str, float] = {goal.name: 0.0 if goal.name in broken else 1.0 for goal in HARD}
    for goal in SOFT:
        assert goal.term is not None  # the goal table's own check guarantees it
        terms[goal.name] = goal.term(loads)
    levels = [max(level, 1e-9) for level in loads.replica_levels]
    resources = {
        "replicas": balancedness(loads.replicas, levels, integral=True),
        "leaders": balancedness(loads.leaders, integral=True),
        "disk_bytes": balancedness(loads.disk, _capacities(state, active, "disk_bytes")),
        "nw_in_bytes_per_s": balancedness(
            pick(nw_in), _capacities(state, active, "nw_in_bytes_per_s")
        ),
        "nw_out_bytes_per_s": balancedness(
            pick(leader_out), _capacities(state, active, "nw_out_bytes_per_s")
        ),
        "leader_bytes_in_per_s": balancedness(loads.leader_bytes_in),
        "leader_bytes_out_per_s": balancedness(loads.leader_bytes_out),
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
