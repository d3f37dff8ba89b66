"""The KRaft controller quorum as Kafka's kafka-metadata-quorum tool and its DescribeQuorum
API describe it, which both planes read (the agent to converge the quorum, `kaas status` and
the drills to see each VM's controller role): typed replicas and the one parser of each
output. Pure.
"""

from __future__ import annotations

import base64
import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace

from planner.contracts.fields import ContractError


class QuorumRole(enum.StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"  # a voter that is not the leader
    OBSERVER = "observer"  # brokers, and controllers not (yet) voting


@dataclass(frozen=True)
class QuorumReplica:
    """One replica of the metadata log, as `describe --replication` reports it."""

    node_id: int
    directory_id: str
    log_end_offset: int
    role: QuorumRole
    caught_up_ago_ms: int | None  # since its last caught-up time, None if never


class QuorumOutputError(ContractError):
    """Output of Kafka's quorum tool that this parser does not know."""


_ROLES = {
    "leader": QuorumRole.LEADER,
    "follower": QuorumRole.FOLLOWER,
    "observer": QuorumRole.OBSERVER,
}


def parse_replication(text: str, now_ms: int) -> tuple[QuorumReplica, ...]:
    """`describe --replication` (timestamps in epoch milliseconds) into replicas."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    header = next((i for i, cells in enumerate(lines) if cells and cells[0] == "NodeId"), None)
    if header is None:
        raise QuorumOutputError("describe --replication printed no NodeId header")
    columns = lines[header]
    try:
        at = {
            name: columns.index(name)
            for name in ("NodeId", "DirectoryId", "LogEndOffset", "LastCaughtUpTimestamp", "Status")
        }
    except ValueError as exc:
        raise QuorumOutputError(f"describe --replication lacks a column ({exc})") from None
    replicas = []
    for cells in lines[header + 1 :]:
        if len(cells) != len(columns):
            raise QuorumOutputError(f"describe --replication line has {len(cells)} cells: {cells}")
        role = _ROLES.get(cells[at["Status"]].lower())
        if role is None:
            raise QuorumOutputError(f"unknown replica status {cells[at['Status']]!r}")
        try:
            node_id = int(cells[at["NodeId"]])
            offset = int(cells[at["LogEndOffset"]])
            caught_up = int(cells[at["LastCaughtUpTimestamp"]])
        except ValueError as exc:
            raise QuorumOutputError(f"describe --replication line {cells}: {exc}") from None
        replicas.append(
            QuorumReplica(
                node_id=node_id,
                directory_id=cells[at["DirectoryId"]],
                log_end_offset=offset,
                role=role,
                caught_up_ago_ms=max(0, now_ms - caught_up) if caught_up > 0 else None,
            )
        )
    return tuple(replicas)


@dataclass(frozen=True)
class QuorumStatus:
    leader_id: int | None
    high_watermark: int


def parse_status(text: str) -> QuorumStatus:
    """`describe --status`: the leader and the high watermark."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    try:
        leader = int(fields["LeaderId"])
        high_watermark = int(fields["HighWatermark"])
    except (KeyError, ValueError) as exc:
        raise QuorumOutputError(
            f"describe --status lacks LeaderId or HighWatermark ({exc})"
        ) from None
    return QuorumStatus(leader if leader >= 0 else None, high_watermark)


def kafka_uuid(text: str) -> str:
    """A UUID as Kafka writes it (URL-safe base64 of its 16 bytes, unpadded: what the quorum
    tool prints and meta.properties keeps), from the dashed form kafka-python gives."""
    try:
        raw = uuid.UUID(text).bytes
    except (ValueError, TypeError, AttributeError):
        raise QuorumOutputError(f"replica_directory_id {text!r} is not a UUID") from None
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _int_field(item: Mapping[str, object], name: str) -> int:
    value = item.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise QuorumOutputError(f"DescribeQuorum answer: {name} is {value!r}, not an integer")
    return value


def _replica(item: object, role: QuorumRole, now_ms: int) -> QuorumReplica:
    if not isinstance(item, Mapping):
        raise QuorumOutputError(f"DescribeQuorum answer: a replica is {item!r}")
    caught_up = _int_field(item, "last_caught_up_timestamp")
    return QuorumReplica(
        node_id=_int_field(item, "replica_id"),
        directory_id=kafka_uuid(str(item.get("replica_directory_id"))),
        log_end_offset=_int_field(item, "log_end_offset"),
        role=role,
        caught_up_ago_ms=max(0, now_ms - caught_up) if caught_up > 0 else None,
    )


def parse_describe_quorum(
    answer: object, now_ms: int
) -> tuple[QuorumStatus, tuple[QuorumReplica, ...]]:
    """kafka-python's DescribeQuorum answer for __cluster_metadata (a dict shaped like the
    response) into what `describe --status` and `describe --replication` give: one answer,
    so the replicas and the high watermark are of the same moment. Leader, then the other
    voters, then observers, as the tool lists them."""
    try:
        partition = answer["topics"][0]["partitions"][0]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        raise QuorumOutputError(
            "DescribeQuorum answer has no __cluster_metadata partition"
        ) from None
    if not isinstance(partition, Mapping):
        raise QuorumOutputError(f"DescribeQuorum answer: the partition is {partition!r}")
    if partition.get("error"):
        raise QuorumOutputError(f"DescribeQuorum answer: {partition['error']}")
    leader = _int_field(partition, "leader_id")
    status = QuorumStatus(leader if leader >= 0 else None, _int_field(partition, "high_watermark"))
    voters, observers = partition.get("current_voters"), partition.get("observers")
    if not isinstance(voters, list) or not isinstance(observers, list):
        raise QuorumOutputError("DescribeQuorum answer lacks current_voters or observers")
    replicas = [_replica(item, QuorumRole.FOLLOWER, now_ms) for item in voters]
    replicas = [replace(r, role=QuorumRole.LEADER) if r.node_id == leader else r for r in replicas]
    replicas.sort(key=lambda r: r.role is not QuorumRole.LEADER)
    replicas += [_replica(item, QuorumRole.OBSERVER, now_ms) for item in observers]
    return status, tuple(replicas)
