"""The ZooKeeper server's configuration files, rendered from the ensemble and this VM's
paths: zoo.cfg, the dynamic membership file, myid and logback. Pure.

Membership lives in the dynamic file, so that it changes by reconfig without a restart:
zoo.cfg names the file, and ZooKeeper rewrites both after a reconfig.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePath

from planner.contracts.log_limits import DEFAULT_LOG_LIMITS, LogLimits
from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.contracts.vm_config.zookeeper_security import (
    ZookeeperSecurity,
    zoo_cfg_security_lines,
)
from planner.errors import PlannerError


class ZookeeperRole(StrEnum):
    PARTICIPANT = "participant"  # votes
    OBSERVER = "observer"  # serves reads, follows writes, never votes


class ZookeeperConfigError(PlannerError, ValueError):
    """A ZooKeeper server or ensemble that must not be rendered; the message names it."""


@dataclass(frozen=True)
class EnsembleServer:
    """One server line of the dynamic file: server.<id>=<address>:<peer>:<election>:<role>.

    No client part: a server binds a plaintext client port wherever its own line names one,
    and ZooKeeper 3.8 answers the four-letter word `srvr` there whatever the whitelist says.
    Clients use the secure port of each server's zoo.cfg. ZooKeeper's incremental reconfig
    wants a client part in a joining line, so the agents reconfigure with the whole member
    list instead (`agent.zk_membership`)."""

    server_id: int
    address: str
    peer_port: int
    election_port: int
    role: ZookeeperRole = ZookeeperRole.PARTICIPANT

    def line(self) -> str:
        return (
            f"server.{self.server_id}={self.address}:{self.peer_port}:{self.election_port}:"
            f"{self.role}"
        )

    def problems(self) -> tuple[str, ...]:
        found = []
        if not 1 <= self.server_id <= 255:
            # ZooKeeper's admin guide asks for a myid from 1 to 255.
            found.append(f"server id must be 1-255, got {self.server_id}")
        if not self.address.strip() or any(c in self.address for c in ":;,= "):
            found.append(f"server {self.server_id}: {self.address!r} is not a host or address")
        ports = (self.peer_port, self.election_port)
        if not all(0 < port < 65536 for port in ports):
            found.append(f"server {self.server_id}: ports must be 1-65535, got {ports}")
        elif self.peer_port == self.election_port:
            found.append(f"server {self.server_id}: peer and election ports must differ")
        return tuple(found)


def voting_roles(server_ids: Sequence[int], participants: int) -> dict[int, ZookeeperRole]:
    """The first `participants` servers (by id) vote; the others observe."""
    return {
        server_id: ZookeeperRole.PARTICIPANT if rank < participants else ZookeeperRole.OBSERVER
        for rank, server_id in enumerate(sorted(server_ids))
    }


def render_zookeeper_dynamic(
    servers: Sequence[EnsembleServer], live_lines: Sequence[str] = ()
) -> str:
    """The dynamic membership file. `live_lines`: server lines as a running ensemble states
    them (/zookeeper/config), kept verbatim before `servers` when a VM joins one."""
    problems = [problem for server in servers for problem in server.problems()]
    ids = [server.server_id for server in servers]
    if len(set(ids)) != len(ids):
        problems.append(f"server ids repeat: {sorted(ids)}")
    if not servers and not live_lines:
        problems.append("an ensemble needs at least one server")
    if any(not line.startswith("server.") or "\n" in line for line in live_lines):
        problems.append(f"live ensemble lines must be server lines: {list(live_lines)}")
    if problems:
        raise ZookeeperConfigError("; ".join(problems))
    return "".join(line + "\n" for line in (*live_lines, *(s.line() for s in servers)))


def render_zoo_cfg(
    data_dir: PurePath,
    dynamic_file: PurePath,
    security: ZookeeperSecurity,
    client_port: int,
    client_address: str | None = None,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
) -> str:
    """zoo.cfg: the same on every server except its paths and client address. reconfigEnabled
    must be the same on every server; standaloneEnabled=false keeps a one-server ensemble a
    real ensemble that can grow by reconfig; clients reach only the secure client port
    (zookeeper_security), bound to `client_address` (None: every interface)."""
    return "\n".join(
        [
            "tickTime=2000",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={data_dir}",
            "reconfigEnabled=true",
            "standaloneEnabled=false",
            f"dynamicConfigFile={dynamic_file}",
            # KaaS reads `srvr` and the agents' metrics read `mntr`, both over TLS (no port
            # serves plaintext); ZooKeeper enables `srvr` whatever this says.
            "4lw.commands.whitelist=srvr,mntr",
            "admin.enableServer=false",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
            "maxClientCnxns=200",
            *zoo_cfg_security_lines(security, client_port, client_address, transport),
            "",
        ]
    )


def render_zookeeper_myid(server_id: int) -> str:
    return f"{server_id}\n"


ZOOKEEPER_SERVER_LOG = "zookeeper-server.log"
LOGGING_RELOAD_S = 10
"""How often a running JVM's logging framework (logback, Log4j 2) looks at its file for a
change: a check of the file's modification time."""


def render_zookeeper_logback(limits: LogLimits = DEFAULT_LOG_LIMITS) -> str:
    """logback.xml: one size-bounded rolling file in ZooKeeper's log dir (`limits`: the
    spec's; rolled files numbered 1..files). Nothing to the console: the supervisor's capture
    of it is no rolling file. logback looks at the file again every LOGGING_RELOAD_S, so the
    agent's rewrite of it takes new bounds with no restart."""
    return f"""<configuration scan="true" scanPeriod="{LOGGING_RELOAD_S} seconds">
  <appender name="FILE" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>${{zookeeper.log.dir}}/{ZOOKEEPER_SERVER_LOG}</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>${{zookeeper.log.dir}}/{ZOOKEEPER_SERVER_LOG}.%i</fileNamePattern>
      <minIndex>1</minIndex>
      <maxIndex>{limits.files}</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>{limits.max_file_mb}MB</maxFileSize>
    </triggeringPolicy>
    <encoder><pattern>%d{{ISO8601}} [myid:%X{{myid}}] %-5level [%t] %logger{{1}} - %msg%n</pattern></encoder>
  </appender>
  <!-- Two lines for every TLS client and one for every four-letter word: the agents' probes
       would fill the file with them. Refusals are logged at WARN and stay. -->
  <logger name="org.apache.zookeeper.server.auth.X509AuthenticationProvider" level="WARN"/>
  <logger name="org.apache.zookeeper.server.NettyServerCnxn" level="WARN"/>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""
