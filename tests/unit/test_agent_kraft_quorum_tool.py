"""The contract's parsers of Kafka's quorum tool output, and the commands the agent's adapter
runs (fake runner)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agent.kraft_quorum_tool import MetadataQuorumTool, QuorumToolError
from planner.contracts.kraft_quorum_state import (
    QuorumOutputError,
    QuorumReplica,
    QuorumRole,
    QuorumStatus,
    kafka_uuid,
    parse_describe_quorum,
    parse_replication,
    parse_status,
)
from planner.kraft_quorum_reader import QuorumReadError
from planner.pki.authority import Role
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles

pytestmark = pytest.mark.unit

# What kafka-metadata-quorum 4.3.1 printed for a 3-VM local cluster.
REPLICATION = (
    "NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus  \t\n"
    "3000  \tPN0u3Tq9TgWmMBONpvDXYw\t88          \t0  \t1795482855072     \t1795482855072        \tLeader  \t\n"
    "3001  \tCTCgcWWIQjSGZ3ltHKnyVQ\t88          \t0  \t1795482854639     \t1795482854639        \tFollower\t\n"
    "0     \tfNMGpaj_loqaqaEW-bvMtQ\t80          \t8  \t1795482854635     \t-1                   \tObserver\t\n"
)
STATUS = (
    "ClusterId:              F5trXJxAQxyWDssgXdoDMg\n"
    "LeaderId:               3002\n"
    "LeaderEpoch:            1\n"
    "HighWatermark:          52\n"
    'CurrentVoters:          [{"id": 3000}]\n'
)


def test_replication_is_parsed_with_roles_and_ages() -> None:
    replicas = parse_replication(REPLICATION, now_ms=1795482856072)
    assert [(r.node_id, r.role, r.log_end_offset, r.caught_up_ago_ms) for r in replicas] == [
        (3000, QuorumRole.LEADER, 88, 1000),
        (3001, QuorumRole.FOLLOWER, 88, 1433),
        (0, QuorumRole.OBSERVER, 80, None),
    ]
    assert replicas[0].directory_id == "PN0u3Tq9TgWmMBONpvDXYw"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no NodeId header"),
        ("NodeId\tDirectoryId\tStatus\n", "lacks a column"),
        (REPLICATION.replace("Leader  \t", "Boss\t"), "unknown replica status 'Boss'"),
        (REPLICATION.replace("88          \t0  \t1795482855072", "x\t0\t1"), "line"),
    ],
)
def test_bad_replication_output_is_named(text: str, message: str) -> None:
    with pytest.raises(QuorumOutputError, match=message):
        parse_replication(text, now_ms=0)


def test_status_gives_the_leader_and_high_watermark() -> None:
    assert parse_status(STATUS) == QuorumStatus(3002, 52)
    assert parse_status(STATUS.replace("3002", "-1")).leader_id is None
    with pytest.raises(QuorumOutputError, match="LeaderId or HighWatermark"):
        parse_status("ClusterId: x\n")


def _client(tmp_path: Path) -> InternalClient:
    return InternalClient("h1:9092", IdentityFiles(tmp_path / "client", Role.ADMIN))


def test_the_adapter_runs_kafkas_tools_with_the_right_arguments(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    configs: list[dict[str, str]] = []
    files: list[Path] = []

    def runner(command: Sequence[str]) -> str:
        ran.append(list(command))
        # The command config exists while the tool runs, private, and is gone afterwards.
        path = Path(command[command.index("--command-config") + 1])
        assert path.stat().st_mode & 0o777 == 0o600
        files.append(path)
        lines = [line.partition("=") for line in path.read_text().splitlines()]
        configs.append({key: value for key, _, value in lines})
        return STATUS if "--status" in command else REPLICATION

    controller_config = tmp_path / "controller.properties"
    controller_config.write_text("node.id=3001\nprocess.roles=controller\n")
    tool = MetadataQuorumTool(
        java="java",
        libs="/libs",
        log_config="/tools-log4j2.properties",
        bootstrap_controllers="h1:9093,h2:9093",
        kafka=_client(tmp_path),
        controller_config=str(controller_config),
        clock_ms=lambda: 1795482856072,
        runner=runner,
        broker_reader=None,
    )
    status, replicas = tool.describe()
    assert status.high_watermark == 52
    assert len(replicas) == 3
    tool.add_controller()
    tool.remove_controller(3001, "CTCgcWWIQjSGZ3ltHKnyVQ")
    tool.unregister_broker(4)
    tails = [command[command.index("-cp") + 2 :] for command in ran]
    for tail in tails:  # the temporary file's name differs per run
        tail[tail.index("--command-config") + 1] = "CONFIG"
    quorum = [
        "org.apache.kafka.tools.MetadataQuorumCommand",
        "--bootstrap-controller",
        "h1:9093,h2:9093",
        "--command-config",
        "CONFIG",
    ]
    assert tails == [
        [*quorum, "describe", "--status"],
        [*quorum, "describe", "--replication"],
        [*quorum, "add-controller"],
        [
            *quorum,
            "remove-controller",
            "--controller-id",
            "3001",
            "--controller-directory-id",
            "CTCgcWWIQjSGZ3ltHKnyVQ",
        ],
        [
            "org.apache.kafka.tools.ClusterTool",
            "unregister",
            "--bootstrap-server",
            "h1:9092",
            "--command-config",
            "CONFIG",
            "--id",
            "4",
        ],
    ]
    assert all("-Dlog4j2.configurationFile=file:/tools-log4j2.properties" in c for c in ran)
    # Every tool presents the identity over TLS; no config names bootstrap servers, which
    # kafka-metadata-quorum refuses beside --bootstrap-controller.
    assert all(c["security.protocol"] == "SSL" for c in configs)
    assert all(c["ssl.keystore.type"] == "PEM" for c in configs)
    assert not any("bootstrap.servers" in c for c in configs)
    # add-controller reads its controller's own properties from the same file.
    assert configs[2]["node.id"] == "3001" and "node.id" not in configs[0]
    assert len(files) == 5 and not any(path.exists() for path in files)


def test_a_vm_without_a_controller_has_none_to_add(tmp_path: Path) -> None:
    tool = MetadataQuorumTool(
        "java", "/libs", "/l", "h:9093", _client(tmp_path), None, lambda: 0, lambda c: ""
    )
    with pytest.raises(QuorumToolError, match="runs no controller"):
        tool.add_controller()


def test_output_the_parser_refuses_is_the_adapters_error(tmp_path: Path) -> None:
    tool = MetadataQuorumTool(
        "java", "/libs", "/l", "h:9093", _client(tmp_path), None, lambda: 0, lambda c: "?", None
    )
    with pytest.raises(QuorumToolError, match="LeaderId or HighWatermark"):
        tool.describe()


# What kafka-python 3.0.12's describe_metadata_quorum() answered for a 3-VM 4.3.1 cluster
# (trimmed to one follower and one observer).
DESCRIBE_QUORUM: dict[str, Any] = {
    "topics": [
        {
            "topic_name": "__cluster_metadata",
            "partitions": [
                {
                    "partition_index": 0,
                    "leader_id": 3002,
                    "leader_epoch": 1,
                    "high_watermark": 124,
                    "current_voters": [
                        {
                            "replica_id": 3000,
                            "replica_directory_id": "8f90519d-b6e8-4b38-bdf9-961a57ac5ef8",
                            "log_end_offset": 124,
                            "last_fetch_timestamp": 1795584356498,
                            "last_caught_up_timestamp": 1795584356498,
                        },
                        {
                            "replica_id": 3002,
                            "replica_directory_id": "01372b0b-d58e-4742-9e6e-69ebb2a1bc71",
                            "log_end_offset": 124,
                            "last_fetch_timestamp": 1795584356835,
                            "last_caught_up_timestamp": 1795584356835,
                        },
                    ],
                    "observers": [
                        {
                            "replica_id": 2,
                            "replica_directory_id": "071bddd6-44c6-4cc2-5680-c502f77dce4f",
                            "log_end_offset": 120,
                            "last_fetch_timestamp": 1795584356498,
                            "last_caught_up_timestamp": -1,
                        }
                    ],
                    "error": None,
                }
            ],
        }
    ],
    "nodes": [],
}


def test_a_describe_quorum_answer_reads_as_the_tools_output() -> None:
    status, replicas = parse_describe_quorum(DESCRIBE_QUORUM, now_ms=1795584357835)
    assert status == QuorumStatus(3002, 124)
    # The leader first, as the tool lists it; directory ids in Kafka's own form.
    assert [(r.node_id, r.role, r.log_end_offset, r.caught_up_ago_ms) for r in replicas] == [
        (3002, QuorumRole.LEADER, 124, 1000),
        (3000, QuorumRole.FOLLOWER, 124, 1337),
        (2, QuorumRole.OBSERVER, 120, None),
    ]
    assert replicas[0].directory_id == "ATcrC9WOR0KebmnrsqG8cQ"


def test_kafka_uuids_are_unpadded_url_safe_base64() -> None:
    # Both forms of one controller's directory id, as kafka-python and the tool gave them.
    assert kafka_uuid("d4ce8e10-c405-4699-a9b9-a1bdada3b58a") == "1M6OEMQFRpmpuaG9raO1ig"
    with pytest.raises(QuorumOutputError, match="not a UUID"):
        kafka_uuid("None")


def _partition(**changes: object) -> dict[str, object]:
    partition = dict(DESCRIBE_QUORUM["topics"][0]["partitions"][0])
    partition.update(changes)
    return {"topics": [{"partitions": [partition]}]}


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({}, "no __cluster_metadata partition"),
        ({"topics": [{"partitions": []}]}, "no __cluster_metadata partition"),
        (_partition(error="NotLeaderOrFollowerError"), "NotLeaderOrFollowerError"),
        (_partition(leader_id="3002"), "leader_id is '3002'"),
        (_partition(observers=None), "lacks current_voters or observers"),
        (_partition(current_voters=[{"replica_id": 1}]), "last_caught_up_timestamp is None"),
    ],
)
def test_a_bad_describe_quorum_answer_is_named(answer: object, message: str) -> None:
    with pytest.raises(QuorumOutputError, match=message):
        parse_describe_quorum(answer, now_ms=0)


def _tool(
    tmp_path: Path, runner: Callable[[Sequence[str]], str], reader: object
) -> MetadataQuorumTool:
    return MetadataQuorumTool(
        "java",
        "/libs",
        "/l",
        "h:9093",
        _client(tmp_path),
        None,
        lambda: 7,
        runner,
        reader,  # type: ignore[arg-type]
    )


def test_a_describe_asks_the_brokers_and_runs_no_jvm_when_they_answer(tmp_path: Path) -> None:
    ran: list[Sequence[str]] = []
    asked: list[tuple[str, int]] = []
    answer = (QuorumStatus(3000, 9), (QuorumReplica(3000, "d", 9, QuorumRole.LEADER, 0),))

    def reader(kafka: InternalClient, now_ms: int) -> object:
        asked.append((kafka.bootstrap_servers, now_ms))
        return answer

    def runner(command: Sequence[str]) -> str:
        ran.append(command)
        return ""

    tool = _tool(tmp_path, runner, reader)
    assert tool.describe() == answer
    assert asked == [("h1:9092", 7)] and ran == []


@pytest.mark.parametrize("failure", [QuorumReadError("no broker"), QuorumOutputError("odd")])
def test_a_describe_runs_the_tool_when_no_broker_answers(
    tmp_path: Path, failure: Exception
) -> None:
    ran: list[Sequence[str]] = []

    def reader(kafka: InternalClient, now_ms: int) -> object:
        raise failure

    def runner(command: Sequence[str]) -> str:
        ran.append(command)
        return STATUS if "--status" in command else REPLICATION

    status, replicas = _tool(tmp_path, runner, reader).describe()
    assert status == QuorumStatus(3002, 52) and len(replicas) == 3 and len(ran) == 2
