from __future__ import annotations

import pytest

from agent.zk_membership import (
    OBSERVER,
    PARTICIPANT,
    ConfigParseError,
    EnsembleConfig,
    MembershipView,
    ZkServer,
    decide_membership,
    parse_ensemble_config,
)

pytestmark = pytest.mark.unit

CONFIG = """server.1=127.0.1.1:2888:3888:participant;127.0.1.1:2181
server.2=127.0.1.2:2888:3888:participant;127.0.1.2:2181
server.3=127.0.1.3:2888:3888:participant;127.0.1.3:2181
version=10000000a
"""


def server(i: int, role: str = PARTICIPANT) -> ZkServer:
    return ZkServer(i, f"127.0.1.{i}", 2888, 3888, role, 2181)


def config(*ids: int) -> EnsembleConfig:
    return EnsembleConfig({i: server(i) for i in ids}, 1)


def view(
    cfg: EnsembleConfig,
    serving: set[int],
    down: dict[int, float] | None = None,
    me: int | None = None,
    desired: int = 3,
) -> MembershipView:
    return MembershipView(
        config=cfg,
        serving={i: i in serving for i in range(1, 7)},
        down_for_s=down or {},
        me=server(me) if me else None,
        desired_participants=desired,
        gone_threshold_s=60,
    )


def test_parse_reads_servers_roles_and_hex_version() -> None:
    cfg = parse_ensemble_config(CONFIG + "server.4=127.0.1.4:2888:3888:observer;127.0.1.4:2181\n")
    assert cfg.version == 0x10000000A
    assert sorted(cfg.participants) == [1, 2, 3]
    assert cfg.servers[4].role == OBSERVER
    assert cfg.servers[2].line() == "server.2=127.0.1.2:2888:3888:participant;127.0.1.2:2181"
    with pytest.raises(ConfigParseError, match="unreadable line"):
        parse_ensemble_config("server.x=nonsense")


@pytest.mark.parametrize(
    ("membership", "expected"),
    [
        # A participant gone past the threshold, the other two alive: remove it.
        (view(config(1, 2, 3), {1, 2}, {3: 61.0}, me=1), ("remove", 3, PARTICIPANT)),
        # Gone, but not for long enough: nothing.
        (view(config(1, 2, 3), {1, 2}, {3: 10.0}, me=1), None),
        # The rest would not have a quorum: nothing (reconfig could not commit anyway).
        (view(config(1, 2, 3, 4, 5), {1, 2}, {3: 99.0, 4: 99.0, 5: 99.0}, me=1), None),
        # This VM's server runs but is not in the config, below the spec's size: join as participant.
        (view(config(1, 2), {1, 2, 3}, me=3), ("add", 3, PARTICIPANT)),
        # Ensemble already at the spec's size: join as observer.
        (view(config(1, 2, 3), {1, 2, 3, 4}, me=4), ("add", 4, OBSERVER)),
        # Not serving (not yet synced with the leader): wait.
        (view(config(1, 2), {1, 2}, me=3), None),
        # Joining would leave the new config without a connected quorum: wait.
        (view(config(1, 2, 3), {1, 4}, me=4, desired=5), None),
        # Nothing to do.
        (view(config(1, 2, 3), {1, 2, 3}, me=2), None),
    ],
)
def test_membership_decisions(
    membership: MembershipView, expected: tuple[str, int, str] | None
) -> None:
    change = decide_membership(membership)
    if expected is None:
        assert change is None
    else:
        assert change is not None
        assert (change.kind, change.server.server_id, change.server.role) == expected


def test_an_agent_never_removes_its_own_server() -> None:
    assert decide_membership(view(config(1, 2, 3), {2, 3}, {1: 500.0}, me=1)) is None
