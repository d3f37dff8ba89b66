"""The ZooKeeper ensemble as both planes see it: the one parser of the dynamic config
(/zookeeper/config), and the check of whether a requested repair is complete (the request
itself is a contract value: planner/contracts/ensemble_repair.py).

Pure: no I/O. The agents decide every membership change (`agent.zk_membership`); the
management plane only states facts in a request (these VMs are recycled for good) and
waits until the ensemble shows the repair done.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.contracts.vm_config.zookeeper import ZookeeperRole
from planner.errors import PlannerError


class EnsembleConfigError(PlannerError, ValueError):
    """/zookeeper/config holds a line this parser does not understand."""


_SERVER_LINE = re.compile(
    r"^server\.(?P<id>\d+)=(?P<address>[^:;]+):(?P<peer>\d+):(?P<election>\d+)"
    r"(?::(?P<role>participant|observer))?"
    r"(?:;(?:(?P<client_address>[^:;]+):)?(?P<client_port>\d+))?$"
)


@dataclass(frozen=True)
class ZkServer:
    """One `server.N=` line of the dynamic config."""

    server_id: int
    address: str
    peer_port: int
    election_port: int
    role: ZookeeperRole
    # The plaintext client port the line names; None: none (a secured server's clients use
    # the secure port of its zoo.cfg, which the dynamic config does not state).
    client_port: int | None = None
    client_address: str | None = None  # None: the line names only the port (every interface)

    def line(self) -> str:
        """The line as reconfig takes it (a `joining` entry)."""
        server = (
            f"server.{self.server_id}={self.address}:{self.peer_port}:{self.election_port}:"
            f"{self.role.value}"
        )
        if self.client_port is None:
            return server
        client = (
            f"{self.client_address}:{self.client_port}"
            if self.client_address is not None
            else str(self.client_port)
        )
        return f"{server};{client}"

    def with_role(self, role: ZookeeperRole) -> ZkServer:
        return ZkServer(
            self.server_id,
            self.address,
            self.peer_port,
            self.election_port,
            role,
            self.client_port,
            self.client_address,
        )


@dataclass(frozen=True)
class EnsembleConfig:
    servers: dict[int, ZkServer]
    version: int  # the config's own version (the `version=` line, hex); -1 if absent

    @property
    def participants(self) -> dict[int, ZkServer]:
        return {i: s for i, s in self.servers.items() if s.role is ZookeeperRole.PARTICIPANT}

    @property
    def observers(self) -> dict[int, ZkServer]:
        return {i: s for i, s in self.servers.items() if s.role is ZookeeperRole.OBSERVER}

    def at_addresses(self, addresses: frozenset[str]) -> dict[int, ZkServer]:
        return {i: s for i, s in self.servers.items() if s.address in addresses}


def parse_server_line(line: str) -> ZkServer:
    match = _SERVER_LINE.match(line.strip())
    if match is None:
        raise EnsembleConfigError(
            f"unreadable server line in /zookeeper/config: {line!r} (expected "
            "server.<id>=<address>:<peer port>:<election port>[:<role>][;[<address>:]<client port>])"
        )
    return ZkServer(
        server_id=int(match["id"]),
        address=match["address"],
        peer_port=int(match["peer"]),
        election_port=int(match["election"]),
        role=ZookeeperRole(match["role"] or ZookeeperRole.PARTICIPANT),
        client_port=int(match["client_port"]) if match["client_port"] else None,
        client_address=match["client_address"],
    )


def parse_ensemble_config(text: str) -> EnsembleConfig:
    """The servers and version of the dynamic config, as /zookeeper/config holds it."""
    servers: dict[int, ZkServer] = {}
    version = -1
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        if line.startswith("version="):
            value = line.split("=", 1)[1]
            try:
                version = int(value, 16)
            except ValueError:
                raise EnsembleConfigError(
                    f"unreadable version in /zookeeper/config: {value!r} (expected hexadecimal)"
                ) from None
            continue
        server = parse_server_line(line)
        if server.server_id in servers:
            raise EnsembleConfigError(
                f"server {server.server_id} appears twice in /zookeeper/config"
            )
        servers[server.server_id] = server
    return EnsembleConfig(servers, version)


def repair_outstanding(
    config: EnsembleConfig,
    recycled_addresses: frozenset[str],
    live_addresses: frozenset[str],
    desired_participants: int,
) -> list[str]:
    """What the ensemble still lacks before a repair is complete (empty: complete): no server
    of a recycled VM, a server for every live VM, and no observer left while the voting
    ensemble is below its size."""
    outstanding = []
    recycled = sorted(config.at_addresses(recycled_addresses))
    if recycled:
        outstanding.append(f"servers {recycled} of recycled VMs still in the ensemble")
    present = {s.address for s in config.servers.values()}
    missing = sorted(live_addresses - recycled_addresses - present)
    if missing:
        outstanding.append(f"no server yet for the VMs at {', '.join(missing)}")
    voting = len(config.participants)
    if voting < desired_participants and config.observers:
        outstanding.append(
            f"{voting} of {desired_participants} participants while observers "
            f"{sorted(config.observers)} could vote"
        )
    return outstanding
