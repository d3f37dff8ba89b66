"""The local provider's side of a drill: a `LocalCluster` seen through the ports the faults
(`faults.FaultCluster`) and the drill runner (`runner.DrillCluster`) use. Reads through
`local/probes.py`, acts through `LocalCluster.vm_action` (pid and start time, never a name).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from kazoo.exceptions import KazooException, NoNodeError

from management_plane.drills import local_disk
from management_plane.drills.errors import DrillError
from management_plane.drills.faults import ProcessAction, ProcessKind
from management_plane.drills.health import JournalLine
from management_plane.drills.local_kraft import LocalKraftReads
from management_plane.drills.local_planner import LocalPlanReads
from management_plane.errors import KaasError
from management_plane.local import probes
from management_plane.local.cluster import LocalCluster
from management_plane.local.processes import is_alive
from management_plane.local.state import ClusterState, require_state
from management_plane.local.tls import admin_client, admin_identity
from planner.contracts.fields import ContractError
from planner.contracts.journal import parse_journal_entry
from planner.contracts.paths import ClusterPaths
from planner.pki.client_settings import InternalClient
from planner.zookeeper_client import zookeeper_client


class LocalFaultCluster(LocalPlanReads, LocalKraftReads):
    def __init__(self, home: Path) -> None:
        self.home = home
        self.local = LocalCluster(home)

    def _state(self) -> ClusterState:
        return require_state(self.home)

    @property
    def name(self) -> str:
        return self._state().layout.name

    @property
    def kafka(self) -> InternalClient:
        """The operator's admin identity on the internal listener (mutual TLS)."""
        return admin_client(self._state().layout)

    def vm_names(self) -> tuple[str, ...]:
        return tuple(vm.name for vm in self._state().layout.vms)

    def vm_address(self, vm: str) -> str:
        return self._state().layout.vm(vm).address

    def vm_pids(self, vm: str) -> tuple[int, ...]:
        state = self._state()
        records = [state.record(vm, kind) for kind in state.kinds]
        return tuple(r.pid for r in records if r is not None and is_alive(r))

    def runs_agents(self) -> bool:
        return self._state().agents

    def _registered_hosts(self, timeout: float = 5.0) -> dict[int, str]:
        """Each registered broker's host, by id: Kafka's znodes in ZooKeeper mode; in KRaft
        mode the brokers the controllers' metadata lists (the unfenced ones), read through
        the brokers, since Kafka writes nothing to ZooKeeper there."""
        state = self._state()
        if state.kraft:
            metadata = probes.admin_client(self.kafka).list_topics(timeout=timeout)
            return {int(b.id): str(b.host) for b in metadata.brokers.values()}
        registrations = probes.broker_registrations(state.layout, timeout=timeout)
        return {broker_id: r.host for broker_id, r in registrations.items()}

    def broker_vm(self, broker_id: int) -> str:
        layout = self._state().layout
        host = self._registered_hosts().get(broker_id)
        if host is None:
            where = "in the KRaft metadata" if self._state().kraft else "in ZooKeeper"
            raise DrillError(f"broker {broker_id} is not registered {where}")
        for vm in layout.vms:
            if vm.address == host:
                return vm.name
        raise DrillError(f"broker {broker_id} ({host}) is on no VM of this cluster")

    def partition_leader(self, topic: str, partition: int) -> int:
        metadata = probes.admin_client(self.kafka).list_topics(topic, timeout=10)
        described = metadata.topics.get(topic)
        if described is None or partition not in described.partitions:
            raise DrillError(f"topic {topic} has no partition {partition}")
        leader = described.partitions[partition].leader
        if leader < 0:
            raise DrillError(f"{topic}-{partition} has no leader now")
        return int(leader)

    def controller_id(self) -> int:
        if self._state().kraft:  # a KRaft broker names a random broker as "the controller"
            raise DrillError("a KRaft cluster has no controller broker: ask quorum_leader")
        metadata = probes.admin_client(self.kafka).list_topics(timeout=10)
        if metadata.controller_id < 0:
            raise DrillError("the cluster has no controller now")
        return int(metadata.controller_id)

    def zookeeper_modes(self) -> Mapping[str, str]:
        layout = self._state().layout
        return {vm.name: probes.zookeeper_mode(layout, vm) for vm in layout.vms}

    def act(self, vm: str, action: ProcessAction, kind: ProcessKind) -> str:
        return self.local.vm_action(action.value, vm, only=kind.value)

    # -- the disk faults (disk_faults.DiskCluster), through local_disk --

    def broker_pid(self, vm: str) -> int | None:
        record = self._state().record(vm, ProcessKind.KAFKA.value)
        return record.pid if record is not None and is_alive(record) else None

    def _data_dir(self, vm: str) -> Path:
        return self._state().layout.vm(vm).kafka_data_dir

    def destroy_broker_data(self, vm: str) -> str:
        return local_disk.destroy(self._data_dir(vm))

    def limit_log_dir(self, vm: str, headroom_bytes: int) -> int:
        return local_disk.limit(self._data_dir(vm), headroom_bytes, os.getpid())

    def fill_log_dir(self, vm: str) -> int:
        return local_disk.fill(self._data_dir(vm))

    def restore_log_dir(self, vm: str) -> bool:
        return local_disk.restore(self._data_dir(vm))

    def restore_stale_log_dirs(self) -> list[str]:
        """Log directories a drill killed outright left on its filesystem: each VM's broker
        (and agent) stopped, the data moved back, started again. Returns the VMs."""
        by_dir = {self._data_dir(vm): vm for vm in self.vm_names()}
        restored = []
        for data_dir in local_disk.stale_mounts(list(by_dir)):
            vm = by_dir[data_dir]
            agents = self.runs_agents()
            if agents:
                self.act(vm, ProcessAction.STOP, ProcessKind.AGENT)
            self.act(vm, ProcessAction.STOP, ProcessKind.KAFKA)
            local_disk.restore(data_dir)
            self.act(vm, ProcessAction.START, ProcessKind.AGENT if agents else ProcessKind.KAFKA)
            restored.append(vm)
        return restored

    def wait_broker_serving(self, vm: str, timeout_s: float) -> None:
        address = self._state().layout.vm(vm).address
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                hosts = set(self._registered_hosts(timeout=3).values())
            except Exception:  # ZooKeeper (or, in KRaft mode, Kafka) may be what is down
                hosts = set()
            if address in hosts:
                return
            time.sleep(0.5)
        raise DrillError(f"{vm}'s broker did not register within {timeout_s:.0f}s")

    # -- what the drill runner reads --

    def status(self) -> dict[str, object]:
        return self.local.status()

    def under_replicated(self) -> int | None:
        """Partitions whose ISR lacks a replica, over every topic, or None while the metadata
        does not answer or lacks a broker."""
        try:
            metadata = probes.admin_client(self.kafka).list_topics(timeout=5)
        except Exception:  # a cluster still recovering may not answer
            return None
        if len(metadata.brokers) < len(self.vm_names()):
            return None
        return sum(
            1
            for topic in metadata.topics.values()
            for partition in topic.partitions.values()
            if partition.leader < 0 or len(partition.isrs) < len(partition.replicas)
        )

    def journal_since(self, since_s: float) -> list[JournalLine]:
        """KaaS's agents' journal entries from `since_s` on (empty without agents)."""
        state = self._state()
        if not state.agents:
            return []
        paths = ClusterPaths(state.layout.name)
        client = zookeeper_client(
            state.layout.zookeeper_hosts,
            admin_identity(state.layout),
            timeout=5,
            connection_retry=None,
        )
        lines: list[JournalLine] = []
        try:
            client.start(timeout=10)
            for child in sorted(client.get_children(paths.journal)):
                data, _ = client.get(f"{paths.journal}/{child}")
                try:
                    entry = parse_journal_entry(data)
                except ContractError:
                    continue
                at_s = entry.at_ms / 1000
                if at_s >= since_s:
                    lines.append(
                        JournalLine(
                            time_s=at_s,
                            text=f"broker {entry.broker_id}: {entry.action.value} "
                            f"({entry.reason}): {entry.result}",
                        )
                    )
        except (NoNodeError, KazooException, KaasError):
            pass
        except Exception:  # the journal is decoration for the report
            pass
        finally:
            client.stop()
            client.close()
        return lines
