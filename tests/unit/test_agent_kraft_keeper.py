"""The agent's quorum keeper against a fake quorum: who may make which change, since when a
voter is gone, the one change per look, the unregistration of recycled brokers."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.kraft_keeper import (
    QuorumKeeper,
    allowed,
    metadata_directory_id,
    recycled_controllers,
    stale_brokers,
    track_unseen,
)
from agent.kraft_quorum import ControllerIdentity, QuorumChange, QuorumChangeKind
from agent.kraft_quorum_tool import QuorumToolError
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole, QuorumStatus
from planner.contracts.spec import ClusterSpec

pytestmark = pytest.mark.unit

LEADER, FOLLOWER, OBSERVER = QuorumRole.LEADER, QuorumRole.FOLLOWER, QuorumRole.OBSERVER
SPEC = ClusterSpec(
    cluster="c",
    kafka_version="4.3.1",
    broker_count=3,
    zones=("zone-a",),
    generation=1,
    kraft_controllers=3,
)


def replica(node: int, role: QuorumRole, ago: int | None = 100, offset: int = 50) -> QuorumReplica:
    return QuorumReplica(node, f"dir-{node}", offset, role, ago)


class FakeQuorum:
    def __init__(self, replicas: list[QuorumReplica]) -> None:
        self.replicas = replicas
        self.calls: list[str] = []
        self.refuse = False
        self.unknown_brokers: set[int] = set()

    def describe(self) -> tuple[QuorumStatus, tuple[QuorumReplica, ...]]:
        leader = next((r.node_id for r in self.replicas if r.role is LEADER), None)
        return QuorumStatus(leader, 50), tuple(self.replicas)

    def add_controller(self) -> None:
        self.calls.append("add")
        if self.refuse:
            raise QuorumToolError("a voter change is pending")

    def remove_controller(self, node_id: int, directory_id: str) -> None:
        self.calls.append(f"remove {node_id} {directory_id}")

    def unregister_broker(self, broker_id: int) -> None:
        self.calls.append(f"unregister {broker_id}")


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def keeper(
    quorum: FakeQuorum,
    me: ControllerIdentity | None,
    elected: bool,
    clock: Clock,
    journal: list[tuple[str, str, str]],
    registered: frozenset[int] = frozenset({0, 1, 2}),
    claimed: frozenset[int] = frozenset({0, 1, 2}),
) -> QuorumKeeper:
    return QuorumKeeper(
        quorum,
        lambda: me,
        lambda: SPEC,
        lambda: elected,
        lambda: registered,
        lambda: claimed,
        lambda *entry: journal.append(entry),
        clock,
        gone_threshold_s=60.0,
        caught_up_within_ms=5000,
    )


@pytest.mark.parametrize(
    ("kind", "node", "me", "elected", "expected"),
    [
        (QuorumChangeKind.ADD, 3002, ControllerIdentity(3002, "d"), False, True),
        (QuorumChangeKind.ADD, 3002, ControllerIdentity(3001, "d"), True, False),
        (QuorumChangeKind.ADD, 3002, None, True, False),
        (QuorumChangeKind.REMOVE, 3002, None, True, True),
        (QuorumChangeKind.REMOVE, 3002, ControllerIdentity(3000, "d"), False, False),
    ],
)
def test_who_may_make_a_change(
    kind: QuorumChangeKind,
    node: int,
    me: ControllerIdentity | None,
    elected: bool,
    expected: bool,
) -> None:
    assert allowed(QuorumChange(kind, node, "d", "why"), me, elected) is expected


def test_unseen_voters_keep_the_time_they_were_first_found() -> None:
    replicas = (replica(3000, LEADER), replica(3001, FOLLOWER, ago=9000), replica(3002, FOLLOWER))
    first = track_unseen({}, replicas, 10.0, 5000)
    assert first == {3001: 10.0}
    assert track_unseen(first, replicas, 30.0, 5000) == {3001: 10.0}
    back = (replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER))
    assert track_unseen(first, back, 40.0, 5000) == {}
    never = (replica(3000, LEADER), replica(3001, FOLLOWER, ago=None))
    assert track_unseen({}, never, 5.0, 5000) == {3001: 5.0}


def test_stale_brokers_are_unclaimed_and_absent() -> None:
    assert stale_brokers(frozenset({0, 1, 2, 3}), frozenset({0, 1, 2}), frozenset({0, 1})) == {3}
    assert stale_brokers(frozenset({0, 3}), frozenset({0}), frozenset({0, 3})) == frozenset()


def test_metadata_directory_id(tmp_path: Path) -> None:
    assert metadata_directory_id(tmp_path) is None
    (tmp_path / "meta.properties").write_text("node.id=3001\ndirectory.id=abcDEF\nversion=1\n")
    assert metadata_directory_id(tmp_path) == "abcDEF"


def test_a_caught_up_observer_is_added_by_its_own_agent_only() -> None:
    quorum = FakeQuorum([replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, OBSERVER)])
    journal: list[tuple[str, str, str]] = []
    other = keeper(quorum, ControllerIdentity(3000, "dir-3000"), True, Clock(), journal)
    assert other.tick() is None
    assert quorum.calls == []
    mine = keeper(quorum, ControllerIdentity(3002, "dir-3002"), False, Clock(), journal)
    change = mine.tick()
    assert change is not None and change.kind is QuorumChangeKind.ADD
    assert quorum.calls == ["add"]
    assert [(a, r) for a, _, r in journal] == [
        ("add_controller", "started"),
        ("add_controller", "done"),
    ]


def test_a_refused_change_is_journaled_and_decided_again() -> None:
    quorum = FakeQuorum([replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, OBSERVER)])
    quorum.refuse = True
    journal: list[tuple[str, str, str]] = []
    mine = keeper(quorum, ControllerIdentity(3002, "dir-3002"), False, Clock(), journal)
    assert mine.tick() is None
    assert journal[-1][2].startswith("failed: a voter change is pending")
    quorum.refuse = False
    assert mine.tick() is not None
    assert quorum.calls == ["add", "add"]


def test_a_voter_gone_past_the_threshold_is_removed_by_the_elected_agent() -> None:
    quorum = FakeQuorum(
        [
            replica(3000, LEADER),
            replica(3001, FOLLOWER),
            replica(3002, FOLLOWER),
            replica(3003, FOLLOWER, ago=None),
            replica(3004, FOLLOWER),
        ]
    )
    clock = Clock()
    journal: list[tuple[str, str, str]] = []
    elected = keeper(quorum, None, True, clock, journal)
    assert elected.tick() is None  # just found gone
    clock.now += 61
    change = elected.tick()
    assert change is not None
    assert (change.kind, change.node_id) == (QuorumChangeKind.REMOVE, 3003)
    assert quorum.calls == ["remove 3003 dir-3003"]
    # A member agent never removes.
    member_quorum = FakeQuorum(quorum.replicas)
    member = keeper(member_quorum, ControllerIdentity(3001, "dir-3001"), False, clock, [])
    clock.now += 1
    member.tick()
    clock.now += 61
    assert member.tick() is None
    assert member_quorum.calls == []


def test_no_removal_that_would_cost_the_majority() -> None:
    quorum = FakeQuorum(
        [
            replica(3000, LEADER),
            replica(3001, FOLLOWER, ago=None),
            replica(3002, FOLLOWER, ago=None),
        ]
    )
    clock = Clock()
    elected = keeper(quorum, None, True, clock, [])
    elected.tick()
    clock.now += 120
    assert elected.tick() is None
    assert quorum.calls == []


def test_the_elected_agent_unregisters_a_recycled_broker_once() -> None:
    quorum = FakeQuorum([replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER)])
    journal: list[tuple[str, str, str]] = []
    registered = {0, 1, 2, 3}
    claimed = {0, 1, 2, 3}
    elected = QuorumKeeper(
        quorum,
        lambda: None,
        lambda: SPEC,
        lambda: True,
        lambda: frozenset(registered),
        lambda: frozenset(claimed),
        lambda *entry: journal.append(entry),
        Clock(),
        60.0,
        5000,
    )
    elected.tick()
    assert quorum.calls == []
    registered.discard(3)  # its VM recycled: gone from the metadata, its claim released
    claimed.discard(3)
    elected.tick()
    elected.tick()
    assert quorum.calls == ["unregister 3"]
    assert journal == [("unregister_broker", journal[0][1], "done")]
    assert "broker 3 is claimed by no VM" in journal[0][1]


def test_a_recycled_vms_voter_goes_at_once_and_a_never_claimed_one_waits() -> None:
    """Claims 0-3 seen, then 3's released (its VM recycled): voter 3003 is removed on the next
    look, before the gone threshold. A voter whose claim was never seen stays."""
    quorum = FakeQuorum(
        [
            replica(3000, LEADER),
            replica(3001, FOLLOWER),
            replica(3002, FOLLOWER),
            replica(3003, FOLLOWER, ago=None),
            replica(3004, FOLLOWER, ago=None),
        ]
    )
    claimed = {0, 1, 2, 3}
    journal: list[tuple[str, str, str]] = []
    elected = QuorumKeeper(
        quorum,
        lambda: None,
        lambda: SPEC,
        lambda: True,
        lambda: frozenset({0, 1, 2}),
        lambda: frozenset(claimed),
        lambda *entry: journal.append(entry),
        Clock(),
        60.0,
        5000,
    )
    assert elected.tick() is None
    claimed.discard(3)
    change = elected.tick()
    assert change is not None and (change.kind, change.node_id) == (QuorumChangeKind.REMOVE, 3003)
    assert "its VM is recycled" in change.reason
    assert recycled_controllers(frozenset({0, 1, 3}), frozenset({0, 1})) == {3003}
    assert recycled_controllers(frozenset(), frozenset({0})) == frozenset()


def test_a_look_is_steady_only_when_the_quorum_is_as_the_spec_wants_it() -> None:
    clock = Clock()
    journal: list[tuple[str, str, str]] = []
    voters = [replica(3000, LEADER), replica(3001, FOLLOWER), replica(3002, FOLLOWER)]
    quorum = FakeQuorum([*voters, replica(0, OBSERVER)])
    me = ControllerIdentity(3001, "dir-3001")
    look = keeper(quorum, me, False, clock, journal)
    look.tick()
    assert look.steady
    # A voter fallen behind: looked at again soon, though nothing is to change yet.
    quorum.replicas = [voters[0], voters[1], replica(3002, FOLLOWER, ago=60_000)]
    look.tick()
    assert not look.steady and quorum.calls == []
    # This VM's controller an observer the spec wants as a voter: it adds itself, unsteady.
    quorum.replicas = [voters[0], voters[2], replica(3001, OBSERVER)]
    joining = keeper(quorum, me, False, clock, journal)
    joining.tick()
    assert quorum.calls == ["add"] and not joining.steady
    # No leader: nothing can change and nothing is steady.
    quorum.replicas = [replica(3000, FOLLOWER), replica(3001, FOLLOWER), replica(3002, FOLLOWER)]
    joining.tick()
    assert not joining.steady
