"""The KRaft controller faults: the active controller killed (SIGKILL) or frozen (SIGSTOP), a
follower controller killed, and the quorum's majority frozen. A killed controller is started
again by its VM's agent (the drill only waits for it; without agents the drill starts it);
a frozen one is resumed by the drill after the duration. Each settles once the quorum has a
leader and every voter has caught up, and reports its failover: from the leader gone to the
first leader elected after it (the first successful produce after the fault is the
checker's own figure)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from management_plane.drills.errors import DrillError
from management_plane.drills.faults import (
    FaultContext,
    ProcessAction,
    ProcessKind,
    start_controller,
)

# What a controller fault reports (`ReportsFigures`), in seconds.
NEW_LEADER_AFTER_FAULT = "new_leader_after_fault_s"
NEW_LEADER_AFTER_HEAL = "new_leader_after_heal_s"
SETTLE_TIMEOUT_S = 240.0


def _kraft_only(name: str, context: FaultContext) -> str | None:
    if not context.cluster.runs_kraft():
        return f"{name} needs a KRaft cluster; this one keeps its metadata in ZooKeeper"
    return None


def _leader(context: FaultContext) -> str:
    leader = context.cluster.quorum_leader()
    if leader is None:
        raise DrillError("the KRaft controller quorum has no leader now")
    return leader


def active_controller(context: FaultContext) -> tuple[str, ...]:
    return (_leader(context),)


def follower_controller(context: FaultContext) -> tuple[str, ...]:
    leader = _leader(context)
    followers = [vm for vm in context.cluster.controller_vms() if vm != leader]
    if not followers:
        raise DrillError(f"the KRaft quorum has no controller beside its leader ({leader})")
    return (followers[0],)


def controller_majority(context: FaultContext) -> tuple[str, ...]:
    """The leader and as many followers as leave the rest short of a majority (two of
    three, three of five)."""
    leader = _leader(context)
    controllers = context.cluster.controller_vms()
    majority = len(controllers) // 2 + 1
    followers = [vm for vm in controllers if vm != leader]
    if len(controllers) < 2:
        raise DrillError(f"a quorum of {len(controllers)} controller(s) has no majority to lose")
    return (leader, *followers[: majority - 1])


def _elected_after(context: FaultContext, since_s: float | None) -> tuple[str, float] | None:
    return None if since_s is None else context.cluster.leader_elected_since(since_s)


@dataclass
class ControllerKill:
    """One controller killed (SIGKILL); its VM's agent starts it again. Settled once it runs
    under a new pid and the quorum is whole, with a leader elected after the kill when the
    killed one led."""

    name: str
    summary: str
    pick: Callable[[FaultContext], tuple[str, ...]]
    settle_timeout_s: float = SETTLE_TIMEOUT_S
    victim: str | None = field(default=None, init=False)
    led: bool = field(default=False, init=False)
    pid_before: int | None = field(default=None, init=False)
    killed_s: float | None = field(default=None, init=False)
    restarted_pid: int | None = field(default=None, init=False)
    elected: tuple[str, float] | None = field(default=None, init=False)
    leader_after: str | None = field(default=None, init=False)

    def describe(self) -> str:
        return self.summary

    def preflight(self, context: FaultContext) -> str | None:
        return _kraft_only(self.name, context)

    def inject(self, context: FaultContext) -> str:
        cluster = context.cluster
        leader = _leader(context)
        self.victim = self.pick(context)[0]
        self.led = self.victim == leader
        self.pid_before = cluster.controller_pid(self.victim)
        self.killed_s = time.time()
        cluster.act(self.victim, ProcessAction.KILL, ProcessKind.CONTROLLER)
        return f"{self.victim}'s controller ({'the active one' if self.led else 'a follower'})"

    def hold(self, context: FaultContext) -> None:
        context.sleep(context.duration_s)

    def heal(self, context: FaultContext) -> None:
        if self.victim is not None:
            start_controller(context, self.victim)

    def unsettled(self, context: FaultContext) -> str | None:
        cluster = context.cluster
        if self.victim is None:
            return None
        pid = cluster.controller_pid(self.victim)
        if pid is None or pid == self.pid_before:
            by = " by its agent" if cluster.runs_agents() else ""
            return f"waiting for {self.victim}'s controller to be started again{by}"
        self.restarted_pid = pid
        missing = cluster.quorum_whole()
        if missing is not None:
            return f"waiting for the controller quorum: {missing}"
        self.elected = self.elected or _elected_after(context, self.killed_s)
        if self.led and self.elected is None:
            return "waiting for the controllers' logs to show the new leader"
        self.leader_after = cluster.quorum_leader()
        return None

    def settlement(self) -> str:
        started = "its agent" if self.restarted_pid is not None else "the drill"
        if self.elected is not None and self.killed_s is not None:
            vm, at = self.elected
            leadership = (
                f"{vm}'s controller elected leader {at - self.killed_s:.2f}s after the kill"
            )
        else:
            leadership = f"the leader ({self.leader_after}) kept"
        return (
            f"{self.victim}'s controller running again (pid {self.restarted_pid}, started by "
            f"{started}); {leadership}; every voter caught up"
        )

    def clean_up(self, context: FaultContext) -> None:
        self.heal(context)

    def figures(self, context: FaultContext) -> dict[str, float | None]:
        if self.elected is None or self.killed_s is None:
            return {NEW_LEADER_AFTER_FAULT: None}
        return {NEW_LEADER_AFTER_FAULT: round(self.elected[1] - self.killed_s, 3)}


@dataclass
class ControllerPause:
    """Controllers frozen (SIGSTOP) for the duration and resumed: the active one alone (the
    others elect a leader meanwhile) or the quorum's majority (no leader can be elected until
    they are back). The agents leave a paused controller alone, so the drill's duration is
    the fault's. Settled once the quorum is whole again."""

    name: str
    summary: str
    pick: Callable[[FaultContext], tuple[str, ...]]
    settle_timeout_s: float = SETTLE_TIMEOUT_S
    victims: tuple[str, ...] = field(default=(), init=False)
    paused_s: float | None = field(default=None, init=False)
    resumed_s: float | None = field(default=None, init=False)
    elected: tuple[str, float] | None = field(default=None, init=False)

    def describe(self) -> str:
        return self.summary

    def preflight(self, context: FaultContext) -> str | None:
        return _kraft_only(self.name, context)

    def inject(self, context: FaultContext) -> str:
        self.victims = self.pick(context)
        self.paused_s = time.time()
        for vm in self.victims:
            context.cluster.act(vm, ProcessAction.PAUSE, ProcessKind.CONTROLLER)
        return ", ".join(f"{vm}'s controller" for vm in self.victims) + " paused"

    def hold(self, context: FaultContext) -> None:
        context.sleep(context.duration_s)

    def heal(self, context: FaultContext) -> None:
        if not self.victims:
            return
        for vm in self.victims:
            context.cluster.act(vm, ProcessAction.RESUME, ProcessKind.CONTROLLER)
        self.resumed_s = time.time()
        self.victims = ()

    def unsettled(self, context: FaultContext) -> str | None:
        missing = context.cluster.quorum_whole()
        if missing is not None:
            return f"waiting for the controller quorum: {missing}"
        self.elected = self.elected or _elected_after(context, self.paused_s)
        return None

    def settlement(self) -> str:
        if self.elected is None or self.paused_s is None:
            return "the quorum whole again without a new election (the leader kept)"
        vm, at = self.elected
        return (
            f"{vm}'s controller elected leader {at - self.paused_s:.2f}s after the pause; "
            "every voter caught up"
        )

    def clean_up(self, context: FaultContext) -> None:
        self.heal(context)

    def figures(self, context: FaultContext) -> dict[str, float | None]:
        if self.elected is None or self.paused_s is None:
            return {NEW_LEADER_AFTER_FAULT: None, NEW_LEADER_AFTER_HEAL: None}
        at = self.elected[1]
        after_heal = None if self.resumed_s is None else round(at - self.resumed_s, 3)
        return {
            NEW_LEADER_AFTER_FAULT: round(at - self.paused_s, 3),
            NEW_LEADER_AFTER_HEAL: after_heal,
        }
