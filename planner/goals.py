"""The goals, as one table: every goal's name, whether it is hard or soft, its priority,
its whole-cluster check and its incremental move check. Feasibility, the phases, the
working state's checks and the score all read this table; none keeps a list of its own.

Hard goals are never broken by a plan. Soft goals are pursued in priority order; a phase
working on one never trades away a goal before it:

1. replicas_per_broker  max-min <= 1 (within each rack when racks pin their totals)
2. leaders_per_broker   preferred leaders, max-min <= 1
3. topic_spread         no broker holds clearly more than its share of one topic
4. disk_bytes           every broker within +-5% of its share of the bytes
5. leader_bytes         leader bytes in and bytes out, each within +-10% of its mean

A goal's checks take two forms:

- the whole-cluster check. For a hard goal, the violations of a placement (`Finding`s
  over `PlacementFacts`, which both a layout and the optimizer's working state provide);
  for a soft goal, its balance term, 0..1, over per-broker vectors (`BrokerLoads`).
- the incremental move check: a hard goal's test that moving partition p's replica from
  broker src to broker dst keeps it, written as a Python expression over the working
  state's arrays. `compile_move_check` joins the expressions of the goals it is given
  into one function, so the phases' hot loops pay one call per candidate move, as for
  a hand-written test, while the table stays the only place that says what a goal
  allows.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import CodeType
from typing import cast

from planner.balance import balancedness
from planner.model import UNLIMITED, BrokerState, Cluster, PlannerSettings


class GoalName(enum.StrEnum):
    REPLICATION_FACTOR = "replication_factor"
    ONE_REPLICA_PER_BROKER = "one_replica_per_broker"
    RACK_SPREAD = "rack_spread"
    NO_REPLICA_ON_INACTIVE_BROKER = "no_replica_on_inactive_broker"
    DISK_LIMIT = "disk_limit"
    REPLICAS_PER_BROKER = "replicas_per_broker"
    LEADERS_PER_BROKER = "leaders_per_broker"
    TOPIC_SPREAD = "topic_spread"
    DISK_BYTES = "disk_bytes"
    LEADER_BYTES = "leader_bytes"


class Strictness(enum.Enum):
    HARD = "hard"
    """Never broken by a plan; a layout that cannot keep it is refused."""
    SOFT = "soft"
    """Pursued in priority order, as far as the hard goals and higher soft goals allow."""


class Precondition(enum.Enum):
    """What planner.feasibility checks from counts alone before any search, per goal."""

    ACTIVE_BROKERS_PER_RACK = "active brokers per rack"
    DISK_ROOM = "disk room per rack and in all"


@dataclass(frozen=True)
class Violation:
    goal: str
    subject: str
    """The partition ("orders-3") or broker ("broker 4") at fault."""
    detail: str

    def __str__(self) -> str:
        return f"{self.goal}: {self.subject}: {self.detail}"


def rack_bounds(replication_factor: int, racks: int) -> tuple[int, int]:
    """(fewest, most) replicas of one partition a rack may hold: with RF at most the
    number of racks, at most one per rack (RF distinct racks); above it, RF//R or
    ceil(RF/R) in every rack."""
    return replication_factor // racks, -(-replication_factor // racks)


# ----- what the whole-cluster checks read -----------------------------------------------


@dataclass(frozen=True)
class PlacementFacts:
    """A placement as the hard goals' whole-cluster checks read it: brokers and partitions
    numbered 0..n-1. The optimizer's working state shares its own lists here (the facts
    follow its moves); a layout is translated once by `facts_of_cluster`."""

    replicas: Sequence[Sequence[int]]
    """Each partition's replicas as broker numbers."""
    replication_factor: Sequence[int]
    """How many replicas each partition must have."""
    rack_of: Sequence[int]
    """Each broker's rack number; -1 for a broker the layout does not list."""
    rack_names: Sequence[str]
    active: Sequence[bool]
    broker_ids: Sequence[int]
    broker_states: Sequence[BrokerState | None]
    """None for a broker the layout does not list."""
    size: Sequence[float]
    disk_capacity: Sequence[float]
    disk_limit: Sequence[float]
    max_disk_share: float
    partition_name: Callable[[int], str]


def facts_of_cluster(
    cluster: Cluster, settings: PlannerSettings, original: Cluster | None = None
) -> PlacementFacts:
    """The facts of a layout; with `original`, each partition must keep its replication
    factor there. Replicas on brokers the layout does not list get numbers of their own
    (inactive, in no rack), so that the checks can name them."""
    brokers = list(cluster.brokers)
    index = {broker.id: b for b, broker in enumerate(brokers)}
    rack_names = cluster.racks()
    rack_index = {name: r for r, name in enumerate(rack_names)}
    broker_ids = [broker.id for broker in brokers]
    states: list[BrokerState | None] = [broker.state for broker in brokers]
    for partition in cluster.partitions:
        for replica in partition.replicas:
            if replica not in index:
                index[replica] = len(broker_ids)
                broker_ids.append(replica)
                states.append(None)
    unknown = len(broker_ids) - len(brokers)
    capacity = [broker.capacity.disk_bytes for broker in brokers] + [UNLIMITED] * unknown
    original_rf = (
        {(p.topic, p.partition): p.replication_factor for p in original.partitions}
        if original
        else {}
    )
    partitions = cluster.partitions
    return PlacementFacts(
        replicas=[[index[r] for r in p.replicas] for p in partitions],
        replication_factor=[
            original_rf.get((p.topic, p.partition), p.replication_factor) for p in partitions
        ],
        rack_of=[rack_index[broker.rack] for broker in brokers] + [-1] * unknown,
        rack_names=rack_names,
        active=[broker.is_active for broker in brokers] + [False] * unknown,
        broker_ids=broker_ids,
        broker_states=states,
        size=[p.size_bytes for p in partitions],
        disk_capacity=capacity,
        disk_limit=[c * settings.max_disk_share for c in capacity],
        max_disk_share=settings.max_disk_share,
        partition_name=lambda p: partitions[p].name,
    )


Finding = tuple[str, str]
"""(subject, detail) of one violation: the partition or broker at fault, and how."""
HardCheck = Callable[[PlacementFacts], Iterator[Finding]]


def _replication_factor_kept(facts: PlacementFacts) -> Iterator[Finding]:
    expected = facts.replication_factor
    for p, reps in enumerate(facts.replicas):
        if len(reps) != expected[p]:
            yield facts.partition_name(p), f"{len(reps)} replicas, expected {expected[p]}"


def _one_replica_per_broker(facts: PlacementFacts) -> Iterator[Finding]:
    for p, reps in enumerate(facts.replicas):
        if len(set(reps)) != len(reps):
            ids = [facts.broker_ids[b] for b in reps]
            yield facts.partition_name(p), f"replicas {ids}"


def _rack_spread(facts: PlacementFacts) -> Iterator[Finding]:
    rack_of, racks = facts.rack_of, len(facts.rack_names)
    for p, reps in enumerate(facts.replicas):
        k = len(reps)
        # The usual case (k <= racks: k distinct racks) without counting.
        if k <= racks and len({rack_of[b] for b in reps}) == k:
            continue
        low, high = rack_bounds(k, racks)
        counts: dict[int, int] = {}
        for b in reps:
            if rack_of[b] >= 0:
                counts[rack_of[b]] = counts.get(rack_of[b], 0) + 1
        if all(c <= high for c in counts.values()) and (
            low == 0 or (len(counts) == racks and min(counts.values()) >= low)
        ):
            continue
        per_rack = {facts.rack_names[r]: c for r, c in counts.items()}
        yield (
            facts.partition_name(p),
            f"replicas per rack {dict(sorted(per_rack.items()))}, allowed {low}..{high} per rack",
        )


def _no_replica_on_inactive_broker(facts: PlacementFacts) -> Iterator[Finding]:
    active = facts.active
    if all(active):
        return
    for p, reps in enumerate(facts.replicas):
        for b in reps:
            if active[b]:
                continue
            state = facts.broker_states[b]
            where = "unknown broker" if state is None else f"replica on {state.value} broker"
            yield facts.partition_name(p), f"{where} {facts.broker_ids[b]}"


def _disk_limit(facts: PlacementFacts) -> Iterator[Finding]:
    active, limit = facts.active, facts.disk_limit
    if all(limit[b] == UNLIMITED for b, a in enumerate(active) if a):
        return
    disk = [0.0] * len(active)
    size = facts.size
    for p, reps in enumerate(facts.replicas):
        p_size = size[p]
        for b in reps:
            disk[b] += p_size
    for b, used in enumerate(disk):
        if active[b] and used > limit[b]:
            yield (
                f"broker {facts.broker_ids[b]}",
                f"{used:.0f} bytes, over {facts.max_disk_share:.0%} of "
                f"{facts.disk_capacity[b]:.0f}",
            )


# ----- what the soft goals' terms read --------------------------------------------------


@dataclass(frozen=True)
class BrokerLoads:
    """Per active broker, what the soft goals' balance terms are computed from."""

    replicas: Sequence[float]
    replica_levels: Sequence[float]
    """Each broker's balanced replica count (its rack's level; 0 in an empty rack)."""
    leaders: Sequence[float]
    disk: Sequence[float]
    disk_targets: Sequence[float]
    leader_bytes_in: Sequence[float]
    leader_bytes_out: Sequence[float]
    topic_counts: Sequence[Mapping[int, int]]
    """Replicas of each topic (by number) on the broker."""
    topic_totals: Sequence[int]
    """Replicas of each topic on all brokers."""


SoftTerm = Callable[[BrokerLoads], float]

_TINY = 1e-9
"""Stands in for a zero level or target, which balancedness refuses as a capacity."""


def _replicas_term(loads: BrokerLoads) -> float:
    levels = [max(level, _TINY) for level in loads.replica_levels]
    return balancedness(loads.replicas, levels, integral=True)


def _leaders_term(loads: BrokerLoads) -> float:
    return balancedness(loads.leaders, integral=True)


def topic_spread_term(loads: BrokerLoads) -> float:
    """Mean over topics, weighted by their replicas, of each topic's balancedness."""
    totals = loads.topic_totals
    total_replicas = sum(totals)
    if not total_replicas or not loads.replicas:
        return 1.0
    levels = {level for level in loads.replica_levels if level > 0}
    peak = [0.0] * len(totals)
    for level, counts in zip(loads.replica_levels, loads.topic_counts, strict=True):
        if level <= 0:
            continue
        for t, count in counts.items():
            utilisation = count / level
            if utilisation > peak[t]:
                peak[t] = utilisation
    weighted = 0.0
    for t, total in enumerate(totals):
        share = total / total_replicas
        ideal = max(math.ceil(share * level - _TINY) / level for level in levels) if levels else 0.0
        weighted += total * (1.0 if peak[t] <= ideal else ideal / peak[t])
    return weighted / total_replicas


def _disk_term(loads: BrokerLoads) -> float:
    return balancedness(loads.disk, [max(target, _TINY) for target in loads.disk_targets])


def leader_bytes_term(leader_bytes_in: Sequence[float], leader_bytes_out: Sequence[float]) -> float:
    """The leader_bytes goal's term: the mean of leader bytes in and out balancedness."""
    return (balancedness(leader_bytes_in) + balancedness(leader_bytes_out)) / 2


def _leader_bytes_term(loads: BrokerLoads) -> float:
    return leader_bytes_term(loads.leader_bytes_in, loads.leader_bytes_out)


# ----- the table ------------------------------------------------------------------------


@dataclass(frozen=True)
class Goal:
    name: GoalName
    strictness: Strictness
    priority: int
    """1 is the highest; hard goals come before soft ones."""
    summary: str
    cluster_check: HardCheck | None = None
    """Hard goals: the violations of a whole placement."""
    move_check: str | None = None
    """Hard goals: a Python expression, true when moving p's replica from src to dst keeps
    the goal (names: the working state's arrays, see `compile_move_check`). None when no
    move can break it."""
    precondition: Precondition | None = None
    """Hard goals: what feasibility checks from counts before searching."""
    term: SoftTerm | None = None
    """Soft goals: how well a placement meets it, 0..1."""
    counts: bool = False
    """The goal's values are counts: an even share is judged rounded up."""

    @property
    def is_hard(self) -> bool:
        return self.strictness is Strictness.HARD


GOALS: tuple[Goal, ...] = (
    Goal(
        GoalName.REPLICATION_FACTOR,
        Strictness.HARD,
        1,
        "every partition keeps its number of replicas",
        cluster_check=_replication_factor_kept,
        # A move replaces one replica by another: the number never changes.
    ),
    Goal(
        GoalName.ONE_REPLICA_PER_BROKER,
        Strictness.HARD,
        2,
        "no broker holds two replicas of one partition",
        cluster_check=_one_replica_per_broker,
        move_check="dst not in replicas[p]",
    ),
    Goal(
        GoalName.RACK_SPREAD,
        Strictness.HARD,
        3,
        "each rack holds between RF//R and ceil(RF/R) replicas of a partition "
        "(RF distinct racks when RF <= R)",
        cluster_check=_rack_spread,
        # Within one rack the counts per rack stay as they are: no call needed.
        move_check="rack_of[src] == rack_of[dst] or rack_allows(p, src, dst)",
        precondition=Precondition.ACTIVE_BROKERS_PER_RACK,
    ),
    Goal(
        GoalName.NO_REPLICA_ON_INACTIVE_BROKER,
        Strictness.HARD,
        4,
        "no replica on a draining, dead or unknown broker",
        cluster_check=_no_replica_on_inactive_broker,
        move_check="active[dst]",
    ),
    Goal(
        GoalName.DISK_LIMIT,
        Strictness.HARD,
        5,
        "each broker's disk use at most max_disk_share of its capacity",
        cluster_check=_disk_limit,
        move_check="disk[dst] + size[p] <= disk_limit[dst]",
        precondition=Precondition.DISK_ROOM,
    ),
    Goal(
        GoalName.REPLICAS_PER_BROKER,
        Strictness.SOFT,
        6,
        "replicas per broker max-min <= 1 (within each rack when racks pin their totals)",
        term=_replicas_term,
        counts=True,
    ),
    Goal(
        GoalName.LEADERS_PER_BROKER,
        Strictness.SOFT,
        7,
        "preferred leaders per broker max-min <= 1",
        term=_leaders_term,
        counts=True,
    ),
    Goal(
        GoalName.TOPIC_SPREAD,
        Strictness.SOFT,
        8,
        "no broker holds clearly more than its share of one topic",
        term=topic_spread_term,
        counts=True,
    ),
    Goal(
        GoalName.DISK_BYTES,
        Strictness.SOFT,
        9,
        "every broker within +-5% of its share of the bytes",
        term=_disk_term,
    ),
    Goal(
        GoalName.LEADER_BYTES,
        Strictness.SOFT,
        10,
        "leader bytes in and bytes out, each within +-10% of its mean",
        term=_leader_bytes_term,
    ),
)
GOAL_BY_NAME: dict[str, Goal] = {goal.name: goal for goal in GOALS}
HARD: tuple[Goal, ...] = tuple(goal for goal in GOALS if goal.is_hard)
SOFT: tuple[Goal, ...] = tuple(goal for goal in GOALS if not goal.is_hard)
HARD_GOALS: tuple[str, ...] = tuple(goal.name for goal in HARD)
SOFT_GOALS: tuple[str, ...] = tuple(goal.name for goal in SOFT)


def check_table(goals: Sequence[Goal]) -> None:
    """Refuse a table whose entries do not fit together, naming the entry at fault."""
    priorities = [goal.priority for goal in goals]
    if priorities != sorted(priorities) or len(set(priorities)) != len(priorities):
        raise ValueError(f"goal priorities must rise strictly in table order: {priorities}")
    if len({goal.name for goal in goals}) != len(goals):
        raise ValueError("goal names must be unique")
    seen_soft = False
    for goal in goals:
        if goal.is_hard:
            if seen_soft:
                raise ValueError(f"hard goal {goal.name} comes after a soft goal")
            if goal.cluster_check is None or goal.term is not None:
                raise ValueError(f"hard goal {goal.name} needs a cluster check and no term")
        else:
            seen_soft = True
            if goal.term is None or goal.cluster_check or goal.move_check or goal.precondition:
                raise ValueError(f"soft goal {goal.name} needs a term and no hard-goal checks")


check_table(GOALS)


# ----- using the table ------------------------------------------------------------------


def hard_goal_violations(
    cluster: Cluster,
    settings: PlannerSettings,
    original: Cluster | None = None,
) -> list[Violation]:
    """Every hard goal the cluster breaks. With `original`, the replication factor is
    checked against it (a plan must keep every partition's replication factor)."""
    facts = facts_of_cluster(cluster, settings, original)
    return [
        Violation(goal.name, subject, detail)
        for goal in HARD
        if goal.cluster_check is not None
        for subject, detail in goal.cluster_check(facts)
    ]


def first_violations(facts: PlacementFacts) -> dict[str, str]:
    """Each hard goal the placement breaks, with one example ("subject: detail"): each
    check stops at its first finding."""
    broken: dict[str, str] = {}
    for goal in HARD:
        if goal.cluster_check is None:
            continue
        finding = next(goal.cluster_check(facts), None)
        if finding is not None:
            broken[goal.name] = f"{finding[0]}: {finding[1]}"
    return broken


MoveTest = Callable[[int, int, int], bool]
"""(p, src, dst) -> whether moving p's replica from src to dst keeps the goals."""


def compile_move_check(goals: Sequence[Goal], arrays: Mapping[str, object]) -> MoveTest:
    """One function testing the move checks of `goals` (in table order, stopping at the
    first refusal) against `arrays`: the names the expressions use, bound once. Built
    from the table's own text, so the phases' fast path cannot drift from the table."""
    tests = [f"({goal.move_check})" for goal in goals if goal.move_check]
    source = "lambda p, src, dst: " + (" and ".join(tests) if tests else "True")
    try:
        code = compile(source, "<goal move checks>", "eval")
    except SyntaxError as exc:
        raise ValueError(f"a goal's move check is not an expression: {exc.text}") from None
    body = next(c for c in code.co_consts if isinstance(c, CodeType))
    missing = set(body.co_names) - set(arrays)
    if missing:
        raise ValueError(f"move checks use names the state does not provide: {sorted(missing)}")
    # The lambda looks its names up as globals: the arrays, and no builtins.
    return cast(MoveTest, eval(code, {"__builtins__": {}, **arrays}))
