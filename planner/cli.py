"""`kaas plan generate|score`: the planner on LAYOUT.json files (`kaas plan export`, which
needs a live cluster, lives in the management plane's command line).

Exit codes: 0 done, 2 bad input (layout, plan or flags), 3 infeasible (no plan keeps the
hard goals; the reason and a recommendation are printed).
"""

from __future__ import annotations

import argparse
import enum
import json
import re
import sys
from pathlib import Path
from typing import Any

from planner.batches import BatchingError, MovementBudget
from planner.errors import PlannerError
from planner.feasibility import InfeasibleError
from planner.goals import hard_goal_violations
from planner.layout import LayoutError, load_layout
from planner.model import BrokerState, Cluster, PlannerSettings
from planner.plan import cycle_collector_paused, make_plan, spread_of
from planner.reassignment import ReassignmentError, load_reassignment
from planner.score import score_state
from planner.state import PlacementState

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3

_BUDGET_KEYS = {
    "partitions-per-broker": "max_partitions_per_broker",
    "bytes-in-flight": "max_bytes_in_flight",
    "leadership-changes": "max_leadership_changes",
}
_SIZE = re.compile(r"^(\d+)\s*([KMGT]i?B?|B)?$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4}


class Command(enum.StrEnum):
    GENERATE = "generate"
    SCORE = "score"


class UsageError(PlannerError, ValueError):
    pass


def parse_size(text: str) -> int:
    """'10GiB', '500MB', '1048576' -> bytes."""
    match = _SIZE.match(text.strip())
    if not match:
        raise UsageError(f"{text!r} is not a size (e.g. 1048576, 500MB, 10GiB)")
    number, unit = int(match.group(1)), (match.group(2) or "").upper()
    if "I" in unit:
        return number * 1024 ** ("KMGT".index(unit[0]) + 1)
    return number * _UNITS[unit[:1]]


def parse_budget(text: str | None) -> MovementBudget:
    """'partitions-per-broker=5,bytes-in-flight=10GiB,leadership-changes=50'."""
    if not text:
        return MovementBudget()
    values: dict[str, int] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in _BUDGET_KEYS:
            raise UsageError(
                f"--budget: {item!r} is not KEY=VALUE with KEY one of {', '.join(_BUDGET_KEYS)}"
            )
        number = parse_size(value) if key == "bytes-in-flight" else _positive(value, key)
        if number < 1:
            raise UsageError(f"--budget: {key} must be at least 1")
        values[_BUDGET_KEYS[key]] = number
    return MovementBudget(**values)


def _positive(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"--budget: {what}={value!r} is not an integer") from None


def parse_drain(text: str | None, cluster: Cluster) -> Cluster:
    if not text:
        return cluster
    known = {b.id for b in cluster.brokers}
    states: dict[int, BrokerState] = {}
    for item in text.split(","):
        try:
            broker_id = int(item)
        except ValueError:
            raise UsageError(f"--drain: {item!r} is not a broker id") from None
        if broker_id not in known:
            raise UsageError(f"--drain: broker {broker_id} is not in the layout")
        states[broker_id] = BrokerState.DRAINING
    return cluster.with_broker_states(states)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kaas plan", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser(
        Command.GENERATE,
        help="plan a layout; Kafka's reassignment JSON on stdout, summary on stderr",
    )
    generate.add_argument("--layout", required=True, type=Path, help="LAYOUT.json")
    generate.add_argument("--drain", help="broker ids to empty, comma-separated")
    generate.add_argument(
        "--budget",
        help="movement budget per batch: partitions-per-broker=N,bytes-in-flight=SIZE,"
        "leadership-changes=N (default: no limit, one batch per step)",
    )
    generate.add_argument("--seed", type=int, default=0, help="same layout + seed = same plan")
    generate.add_argument(
        "--max-disk-share", type=float, default=0.8, help="hard disk limit (share of capacity)"
    )
    generate.add_argument("--json-summary", type=Path, help="also write the summary here")
    generate.add_argument(
        "--batches", type=Path, help="also write the batches (one reassignment JSON each)"
    )
    score = commands.add_parser(Command.SCORE, help="the balance score of a layout (after a plan)")
    score.add_argument("--layout", required=True, type=Path)
    score.add_argument("--plan", type=Path, help="reassignment JSON applied to the layout first")
    score.add_argument("--max-disk-share", type=float, default=0.8)
    score.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = PlannerSettings(max_disk_share=args.max_disk_share)
        if Command(args.command) is Command.GENERATE:
            return _generate(args, settings)
        return _score(args, settings)
    except (LayoutError, ReassignmentError, UsageError, ValueError) as exc:
        print(f"kaas plan: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (InfeasibleError, BatchingError) as exc:
        print(f"kaas plan: infeasible: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE


def _generate(args: argparse.Namespace, settings: PlannerSettings) -> int:
    with cycle_collector_paused():
        return _generate_unpaused(args, settings)


def _generate_unpaused(args: argparse.Namespace, settings: PlannerSettings) -> int:
    cluster = parse_drain(args.drain, load_layout(args.layout))
    budget = parse_budget(args.budget)
    plan = make_plan(cluster, settings, seed=args.seed, budget=budget)
    json.dump(plan.reassignment_json(), sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")
    summary = plan.summary()
    _print_generate_summary(summary)
    if args.json_summary:
        args.json_summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if args.batches:
        batches = [
            {
                "version": 1,
                "partitions": [
                    {"topic": s.topic, "partition": s.partition, "replicas": list(s.replicas)}
                    for s in batch.steps
                ],
            }
            for batch in plan.batches
        ]
        args.batches.write_text(json.dumps(batches, indent=1) + "\n", encoding="utf-8")
    return 0


def _print_generate_summary(summary: dict[str, Any]) -> None:
    before, after = summary["score_before"], summary["score_after"]
    lines = [
        f"partitions changed {summary['partitions_changed']} in {summary['batches']} batches",
        f"replicas moved {summary['replicas_moved']}, bytes moved {summary['bytes_moved']}, "
        f"leadership changes {summary['leadership_changes']}",
        f"score {before['total']:.1f} -> {after['total']:.1f}",
        f"replicas per broker max-min {summary['spread_before']['replicas_max_minus_min']} -> "
        f"{summary['spread_after']['replicas_max_minus_min']}, leaders per broker max-min "
        f"{summary['spread_before']['leaders_max_minus_min']} -> "
        f"{summary['spread_after']['leaders_max_minus_min']}",
        f"planned in {summary['seconds']:.2f} s (seed {summary['seed']})",
    ]
    for line in lines:
        print(line, file=sys.stderr)


def _score(args: argparse.Namespace, settings: PlannerSettings) -> int:
    cluster = load_layout(args.layout)
    if args.plan:
        cluster = cluster.with_assignment(load_reassignment(args.plan, cluster))
    violations = hard_goal_violations(cluster, settings)
    state = PlacementState(cluster, settings)
    score, spread = score_state(state), spread_of(state)
    report = {
        **score.as_dict(),
        "spread": spread.as_dict(),
        "hard_goal_violations": [str(v) for v in violations],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"score {report['total']:.1f} / 100")
    for name, value in report["goals"].items():
        print(f"  {name:<32} {value:6.1f}")
    print("resources (informative):")
    for name, value in report["resources"].items():
        print(f"  {name:<32} {value:6.1f}")
    print(
        f"replicas per broker max-min {spread.replicas}, leaders per broker max-min "
        f"{spread.leaders}, disk max deviation {spread.disk_max_deviation:.1%}"
    )
    for violation in violations[:20]:
        print(f"hard goal broken: {violation}")
    if len(violations) > 20:
        print(f"... and {len(violations) - 20} more hard-goal violations")
    return 0
