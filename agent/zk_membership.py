"""ZooKeeper ensemble membership by dynamic reconfig: the one place that decides it.

The pure part reads the ensemble's current config (/zookeeper/config), what is alive and the
management plane's repair request, and returns at most one change: remove a server gone
longer than a threshold (or at once when the management plane says its VM is recycled for
good), add this VM's server (participant while the ensemble is below the spec's size, else
observer), or promote this VM's observer while the voting ensemble is below that size. A
change is proposed only when a quorum of the config it produces is connected, one at a
time, and it carries the config version it was decided from and the whole ensemble it
makes (a non-incremental reconfig: ZooKeeper's incremental one wants a plaintext client
port in the joining line): the reconfig is conditional on that version, so of two agents
deciding from the same config only one change lands. A half-done
change (a server removed while it is being replaced, or a server running but absent from
the config) is simply the state the next cycle repairs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from planner.zookeeper_ensemble import (
    EnsembleConfig,
    ZkServer,
    ZookeeperRole,
)


class ReconfigKind(enum.StrEnum):
    ADD = "add"
    REMOVE = "remove"
    PROMOTE = "promote"


@dataclass(frozen=True)
class MembershipView:
    config: EnsembleConfig
    serving: dict[int, bool]  # by server id: answers `srvr` as leader, follower or observer
    down_for_s: dict[int, float]  # by server id: how long it has not been serving
    me: ZkServer | None  # this VM's server, None if it runs none
    desired_participants: int
    gone_threshold_s: float
    recycled_addresses: frozenset[str] = frozenset()  # from the management plane's request


@dataclass(frozen=True)
class ReconfigChange:
    kind: ReconfigKind
    server: ZkServer  # for an add or a promotion: the server with the role it gets
    reason: str
    from_config: int  # the config version this change was decided from
    before: tuple[ZkServer, ...]  # the ensemble of that config version

    @property
    def members(self) -> tuple[ZkServer, ...]:
        """The whole ensemble once the change is made, in server id order."""
        kept = {s.server_id: s for s in self.before}
        kept.pop(self.server.server_id, None)
        if self.kind is not ReconfigKind.REMOVE:
            kept[self.server.server_id] = self.server
        return tuple(kept[i] for i in sorted(kept))

    @property
    def new_members(self) -> str:
        """The reconfig's member list. A whole list, not a joining line: ZooKeeper refuses a
        joining line without a plaintext client port, and a secured server has none."""
        return ",".join(server.line() for server in self.members)

    @property
    def joining(self) -> str | None:
        return self.server.line() if self.kind is not ReconfigKind.REMOVE else None

    @property
    def leaving(self) -> str | None:
        return str(self.server.server_id) if self.kind is ReconfigKind.REMOVE else None


def _has_quorum(participants: set[int], serving: dict[int, bool]) -> bool:
    alive = sum(1 for i in participants if serving.get(i, False))
    return alive * 2 > len(participants)


def _removal(view: MembershipView) -> ReconfigChange | None:
    """One server that is gone (past the threshold, or recycled and not serving), if the
    ensemble without it keeps a connected quorum. An agent never removes its own server."""
    participants = set(view.config.participants)
    for server_id, server in sorted(view.config.servers.items()):
        if view.me is not None and server_id == view.me.server_id:
            continue
        if view.serving.get(server_id, False):
            continue  # a server that answers is not gone, whatever the threshold
        gone_s = view.down_for_s.get(server_id, 0.0)
        recycled = server.address in view.recycled_addresses
        if gone_s < view.gone_threshold_s and not recycled:
            continue
        remaining = participants - {server_id}
        if not remaining or not _has_quorum(remaining, view.serving):
            continue
        why = (
            f"its VM {server.address} is recycled"
            if recycled and gone_s < view.gone_threshold_s
            else f"gone for {gone_s:.0f}s"
        )
        return ReconfigChange(
            ReconfigKind.REMOVE,
            server,
            f"ZooKeeper server {server_id} {why}, removing it from the ensemble",
            view.config.version,
            tuple(view.config.servers.values()),
        )
    return None


def _my_change(view: MembershipView) -> ReconfigChange | None:
    """Add this VM's server when it runs, is synced to the leader, and is not in the config;
    promote it when it observes while the voting ensemble is below the spec's size."""
    me = view.me
    if me is None or not view.serving.get(me.server_id, False):
        return None
    participants = set(view.config.participants)
    current = view.config.servers.get(me.server_id)
    if current is None:
        role = (
            ZookeeperRole.PARTICIPANT
            if len(participants) < view.desired_participants
            else ZookeeperRole.OBSERVER
        )
        voting = participants | ({me.server_id} if role is ZookeeperRole.PARTICIPANT else set())
        if not _has_quorum(voting, view.serving):
            return None
        return ReconfigChange(
            ReconfigKind.ADD,
            me.with_role(role),
            f"ZooKeeper server {me.server_id} is not in the ensemble, adding it as {role.value}",
            view.config.version,
            tuple(view.config.servers.values()),
        )
    if current.role is ZookeeperRole.OBSERVER and len(participants) < view.desired_participants:
        if not _has_quorum(participants | {me.server_id}, view.serving):
            return None
        return ReconfigChange(
            ReconfigKind.PROMOTE,
            current.with_role(ZookeeperRole.PARTICIPANT),
            f"ZooKeeper server {me.server_id} observes while the ensemble has "
            f"{len(participants)} of {view.desired_participants} participants, "
            "promoting it to participant",
            view.config.version,
            tuple(view.config.servers.values()),
        )
    return None


def decide_membership(view: MembershipView) -> ReconfigChange | None:
    # Removal first: a gone server's place is what a new or observing one takes.
    return _removal(view) or _my_change(view)
