from __future__ import annotations

import json

import pytest

from planner.contracts.ensemble_repair import (
    EnsembleRepairRequest,
    RepairRequestError,
    parse_repair_request,
)
from planner.zookeeper_ensemble import (
    EnsembleConfigError,
    ZookeeperRole,
    parse_ensemble_config,
    repair_outstanding,
)

pytestmark = pytest.mark.unit

CONFIG = """server.1=127.0.1.1:2888:3888:participant;127.0.1.1:2181
server.2=127.0.1.2:2888:3888:participant;127.0.1.2:2181
server.3=127.0.1.3:2888:3888:participant;127.0.1.3:2181
version=10000000a
"""


def test_parse_reads_servers_roles_and_hex_version() -> None:
    cfg = parse_ensemble_config(CONFIG + "server.4=127.0.1.4:2888:3888:observer;127.0.1.4:2181\n")
    assert cfg.version == 0x10000000A
    assert sorted(cfg.participants) == [1, 2, 3]
    assert sorted(cfg.observers) == [4]
    assert cfg.servers[4].role is ZookeeperRole.OBSERVER
    assert cfg.servers[2].line() == "server.2=127.0.1.2:2888:3888:participant;127.0.1.2:2181"
    with pytest.raises(EnsembleConfigError, match="unreadable server line"):
        parse_ensemble_config("server.x=nonsense")


@pytest.mark.parametrize(
    ("line", "role", "client_address", "client_port", "written"),
    [
        # No role: a participant; a bare client port binds every interface and stays bare.
        (
            "server.7=10.0.0.7:2888:3888;2181",
            ZookeeperRole.PARTICIPANT,
            None,
            2181,
            "server.7=10.0.0.7:2888:3888:participant;2181",
        ),
        # No client part at all (a secured server: its clients use zoo.cfg's secure port):
        # none is added, since one would open a plaintext client port.
        (
            "server.7=10.0.0.7:2888:3888:observer",
            ZookeeperRole.OBSERVER,
            None,
            None,
            "server.7=10.0.0.7:2888:3888:observer",
        ),
        (
            "server.7=10.0.0.7:2888:3888:observer;0.0.0.0:2281",
            ZookeeperRole.OBSERVER,
            "0.0.0.0",
            2281,
            "server.7=10.0.0.7:2888:3888:observer;0.0.0.0:2281",
        ),
    ],
)
def test_parse_keeps_the_client_part_as_written(
    line: str,
    role: ZookeeperRole,
    client_address: str | None,
    client_port: int | None,
    written: str,
) -> None:
    server = parse_ensemble_config(line).servers[7]
    assert (server.role, server.client_address, server.client_port) == (
        role,
        client_address,
        client_port,
    )
    assert server.line() == written


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("server.1=a:1:2\nserver.1=b:1:2\n", "server 1 appears twice"),
        ("version=zz\n", "unreadable version"),
        ("server.1=a:1:2:voter;2181\n", "unreadable server line"),
        ("peerType=observer\n", "unreadable server line"),
    ],
)
def test_parse_refuses_bad_config_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(EnsembleConfigError, match=problem):
        parse_ensemble_config(text)


def test_a_config_without_version_reads_as_unconditional() -> None:
    assert parse_ensemble_config("server.1=a:1:2;3\n").version == -1


def test_repair_request_round_trips() -> None:
    request = EnsembleRepairRequest(frozenset({"127.0.1.3", "127.0.1.1"}), "operation 7")
    assert parse_repair_request(request.to_bytes()) == request
    assert json.loads(request.to_bytes())["recycled_addresses"] == ["127.0.1.1", "127.0.1.3"]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"not json", "not JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"schema_version": 2}', "schema_version 2"),
        (
            b'{"schema_version": 1, "recycled_addresses": "127.0.1.3", "requested_by": "x"}',
            "recycled_addresses must be a list",
        ),
        (
            b'{"schema_version": 1, "recycled_addresses": [""], "requested_by": "x"}',
            "recycled_addresses must be a list",
        ),
        (
            b'{"schema_version": 1, "recycled_addresses": ["a"]}',
            "requested_by must be a non-empty string",
        ),
    ],
)
def test_repair_request_refuses_bad_values(raw: bytes, problem: str) -> None:
    with pytest.raises(RepairRequestError, match=problem):
        parse_repair_request(raw)


OBSERVING = CONFIG + "server.4=127.0.1.4:2888:3888:observer;127.0.1.4:2181\n"
WITHOUT_3 = "\n".join(line for line in OBSERVING.splitlines() if "server.3" not in line)
PROMOTED = WITHOUT_3.replace(":observer;", ":participant;")
LIVE = frozenset({"127.0.1.1", "127.0.1.2", "127.0.1.4"})


@pytest.mark.parametrize(
    ("text", "recycled", "live", "outstanding"),
    [
        # The recycled VM's server is still there.
        (OBSERVING, {"127.0.1.3"}, LIVE, ["servers [3] of recycled VMs still in the ensemble"]),
        # Gone, but the observer could vote and the ensemble is below its size.
        (WITHOUT_3, {"127.0.1.3"}, LIVE, ["2 of 3 participants while observers [4] could vote"]),
        # Repaired.
        (PROMOTED, {"127.0.1.3"}, LIVE, []),
        # A live VM's server not yet added by its agent.
        (
            CONFIG.replace("server.3=127.0.1.3:2888:3888:participant;127.0.1.3:2181\n", ""),
            {"127.0.1.3"},
            LIVE,
            ["no server yet for the VMs at 127.0.1.4"],
        ),
        # Below the spec's size with no observer to promote: nothing more the agents can do.
        (
            WITHOUT_3.replace("server.4=127.0.1.4:2888:3888:observer;127.0.1.4:2181", ""),
            set(),
            frozenset({"127.0.1.1", "127.0.1.2"}),
            [],
        ),
    ],
)
def test_repair_outstanding(
    text: str, recycled: set[str], live: frozenset[str], outstanding: list[str]
) -> None:
    config = parse_ensemble_config(text)
    assert repair_outstanding(config, frozenset(recycled), live, 3) == outstanding
