"""What this VM's MirrorMaker process should do next (pure).

One process per VM runs every flow of the target cluster placed on the VM (the renderer puts
them in one properties file). From the flows in ZooKeeper, the live agents and which flows'
source credentials this VM holds, `select_flows` says which flows run here; the shell renders
their properties; `decide_mirror` compares them with the running process: start it, restart
it with the new properties, stop it when no flow is left, or wait out the backoff after it
exited on its own. The memory (`MirrorMemory`) carries what one look cannot see: that the
process was meant to be running, and how often it died.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from planner.contracts.mirror_flow import FlowState, MirrorFlow

BACKOFF_FIRST_S = 5.0
BACKOFF_MAX_S = 300.0
STABLE_AFTER_S = 120.0
"""A process that ran this long is healthy again: its next exit starts the backoff over."""


class MirrorActionKind(StrEnum):
    NOTHING = "nothing"
    START = "start_mirror_maker"
    RESTART = "restart_mirror_maker"
    STOP = "stop_mirror_maker"
    WAIT = "wait_mirror_maker_backoff"


@dataclass(frozen=True)
class MirrorMemory:
    expect_running: bool = False
    """The agent started (or found) the process and has not stopped it since."""
    started_at: float | None = None
    crashes: int = 0
    """Exits on its own since the process last ran `STABLE_AFTER_S`."""
    last_exit_at: float | None = None


@dataclass(frozen=True)
class FlowSelection:
    flows: tuple[MirrorFlow, ...]
    """The flows this VM runs, by name."""
    skipped: dict[str, str]
    """Flows placed here that cannot run, and why."""


def select_flows(
    flows: Mapping[str, MirrorFlow],
    broker_id: int,
    live_broker_ids: frozenset[int],
    sources_held: frozenset[str],
) -> FlowSelection:
    """The active flows placed on this VM whose source credentials it holds."""
    chosen: list[MirrorFlow] = []
    skipped: dict[str, str] = {}
    for name, flow in sorted(flows.items()):
        if flow.state is not FlowState.ACTIVE or not flow.runs_on(broker_id, live_broker_ids):
            continue
        if name not in sources_held:
            skipped[name] = "no credentials for its source on this VM"
            continue
        chosen.append(flow)
    return FlowSelection(tuple(chosen), skipped)


def reports_lag(flow: MirrorFlow, broker_id: int, live_broker_ids: frozenset[int]) -> bool:
    """Whether this VM measures the flow's lag: it runs the flow, and no live agent of a
    lower broker id does (one reporter per flow, and another takes over when it is gone)."""
    live = live_broker_ids | {broker_id}
    runners = [b for b in sorted(live) if flow.runs_on(b, live_broker_ids)]
    return bool(runners) and runners[0] == broker_id


@dataclass(frozen=True)
class MirrorObservation:
    desired: str | None
    """The properties this VM's process should run with; None: no flow runs here."""
    flows: tuple[str, ...]
    running: bool
    running_properties: str | None
    """The properties the running process was started with (its file)."""
    now: float


@dataclass(frozen=True)
class MirrorDecision:
    kind: MirrorActionKind
    reason: str
    memory: MirrorMemory


def backoff_s(crashes: int) -> float:
    """How long to wait before starting again after the `crashes`-th exit in a row."""
    if crashes <= 0:
        return 0.0
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (crashes - 1))


def observe(memory: MirrorMemory, running: bool, now: float) -> MirrorMemory:
    """The memory after this look: an exit nobody asked for is a crash; a long run clears
    the count; a process found running (the agent restarted) is adopted."""
    if memory.expect_running and not running:
        return MirrorMemory(False, None, memory.crashes + 1, now)
    if running and not memory.expect_running:
        return replace(memory, expect_running=True, started_at=now)
    if running and memory.started_at is not None and now - memory.started_at >= STABLE_AFTER_S:
        return replace(memory, crashes=0, last_exit_at=None)
    return memory


def decide_mirror(seen: MirrorObservation, memory: MirrorMemory) -> MirrorDecision:
    memory = observe(memory, seen.running, seen.now)
    names = ", ".join(seen.flows)
    if seen.desired is None:
        if seen.running:
            return MirrorDecision(
                MirrorActionKind.STOP,
                "MirrorMaker: no flow runs on this VM any more, stopping it",
                MirrorMemory(crashes=memory.crashes, last_exit_at=memory.last_exit_at),
            )
        return MirrorDecision(MirrorActionKind.NOTHING, "", memory)
    started = replace(memory, expect_running=True, started_at=seen.now)
    if not seen.running:
        if memory.crashes and memory.last_exit_at is not None:
            left = memory.last_exit_at + backoff_s(memory.crashes) - seen.now
            if left > 0:
                return MirrorDecision(
                    MirrorActionKind.WAIT,
                    f"MirrorMaker exited ({memory.crashes} in a row): starting it again in "
                    f"{left:.0f} s",
                    memory,
                )
        again = f" after {memory.crashes} exits" if memory.crashes else ""
        return MirrorDecision(
            MirrorActionKind.START, f"MirrorMaker: starting flows {names}{again}", started
        )
    if seen.running_properties != seen.desired:
        return MirrorDecision(
            MirrorActionKind.RESTART,
            f"MirrorMaker: the flows changed, restarting with {names}",
            started,
        )
    return MirrorDecision(MirrorActionKind.NOTHING, f"MirrorMaker runs flows {names}", memory)
