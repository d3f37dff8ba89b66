"""The test harness's view of a real local cluster: endpoints, the `kaas` CLI, its JVM logs.

Every process a test cluster starts is remembered here (pid and start time), so that the
session can prove at its end that nothing was left running.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from management_plane.errors import KaasError
from management_plane.local.cluster import LocalCluster
from management_plane.local.layout import ClusterLayout
from management_plane.local.processes import ProcessRecord, is_alive, kill_session
from management_plane.local.state import ClusterState, read_state, require_state
from management_plane.local.tls import admin_client, admin_identity_in, vm_identity
from management_plane.monitoring.pipeline import pipeline_records, plan_pipeline
from planner.contracts.journal import JournalEntry, parse_journal_entry
from planner.contracts.member import MemberRecord, MemberState, parse_members
from planner.contracts.paths import ClusterPaths
from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.pki.client_settings import ClientConfig, InternalClient, admin_client_in
from planner.pki.files import IdentityFiles
from planner.zookeeper_client import zookeeper_client


def _claim_test_network() -> int:
    """Claim three /24s of loopback for this test session (127.0.N, N+1, N+2, from N = 11).

    Several pytest sessions may run on one machine (a developer's and a helper's, or CI
    beside a demo cluster on 127.0.1.x): each holds a lock file for its range while it runs.
    """
    for first in range(11, 250, 3):
        lock = open(f"{tempfile.gettempdir()}/kaas-test-net-{first}.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        _HELD_LOCKS.append(lock)
        _stop_clusters_left_on(first)
        return first
    raise RuntimeError("no free 127.0.N test network left between 127.0.11 and 127.0.249")


_HELD_LOCKS: list[IO[str]] = []


def _homes_file(first: int) -> Path:
    return Path(tempfile.gettempdir()) / f"kaas-test-net-{first}.homes"


def _records_of(home: Path, state: ClusterState) -> list[ProcessRecord]:
    records = [
        record
        for vm in state.layout.vms
        for kind in state.kinds
        if (record := state.record(vm.name, kind)) is not None
    ]
    if state.agents:
        monitoring = plan_pipeline(home, state.layout.vms[0].address.rsplit(".", 1)[0])
        records += pipeline_records(monitoring).values()
    return records


def _stop_clusters_left_on(first: int) -> None:
    """A session killed before its end (SIGKILL, SIGTERM: no fixture teardown, no session
    finish) leaves its clusters running on the network this session now holds: stop every
    cluster the file names (their JVMs, agents and monitoring daemons, by pid and start time,
    with whatever is left of each one's session), then start a new list."""
    homes = _homes_file(first)
    try:
        listed = homes.read_text().split()
    except FileNotFoundError:
        listed = []
    for home in dict.fromkeys(listed):
        # Best effort: a failure here must not stop this session's import (each worker that
        # pytest-xdist starts in a crashed one's place would fail the same way).
        try:
            state = read_state(Path(home))
            if state is None:
                continue
            try:
                LocalCluster(Path(home)).down()
            except KaasError as exc:
                print(f"harness: could not stop the cluster left at {home}: {exc}", file=sys.stderr)
            for record in _records_of(Path(home), state):
                kill_session(record)
        except Exception as exc:
            print(
                f"harness: could not clean up the cluster left at {home}: {exc!r}", file=sys.stderr
            )
    homes.write_text("")


_TEST_NETWORK = _claim_test_network()
SHARED_CLUSTER_BASE = f"127.0.{_TEST_NETWORK}"
FRESH_CLUSTER_BASE = f"127.0.{_TEST_NETWORK + 1}"
SCRATCH_BASE = f"127.0.{_TEST_NETWORK + 2}"

STARTED_PROCESSES: set[ProcessRecord] = set()
USED_ENDPOINTS: set[tuple[str, int]] = set()


def remember(home: Path) -> None:
    """Record every process and endpoint of the cluster at `home`, for the end-of-session check
    (and in the network's list, for the next session should this one be killed)."""
    state = require_state(home)
    with _homes_file(_TEST_NETWORK).open("a") as homes:
        homes.write(f"{home.resolve()}\n")
    for vm in state.layout.vms:
        for port in vm.ports.all().values():
            USED_ENDPOINTS.add((vm.address, port))
    STARTED_PROCESSES.update(_records_of(home, state))
    if state.agents:
        host = plan_pipeline(home, state.layout.vms[0].address.rsplit(".", 1)[0]).host
        for port in (host.carbon_line_port, host.carbon_query_port, host.render_port):
            USED_ENDPOINTS.add((host.address, port))


def leftovers() -> list[ProcessRecord]:
    return [record for record in STARTED_PROCESSES if is_alive(record)]


def kill_leftovers() -> list[ProcessRecord]:
    """Kill every process a cluster of this session started and still runs, each with what
    is left of its session (a gunicorn worker outlives its killed master)."""
    alive = leftovers()
    for record in STARTED_PROCESSES:
        kill_session(record)
    return alive


def kaas_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run the real `kaas` command line, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "management_plane.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or dict(os.environ),
    )


@dataclass
class ClusterHandle:
    home: Path
    layout: ClusterLayout

    @property
    def local(self) -> LocalCluster:
        return LocalCluster(self.home)

    @property
    def bootstrap_servers(self) -> str:
        return self.layout.bootstrap_servers

    @property
    def admin(self) -> InternalClient:
        """The operator's admin identity on the internal listener (mutual TLS)."""
        return admin_client(self.layout)

    @property
    def admin_properties(self) -> Path:
        """The admin settings file for Kafka's Java tools, as cluster.json names it."""
        state = json.loads((self.home / "cluster.json").read_text())
        return Path(state["client"]["java_properties"])

    def client_config(self, **overrides: str | int | float | bool) -> ClientConfig:
        """librdkafka settings of the admin identity, with `overrides` on top."""
        return self.admin.librdkafka(**overrides)

    @property
    def zookeeper_hosts(self) -> str:
        return self.layout.zookeeper_hosts

    @property
    def kafka_chroot(self) -> str:
        return self.layout.kafka_chroot

    @property
    def admin_identity(self) -> IdentityFiles:
        """The operator's certificate `kaas up` issued: what the tests present."""
        return admin_identity_in(self.home)

    @property
    def node_identity(self) -> IdentityFiles:
        """The first VM's certificate: what its agent and broker present."""
        return vm_identity(self.layout.vms[0])

    def zookeeper(self, hosts: str | None = None, **options: Any) -> KazooClient:
        """A kazoo client of this cluster's ZooKeeper (all of it unless `hosts`), as the admin."""
        return zookeeper_client(hosts or self.zookeeper_hosts, self.admin_identity, **options)

    def kaas(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        command = args[0]
        result = kaas_cli(command, "--home", str(self.home), *args[1:], timeout=timeout)
        remember(self.home)
        return result

    def vm(self, action: str, name: str, *extra: str) -> str:
        result = self.kaas("vm", action, name, *extra)
        if result.returncode != 0:
            raise AssertionError(f"kaas vm {action} {name} failed: {result.stderr.strip()}")
        return result.stdout.strip()

    @staticmethod
    def unique_topic(name: str) -> str:
        cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", name)[:60]
        return f"{cleaned}-{uuid.uuid4().hex[:8]}"

    def log_tails(self, lines: int = 80) -> list[tuple[str, str]]:
        tails = []
        for vm in self.layout.vms:
            # The processes' captured output, and the rolling files their logging writes.
            for name in (
                "zookeeper",
                "zookeeper-server",
                "agent",
                "kaas-agent",
                "controller",
                "controller-server",
                "kafka",
                "server",
            ):
                path = vm.logs_dir / f"{name}.log"
                if path.exists():
                    text = path.read_text(errors="replace").splitlines()[-lines:]
                    tails.append((f"{vm.name} {name}.log (last {lines} lines)", "\n".join(text)))
        return tails


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 1.0) -> None:
    """Poll `check` until it holds; fail the test naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def member_records(zk: KazooClient, cluster: str) -> dict[int, MemberRecord]:
    """Every agent's member record, read through the contract's parser (a record it refuses
    fails the test: every agent here writes the current schema)."""
    path = ClusterPaths(cluster).members
    values = {}
    for child in zk.get_children(path):
        try:
            values[child] = zk.get(f"{path}/{child}")[0]
        except NoNodeError:  # an agent that just died: its ephemeral znode went after the listing
            continue
    readings = parse_members(values)
    assert not readings.unreadable, f"unreadable member records: {readings.unreadable}"
    return readings.records


def journal_entries(zk: KazooClient, cluster: str) -> list[JournalEntry]:
    """The agents' journal in order, every entry read through the contract's parser."""
    path = ClusterPaths(cluster).journal
    return [
        parse_journal_entry(zk.get(f"{path}/{child}")[0]) for child in sorted(zk.get_children(path))
    ]


def agent_sentences(zk: KazooClient, cluster: str) -> list[str]:
    """The last sentence of every agent, from the member records."""
    return [m.sentence for m in member_records(zk, cluster).values()]


def wait_for_healthy_agents(
    zk: KazooClient, cluster: str, count: int = 3, timeout: float = 120
) -> None:
    wait_until(
        lambda: (
            len(records := member_records(zk, cluster)) == count
            and all(m.state == MemberState.HEALTHY for m in records.values())
        ),
        timeout,
        f"{count} agents reporting a healthy broker",
    )


def start_cluster(
    home: Path,
    nodes: int,
    name: str,
    address_base: str,
    agents: bool = False,
    kafka_version: str | None = None,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
) -> ClusterHandle:
    cluster = LocalCluster(home)
    try:
        result = cluster.up(
            nodes,
            name=name,
            address_base=address_base,
            agents=agents,
            kafka_version=kafka_version,
            transport=transport,
        )
    finally:
        if (home / "cluster.json").exists():
            remember(home)
    return ClusterHandle(home=home, layout=result.state.layout)


def stop_cluster(handle: ClusterHandle) -> None:
    if (handle.home / "cluster.json").exists():
        remember(handle.home)
    handle.local.down(purge=True)


def api_cluster_client(cluster: dict[str, object]) -> InternalClient:
    """The admin client of a cluster the management plane runs, from its API view (the
    service's local provider keeps the identity on this host)."""
    files = cluster["client"]
    assert isinstance(files, dict), f"cluster {cluster['name']} has no client files"
    return admin_client_in(Path(files["directory"]), str(cluster["bootstrap_servers"]))
