"""The planner's problem as an exact model (OR-Tools CP-SAT), and one judge of goal
attainment for any target placement, built from the planner's own checks.

The model keeps every hard goal and the soft goals the planner reaches for with data moves
(replicas per broker, preferred leaders per broker, each topic's spread, disk bytes within
the tolerance), at the very targets the planner computes (`PlacementState`: count ranges,
leader range, a topic's tolerated most, disk targets), and minimises, lexicographically,
replicas moved, then bytes moved, then pure leadership changes (one solve per level, each
fixing the optimum of the one before). Soft goal 5 (leader bytes) moves no data and is left
out: it only reorders replica lists.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from planner.goals import HARD_GOALS, hard_goal_violations
from planner.model import UNLIMITED, BrokerState, Cluster, PlannerSettings
from planner.plan import spread_of
from planner.state import PlacementState


class Goal(enum.Enum):
    """The soft goals the model and the judge cover, highest priority first."""

    REPLICAS_PER_BROKER = "replicas_per_broker"
    LEADERS_PER_BROKER = "leaders_per_broker"
    TOPIC_SPREAD = "topic_spread"
    DISK_BYTES = "disk_bytes"


SOFT_GOALS_MODELLED: tuple[Goal, ...] = tuple(Goal)


class SolveStatus(enum.Enum):
    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"
    """A solution, not proven optimal within the time limit."""
    INFEASIBLE = "INFEASIBLE"
    UNKNOWN = "UNKNOWN"
    """Neither a solution nor a proof within the time limit."""


_STATUS = {
    cp_model.OPTIMAL: SolveStatus.OPTIMAL,
    cp_model.FEASIBLE: SolveStatus.FEASIBLE,
    cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
}


class ModelError(Exception):
    """The instance cannot be modelled (a broker id a replica names does not exist...)."""


# ----- the judge --------------------------------------------------------------------------


def movement(source: Cluster, target: Cluster) -> tuple[int, int, int]:
    """(replicas moved, bytes moved, pure leadership changes) from source to target: a
    replica is moved when its broker is not in the partition's source list; a leadership
    change is a partition that keeps its replica set but not its first replica."""
    before = {(p.topic, p.partition): p.replicas for p in source.partitions}
    moved = moved_bytes = leader_changes = 0
    for p in target.partitions:
        old = before[(p.topic, p.partition)]
        added = len(set(p.replicas) - set(old))
        moved += added
        moved_bytes += added * p.size_bytes
        if not added and p.replicas[0] != old[0]:
            leader_changes += 1
    return moved, moved_bytes, leader_changes


def attainment(source: Cluster, target: Cluster, settings: PlannerSettings) -> dict[str, bool]:
    """Every hard goal and every modelled soft goal: does `target` meet it? One definition
    for the planner's result and the solver's, from the planner's own checks: its hard-goal
    check, its spread figures (replicas and leaders max-min within the groups it states
    them for, disk deviation) and a topic's tolerated most."""
    broken = {v.goal for v in hard_goal_violations(target, settings, original=source)}
    result = {goal: goal not in broken for goal in HARD_GOALS}
    state = PlacementState(target, settings)
    spread = spread_of(state)
    totals = state.topic_totals()
    topics_ok = all(
        held <= state.topic_upper(t, b, totals)
        for b in range(len(state.broker_ids))
        if state.active[b]
        for t, held in state.topic_count[b].items()
    )
    result[Goal.REPLICAS_PER_BROKER.value] = spread.replicas <= 1
    result[Goal.LEADERS_PER_BROKER.value] = spread.leaders <= 1
    result[Goal.TOPIC_SPREAD.value] = topics_ok
    result[Goal.DISK_BYTES.value] = spread.disk_max_deviation <= settings.disk_tolerance + 1e-12
    return result


def missed(goals: dict[str, bool]) -> list[str]:
    return [name for name, met in goals.items() if not met]


# ----- the model --------------------------------------------------------------------------


@dataclass(frozen=True)
class LevelResult:
    """One level of the lexicographic objective."""

    name: str
    value: int
    bound: int
    status: SolveStatus
    seconds: float


@dataclass(frozen=True)
class Optimum:
    status: SolveStatus
    """Of the first level (replicas moved): OPTIMAL means the minimum is proven."""
    target: Cluster | None
    goals: tuple[Goal, ...]
    """The soft goals the model imposed (the lowest are dropped while infeasible)."""
    levels: tuple[LevelResult, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def moves(self) -> int | None:
        return self.levels[0].value if self.levels else None

    @property
    def moves_bound(self) -> int | None:
        return self.levels[0].bound if self.levels else None


class PlacementModel:
    """x[p][i]: partition p has a replica on active broker i; lead[p][i]: i is p's
    preferred leader (only `with_leaders`: without, the model is half the size, and the
    leaders are placed afterwards on the replicas found, see solve_optimum)."""

    def __init__(
        self,
        cluster: Cluster,
        settings: PlannerSettings,
        goals: Sequence[Goal],
        with_leaders: bool = True,
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.goals = tuple(goals)
        self.with_leaders = with_leaders
        state = self.state = PlacementState(cluster, settings)
        self.active = [b for b in range(len(state.broker_ids)) if state.active[b]]
        if not self.active:
            raise ModelError("no active broker")
        column = {b: i for i, b in enumerate(self.active)}
        self.model = m = cp_model.CpModel()
        n_parts = len(state.replicas)
        self.x = [[m.new_bool_var(f"x{p}_{b}") for b in self.active] for p in range(n_parts)]
        self.lead = [
            [m.new_bool_var(f"l{p}_{b}") for b in self.active] if with_leaders else []
            for p in range(n_parts)
        ]
        self.kept: list[list[cp_model.IntVar]] = []
        """Per partition, the x of the active brokers in its source list."""
        self.original_leader: list[cp_model.IntVar | None] = []
        for p, reps in enumerate(state.original):
            row = self.x[p]
            m.add(cp_model.LinearExpr.sum(row) == len(reps))
            self.kept.append([row[column[b]] for b in reps if b in column])
            if not with_leaders:
                self.original_leader.append(None)
                continue
            m.add_exactly_one(self.lead[p])
            for i in range(len(self.active)):
                m.add_implication(self.lead[p][i], row[i])
            self.original_leader.append(
                self.lead[p][column[reps[0]]] if reps[0] in column else None
            )
        self._hard_goals(column)
        self._soft_goals()
        # Moved = RF - kept, so only the kept replicas enter the objectives.
        all_kept = [v for kept in self.kept for v in kept]
        self.moves = sum(len(reps) for reps in state.original) - cp_model.LinearExpr.sum(all_kept)
        self.bytes = sum(state.size[p] * len(state.original[p]) for p in range(n_parts)) - (
            cp_model.LinearExpr.weighted_sum(
                all_kept, [state.size[p] for p, kept in enumerate(self.kept) for _ in kept]
            )
        )
        self.leader_changes = self._leader_changes()

    def _hard_goals(self, column: dict[int, int]) -> None:
        s, m = self.state, self.model
        racks = len(s.rack_names)
        for p, reps in enumerate(s.original):
            k = len(reps)
            low, high = s.rack_low[k], s.rack_high[k]
            for r in range(racks):
                in_rack = [self.x[p][column[b]] for b in s.rack_brokers[r]]
                if low > len(in_rack):
                    raise ModelError(f"rack {s.rack_names[r]} cannot hold {low} replicas of RF {k}")
                if in_rack:
                    m.add_linear_constraint(cp_model.LinearExpr.sum(in_rack), low, high)
        for i, b in enumerate(self.active):
            if s.disk_limit[b] != UNLIMITED:
                m.add(self._disk(i) <= math.floor(s.disk_limit[b]))

    def _disk(self, i: int) -> cp_model.LinearExprT:
        return cp_model.LinearExpr.weighted_sum([row[i] for row in self.x], self.state.size)

    def _count(self, i: int) -> cp_model.LinearExpr:
        return cp_model.LinearExpr.sum([row[i] for row in self.x])

    def _soft_goals(self) -> None:
        s, m = self.state, self.model
        n = len(s.replicas)
        if Goal.REPLICAS_PER_BROKER in self.goals:
            # As the planner states it: max - min <= 1 within each group of brokers sharing
            # a count range (a rack whose total the spread goal pins is a group of its own).
            groups: dict[tuple[int, int], list[int]] = {}
            for i, b in enumerate(self.active):
                r = s.count_range[b]
                groups.setdefault((r.low, r.high), []).append(i)
            total = sum(len(reps) for reps in s.original)
            for members in groups.values():
                floor = m.new_int_var(0, total, "count_floor")
                for i in members:
                    m.add_linear_constraint(self._count(i) - floor, 0, 1)
        if Goal.LEADERS_PER_BROKER in self.goals and self.with_leaders:
            floor = m.new_int_var(0, n, "leader_floor")
            for i in range(len(self.active)):
                led = cp_model.LinearExpr.sum([row[i] for row in self.lead])
                m.add_linear_constraint(led - floor, 0, 1)
        if Goal.TOPIC_SPREAD in self.goals:
            totals = s.topic_totals()
            by_topic: dict[int, list[int]] = {}
            for p, t in enumerate(s.topic_of):
                by_topic.setdefault(t, []).append(p)
            for t, parts in by_topic.items():
                for i, b in enumerate(self.active):
                    upper = s.topic_upper(t, b, totals)
                    if upper < len(parts):
                        m.add(cp_model.LinearExpr.sum([self.x[p][i] for p in parts]) <= upper)
        if Goal.DISK_BYTES in self.goals:
            tol = self.settings.disk_tolerance
            for i, b in enumerate(self.active):
                target = s.disk_target[b]
                if target > 0:
                    m.add_linear_constraint(
                        self._disk(i),
                        math.ceil(target * (1 - tol)),
                        math.floor(target * (1 + tol)),
                    )

    def _leader_changes(self) -> cp_model.LinearExprT:
        """Partitions that keep their replicas but not their leader: change >= (original
        leader lost) - (replicas moved), so a moved partition's change costs nothing."""
        m = self.model
        changes = []
        for p, reps in enumerate(self.state.original):
            original = self.original_leader[p]
            if original is None:
                continue
            change = m.new_bool_var(f"c{p}")
            moved = len(reps) - cp_model.LinearExpr.sum(self.kept[p])
            m.add(change >= 1 - original - moved)
            changes.append(change)
        return cp_model.LinearExpr.sum(changes)

    def hint(self, target: Cluster) -> None:
        """Start the search from `target` (the planner's result)."""
        index = self.state.index_of_broker
        for p, partition in enumerate(target.partitions):
            on = {index[b] for b in partition.replicas}
            leader = index[partition.replicas[0]]
            for i, b in enumerate(self.active):
                self.model.add_hint(self.x[p][i], b in on)
                if self.with_leaders:
                    self.model.add_hint(self.lead[p][i], b == leader)

    def fix_replicas(self, solution: list[list[bool]]) -> None:
        """Keep the replica sets of another model's solution: only leaders remain to place."""
        for row, values in zip(self.x, solution, strict=True):
            for v, on in zip(row, values, strict=True):
                self.model.add(v == int(on))

    def solve(
        self, seconds_per_level: float, workers: int, levels: Sequence[str]
    ) -> tuple[SolveStatus, list[LevelResult]]:
        """Minimise each named level in turn ("replicas", "bytes", "leader_changes"), each
        keeping the value the one before reached; the status is the first level's."""
        objectives = {
            "replicas": self.moves,
            "bytes": self.bytes,
            "leader_changes": self.leader_changes,
        }
        results: list[LevelResult] = []
        first_status = SolveStatus.UNKNOWN
        for name in levels:
            objective = objectives[name]
            solver = cp_model.CpSolver()
            solver.parameters.max_time_in_seconds = seconds_per_level
            solver.parameters.num_workers = workers
            solver.parameters.random_seed = 1
            self.model.minimize(objective)
            started = time.perf_counter()
            code = solver.solve(self.model)
            status = _STATUS.get(code, SolveStatus.UNKNOWN)
            if not results:
                first_status = status
            if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
                break
            value = round(solver.objective_value)
            results.append(
                LevelResult(
                    name,
                    value,
                    round(solver.best_objective_bound),
                    status,
                    time.perf_counter() - started,
                )
            )
            self._keep_solution(solver)
            # The next level keeps this one's value (its optimum when proven).
            self.model.add(objective <= value)
        return first_status, results

    def _keep_solution(self, solver: cp_model.CpSolver) -> None:
        self.model.clear_hints()
        self.solution = [[solver.boolean_value(v) for v in row] for row in self.x]
        self.leaders = [
            next((i for i, v in enumerate(row) if solver.boolean_value(v)), -1) for row in self.lead
        ]
        for p, row in enumerate(self.x):
            for i, v in enumerate(row):
                self.model.add_hint(v, self.solution[p][i])
                if self.with_leaders:
                    self.model.add_hint(self.lead[p][i], i == self.leaders[p])

    def target(self) -> Cluster:
        """The last solution as a cluster, each list ordered: the leader first, then the
        source list's order, then new brokers."""
        s = self.state
        ids = s.broker_ids
        assignment = {}
        for p, partition in enumerate(self.cluster.partitions):
            chosen = {self.active[i] for i, on in enumerate(self.solution[p]) if on}
            leader = self.active[self.leaders[p]]
            rest = [b for b in s.original[p] if b in chosen and b != leader]
            rest += sorted(b for b in chosen if b not in s.original[p] and b != leader)
            assignment[(partition.topic, partition.partition)] = [ids[b] for b in [leader, *rest]]
        return self.cluster.with_assignment(assignment)


def solve_optimum(
    cluster: Cluster,
    settings: PlannerSettings,
    seconds_per_level: float = 60.0,
    workers: int = 2,
    hint: Cluster | None = None,
    levels: int = 3,
) -> Optimum:
    """The fewest replicas moved (then bytes, then leadership changes) by any placement
    meeting every hard goal and the modelled soft goals; when that is infeasible, the
    goals are taken in priority order and each kept if the model stays feasible with it
    (so a goal below an unattainable one still counts).

    Replicas and bytes are solved without leader variables, then leaders are placed on the
    replica sets found (fewest leadership changes on those sets). Exact for replicas and
    bytes: leaders move no data, so the minimum without the leader goal is a lower bound,
    and it is the minimum with it as soon as its replica sets admit leaders within range;
    when they do not, the whole model with leaders is solved instead."""
    started = time.perf_counter()
    goals = list(SOFT_GOALS_MODELLED)
    names = ("replicas", "bytes", "leader_changes")[:levels]
    candidates: list[Goal] | None = None  # goals still to try one by one, once needed
    while True:
        model = PlacementModel(cluster, settings, goals, with_leaders=False)
        if hint is not None:
            model.hint(hint)
        status, results = model.solve(seconds_per_level, workers, names[:2])
        infeasible = status is SolveStatus.INFEASIBLE
        if candidates is None:
            if infeasible:
                candidates = list(SOFT_GOALS_MODELLED)
                goals = [candidates.pop(0)]
                continue
        else:
            if infeasible and goals:
                goals.pop()  # the goal just added cannot be met with those before it
            if candidates:
                goals.append(candidates.pop(0))
                continue
            if infeasible and goals:
                candidates = []
                continue  # solve again with the goals kept
        if not results:
            return Optimum(status, None, tuple(goals), (), time.perf_counter() - started)
        leaders = PlacementModel(cluster, settings, goals, with_leaders=True)
        leaders.fix_replicas(model.solution)
        leader_status, leader_results = leaders.solve(
            seconds_per_level, workers, ("leader_changes",)
        )
        if leader_status is SolveStatus.INFEASIBLE:
            leaders = PlacementModel(cluster, settings, goals, with_leaders=True)
            if hint is not None:
                leaders.hint(hint)
            status, results = leaders.solve(seconds_per_level, workers, names)
            if status is SolveStatus.INFEASIBLE and goals:
                goals.pop()
                continue
            leader_results = []
        seconds = time.perf_counter() - started
        if not leader_results:  # no leaders found in time: no placement to judge
            return Optimum(status, None, tuple(goals), tuple(results), seconds)
        if "leader_changes" in names:
            results += leader_results
        return Optimum(status, leaders.target(), tuple(goals), tuple(results), seconds)


def draining_ids(cluster: Cluster) -> list[int]:
    return [b.id for b in cluster.brokers if b.state is BrokerState.DRAINING]
