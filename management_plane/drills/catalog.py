"""Every drill `kaas drill` knows: its name, its faults (run one after the other, with a
recovery check between) and its default fault duration."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from management_plane.drills.controller_faults import (
    ControllerKill,
    ControllerPause,
    active_controller,
    controller_majority,
    follower_controller,
)
from management_plane.drills.disk_faults import DestroyedVolume, FullDisk
from management_plane.drills.errors import DrillRefused
from management_plane.drills.faults import (
    BounceFault,
    DegradedNetwork,
    Fault,
    NetworkPartition,
    ProcessAction,
    ProcessFault,
    ProcessKind,
    controller_vm,
    follower_broker_vm,
    leader_vm,
    zookeeper_follower,
    zookeeper_leader,
    zookeeper_quorum,
)
from management_plane.drills.plane_faults import LostVm, ManagementPlaneKill
from management_plane.drills.planner_faults import PlannerAgentKill


@dataclass(frozen=True)
class Drill:
    name: str
    summary: str
    faults: Callable[[], tuple[Fault, ...]]  # new fault objects for each run
    duration_s: float  # of each fault, unless the run says otherwise
    # It faults the management plane itself (kills it, or waits for its repair): it runs
    # beside the cluster (`kaas drill run`), never as one of that plane's operations.
    faults_the_plane: bool = False
    kraft_only: bool = False  # it faults KRaft controllers: refused in ZooKeeper mode


def _process(
    name: str,
    summary: str,
    kind: ProcessKind,
    action: ProcessAction,
    pick: Callable[..., tuple[str, ...]],
    needs_agents: bool = False,
) -> Callable[[], tuple[Fault, ...]]:
    return lambda: (ProcessFault(name, summary, kind, action, pick, needs_agents),)


def _bounce(
    name: str,
    summary: str,
    hard: bool,
    pick: Callable[..., tuple[str, ...]],
    controller: bool = False,
) -> Callable[[], tuple[Fault, ...]]:
    return lambda: (BounceFault(name, summary, hard, pick, controller),)


_SINGLE: tuple[Drill, ...] = (
    Drill(
        "broker-sigkill",
        "the broker leading partition 0 killed (SIGKILL), started again after the duration",
        _process(
            "broker-sigkill",
            "partition 0's leader killed",
            ProcessKind.KAFKA,
            ProcessAction.KILL,
            leader_vm,
        ),
        30.0,
    ),
    Drill(
        "broker-sigstop",
        "a broker (not the controller) frozen with SIGSTOP for the duration, then resumed",
        _process(
            "broker-sigstop",
            "a broker paused",
            ProcessKind.KAFKA,
            ProcessAction.PAUSE,
            follower_broker_vm,
        ),
        30.0,
    ),
    Drill(
        "leader-clean-bounce",
        "partition 0's leader stopped cleanly (controlled shutdown) and started, 3 times",
        _bounce("leader-clean-bounce", "leader clean bounce", False, leader_vm),
        30.0,
    ),
    Drill(
        "leader-hard-bounce",
        "partition 0's leader killed (SIGKILL) and started, 3 times",
        _bounce("leader-hard-bounce", "leader hard bounce", True, leader_vm),
        30.0,
    ),
    Drill(
        "controller-clean-bounce",
        "the controller's broker (KRaft: the active controller) stopped cleanly and started, "
        "3 times",
        _bounce("controller-clean-bounce", "controller clean bounce", False, controller_vm, True),
        30.0,
    ),
    Drill(
        "controller-hard-bounce",
        "the controller's broker (KRaft: the active controller) killed (SIGKILL) and started, "
        "3 times",
        _bounce("controller-hard-bounce", "controller hard bounce", True, controller_vm, True),
        30.0,
    ),
    Drill(
        "zookeeper-follower-kill",
        "a ZooKeeper follower killed, started again after the duration",
        _process(
            "zookeeper-follower-kill",
            "a ZooKeeper follower killed",
            ProcessKind.ZOOKEEPER,
            ProcessAction.KILL,
            zookeeper_follower,
        ),
        30.0,
    ),
    Drill(
        "zookeeper-leader-kill",
        "the ZooKeeper leader killed, started again after the duration",
        _process(
            "zookeeper-leader-kill",
            "the ZooKeeper leader killed",
            ProcessKind.ZOOKEEPER,
            ProcessAction.KILL,
            zookeeper_leader,
        ),
        30.0,
    ),
    Drill(
        "zookeeper-quorum-loss",
        "two of three ZooKeeper servers (the leader and a follower) killed for the duration",
        _process(
            "zookeeper-quorum-loss",
            "ZooKeeper quorum lost",
            ProcessKind.ZOOKEEPER,
            ProcessAction.KILL,
            zookeeper_quorum,
        ),
        30.0,
    ),
    Drill(
        "kraft-controller-kill",
        "KRaft: the active controller killed (SIGKILL); the others elect a leader and its "
        "VM's agent starts it again",
        lambda: (
            ControllerKill(
                "kraft-controller-kill", "the active controller killed", active_controller
            ),
        ),
        30.0,
        kraft_only=True,
    ),
    Drill(
        "kraft-controller-sigstop",
        "KRaft: the active controller frozen with SIGSTOP for the duration (the others elect "
        "a leader), then resumed",
        lambda: (
            ControllerPause(
                "kraft-controller-sigstop", "the active controller paused", active_controller
            ),
        ),
        30.0,
        kraft_only=True,
    ),
    Drill(
        "kraft-follower-controller-kill",
        "KRaft: a follower controller killed (SIGKILL); the leader stays and the VM's agent "
        "starts it again",
        lambda: (
            ControllerKill(
                "kraft-follower-controller-kill",
                "a follower controller killed",
                follower_controller,
            ),
        ),
        30.0,
        kraft_only=True,
    ),
    Drill(
        "kraft-quorum-loss",
        "KRaft: the controller quorum's majority (the leader and a follower of three) frozen "
        "with SIGSTOP for the duration, then resumed",
        lambda: (
            ControllerPause(
                "kraft-quorum-loss", "controller quorum majority paused", controller_majority
            ),
        ),
        30.0,
        kraft_only=True,
    ),
    Drill(
        "agent-kill",
        "a VM's kaas-agent killed (SIGKILL), started again after the duration",
        _process(
            "agent-kill",
            "an agent killed",
            ProcessKind.AGENT,
            ProcessAction.KILL,
            follower_broker_vm,
            needs_agents=True,
        ),
        30.0,
    ),
    Drill(
        "network-partition",
        "one broker's VM cut off from the other VMs and from clients (nftables), then healed",
        lambda: (NetworkPartition(),),
        30.0,
    ),
    Drill(
        "destroyed-volume",
        "a broker's log directory deleted while it runs; it stops, starts empty and re-replicates",
        lambda: (DestroyedVolume(),),
        30.0,
    ),
    Drill(
        "full-disk",
        "a broker's log directory moved onto a small tmpfs and filled; freed and moved back "
        "after the duration",
        lambda: (FullDisk(),),
        30.0,
    ),
    Drill(
        "degraded-network",
        "one broker's VM losing 20% of its packets each way (nftables), then healed",
        lambda: (DegradedNetwork(),),
        30.0,
    ),
    Drill(
        "planner-agent-kill",
        "the elected planner's agent killed (SIGKILL) while its plan moves a topic's replicas "
        "(a topic of the drill's own, on two brokers, at a slow budget); another agent is "
        "elected, finishes the same plan and clears the throttles",
        lambda: (PlannerAgentKill(),),
        30.0,
    ),
    Drill(
        "management-plane-kill",
        "kaas serve killed (SIGKILL) while a rolling config change waits for the agents; "
        "started again, it resumes the operation from its journal and finishes it",
        lambda: (ManagementPlaneKill(),),
        10.0,
        faults_the_plane=True,
    ),
    Drill(
        "lost-vm",
        "a broker's VM lost (every process killed, its volume deleted); the management plane "
        "notices after its threshold and replaces it, keeping the broker id",
        lambda: (LostVm(),),
        30.0,
        faults_the_plane=True,
    ),
)

# The rolling sequence: one fault of each family, with recovery checks between.
GAME_DAY_DRILLS = (
    "broker-sigkill",
    "leader-clean-bounce",
    "controller-hard-bounce",
    "zookeeper-leader-kill",
    "network-partition",
)


GAME_DAY = "game-day"


def game_day(names: Sequence[str] = GAME_DAY_DRILLS) -> Drill:
    """The rolling sequence of the drills `names`, in that order (any single drill, each at
    most once)."""
    by_name = {drill.name: drill for drill in _SINGLE}
    problems = [f"{name!r} is not a single drill" for name in names if name not in by_name]
    repeated = sorted({name for name in names if list(names).count(name) > 1})
    if repeated:
        problems.append(f"{', '.join(repeated)} named more than once")
    if not names:
        problems.append("it needs at least one drill")
    if problems:
        raise DrillRefused(
            f"game-day refused: {'; '.join(problems)} (single drills: {', '.join(by_name)})"
        )
    chosen = tuple(names)
    return Drill(
        GAME_DAY,
        "in turn: " + ", ".join(chosen) + ", each recovered before the next",
        lambda: tuple(fault for name in chosen for fault in by_name[name].faults()),
        15.0,
        faults_the_plane=any(by_name[name].faults_the_plane for name in chosen),
        kraft_only=any(by_name[name].kraft_only for name in chosen),
    )


DRILLS: tuple[Drill, ...] = (*_SINGLE, game_day())


def choose_drill(name: str, game_day_drills: Sequence[str] | None) -> Drill:
    """The drill to run: `name`, or the game day of the drills chosen for it."""
    if game_day_drills is None:
        return find_drill(name)
    if name != GAME_DAY:
        raise DrillRefused(f"drill {name} refused: only {GAME_DAY} takes a list of drills")
    return game_day(game_day_drills)


def find_drill(name: str) -> Drill:
    for drill in DRILLS:
        if drill.name == name:
            return drill
    raise DrillRefused(
        f"unknown drill {name!r}: `kaas drill list` names them ({', '.join(d.name for d in DRILLS)})"
    )
