"""The state an agent reports in its member record (pure): what its cycle's decision found,
as a value the management plane can act on. It follows `decide`'s branches in their order,
so every sentence `decide` can say has exactly one state."""

from __future__ import annotations

from agent.decide import STOPPED, Action, Snapshot
from planner.contracts.member import MemberState

_BY_ACTION = {
    "start": MemberState.STARTING,
    "restart": MemberState.RESTARTING,
    "zk_reconfig": MemberState.RECONFIGURING_ZOOKEEPER,
    "apply_dynamic": MemberState.APPLYING_CONFIG,
    "start_controller": MemberState.STARTING,
    "restart_controller": MemberState.RESTARTING,
    "stop_controller": MemberState.RESTARTING,
    "restart_zookeeper": MemberState.RESTARTING,
}


def member_state(snap: Snapshot, action: Action, long_action_kind: str | None) -> MemberState:
    """`long_action_kind`: the kind of the start or restart running off the loop, if any."""
    if long_action_kind is not None:
        return _BY_ACTION.get(long_action_kind, MemberState.RESTARTING)
    if action.kind in _BY_ACTION:
        return _BY_ACTION[action.kind]
    if snap.spec is None:
        return MemberState.WAITING_FOR_SPEC
    broker = snap.broker
    if broker.process == STOPPED:
        return MemberState.STARTING
    if not broker.responsive:
        return MemberState.UNRESPONSIVE
    if not broker.registered:
        return MemberState.JOINING
    if snap.config.error is not None:
        return MemberState.REFUSING
    if snap.config.read_only or snap.controller_changed:
        return MemberState.AWAITING_RESTART
    return MemberState.HEALTHY
