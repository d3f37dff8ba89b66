"""The management plane as tests run it: the real `kaas serve` in a process of its own, and
a small HTTP client that returns status and JSON body (errors included)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from management_plane.local.background_service import serve_command
from management_plane.local.cluster import LocalCluster
from management_plane.local.state import read_state
from management_plane.local.tls import admin_identity_in
from management_plane.service.tls import api_client_context, api_trust_bundle
from planner.zookeeper_client import zookeeper_client
from tests import harness

SERVE_START_S = 180.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ServiceHandle:
    home: Path
    port: int
    address_base: str
    engine: bool = True
    extra_args: tuple[str, ...] = ()
    """More `kaas serve` options (e.g. a short --broker-loss-after for a drill)."""
    process: subprocess.Popen[bytes] | None = None
    log_files: list[Path] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def trust_bundle(self) -> Path:
        """The service's CA certificate, made at its first start: the API is verified with it."""
        return api_trust_bundle(self.home)

    @property
    def key(self) -> str:
        return (self.home / "admin-key").read_text().strip()

    def start(self) -> None:
        log_file = self.home / f"serve-{len(self.log_files)}.log"
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_files.append(log_file)
        options = ["--local-address-base", self.address_base, *self.extra_args]
        if not self.engine:
            options.append("--no-engine")
        command = serve_command(self.home, self.port, *options)
        with log_file.open("wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ)
            )
        # Seconds on a quiet machine; run 6 (load 45) saw a restart print nothing in 60 s.
        deadline = time.monotonic() + SERVE_START_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"kaas serve exited: {log_file.read_text()}"
            try:
                if self.call("GET", "/v1/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise AssertionError(
            f"kaas serve did not answer within {SERVE_START_S:.0f}s: {log_file.read_text()}"
        )

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind, as a crashed host would leave it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = "admin",
        timeout_s: float = 60.0,
    ) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if key == "admin":
            key = self.key
        if key is not None:
            headers["X-API-Key"] = key
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            context = api_client_context(self.trust_bundle)
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def operation(self, op_id: int) -> dict[str, Any]:
        status, body = self.call("GET", f"/v1/operations/{op_id}")
        assert status == 200, body
        return dict(body)

    def wait_operation(self, op_id: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        op: dict[str, Any] = {}
        while time.monotonic() < deadline:
            op = self.operation(op_id)
            if op["status"] in ("succeeded", "failed"):
                print(step_timings(op))
                assert op["status"] == "succeeded", f"operation {op_id} failed: {op['message']}"
                return op
            time.sleep(1)
        raise AssertionError(f"operation {op_id} not finished in {timeout}s: {op.get('message')}")

    def zookeeper(self, cluster: str, hosts: str) -> KazooClient:
        """A kazoo client of a cluster this service made, as the admin its provider holds."""
        return zookeeper_client(hosts, admin_identity_in(self.home / "local" / cluster))

    def cluster_homes(self) -> list[Path]:
        local = self.home / "local"
        return [p for p in local.iterdir() if p.is_dir()] if local.is_dir() else []

    def remember_clusters(self) -> None:
        for home in self.cluster_homes():
            if read_state(home) is not None:
                harness.remember(home)

    def tear_down(self) -> None:
        self.stop()
        for home in self.cluster_homes():
            if read_state(home) is not None:
                harness.remember(home)
                LocalCluster(home).down(purge=True)


def step_timings(op: dict[str, Any]) -> str:
    """One line naming each finished step of an operation and the seconds it took, so that a
    drill's output says where its time went."""
    previous = float(op["created_at"])
    parts = []
    for entry in op["journal"]:
        if entry["outcome"] == "done":
            parts.append(f"{entry['step']}={entry['at'] - previous:.0f}s")
            previous = entry["at"]
    return f"operation {op['op_id']} {op['kind']} {op['status']}: " + " ".join(parts)


def adopt_cluster(service_home: Path, cluster: harness.ClusterHandle) -> str:
    """Enter a running harness cluster (the shared one) into a service's database, through
    the service's own access layer, as a running cluster of the local provider: tenant tests
    then use the session's cluster instead of making one through the service. Call before
    the service starts. Returns the cluster's name."""
    from management_plane.service.db import Database
    from planner.contracts.spec import ClusterSpec

    service_home.mkdir(parents=True, exist_ok=True)
    db = Database(f"sqlite:///{service_home / 'kaas.db'}")
    try:
        layout = cluster.layout
        version = read_state(cluster.home).kafka_version  # type: ignore[union-attr]
        spec = ClusterSpec(
            cluster=layout.name,
            kafka_version=version,
            broker_count=len(layout.vms),
            zones=tuple(sorted({vm.zone for vm in layout.vms})),
        )
        db.add_cluster(layout.name, "local", "local", json.dumps(spec.to_json(), sort_keys=True))
        db.update_cluster(layout.name, status="running")
        for vm in layout.vms:
            db.upsert_vm(
                f"{layout.name}/{vm.name}",
                layout.name,
                vm.zone,
                vm.address,
                "local",
                version,
                "running",
                broker_id=vm.broker_id,
            )
    finally:
        db.close()
    # The service reaches a cluster's internal listener with the admin identity its local
    # provider keeps in the cluster's folder: give it the harness cluster's.
    shutil.copytree(
        cluster.admin.identity.directory, service_home / "local" / layout.name / "client"
    )
    return layout.name
