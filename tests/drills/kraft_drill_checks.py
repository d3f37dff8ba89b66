"""The drills on a KRaft cluster with agents (run on the KRaft integration file's shared
cluster, which they leave as they found it): the controller faults and the drill table's
faults that apply to KRaft. In `make test` they run as one game day of short faults (one
workload, every fault recovered before the next); under `make drills` each drill runs alone
at its full duration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from management_plane.drills.catalog import DRILLS, game_day
from management_plane.drills.controller_faults import NEW_LEADER_AFTER_FAULT
from management_plane.drills.runner import DrillResult, FaultOutcome
from tests.drills.drill_runs import CI_GAME_DAY_DRILLS, FULL, run_and_check
from tests.harness import ClusterHandle

CONTROLLER_DRILLS = (
    "kraft-controller-kill",
    "kraft-controller-sigstop",
    "kraft-follower-controller-kill",
    "kraft-quorum-loss",
)
# Long enough for the two controllers left to elect a leader while the active one is paused
# (Kafka's defaults: a follower gives up on its leader after 2 s, an election takes 1-2 s).
SHORT_CONTROLLER_S = 5.0
# Drills with tests of their own on the ZooKeeper-mode clusters (the volumes', the management
# plane's, the planner's) or that fault only ZooKeeper-mode pieces are not in the KRaft table.
TABLE_DRILLS = tuple(
    d.name
    for d in DRILLS
    if not d.kraft_only
    and d.name
    not in (
        "game-day",
        "destroyed-volume",
        "full-disk",
        "management-plane-kill",
        "lost-vm",
        "planner-agent-kill",
    )
)


def run_kraft_drills(
    handle: ClusterHandle, tmp_path: Path
) -> list[tuple[FaultOutcome, dict[str, Any]]]:
    """Every drill of the KRaft set, each checked by `run_and_check` (valid verdict,
    recovered, report written, nothing left behind); returns each fault's outcome with its
    report entry, in order."""
    if FULL:
        results = [
            run_and_check(handle, name, tmp_path / name)
            for name in (*CONTROLLER_DRILLS, *TABLE_DRILLS)
        ]
    else:
        drill = game_day((*CONTROLLER_DRILLS, *CI_GAME_DAY_DRILLS))
        results = [
            run_and_check(handle, "game-day", tmp_path, drill=drill, short_s=SHORT_CONTROLLER_S)
        ]
    pairs: list[tuple[FaultOutcome, dict[str, Any]]] = []
    for result in results:
        assert result.verdict.totals.failed == 0, result.report["summary"]
        pairs += list(zip(result.outcomes, result.report["summary"]["faults"], strict=True))
        _print_figures(result)
    return pairs


def _print_figures(result: DrillResult) -> None:
    for outcome, entry in zip(result.outcomes, result.report["summary"]["faults"], strict=True):
        print(
            f"\nkraft figures {outcome.fault}: first ack after fault "
            f"{entry['first_ack_after_fault_s']}s, recovery {entry['recovery_s']}s, "
            f"own {entry['figures']}; {outcome.settled or ''}"
        )
    print(
        f"kraft run {result.drill}: {result.ended_s - result.started_s:.0f}s, longest stall "
        f"{result.report['summary']['longest_stall_s']}s, valid {result.verdict.valid}"
    )


def check_controller_faults(pairs: list[tuple[FaultOutcome, dict[str, Any]]]) -> None:
    """Each controller fault: a leader elected again (after the active one was lost), the
    killed controller started again by its agent, every voter caught up, produce flowing
    again within seconds."""
    by_fault = {outcome.fault: (outcome, entry) for outcome, entry in pairs}
    assert set(CONTROLLER_DRILLS) <= set(by_fault), sorted(by_fault)
    for name in CONTROLLER_DRILLS:
        outcome, entry = by_fault[name]
        # Settled: the quorum had a leader and every voter caught up (the settle's check).
        assert outcome.settled is not None, vars(outcome)
        assert entry["first_ack_after_fault_s"] is not None
        assert entry["first_ack_after_fault_s"] < 5.0, entry
    killed, entry = by_fault["kraft-controller-kill"]
    assert killed.target.endswith("'s controller (the active one)"), killed.target
    assert "started by its agent" in (killed.settled or ""), killed.settled
    assert "every voter caught up" in (killed.settled or "")
    victim = killed.target.split("'s ")[0]
    assert not (killed.settled or "").split("; ")[1].startswith(victim), killed.settled
    elected = entry["figures"][NEW_LEADER_AFTER_FAULT]
    assert elected is not None and 0 < elected < 15.0, entry
    paused, entry = by_fault["kraft-controller-sigstop"]
    assert paused.target.endswith("'s controller paused"), paused.target
    elected = entry["figures"][NEW_LEADER_AFTER_FAULT]
    assert elected is not None and 0 < elected < 15.0, entry
    follower, entry = by_fault["kraft-follower-controller-kill"]
    assert follower.target.endswith("'s controller (a follower)"), follower.target
    assert "started by its agent" in (follower.settled or "")
    assert "kept" in (follower.settled or "") and entry["figures"][NEW_LEADER_AFTER_FAULT] is None
    lost, entry = by_fault["kraft-quorum-loss"]
    assert lost.target.count("'s controller") == 2, lost.target
