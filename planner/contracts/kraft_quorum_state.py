"""The KRaft controller quorum as Kafka's kafka-metadata-quorum tool describes it, which both
planes read (the agent to converge the quorum, `kaas status` to show each VM's controller
role): typed replicas and the one parser of each output. Pure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

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
