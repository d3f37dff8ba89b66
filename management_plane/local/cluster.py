"""The local provider's operations: up, down, status and the VM commands.

Each VM is a folder and two JVMs (ZooKeeper server, Kafka broker) bound to the VM's own
loopback address. Nothing is ever stopped by name: only the process ids recorded in the
cluster file, checked against their start time.
"""

from __future__ import annotations

import shutil
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog
from kazoo.exceptions import NodeExistsError

from management_plane.errors import KaasError
from management_plane.local import kraft, probes, render
from management_plane.local.background_service import stop_background_service
from management_plane.local.image import LocalImage, find_java, load_image
from management_plane.local.kraft_storage import format_storage
from management_plane.local.layout import (
    DEFAULT_ADDRESS_BASE,
    ZONES,
    ClusterLayout,
    VmLayout,
    next_vm,
    plan_layout,
)
from management_plane.local.mirror_sources import MirrorSourceStore
from management_plane.local.processes import is_alive, kill_process, send_signal
from management_plane.local.state import (
    LOCK_FILE,
    ClusterState,
    locked,
    read_state,
    require_state,
    write_state,
)
from management_plane.local.status_report import cluster_status
from management_plane.local.tls import admin_client, admin_identity, authority_dir
from management_plane.local.up_choice import (
    RecordedCluster,
    UpChoice,
    UpDecision,
    address_base_of,
    decide_up,
)
from management_plane.local.vm_files import make_vm_folders, write_vm_files
from management_plane.local.vm_processes import (
    KAFKA_PORT_ROLES,
    ZOOKEEPER_PORT_ROLES,
    check_ports_free,
    start_agent,
    start_controller,
    start_kafka,
    start_zookeeper,
    stop_every_vm,
    stop_mirror_maker,
    stop_vm_processes,
    wait_brokers,
    wait_controllers,
    wait_zookeeper,
)
from management_plane.monitoring.pipeline import (
    PipelineLayout,
    plan_pipeline,
    start_pipeline,
    stop_pipeline,
)
from management_plane.workload import create_topic
from planner.contracts.kafka_release import KAFKA_RELEASES, KafkaMode, is_kraft
from planner.contracts.log_record import LOGS_TOPIC
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.paths import ClusterPaths
from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.pki.files import has_authority
from planner.zookeeper_client import zookeeper_client

log = structlog.get_logger("kaas.local")

METRICS_TOPIC = "_kaas_metrics"  # the agents' default metrics_topic
RETIRED_DIR = "retired"  # logs of recycled VMs; their indexes (and addresses) are not reused


@dataclass(frozen=True)
class UpResult:
    state: ClusterState
    decision: UpDecision
    seconds: float

    @property
    def already_running(self) -> bool:
        return self.decision.choice is UpChoice.REUSE


def _live_ensemble(layout: ClusterLayout) -> list[str]:
    """The server lines of the ensemble's current config (/zookeeper/config)."""
    client = zookeeper_client(layout.zookeeper_hosts, admin_identity(layout), timeout=10)
    try:
        client.start(timeout=30)
        raw, _ = client.get("/zookeeper/config")
    except Exception as exc:
        raise KaasError(f"cannot read the ZooKeeper ensemble of {layout.name}: {exc}") from None
    finally:
        client.stop()
        client.close()
    return [line for line in raw.decode().splitlines() if line.startswith("server.")]


def _without(layout: ClusterLayout, vm_name: str) -> ClusterLayout:
    controllers = kraft.controller_vms(layout)
    return replace(
        layout,
        vms=tuple(v for v in layout.vms if v.name != vm_name),
        # Named from here on: the positional rule would move the role onto another VM.
        controllers=tuple(v.name for v in controllers if v.name != vm_name),
    )


class LocalCluster:
    """Operations on the local cluster whose folder is `home`."""

    def __init__(self, home: Path, image: LocalImage | None = None) -> None:
        self.home = home.resolve()
        self._image = image

    def image(self) -> LocalImage:
        if self._image is None:
            self._image = load_image()
        return self._image

    @staticmethod
    def _write_spec_if_absent(
        layout: ClusterLayout, kafka_version: str, monitoring: MonitoringTargets | None = None
    ) -> None:
        """The local provider stands in for the management plane: it writes the first spec."""
        spec = render.local_spec(layout, kafka_version, monitoring)
        if is_kraft(kafka_version):  # the quorum size of the controllers this layout runs
            spec = replace(
                spec,
                kraft_controllers=kraft.local_kraft_spec(layout, kafka_version).kraft_controllers,
            )
        client = zookeeper_client(layout.zookeeper_hosts, admin_identity(layout), timeout=10)
        client.start(timeout=30)
        try:
            client.create(ClusterPaths(layout.name).spec, spec.encode(), makepath=True)
        except NodeExistsError:
            pass
        finally:
            client.stop()
            client.close()

    def _stop_all(self, state: ClusterState, discard: bool = False) -> None:
        stop_every_vm(state, discard)
        stop_pipeline(self._monitoring(state.layout))

    def _monitoring(self, layout: ClusterLayout) -> PipelineLayout:
        return plan_pipeline(self.home, address_base_of(layout.vms[0].address))

    # -- operations -----------------------------------------------------------------------

    def up(
        self,
        nodes: int,
        name: str = "local",
        address_base: str = DEFAULT_ADDRESS_BASE,
        kafka_version: str | None = None,
        agents: bool = False,
        zones: tuple[str, ...] = ZONES,
        controllers: int | None = None,
        transport: TransportSecurity = DEFAULT_TRANSPORT,
    ) -> UpResult:
        """`controllers`: a KRaft cluster's quorum size (None: as many as vote in ZooKeeper).
        `transport`: PLAINTEXT_LEGACY starts a cluster as KaaS ran before TLS, to test and
        rehearse its conversion; without agents only (theirs is TLS)."""
        started = time.monotonic()
        if transport is not DEFAULT_TRANSPORT and agents:
            raise KaasError(
                f"a {transport.value} cluster runs without agents (--no-agents): the agents "
                "reach ZooKeeper, Kafka and Jolokia over TLS only"
            )
        layout = plan_layout(name, self.home, nodes, address_base, zones, transport)
        java = find_java()
        image = self.image()
        version = kafka_version or image.default_kafka_version
        if transport is not DEFAULT_TRANSPORT and KAFKA_RELEASES.get(version) is KafkaMode.KRAFT:
            raise KaasError(
                f"Kafka {version} runs KRaft, which KaaS ran with TLS only: a {transport.value} "
                "cluster needs a ZooKeeper-mode --kafka-version"
            )
        image.kafka_libs(version)  # an unknown version fails here, before anything starts
        if is_kraft(version):
            layout = kraft.with_controllers(layout, controllers or kraft.quorum_size(nodes))
        with locked(self.home):
            existing = read_state(self.home)
            decision = decide_up(self._recorded(existing), nodes, address_base, self.home)
            if (
                existing is not None
                and decision.choice is not UpChoice.REPLACE
                and existing.layout.transport is not transport
            ):
                raise KaasError(
                    f"the cluster in {self.home} runs transport "
                    f"{existing.layout.transport.value}, not {transport.value}: "
                    "kaas down --purge it first"
                )
            if existing is not None and decision.choice is UpChoice.REUSE:
                return UpResult(existing, decision, time.monotonic() - started)
            if existing is not None and decision.choice is UpChoice.START:
                layout = existing.layout
                version = kafka_version or existing.kafka_version
                agents = existing.agents
            if existing is not None and decision.choice is UpChoice.REPLACE:
                self._discard(existing)
            check_ports_free(layout.vms)
            state = ClusterState(layout=layout, kafka_version=version, agents=agents)
            try:
                for vm in layout.vms:
                    write_vm_files(layout, vm, version, agents)
                for vm in layout.vms:
                    start_zookeeper(state, vm, java, image)
                write_state(state)
                wait_zookeeper(state, layout.vms)
                if agents:
                    # The pipeline runs before the agents, so their first samples land.
                    targets = start_pipeline(self._monitoring(layout))
                    self._write_spec_if_absent(layout, version, targets)
                if state.kraft:
                    libs = str(image.kafka_libs(version))
                    format_storage(self.home, layout, str(java), libs)
                    for vm in layout.vms:
                        start_controller(state, vm, java, image)
                    write_state(state)
                    if not agents:
                        wait_controllers(state)
                for vm in layout.vms:
                    if agents:
                        start_agent(state, vm, java, image)
                    else:
                        start_kafka(state, vm, java, image)
                write_state(state)
                if agents and state.kraft:
                    wait_controllers(state)
                wait_brokers(state, layout.vms)
                if agents:
                    # Made here, once every broker is up, rather than by the first agent to
                    # publish (which may find fewer brokers than the replication factor).
                    connection = admin_client(layout).librdkafka()
                    for topic in (METRICS_TOPIC, LOGS_TOPIC):
                        create_topic(connection, topic, 6, min(3, len(layout.vms)))
            except BaseException:
                # Leave nothing half-started behind.
                self._stop_all(state)
                write_state(state)
                raise
            write_state(state)
        log.info("cluster_up", name=name, nodes=nodes, seconds=round(time.monotonic() - started, 1))
        return UpResult(state, decision, time.monotonic() - started)

    def _recorded(self, state: ClusterState | None) -> RecordedCluster | None:
        if state is None:
            return None
        vms = state.layout.vms
        alive = sum(
            is_alive(state.record(vm.name, kind)) for vm in vms for kind in state.vm_kinds(vm.name)
        )
        expected = sum(len(state.vm_kinds(vm.name)) for vm in vms)
        # A cluster made before TLS has no CA: it is refused, never probed over TLS.
        secured = has_authority(authority_dir(state.layout))
        return RecordedCluster(
            vm_count=len(vms),
            address_base=address_base_of(vms[0].address),
            processes_alive=alive,
            processes_expected=expected,
            serving_problem=probes.serving_problem(state.layout, state.kraft)
            if alive == expected and secured
            else None,
            name=state.layout.name,
            has_authority=secured,
        )

    def _discard(self, state: ClusterState) -> None:
        """Stop everything of a cluster about to be replaced and delete its folder's
        contents (all but the lock file, which the caller holds)."""
        stop_background_service(self.home)
        self._stop_all(state, discard=True)
        for entry in self.home.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def down(self, purge: bool = False, stop_service: bool = True) -> ClusterState | None:
        """Stop every process; with `stop_service`, first the management plane `kaas up`
        started beside the cluster (so it never takes the VMs going away for a loss). With
        `purge` the folder goes too, so its JVMs are killed rather than shut down."""
        if stop_service:
            stop_background_service(self.home)
        with locked(self.home):
            state = read_state(self.home)
            if state is not None:
                self._stop_all(state, discard=purge)
                write_state(state)
        if purge and self.home.exists():
            shutil.rmtree(self.home)
        return state

    def status(self) -> dict[str, Any]:
        state = require_state(self.home)
        return cluster_status(state, self.image, self._monitoring(state.layout))

    # -- growing and shrinking a running cluster (the management plane's local provider) --

    def retired_indexes(self) -> frozenset[int]:
        retired = self.home / RETIRED_DIR
        if not retired.is_dir():
            return frozenset()
        return frozenset(
            int(p.name[2:])
            for p in retired.iterdir()
            if p.name[:2] == "vm" and p.name[2:].isdigit()
        )

    def add_vm(
        self, zone: str, preferred_broker_id: int | None = None, controller: bool = False
    ) -> VmLayout:
        """Start one more VM in the running cluster (agents only): its ZooKeeper server starts
        with the live ensemble's config plus itself, and its agent adds it to the ensemble
        (participant or observer, per the spec) and claims a broker id (`preferred_broker_id`
        if it is free: the replacement of a lost VM keeps its id); this returns once the
        server serves and the agent runs, without waiting for the broker. On KRaft its
        storage is formatted first, with `controller` a controller's too (an observer, which
        its agent makes a voter once it has caught up)."""
        with locked(self.home):
            state = require_state(self.home)
            if not state.agents:
                raise KaasError(
                    f"cluster {state.layout.name} runs without agents: a VM can only be added "
                    "to a cluster whose VMs run kaas-agent (nothing else claims its broker id)"
                )
            java = find_java()
            image = self.image()
            vm = next_vm(state.layout, zone, self.retired_indexes())
            if state.kraft and preferred_broker_id is not None:
                # The volume's node id is the one its agent claims: format it with the
                # preferred one.
                vm = replace(vm, broker_id=preferred_broker_id)
            check_ports_free((vm,))
            ensemble = _live_ensemble(state.layout)
            layout = replace(state.layout, vms=(*state.layout.vms, vm))
            if state.kraft and controller:
                hosts = kraft.controller_vms(state.layout)
                layout = replace(layout, controllers=(*(v.name for v in hosts), vm.name))
            state.layout = layout
            make_vm_folders(vm)
            (vm.config_dir / render.ZOOKEEPER_DYNAMIC).write_text(
                render.joining_dynamic_file(ensemble, vm)
            )
            write_vm_files(layout, vm, state.kafka_version, agents=True)
            # The cluster's mirror flows run on any of its VMs: this one gets their sources'
            # credentials before its agent starts.
            MirrorSourceStore(self.home).provision(vm.directory)
            try:
                if state.kraft:
                    libs = str(image.kafka_libs(state.kafka_version))
                    format_storage(self.home, layout, str(java), libs, joining=vm)
                start_zookeeper(state, vm, java, image)
                write_state(state)
                wait_zookeeper(state, (vm,))
                start_agent(state, vm, java, image, preferred_broker_id)
            except BaseException:
                stop_vm_processes(state, vm, tuple(reversed(state.kinds)))
                stop_mirror_maker(vm)
                state.layout = _without(layout, vm.name)
                write_state(state)
                raise
            write_state(state)
        log.info("vm_added", cluster=layout.name, vm=vm.name, address=vm.address, zone=zone)
        return vm

    def remove_vm(self, vm_name: str) -> bool:
        """Stop one VM and delete its data, keeping its logs under retired/; False if the
        cluster has no such VM (already removed)."""
        with locked(self.home):
            state = require_state(self.home)
            try:
                vm = state.layout.vm(vm_name)
            except KaasError:
                return False
            if len(state.layout.vms) == 1:
                raise KaasError(f"{vm_name} is the last VM of {state.layout.name}: use `kaas down`")
            stop_vm_processes(state, vm, tuple(reversed(state.kinds)))
            stop_mirror_maker(vm)
            state.layout = _without(state.layout, vm_name)
            state.processes.pop(vm.name, None)
            write_state(state)
            retired = self.home / RETIRED_DIR / vm.name
            retired.mkdir(parents=True, exist_ok=True)
            if vm.logs_dir.exists():
                shutil.rmtree(retired / "logs", ignore_errors=True)
                shutil.move(str(vm.logs_dir), str(retired / "logs"))
            shutil.rmtree(vm.directory, ignore_errors=True)
        log.info("vm_removed", cluster=state.layout.name, vm=vm_name)
        return True

    def vm_action(self, action: str, vm_name: str, only: str | None = None) -> str:
        with locked(self.home):
            state = require_state(self.home)
            if only is not None and only not in state.kinds:
                raise KaasError(
                    f"cluster {state.layout.name} has no {only} processes (it runs {', '.join(state.kinds)})"
                )
            kinds = (only,) if only else state.kinds
            vm = state.layout.vm(vm_name)
            message = self._vm_action(state, vm, action, kinds)
            write_state(state)
        return message

    def _vm_action(
        self, state: ClusterState, vm: VmLayout, action: str, kinds: tuple[str, ...]
    ) -> str:
        # Start in the order ZooKeeper, agent, broker; stop the agent first, so that it never
        # heals a broker being stopped, then the broker while ZooKeeper still serves.
        starting_order = [k for k in state.vm_kinds(vm.name) if k in kinds]
        stopping_order = [
            k for k in ("agent", "kafka", "controller", "zookeeper") if k in starting_order
        ]
        if action == "start":
            java = find_java()
            image = self.image()
            write_vm_files(state.layout, vm, state.kafka_version, state.agents)
            needed = [k for k in starting_order if not is_alive(state.record(vm.name, k))]
            if "zookeeper" in needed:
                check_ports_free((vm,), ZOOKEEPER_PORT_ROLES)
                start_zookeeper(state, vm, java, image)
                write_state(state)
                wait_zookeeper(state, (vm,))
            if "controller" in needed:
                check_ports_free((vm,), ("kafka_controller",))
                start_controller(state, vm, java, image)
                write_state(state)
            if "agent" in needed:
                start_agent(state, vm, java, image)
                write_state(state)
            if "kafka" in needed and not state.agents:
                check_ports_free((vm,), KAFKA_PORT_ROLES)
                start_kafka(state, vm, java, image)
                write_state(state)
            if "kafka" in needed or ("agent" in needed and "kafka" in state.kinds):
                wait_brokers(state, (vm,))
            return (
                f"{vm.name}: started {', '.join(needed)}"
                if needed
                else f"{vm.name}: already running"
            )
        if action == "stop":
            stop_vm_processes(state, vm, tuple(stopping_order))
            return f"{vm.name}: stopped {', '.join(stopping_order)}"
        if action == "kill":
            for kind in stopping_order:
                kill_process(state.record(vm.name, kind))
                state.set_record(vm.name, kind, None)
            return f"{vm.name}: killed {', '.join(stopping_order)}"
        if action in ("pause", "resume"):
            signum = signal.SIGSTOP if action == "pause" else signal.SIGCONT
            done = [k for k in stopping_order if send_signal(state.record(vm.name, k), signum)]
            if not done:
                raise KaasError(f"{vm.name} has no running process to {action}")
            return f"{vm.name}: {action}d {', '.join(done)}"
        if action == "wipe":
            if is_alive(state.record(vm.name, "kafka")) or is_alive(state.record(vm.name, "agent")):
                raise KaasError(
                    f"{vm.name}'s broker or agent is running: `kaas vm stop {vm.name}` before wiping its data"
                )
            shutil.rmtree(vm.kafka_data_dir, ignore_errors=True)
            vm.kafka_data_dir.mkdir(parents=True)
            return f"{vm.name}: broker data deleted"
        raise KaasError(f"unknown VM action {action!r}")
