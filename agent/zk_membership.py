"""ZooKeeper ensemble membership by dynamic reconfig (seed 002).

The pure part reads the ensemble's current config (/zookeeper/config) and what is alive, and
returns at most one change: remove a participant gone longer than a threshold, or add this
VM's server (participant while the ensemble is below the spec's size, else observer). A
change is proposed only when a quorum of the config it produces is connected, and one at a
time; a half-done change (a server removed while it is being replaced, or a server running
but absent from the config) is simply the state the next cycle repairs. Failure and growth
go through the same two steps, as the seed describes.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

PARTICIPANT, OBSERVER = "participant", "observer"
_SERVER_LINE = re.compile(
    r"^server\.(?P<id>\d+)=(?P<address>[^:]+):(?P<peer>\d+):(?P<election>\d+)(?::(?P<role>participant|observer))?"
    r"(?:;(?:(?P<client_address>[^:]+):)?(?P<client_port>\d+))?$"
)


@dataclass(frozen=True)
class ZkServer:
    server_id: int
    address: str
    peer_port: int
    election_port: int
    role: str
    client_port: int

    def line(self) -> str:
        return (
            f"server.{self.server_id}={self.address}:{self.peer_port}:{self.election_port}:{self.role};"
            f"{self.address}:{self.client_port}"
        )

    @property
    def client_endpoint(self) -> str:
        return f"{self.address}:{self.client_port}"


@dataclass(frozen=True)
class EnsembleConfig:
    servers: dict[int, ZkServer]
    version: int

    @property
    def participants(self) -> dict[int, ZkServer]:
        return {i: s for i, s in self.servers.items() if s.role == PARTICIPANT}


class ConfigParseError(ValueError):
    pass


def parse_ensemble_config(text: str) -> EnsembleConfig:
    servers: dict[int, ZkServer] = {}
    version = -1
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("version="):
            version = int(line.split("=", 1)[1], 16)
            continue
        match = _SERVER_LINE.match(line)
        if match is None:
            raise ConfigParseError(f"unreadable line in /zookeeper/config: {line!r}")
        server_id = int(match["id"])
        servers[server_id] = ZkServer(
            server_id=server_id,
            address=match["address"],
            peer_port=int(match["peer"]),
            election_port=int(match["election"]),
            role=match["role"] or PARTICIPANT,
            client_port=int(match["client_port"] or 2181),
        )
    return EnsembleConfig(servers, version)


@dataclass(frozen=True)
class MembershipView:
    config: EnsembleConfig
    serving: dict[int, bool]  # by server id: answers `srvr` as leader, follower or observer
    down_for_s: dict[int, float]  # by server id: how long it has not been serving
    me: ZkServer | None  # this VM's server, None if it runs none
    desired_participants: int
    gone_threshold_s: float


@dataclass(frozen=True)
class ReconfigChange:
    kind: str  # add | remove
    server: ZkServer
    reason: str


def _has_quorum(participants: set[int], serving: dict[int, bool]) -> bool:
    alive = sum(1 for i in participants if serving.get(i, False))
    return alive * 2 > len(participants)


def decide_membership(view: MembershipView) -> ReconfigChange | None:
    participants = set(view.config.participants)
    # 1. Remove one participant that has been gone too long, if the rest keep a quorum.
    for server_id in sorted(participants):
        if view.me is not None and server_id == view.me.server_id:
            continue
        gone = view.down_for_s.get(server_id, 0.0)
        if gone >= view.gone_threshold_s and len(participants) > 1:
            remaining = participants - {server_id}
            if _has_quorum(remaining, view.serving):
                server = view.config.servers[server_id]
                return ReconfigChange(
                    "remove",
                    server,
                    f"ZooKeeper server {server_id} gone for {gone:.0f}s, removing it from the ensemble",
                )
    # 2. Add this VM's server when it runs, is synced to the leader, and is not in the config.
    me = view.me
    if (
        me is not None
        and me.server_id not in view.config.servers
        and view.serving.get(me.server_id, False)
    ):
        role = PARTICIPANT if len(participants) < view.desired_participants else OBSERVER
        joining = ZkServer(
            me.server_id, me.address, me.peer_port, me.election_port, role, me.client_port
        )
        new_participants = participants | ({me.server_id} if role == PARTICIPANT else set())
        if _has_quorum(new_participants, view.serving):
            return ReconfigChange(
                "add",
                joining,
                f"ZooKeeper server {me.server_id} is not in the ensemble, adding it as {role}",
            )
    return None


def server_mode(address: str, port: int, timeout: float = 2.0) -> str | None:
    """The server's mode from ZooKeeper's `srvr` four-letter command, None if it is not serving.

    The four-letter commands are ZooKeeper's documented plain-text diagnostics (`echo srvr |
    nc host 2181`); a session-less read matters here, since a kazoo session per probe would
    be a write to the ensemble every cycle.
    """
    try:
        with socket.create_connection((address, port), timeout=timeout) as connection:
            connection.sendall(b"srvr")
            connection.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := connection.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None
