from __future__ import annotations

import pytest

from agent.zk_membership import (
    MembershipView,
    ReconfigKind,
    decide_membership,
)
from planner.zookeeper_ensemble import EnsembleConfig, ZkServer, ZookeeperRole

pytestmark = pytest.mark.unit

PARTICIPANT, OBSERVER = ZookeeperRole.PARTICIPANT, ZookeeperRole.OBSERVER
ADD, REMOVE, PROMOTE = ReconfigKind.ADD, ReconfigKind.REMOVE, ReconfigKind.PROMOTE
CONFIG_VERSION = 0x10000000A


def server(i: int, role: ZookeeperRole = PARTICIPANT) -> ZkServer:
    return ZkServer(i, f"127.0.1.{i}", 2888, 3888, role)


def config(*ids: int, observers: tuple[int, ...] = ()) -> EnsembleConfig:
    servers = {i: server(i) for i in ids} | {i: server(i, OBSERVER) for i in observers}
    return EnsembleConfig(servers, CONFIG_VERSION)


def view(
    cfg: EnsembleConfig,
    serving: set[int],
    down: dict[int, float] | None = None,
    me: int | None = None,
    desired: int = 3,
    recycled: tuple[int, ...] = (),
    threshold: float = 60.0,
) -> MembershipView:
    return MembershipView(
        config=cfg,
        serving={i: i in serving for i in range(1, 7)},
        down_for_s=down or {},
        me=server(me) if me else None,
        desired_participants=desired,
        gone_threshold_s=threshold,
        recycled_addresses=frozenset(f"127.0.1.{i}" for i in recycled),
    )


@pytest.mark.parametrize(
    ("membership", "expected"),
    [
        # A participant gone past the threshold, the other two alive: remove it.
        (view(config(1, 2, 3), {1, 2}, {3: 61.0}, me=1), (REMOVE, 3, PARTICIPANT)),
        # A server that answers is never gone, even with no threshold at all.
        (view(config(1, 2, 3), {1, 2, 3}, {}, me=1, threshold=0.0), None),
        # With no threshold, one that does not answer goes at once.
        (view(config(1, 2, 3), {1, 2}, {3: 0.0}, me=1, threshold=0.0), (REMOVE, 3, PARTICIPANT)),
        # Gone, but not for long enough: nothing.
        (view(config(1, 2, 3), {1, 2}, {3: 10.0}, me=1), None),
        # Not long gone, but its VM is recycled for good: remove it at once.
        (view(config(1, 2, 3), {1, 2}, {3: 1.0}, me=1, recycled=(3,)), (REMOVE, 3, PARTICIPANT)),
        # Named recycled, but its server still serves (the address came back): keep it.
        (view(config(1, 2, 3), {1, 2, 3}, me=1, recycled=(3,)), None),
        # A recycled VM's observer goes too.
        (
            view(config(1, 2, 3, observers=(4,)), {1, 2, 3}, me=1, recycled=(4,)),
            (REMOVE, 4, OBSERVER),
        ),
        # The rest would not have a quorum: nothing (reconfig could not commit anyway).
        (view(config(1, 2, 3, 4, 5), {1, 2}, {3: 99.0, 4: 99.0, 5: 99.0}, me=1), None),
        # ... also when the management plane names them recycled.
        (view(config(1, 2, 3, 4, 5), {1, 2}, me=1, recycled=(3, 4, 5)), None),
        # This VM's server runs but is not in the config, below the spec's size: join as participant.
        (view(config(1, 2), {1, 2, 3}, me=3), (ADD, 3, PARTICIPANT)),
        # Ensemble already at the spec's size: join as observer.
        (view(config(1, 2, 3), {1, 2, 3, 4}, me=4), (ADD, 4, OBSERVER)),
        # Not serving (not yet synced with the leader): wait.
        (view(config(1, 2), {1, 2}, me=3), None),
        # Joining would leave the new config without a connected quorum: wait.
        (view(config(1, 2, 3), {1, 4}, me=4, desired=5), None),
        # This VM observes while the voting ensemble is below its size: promote it.
        (view(config(1, 2, observers=(4,)), {1, 2, 4}, me=4), (PROMOTE, 4, PARTICIPANT)),
        # It observes and the voting ensemble is full: stay an observer.
        (view(config(1, 2, 3, observers=(4,)), {1, 2, 3, 4}, me=4), None),
        # Another VM's observer is not this agent's to promote.
        (view(config(1, 2, observers=(4,)), {1, 2, 4}, me=1), None),
        # An observer not serving is not promoted.
        (view(config(1, 2, observers=(4,)), {1, 2}, me=4), None),
        # A gone server goes before this VM's promotion: one change at a time.
        (
            view(config(1, 2, 3, observers=(4,)), {1, 2, 4}, me=4, recycled=(3,)),
            (REMOVE, 3, PARTICIPANT),
        ),
        # Nothing to do.
        (view(config(1, 2, 3), {1, 2, 3}, me=2), None),
    ],
)
def test_membership_decisions(
    membership: MembershipView, expected: tuple[ReconfigKind, int, ZookeeperRole] | None
) -> None:
    change = decide_membership(membership)
    if expected is None:
        assert change is None
    else:
        assert change is not None
        assert (change.kind, change.server.server_id, change.server.role) == expected


def test_an_agent_never_removes_its_own_server() -> None:
    assert decide_membership(view(config(1, 2, 3), {2, 3}, {1: 500.0}, me=1)) is None
    assert decide_membership(view(config(1, 2, 3), {2, 3}, me=1, recycled=(1,))) is None


def test_every_change_carries_the_config_version_it_was_decided_from() -> None:
    removal = decide_membership(view(config(1, 2, 3), {1, 2}, {3: 61.0}, me=1))
    addition = decide_membership(view(config(1, 2), {1, 2, 3}, me=3))
    promotion = decide_membership(view(config(1, 2, observers=(4,)), {1, 2, 4}, me=4))
    assert removal is not None and addition is not None and promotion is not None
    assert {removal.from_config, addition.from_config, promotion.from_config} == {CONFIG_VERSION}


def test_a_change_names_its_reconfig_arguments() -> None:
    removal = decide_membership(view(config(1, 2, 3), {1, 2}, {3: 61.0}, me=1))
    assert removal is not None
    assert (removal.joining, removal.leaving) == (None, "3")
    assert removal.new_members == (
        "server.1=127.0.1.1:2888:3888:participant,server.2=127.0.1.2:2888:3888:participant"
    )
    assert "gone for 61s, removing it" in removal.reason
    recycled = decide_membership(view(config(1, 2, 3), {1, 2}, me=1, recycled=(3,)))
    assert recycled is not None
    assert "its VM 127.0.1.3 is recycled, removing it" in recycled.reason
    promotion = decide_membership(view(config(1, 2, observers=(4,)), {1, 2, 4}, me=4))
    assert promotion is not None
    assert promotion.leaving is None
    assert promotion.joining == "server.4=127.0.1.4:2888:3888:participant"
    assert promotion.new_members.split(",") == [
        "server.1=127.0.1.1:2888:3888:participant",
        "server.2=127.0.1.2:2888:3888:participant",
        "server.4=127.0.1.4:2888:3888:participant",
    ]
    addition = decide_membership(view(config(1, 2, 3), {1, 2, 3, 4}, me=4))
    assert addition is not None
    assert addition.joining == "server.4=127.0.1.4:2888:3888:observer"
    assert addition.new_members.split(",")[-1] == "server.4=127.0.1.4:2888:3888:observer"
    assert "adding it as observer" in addition.reason


def test_the_member_list_keeps_the_other_servers_lines_as_the_ensemble_states_them() -> None:
    """A converted cluster's servers may still name a plaintext client port: a reconfig of
    another server leaves their lines as they are."""
    legacy = ZkServer(1, "127.0.1.1", 2888, 3888, PARTICIPANT, 2181, "127.0.1.1")
    cfg = EnsembleConfig({1: legacy, 2: server(2)}, CONFIG_VERSION)
    addition = decide_membership(view(cfg, {1, 2, 3}, me=3))
    assert addition is not None
    assert addition.new_members.split(",") == [
        "server.1=127.0.1.1:2888:3888:participant;127.0.1.1:2181",
        "server.2=127.0.1.2:2888:3888:participant",
        "server.3=127.0.1.3:2888:3888:participant",
    ]
