"""The goal table: its entries fit together, its move checks compile, and the forms the
phases use (the compiled check, the count phase's inlined filter) agree with the goals'
whole-cluster checks."""

from __future__ import annotations

import dataclasses
import gc
import importlib
import inspect
import pkgutil
import random
import weakref

import pytest

import planner
from planner.errors import PlannerError
from planner.goals import (
    GOALS,
    HARD,
    Goal,
    GoalName,
    Strictness,
    check_table,
    compile_move_check,
    first_violations,
    hard_goal_violations,
)
from planner.model import Broker, BrokerState, Capacity, Cluster, Partition, PlannerSettings
from planner.optimizer import optimize
from planner.replica_phases import ReplicaPhases
from planner.score import goal_weights
from planner.state import PlacementState

pytestmark = pytest.mark.unit


def test_the_table_lists_every_goal_once_hard_before_soft() -> None:
    assert [goal.name for goal in GOALS] == list(GoalName)
    check_table(GOALS)
    assert all(goal.strictness is Strictness.HARD for goal in GOALS[:5])
    assert all(goal.strictness is Strictness.SOFT for goal in GOALS[5:])


def _with(index: int, **changes: object) -> tuple[Goal, ...]:
    goals = list(GOALS)
    goals[index] = dataclasses.replace(goals[index], **changes)  # type: ignore[arg-type]
    return tuple(goals)


@pytest.mark.parametrize(
    ("case", "goals", "message"),
    [
        ("priorities out of order", _with(0, priority=9), "rise strictly"),
        ("a repeated priority", _with(1, priority=1), "rise strictly"),
        ("a repeated name", _with(1, name=GoalName.REPLICATION_FACTOR), "unique"),
        ("a hard goal without its check", _with(2, cluster_check=None), "needs a cluster check"),
        ("a soft goal without its term", _with(6, term=None), "needs a term"),
        ("a soft goal with a move check", _with(6, move_check="active[dst]"), "needs a term"),
        ("hard after soft", (*GOALS[5:6], *GOALS[:1]), "rise strictly"),
        (
            "hard after soft, priorities rising",
            (GOALS[5], dataclasses.replace(GOALS[0], priority=11)),
            "comes after a soft goal",
        ),
    ],
)
def test_a_table_whose_entries_do_not_fit_is_refused(
    case: str, goals: tuple[Goal, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        check_table(goals)


def test_goal_weights_follow_the_table() -> None:
    weights = goal_weights([goal.name for goal in reversed(GOALS)])
    ordered = sorted(weights, key=weights.__getitem__, reverse=True)
    assert ordered[:5] == [goal.name for goal in GOALS[:5]]
    # Hard goals carry the strictness weight: the last hard one outweighs the first soft one
    # by more than one priority step.
    assert weights[GOALS[4].name] / weights[GOALS[5].name] > 1.1 * 1.2


def test_compiled_move_checks_refuse_unknown_names_and_bad_expressions() -> None:
    bad_name = [dataclasses.replace(HARD[1], move_check="nowhere[dst]")]
    with pytest.raises(ValueError, match="nowhere"):
        compile_move_check(bad_name, {})
    bad_syntax = [dataclasses.replace(HARD[1], move_check="dst not in")]
    with pytest.raises(ValueError, match="not an expression"):
        compile_move_check(bad_syntax, {"replicas": []})
    assert compile_move_check([HARD[0]], {})(0, 0, 0) is True  # no goal to refuse a move


def _cluster(seed: int) -> Cluster:
    """A random layout of 9 brokers in 3 racks, some with small disks, one draining."""
    rng = random.Random(seed)
    brokers = tuple(
        Broker(
            i,
            f"zone-{'abc'[i % 3]}",
            BrokerState.DRAINING if i == 4 else BrokerState.ACTIVE,
            Capacity(disk_bytes=rng.choice([2_000.0, 4_000.0, 10_000.0])),
        )
        for i in range(9)
    )
    by_rack = [[b.id for b in brokers if b.rack == f"zone-{r}"] for r in "abc"]
    partitions = []
    for number in range(60):
        k = rng.choice((2, 3))
        racks = rng.sample(range(3), k)
        partitions.append(
            Partition(
                f"t{number % 4}",
                number,
                tuple(rng.choice(by_rack[r]) for r in racks),
                rng.randrange(10, 120),
            )
        )
    return Cluster(brokers, tuple(partitions))


@pytest.mark.parametrize("seed", range(6))
def test_state_and_layout_checks_find_the_same_broken_goals(seed: int) -> None:
    layout = _cluster(seed)
    state = PlacementState(layout, PlannerSettings())
    from_layout = {v.goal for v in hard_goal_violations(layout, PlannerSettings())}
    assert from_layout == set(state.broken_hard_goals())
    assert GoalName.NO_REPLICA_ON_INACTIVE_BROKER in from_layout  # broker 4 drains


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_move_check_agrees_with_the_whole_cluster_checks(seed: int) -> None:
    """On a placement that keeps every hard goal, a move passes the compiled check exactly
    when the placement after it still keeps every hard goal."""
    state = optimize(_cluster(seed), PlannerSettings(), seed)
    assert first_violations(state.facts) == {}
    rng = random.Random(seed)
    verdicts = set()
    for _ in range(400):
        p = rng.randrange(len(state.replicas))
        src = rng.choice(state.replicas[p])
        dst = rng.randrange(len(state.broker_ids))
        allowed = state.keeps_hard_goals(p, src, dst)
        verdicts.add(allowed)
        if dst in state.replicas[p]:
            assert not allowed
            continue
        state.move(p, src, dst)
        assert allowed == (first_violations(state.facts) == {}), (p, src, dst)
        state.move(p, dst, src)
    assert verdicts == {True, False}


@pytest.mark.parametrize("seed", range(4))
def test_the_count_phase_filter_is_the_compiled_move_check(seed: int) -> None:
    """choose_replica inlines the hard goals' move checks: it finds a replica exactly when
    the compiled check allows one, and only such a replica."""
    state = optimize(_cluster(seed), PlannerSettings(), seed)
    phases = ReplicaPhases(state, random.Random(seed))
    for src in range(len(state.broker_ids)):
        for dst in range(len(state.broker_ids)):
            if src == dst:
                continue
            allowed = [p for p in state.hosted[src] if state.keeps_hard_goals(p, src, dst)]
            chosen = phases.choose_replica(src, dst, exhaustive=True)
            assert (chosen is None) == (not allowed), (src, dst)
            assert chosen is None or chosen in allowed


def test_every_planner_error_derives_from_the_planner_root() -> None:
    found = []
    for module_info in pkgutil.walk_packages(planner.__path__, "planner."):
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == module.__name__ and issubclass(value, BaseException):
                found.append(value)
                assert issubclass(value, PlannerError), value
    names = {cls.__name__ for cls in found}
    assert {"LayoutError", "ReassignmentError", "InfeasibleError", "PlanStoreError"} <= names
    assert {"ContractError", "SpecError"} <= names  # the contracts' errors too


def test_a_working_state_is_freed_without_the_cycle_collector() -> None:
    """The compiled move check must not tie the state into a reference cycle: planning
    runs with the cycle collector paused, and a state kept alive by a cycle holds its
    whole placement in memory."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        state = optimize(_cluster(0), PlannerSettings(), 0)
        ReplicaPhases(state, random.Random(0))
        freed = weakref.ref(state)
        del state
        assert freed() is None
    finally:
        if was_enabled:
            gc.enable()
