"""Restarting this VM's ZooKeeper server onto its renewed certificate, off the agent's loop.

ZooKeeper 3.8 builds its secure client port's key and trust managers once, at start (the
x509 auth provider holds them), and has no reload for them: a renewed certificate is
presented only after a restart. The restart runs under the cluster-wide restart lock (one
restart of any process at a time), and only while every other participant of the ensemble
serves, looked at again under the lock: a quorum with one server down cannot lose another.
The lock is held until this server serves again and presents the installed certificate.

`restart_refusal` is the pure gate (table-tested); the process control is an adapter:
systemd (`kaas-zookeeper.service`) on an image VM, the QuorumPeerMain process running this
VM's zoo.cfg on a local one (restarted with the command line it ran with, and recorded in
the VM's `zookeeper.pid`, where `kaas down` finds it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from agent.errors import AgentError
from agent.ports import Clock, RestartLock, StoreUnavailable
from agent.supervisor import start_recorded

ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZOOKEEPER_UNIT = "kaas-zookeeper.service"
ZOOKEEPER_PID_FILE = "zookeeper.pid"


class ZookeeperServerError(AgentError):
    """This VM's ZooKeeper server could not be controlled; the message says why."""


def restart_refusal(me: int, serving: Mapping[int, bool]) -> str | None:
    """Why this VM's server must not restart now (None: it may). `serving`: every
    participant of the ensemble's config and whether it serves. An observer (or a server
    the config no longer names) does not vote: its restart never costs the quorum."""
    if me not in serving:
        return None
    down = sorted(server for server, up in serving.items() if server != me and not up)
    if down:
        names = ", ".join(str(server) for server in down)
        return f"ZooKeeper server(s) {names} not serving: restarting {me} could lose the quorum"
    return None


class ZookeeperServer(Protocol):
    def restart(self, stop_timeout: float) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `stop_timeout`) and start it again."""
        ...


@dataclass(frozen=True)
class ZookeeperRestartSettings:
    server_id: int
    lock_poll_s: float = 5.0
    stop_timeout_s: float = 60.0
    serve_timeout_s: float = 180.0
    poll_s: float = 1.0


@dataclass(frozen=True)
class ZookeeperLooks:
    """What the restart reads, each looked at when called."""

    serving: Callable[[], Mapping[int, bool]]
    """Every participant of the ensemble's config and whether it serves."""
    presented_serial: Callable[[], str | None]
    """What this server's secure client port presents (None: no answer)."""
    installed_serial: Callable[[], str]


def restart_zookeeper_server(
    settings: ZookeeperRestartSettings,
    lock: RestartLock,
    server: ZookeeperServer,
    looks: ZookeeperLooks,
    clock: Clock,
    report: Callable[[str], None],
) -> str:
    """The whole restart; the result for the journal."""
    me = settings.server_id
    report(f"ZooKeeper server {me} restart: waiting for the restart lock")
    try:
        while not lock.acquire(settings.lock_poll_s):
            holders = lock.holders()
            report(
                f"ZooKeeper server {me} restart: waiting for the restart lock"
                + (f" held by {holders[0]}" if holders else "")
            )
    except StoreUnavailable as exc:
        return f"abandoned: restart lock unavailable ({exc})"
    try:
        refusal = restart_refusal(me, looks.serving())
        if refusal is not None:
            return f"not restarted: {refusal}"
        report(f"ZooKeeper server {me} restart 1/2: restarting")
        server.restart(settings.stop_timeout_s)
        report(f"ZooKeeper server {me} restart 2/2: waiting until it serves its new certificate")
        installed = looks.installed_serial()
        deadline = clock.monotonic() + settings.serve_timeout_s
        while clock.monotonic() < deadline:
            # A participant must serve again; an observer's presenting the certificate will do.
            if looks.presented_serial() == installed and looks.serving().get(me, True):
                return f"done, serving with certificate {installed}"
            clock.sleep(settings.poll_s)
        return (
            f"restarted, not serving certificate {installed} after {settings.serve_timeout_s:.0f} s"
        )
    except (AgentError, OSError) as exc:
        return f"failed: {exc}"
    finally:
        with contextlib.suppress(StoreUnavailable):
            lock.release()


class SystemdZookeeper:
    """The image's kaas-zookeeper unit: one `systemctl restart`, so that an agent dying
    half-way never leaves the server stopped."""

    def restart(self, stop_timeout: float) -> None:
        done = subprocess.run(
            ["systemctl", "restart", ZOOKEEPER_UNIT],
            capture_output=True,
            text=True,
            timeout=stop_timeout + 60,
            check=False,
        )
        if done.returncode != 0:
            raise ZookeeperServerError(
                f"systemctl restart {ZOOKEEPER_UNIT} failed: {done.stderr.strip()}"
            )


def _gone(process: psutil.Process, timeout: float) -> bool:
    """Whether the process exited within `timeout` (a zombie counts: its parent, not this
    agent, may be the one to collect it)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(process.pid, os.WNOHANG)  # a server this agent started is its child
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


class LocalZookeeper:
    """A local VM's server: the QuorumPeerMain process that runs this VM's zoo.cfg,
    restarted with the command line and working folder it ran with."""

    def __init__(self, zoo_cfg: Path, state_dir: Path, log_file: Path) -> None:
        self.zoo_cfg = str(zoo_cfg)
        self.pid_file = state_dir / ZOOKEEPER_PID_FILE
        self.log_file = log_file

    def _find(self) -> psutil.Process | None:
        for process in psutil.process_iter(["cmdline"]):
            command = process.info.get("cmdline") or []
            if ZOOKEEPER_MAIN in command and command[-1:] == [self.zoo_cfg]:
                return process
        return None

    def restart(self, stop_timeout: float) -> None:
        process = self._find()
        if process is None:
            raise ZookeeperServerError(f"no ZooKeeper server runs {self.zoo_cfg}")
        try:
            command, cwd = process.cmdline(), process.cwd()
            process.send_signal(signal.SIGTERM)
            if not _gone(process, stop_timeout):
                process.kill()
                if not _gone(process, 10):
                    raise ZookeeperServerError(f"ZooKeeper server {process.pid} does not exit")
        except psutil.NoSuchProcess:
            raise ZookeeperServerError("the ZooKeeper server exited before its restart") from None
        except psutil.Error as exc:
            raise ZookeeperServerError(f"stopping the ZooKeeper server: {exc}") from None
        start_recorded(command, self.log_file, self.pid_file, cwd)
