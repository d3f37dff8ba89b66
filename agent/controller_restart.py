"""A KRaft controller's restart with a new controller.properties, run off the agent's loop:
under the cluster-wide restart lock (one restart of any process at a time), only once the
rest of the quorum has caught up (looked at again under the lock: the last describe may be
seconds old), then stop, write, start, and hold the lock until this controller has caught
up again, so the next controller's restart never finds the quorum a vote short.

The decision to restart and its order (brokers, follower controllers, the active controller
last) is `decide`'s; this runs the steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.errors import AgentError
from agent.kraft_keeper import rest_caught_up
from agent.ports import BrokerSupervisor, Clock, RestartLock, StoreUnavailable
from agent.restart_runner import write_properties
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole

Describe = Callable[[], tuple[int | None, tuple[QuorumReplica, ...]]]


@dataclass(frozen=True)
class ControllerRestartSettings:
    node_id: int
    properties_path: Path
    caught_up_within_ms: int
    lock_poll_s: float = 5.0
    quorum_wait_s: float = 180.0
    stop_timeout_s: float = 60.0
    poll_s: float = 2.0


def _caught_up(replicas: tuple[QuorumReplica, ...], node_id: int, within_ms: int) -> bool:
    mine = [r for r in replicas if r.node_id == node_id and r.role is not QuorumRole.OBSERVER]
    return bool(mine) and all(
        r.role is QuorumRole.LEADER
        or (r.caught_up_ago_ms is not None and r.caught_up_ago_ms <= within_ms)
        for r in mine
    )


def restart_controller(
    settings: ControllerRestartSettings,
    lock: RestartLock,
    controller: BrokerSupervisor,
    describe: Describe,
    properties: Mapping[str, str],
    kafka_version: str,
    clock: Clock,
    report: Callable[[str], None],
) -> str:
    """The whole restart; the result for the journal."""
    report("controller restart: waiting for the restart lock")
    try:
        while not lock.acquire(settings.lock_poll_s):
            holders = lock.holders()
            report(
                "controller restart: waiting for the restart lock"
                + (f" held by {holders[0]}" if holders else "")
            )
    except StoreUnavailable as exc:
        return f"abandoned: restart lock unavailable ({exc})"
    try:
        report("controller restart 1/3: waiting until the rest of the quorum has caught up")
        if not _wait(
            lambda: rest_caught_up(describe()[1], settings.node_id, settings.caught_up_within_ms),
            settings,
            clock,
        ):
            return "abandoned: the rest of the quorum did not catch up"
        report("controller restart 2/3: restarting the controller")
        controller.stop(settings.stop_timeout_s)
        write_properties(settings.properties_path, properties)
        controller.start(kafka_version)
        report("controller restart 3/3: waiting until the controller has caught up")
        if not _wait(
            lambda: _caught_up(describe()[1], settings.node_id, settings.caught_up_within_ms),
            settings,
            clock,
        ):
            return "controller restarted, not caught up in time"
        return "done, caught up"
    finally:
        with contextlib.suppress(StoreUnavailable):  # an ephemeral node: goes with the session
            lock.release()


def _wait(ready: Callable[[], bool], settings: ControllerRestartSettings, clock: Clock) -> bool:
    deadline = clock.monotonic() + settings.quorum_wait_s
    while clock.monotonic() < deadline:
        try:
            if ready():
                return True
        except AgentError:
            pass  # the quorum tool failed (an election running): look again
        clock.sleep(settings.poll_s)
    return False
