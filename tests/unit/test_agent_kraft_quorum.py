"""The agent's KRaft controller-quorum decision (agent/kraft_quorum.py): table-tested."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agent.kraft_quorum import (
    ControllerIdentity,
    QuorumChange,
    QuorumChangeKind,
    QuorumView,
    decide_quorum,
)
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole

pytestmark = pytest.mark.unit

LEAD, FOLLOW, OBSERVE = QuorumRole.LEADER, QuorumRole.FOLLOWER, QuorumRole.OBSERVER
HW = 500


def replica(
    node: int, role: QuorumRole, directory: str = "", offset: int = HW, ago: int | None = 100
) -> QuorumReplica:
    return QuorumReplica(node, directory or f"dir{node}", offset, role, ago)


THREE = (replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, FOLLOW))
BROKERS = (replica(0, OBSERVE), replica(1, OBSERVE), replica(2, OBSERVE))


def view(
    replicas: tuple[QuorumReplica, ...],
    me: int | None = None,
    my_directory: str = "",
    desired: int = 3,
    gone: dict[int, float] | None = None,
    recycled: frozenset[int] = frozenset(),
) -> QuorumView:
    return QuorumView(
        replicas=replicas + BROKERS,
        high_watermark=HW,
        me=ControllerIdentity(me, my_directory or f"dir{me}") if me is not None else None,
        desired_voters=desired,
        gone_for_s=gone or {},
        gone_threshold_s=60.0,
        caught_up_within_ms=5000,
        recycled_node_ids=recycled,
    )


def change(
    kind: QuorumChangeKind, node: int, directory: str = ""
) -> tuple[QuorumChangeKind, int, str]:
    return (kind, node, directory or f"dir{node}")


def key(found: QuorumChange | None) -> tuple[QuorumChangeKind, int, str] | None:
    return None if found is None else (found.kind, found.node_id, found.directory_id)


ADD, REMOVE = QuorumChangeKind.ADD, QuorumChangeKind.REMOVE
DOWN = 10**9  # caught up long ago: gone


@pytest.mark.parametrize(
    ("name", "the_view", "expected"),
    [
        ("a full healthy quorum: nothing", view(THREE, me=3001), None),
        (
            "no leader: nothing can change",
            view((replica(3000, FOLLOW), replica(3001, FOLLOW)), me=3002),
            None,
        ),
        (
            "a caught-up observer controller joins a short quorum",
            view((replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, OBSERVE)), me=3002),
            change(ADD, 3002),
        ),
        (
            "an observer still behind the high watermark waits",
            view(
                (
                    replica(3000, LEAD),
                    replica(3001, FOLLOW),
                    replica(3002, OBSERVE, offset=HW - 40),
                ),
                me=3002,
            ),
            None,
        ),
        (
            "an observer that never caught up waits",
            view(
                (replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, OBSERVE, ago=None)),
                me=3002,
            ),
            None,
        ),
        (
            "another VM's observer is that VM's agent's to add",
            view((replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, OBSERVE)), me=3001),
            None,
        ),
        (
            "a quorum at its size takes no more voters",
            view((*THREE, replica(3003, OBSERVE)), me=3003),
            None,
        ),
        (
            "a quorum of 5 takes a fourth and fifth voter",
            view((*THREE, replica(3003, OBSERVE)), me=3003, desired=5),
            change(ADD, 3003),
        ),
        (
            "a voter gone past the threshold is removed while the other two keep a majority",
            view(
                (replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, FOLLOW, ago=DOWN)),
                me=3001,
                gone={3002: 61.0},
            ),
            change(REMOVE, 3002),
        ),
        (
            "a voter gone less than the threshold stays",
            view(
                (replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, FOLLOW, ago=DOWN)),
                me=3001,
                gone={3002: 30.0},
            ),
            None,
        ),
        (
            "a recycled VM's voter goes at once",
            view(
                (replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, FOLLOW, ago=DOWN)),
                me=3001,
                gone={3002: 5.0},
                recycled=frozenset({3002}),
            ),
            change(REMOVE, 3002),
        ),
        (
            "no removal that leaves no live majority",
            view(
                (
                    replica(3000, LEAD),
                    replica(3001, FOLLOW, ago=DOWN),
                    replica(3002, FOLLOW, ago=DOWN),
                ),
                me=None,
                gone={3001: 90.0, 3002: 90.0},
            ),
            None,
        ),
        (
            "the leader is never removed",
            view((replica(3000, LEAD), replica(3001, FOLLOW)), me=3001, gone={3000: 600.0}),
            None,
        ),
        (
            "an agent never removes its own controller",
            view(
                (replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, FOLLOW, ago=DOWN)),
                me=3002,
                gone={3002: 600.0},
            ),
            None,
        ),
        (
            "half-done replacement: the node's old directory is removed first",
            view(
                (
                    replica(3000, LEAD),
                    replica(3001, FOLLOW),
                    replica(3002, FOLLOW, directory="old", ago=DOWN),
                    replica(3002, OBSERVE, directory="new"),
                ),
                me=3002,
                my_directory="new",
            ),
            change(REMOVE, 3002, "old"),
        ),
        (
            "then the new directory, caught up, is added",
            view(
                (
                    replica(3000, LEAD),
                    replica(3001, FOLLOW),
                    replica(3002, OBSERVE, directory="new"),
                ),
                me=3002,
                my_directory="new",
            ),
            change(ADD, 3002, "new"),
        ),
        (
            "removal goes before addition: one change at a time",
            view(
                (
                    replica(3000, LEAD),
                    replica(3001, FOLLOW),
                    replica(3002, FOLLOW, ago=DOWN),
                    replica(3003, OBSERVE),
                ),
                me=3003,
                gone={3002: 120.0},
            ),
            change(REMOVE, 3002),
        ),
        (
            "a one-voter quorum grows to three",
            view((replica(3000, LEAD), replica(3001, OBSERVE)), me=3001),
            change(ADD, 3001),
        ),
    ],
)
def test_decide_quorum(
    name: str, the_view: QuorumView, expected: tuple[QuorumChangeKind, int, str] | None
) -> None:
    assert key(decide_quorum(the_view)) == expected, name


def test_every_change_says_why() -> None:
    found = decide_quorum(
        view((replica(3000, LEAD), replica(3001, FOLLOW), replica(3002, OBSERVE)), me=3002)
    )
    assert found is not None
    assert found.reason == (
        "controller 3002 has caught up and the quorum has 2 of 3 voters: adding it as a voter"
    )


def test_a_lagging_voter_counts_as_not_alive_for_the_majority() -> None:
    # 3001 and 3002 gone: removing 3002 would leave 3000 and a dead 3001, no live majority.
    base = view(
        (replica(3000, LEAD), replica(3001, FOLLOW, ago=DOWN), replica(3002, FOLLOW, ago=DOWN)),
        gone={3001: 10.0, 3002: 120.0},
    )
    assert decide_quorum(base) is None
    assert key(decide_quorum(replace(base, gone_for_s={3001: 0.0, 3002: 120.0}))) is None
