"""KRaft controller-quorum membership (KIP-853 dynamic quorum): the one place that decides it.

The pure part reads the quorum as its leader describes it (voters and observers with their
log end offsets and last caught-up times), how long each voter has been gone, and this VM's
own controller, and returns at most one change, like the ZooKeeper ensemble's membership:

- repair first: a voter whose node now runs with another metadata directory (its VM was
  re-imaged, or a replacement kept the node id) is a stale voter: it is removed, and the
  node's new directory is added on a later cycle once it has caught up;
- remove a voter gone longer than the threshold (or at once when its VM is recycled), only if
  the voters left keep a majority that is alive; never the leader, never this VM's own;
- add this VM's controller, an observer, as a voter once it has caught up with the leader,
  while the quorum has fewer voters than the spec asks for, only if the larger quorum has a
  live majority.

Kafka itself runs one voter change at a time and refuses a second while one is pending, so of
two agents deciding from the same description only one change lands; a refused change is
decided again on the next cycle from the quorum as it is then.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole


@dataclass(frozen=True)
class ControllerIdentity:
    node_id: int
    directory_id: str


@dataclass(frozen=True)
class QuorumView:
    replicas: tuple[QuorumReplica, ...]
    high_watermark: int
    me: ControllerIdentity | None  # this VM's controller, None if it runs none
    desired_voters: int  # the spec's quorum size
    gone_for_s: dict[int, float]  # voter node id -> how long it has not caught up
    gone_threshold_s: float
    caught_up_within_ms: int  # an observer caught up this recently counts as caught up
    recycled_node_ids: frozenset[int] = frozenset()

    @property
    def voters(self) -> tuple[QuorumReplica, ...]:
        return tuple(r for r in self.replicas if r.role is not QuorumRole.OBSERVER)

    @property
    def leader(self) -> QuorumReplica | None:
        return next((r for r in self.replicas if r.role is QuorumRole.LEADER), None)


class QuorumChangeKind(enum.StrEnum):
    ADD = "add-controller"
    REMOVE = "remove-controller"


@dataclass(frozen=True)
class QuorumChange:
    kind: QuorumChangeKind
    node_id: int
    directory_id: str
    reason: str


def _alive(replica: QuorumReplica, view: QuorumView) -> bool:
    if replica.role is QuorumRole.LEADER:
        return True
    return view.gone_for_s.get(replica.node_id, 0.0) < view.gone_threshold_s and (
        replica.caught_up_ago_ms is not None
        and replica.caught_up_ago_ms <= view.caught_up_within_ms
    )


def _keeps_majority(voters: list[QuorumReplica], view: QuorumView) -> bool:
    alive = sum(1 for voter in voters if _alive(voter, view))
    return bool(voters) and alive * 2 > len(voters)


def _stale_voter(view: QuorumView) -> QuorumChange | None:
    """A voter whose node id now runs another metadata directory (an observer of the same
    id): the half-done replacement of a controller, repaired by removing the old directory."""
    observers = {r.node_id: r for r in view.replicas if r.role is QuorumRole.OBSERVER}
    for voter in sorted(view.voters, key=lambda r: r.node_id):
        newer = observers.get(voter.node_id)
        if newer is None or newer.directory_id == voter.directory_id:
            continue
        if voter.role is QuorumRole.LEADER:
            continue
        remaining = [v for v in view.voters if v is not voter]
        if not _keeps_majority(remaining, view):
            continue
        return QuorumChange(
            QuorumChangeKind.REMOVE,
            voter.node_id,
            voter.directory_id,
            f"controller {voter.node_id} now runs directory {newer.directory_id}: removing "
            f"its old directory {voter.directory_id} from the voters",
        )
    return None


def _gone_voter(view: QuorumView) -> QuorumChange | None:
    for voter in sorted(view.voters, key=lambda r: r.node_id):
        if voter.role is QuorumRole.LEADER:
            continue
        if view.me is not None and voter.node_id == view.me.node_id:
            continue
        gone_s = view.gone_for_s.get(voter.node_id, 0.0)
        recycled = voter.node_id in view.recycled_node_ids
        if gone_s < view.gone_threshold_s and not recycled:
            continue
        remaining = [v for v in view.voters if v is not voter]
        if not _keeps_majority(remaining, view):
            continue
        why = (
            "its VM is recycled"
            if recycled and gone_s < view.gone_threshold_s
            else (f"gone for {gone_s:.0f}s")
        )
        return QuorumChange(
            QuorumChangeKind.REMOVE,
            voter.node_id,
            voter.directory_id,
            f"controller {voter.node_id} {why}: removing it from the voters",
        )
    return None


def _my_addition(view: QuorumView) -> QuorumChange | None:
    me = view.me
    if me is None:
        return None
    mine = next(
        (r for r in view.replicas if r.node_id == me.node_id and r.directory_id == me.directory_id),
        None,
    )
    if mine is None or mine.role is not QuorumRole.OBSERVER:
        return None  # not yet fetching, or already a voter
    if len(view.voters) >= view.desired_voters:
        return None
    if any(v.node_id == me.node_id for v in view.voters):
        return None  # a stale voter of this id goes first
    caught_up = (
        mine.log_end_offset >= view.high_watermark
        and mine.caught_up_ago_ms is not None
        and mine.caught_up_ago_ms <= view.caught_up_within_ms
    )
    if not caught_up:
        return None
    if not _keeps_majority([*view.voters, mine], view):
        return None
    return QuorumChange(
        QuorumChangeKind.ADD,
        me.node_id,
        me.directory_id,
        f"controller {me.node_id} has caught up and the quorum has {len(view.voters)} of "
        f"{view.desired_voters} voters: adding it as a voter",
    )


def decide_quorum(view: QuorumView) -> QuorumChange | None:
    """At most one voter change; none without a leader to make it."""
    if view.leader is None:
        return None
    return _stale_voter(view) or _gone_voter(view) or _my_addition(view)
