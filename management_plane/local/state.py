"""The cluster's machine-readable file, `<home>/cluster.json`: layout, endpoints and process ids.

Read by `kaas status`, the VM commands, the test harness and later the management plane.
Writes are atomic (a temporary file renamed over the old one) and serialised by a lock file.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from management_plane.errors import KaasError
from management_plane.local.kraft import controller_vms
from management_plane.local.layout import ClusterLayout, Ports, VmLayout
from management_plane.local.processes import ProcessRecord, is_alive
from management_plane.local.tls import admin_identity
from planner.contracts.kafka_release import KAFKA_RELEASES, KafkaMode
from planner.contracts.transport_security import DEFAULT_TRANSPORT, parse_transport
from planner.pki.client_settings import client_files

STATE_FILE = "cluster.json"
LOCK_FILE = ".lock"
SCHEMA_VERSION = 1
PROCESS_KINDS = ("zookeeper", "agent", "controller", "kafka")
AGENT_PID_FILE = (
    "kafka.pid"  # where a VM's agent records the broker it started (agent/supervisor.py)
)
# Where a VM's agent records each process it started, by kind.
AGENT_PID_FILES = {"kafka": AGENT_PID_FILE, "controller": "controller.pid"}
# A ZooKeeper server `kaas up` started and the VM's agent restarted onto a renewed
# certificate (agent/zk_server_restart.py): the agent's record, while that process lives.
AGENT_ZOOKEEPER_PID_FILE = "zookeeper.pid"

# MirrorMaker, which the agent starts only where flows run (agent/mirror_maker.py).
MIRROR_MAKER_PID_FILE = "mirror-maker.pid"


def mirror_maker_record(vm: VmLayout) -> ProcessRecord | None:
    """The MirrorMaker process a VM's agent started, if it recorded one."""
    return _agent_started_broker(vm.directory / MIRROR_MAKER_PID_FILE)


@dataclass
class ClusterState:
    layout: ClusterLayout
    kafka_version: str
    # vm name -> process kind -> record
    processes: dict[str, dict[str, ProcessRecord]] = field(default_factory=dict)
    agents: bool = False  # each VM runs kaas-agent, which starts and heals its broker

    @property
    def kraft(self) -> bool:
        """Kafka 4.x: the brokers' metadata lives in a controller quorum, not in ZooKeeper."""
        return KAFKA_RELEASES.get(self.kafka_version) is KafkaMode.KRAFT

    @property
    def kinds(self) -> tuple[str, ...]:
        """The cluster's kinds of processes in start order."""
        if self.agents:
            # The agent starts its VM's controller and broker: their pid files are the records.
            return (
                ("zookeeper", "agent", "controller", "kafka")
                if self.kraft
                else (
                    "zookeeper",
                    "agent",
                    "kafka",
                )
            )
        return ("zookeeper", "controller", "kafka") if self.kraft else ("zookeeper", "kafka")

    def vm_kinds(self, vm: str) -> tuple[str, ...]:
        """The processes one VM runs, in start order: a KRaft controller on the first VMs only."""
        if "controller" in self.kinds and self.layout.vm(vm) not in controller_vms(self.layout):
            return tuple(kind for kind in self.kinds if kind != "controller")
        return self.kinds

    def record(self, vm: str, kind: str) -> ProcessRecord | None:
        if kind in AGENT_PID_FILES and self.agents:
            return _agent_started_broker(self.layout.vm(vm).directory / AGENT_PID_FILES[kind])
        if kind == "zookeeper" and self.agents:
            restarted = _agent_started_broker(
                self.layout.vm(vm).directory / AGENT_ZOOKEEPER_PID_FILE
            )
            if is_alive(restarted):
                return restarted
        return self.processes.get(vm, {}).get(kind)

    def set_record(self, vm: str, kind: str, record: ProcessRecord | None) -> None:
        if kind in AGENT_PID_FILES and self.agents:
            return  # the agent's pid file is the record
        records = self.processes.setdefault(vm, {})
        if record is None:
            records.pop(kind, None)
        else:
            records[kind] = record

    def to_json(self) -> dict[str, Any]:
        layout = self.layout
        return {
            "schema_version": SCHEMA_VERSION,
            "name": layout.name,
            "home": str(layout.home),
            "kafka_version": self.kafka_version,
            "agents": self.agents,
            "controllers": None if layout.controllers is None else list(layout.controllers),
            **(
                {"transport_security": layout.transport.value}
                if layout.transport is not DEFAULT_TRANSPORT
                else {}
            ),
            "bootstrap_servers": layout.bootstrap_servers,
            "tenant_bootstrap_servers": layout.tenant_bootstrap_servers,
            # The internal listener wants a client certificate: the operator's is here.
            "client": client_files(admin_identity(layout)),
            "zookeeper_hosts": layout.zookeeper_hosts,
            "kafka_chroot": layout.kafka_chroot,
            "zookeeper_connect": layout.zookeeper_connect,
            "vms": [
                {
                    "name": vm.name,
                    "index": vm.index,
                    "address": vm.address,
                    "zone": vm.zone,
                    "broker_id": vm.broker_id,
                    "directory": str(vm.directory),
                    "ports": vm.ports.all(),
                    "jolokia_url": vm.jolokia_url,
                    "processes": {
                        kind: record.to_json()
                        for kind in self.vm_kinds(vm.name)
                        if (record := self.record(vm.name, kind)) is not None
                    },
                }
                for vm in layout.vms
            ],
        }

    @staticmethod
    def from_json(value: dict[str, Any], source: Path) -> ClusterState:
        try:
            if value.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(
                    f"schema_version {value.get('schema_version')!r} is not {SCHEMA_VERSION}"
                )
            home = Path(value["home"])
            vms = []
            processes: dict[str, dict[str, ProcessRecord]] = {}
            for entry in value["vms"]:
                ports = entry["ports"]
                vms.append(
                    VmLayout(
                        name=str(entry["name"]),
                        index=int(entry["index"]),
                        address=str(entry["address"]),
                        zone=str(entry["zone"]),
                        broker_id=int(entry["broker_id"]),
                        directory=Path(entry["directory"]),
                        ports=Ports(
                            zookeeper_client=int(ports["zookeeper_client"]),
                            zookeeper_peer=int(ports["zookeeper_peer"]),
                            zookeeper_election=int(ports["zookeeper_election"]),
                            # Files written before the listeners had TLS name them kafka and
                            # kafka_sasl (the tenant port is absent from still older ones).
                            kafka_internal=int(ports.get("kafka_internal", ports.get("kafka"))),
                            kafka_tenant=int(
                                ports.get("kafka_tenant", ports.get("kafka_sasl", 9094))
                            ),
                            jolokia=int(ports["jolokia"]),
                            kafka_controller=int(
                                ports.get("kafka_controller", Ports().kafka_controller)
                            ),
                        ),
                    )
                )
                processes[entry["name"]] = {
                    kind: ProcessRecord.from_json(record)
                    for kind, record in entry.get("processes", {}).items()
                    if kind in PROCESS_KINDS
                }
            controllers = value.get("controllers")
            transport = parse_transport(
                value.get("transport_security", DEFAULT_TRANSPORT.value), "transport_security"
            )
            layout = ClusterLayout(
                name=str(value["name"]),
                home=home,
                vms=tuple(vms),
                controllers=None if controllers is None else tuple(str(c) for c in controllers),
                transport=transport,
            )
            return ClusterState(
                layout=layout,
                kafka_version=str(value["kafka_version"]),
                processes=processes,
                agents=bool(value.get("agents", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise KaasError(f"cluster file {source} is malformed ({exc})") from None


def _agent_started_broker(pid_file: Path) -> ProcessRecord | None:
    try:
        return ProcessRecord.from_json(json.loads(pid_file.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def read_state(home: Path) -> ClusterState | None:
    path = state_path(home)
    if not path.exists():
        return None
    try:
        value = json.loads(path.read_text())
    except ValueError as exc:
        raise KaasError(f"cluster file {path} is not valid JSON ({exc})") from None
    return ClusterState.from_json(value, path)


def require_state(home: Path) -> ClusterState:
    state = read_state(home)
    if state is None:
        raise KaasError(f"no local cluster at {home} (no {STATE_FILE}): start one with `kaas up`")
    return state


def write_state(state: ClusterState) -> None:
    path = state_path(state.layout.home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    os.replace(tmp, path)


@contextmanager
def locked(home: Path) -> Iterator[None]:
    """One `kaas` command at a time changes a cluster's processes."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / LOCK_FILE).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
