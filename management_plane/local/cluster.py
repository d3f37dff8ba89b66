"""The local provider's operations: up, down, status and the VM commands.

Each VM is a folder and two JVMs (ZooKeeper server, Kafka broker) bound to the VM's own
loopback address. Nothing is ever stopped by name: only the process ids recorded in the
cluster file, checked against their start time.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import structlog
from kazoo.exceptions import NodeExistsError

from management_plane.errors import KaasError
from management_plane.local import kraft, probes, render
from management_plane.local.background_service import stop_background_service
from management_plane.local.image import LocalImage, find_java, load_image
from management_plane.local.kraft_probe import quorum_replicas
from management_plane.local.kraft_storage import format_storage
from management_plane.local.layout import (
    DEFAULT_ADDRESS_BASE,
    ZONES,
    ClusterLayout,
    VmLayout,
    next_vm,
    plan_layout,
)
from management_plane.local.processes import (
    is_alive,
    is_paused,
    kill_process,
    resident_bytes,
    send_signal,
    start_process,
    stop_process,
)
from management_plane.local.state import (
    LOCK_FILE,
    ClusterState,
    locked,
    read_state,
    require_state,
    write_state,
)
from management_plane.local.tls import (
    admin_client,
    admin_identity,
    authority_dir,
    ensure_vm_identity,
    write_admin_client_files,
)
from management_plane.local.up_choice import (
    RecordedCluster,
    UpChoice,
    UpDecision,
    address_base_of,
    decide_up,
)
from management_plane.monitoring.pipeline import (
    PipelineLayout,
    pipeline_status,
    plan_pipeline,
    start_pipeline,
    stop_pipeline,
)
from management_plane.workload import create_topic
from planner.contracts.kafka_release import KafkaMode, kafka_mode
from planner.contracts.member import MemberRecord
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.paths import ClusterPaths
from planner.contracts.plan_status import PlanStatus
from planner.contracts.vm_config import render_zookeeper_myid
from planner.pki.client_settings import client_files
from planner.pki.files import has_authority
from planner.zookeeper_client import zookeeper_client

log = structlog.get_logger("kaas.local")

ZOOKEEPER_READY_TIMEOUT = 120.0
BROKERS_READY_TIMEOUT = 240.0
KAFKA_STOP_TIMEOUT = 120.0
ZOOKEEPER_STOP_TIMEOUT = 30.0
AGENT_STOP_TIMEOUT = 30.0
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


def _last_line(log_file: Path) -> str:
    try:
        lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    hint: str,
    alive: Callable[[], None] = lambda: None,
) -> None:
    """Poll `check` until it holds; `alive` raises as soon as a process it watches has died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        try:
            if check():
                return
        except Exception as exc:  # a probe failing is "not yet", until the deadline
            log.debug("probe_failed", what=what, error=str(exc))
        time.sleep(0.5)
    raise KaasError(f"timed out after {timeout:.0f}s waiting for {what}: {hint}")


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


def _write_vm_files(
    layout: ClusterLayout, vm: VmLayout, kafka_version: str, agents: bool = False
) -> None:
    for folder in (vm.config_dir, vm.kafka_data_dir, vm.zookeeper_data_dir, vm.logs_dir):
        folder.mkdir(parents=True, exist_ok=True)
    ensure_vm_identity(layout, vm)
    write_admin_client_files(layout)
    (vm.zookeeper_data_dir / "myid").write_text(render_zookeeper_myid(vm.index))
    keep = {
        # After a reconfig ZooKeeper rewrites zoo.cfg to name its new dynamic file, and owns that.
        render.ZOO_CFG,
        render.ZOOKEEPER_DYNAMIC,
        # Once rendered, the agent owns server.properties.
        *((render.SERVER_PROPERTIES, kraft.CONTROLLER_PROPERTIES) if agents else ()),
    }
    files = render.config_files(layout, vm, kafka_version)
    if kafka_mode(kafka_version) is KafkaMode.KRAFT:
        kafka_files = (render.SERVER_PROPERTIES, render.KAFKA_LOG4J)
        files = {n: t for n, t in files.items() if n not in kafka_files}
        files.update(kraft.config_files(layout, vm, kafka_version))
    for name, text in files.items():
        path = vm.config_dir / name
        if not (name in keep and path.exists()):
            path.write_text(text)


ZOOKEEPER_PORT_ROLES = (
    "zookeeper_client",
    "zookeeper_peer",
    "zookeeper_election",
)
KAFKA_PORT_ROLES = ("kafka_internal", "kafka_tenant", "jolokia", "kafka_controller")


def _check_ports_free(
    vms: tuple[VmLayout, ...], roles: tuple[str, ...] = ZOOKEEPER_PORT_ROLES + KAFKA_PORT_ROLES
) -> None:
    for vm in vms:
        for role, port in vm.ports.all().items():
            if role in roles and not probes.port_bindable(vm.address, port):
                raise KaasError(
                    f"address {vm.address}:{port} ({role} of {vm.name}) is already in use: "
                    "stop what holds it, or pick other addresses with --address-base"
                )


class LocalCluster:
    """Operations on the local cluster whose folder is `home`."""

    def __init__(self, home: Path, image: LocalImage | None = None) -> None:
        self.home = home.resolve()
        self._image = image

    # -- helpers --------------------------------------------------------------------------

    def image(self) -> LocalImage:
        if self._image is None:
            self._image = load_image()
        return self._image

    def _start_zookeeper(self, state: ClusterState, vm: VmLayout, java: Path) -> None:
        if is_alive(state.record(vm.name, "zookeeper")):
            return
        command = render.zookeeper_command(str(java), vm, str(self.image().zookeeper_lib))
        state.set_record(
            vm.name,
            "zookeeper",
            start_process(command, vm.logs_dir / "zookeeper.log", vm.directory),
        )

    def _start_agent(
        self, state: ClusterState, vm: VmLayout, java: Path, preferred_broker_id: int | None = None
    ) -> None:
        if is_alive(state.record(vm.name, "agent")):
            return
        settings_file = vm.config_dir / "agent.json"
        settings = render.agent_settings(
            state.layout,
            vm,
            str(self.image().root),
            str(java),
            kraft.bootstrap_endpoints(state.layout) if state.kraft else (),
            kraft.is_controller_vm(state.layout, vm),
        )
        if preferred_broker_id is not None:
            settings["preferred_broker_id"] = preferred_broker_id
        settings_file.write_text(json.dumps(settings, indent=2) + "\n")
        # Under the unit's stand-in, as systemd runs it on a real VM: a crashed agent restarts.
        command = [
            sys.executable,
            "-m",
            "management_plane.local.agent_unit",
            "--",
            sys.executable,
            "-m",
            "agent.main",
            "--config",
            str(settings_file),
        ]
        state.set_record(
            vm.name, "agent", start_process(command, vm.logs_dir / "agent.log", vm.directory)
        )

    @staticmethod
    def _write_spec_if_absent(
        layout: ClusterLayout, kafka_version: str, monitoring: MonitoringTargets | None = None
    ) -> None:
        """The local provider stands in for the management plane: it writes the first spec."""
        spec = render.local_spec(layout, kafka_version, monitoring)
        client = zookeeper_client(layout.zookeeper_hosts, admin_identity(layout), timeout=10)
        client.start(timeout=30)
        try:
            client.create(ClusterPaths(layout.name).spec, spec.encode(), makepath=True)
        except NodeExistsError:
            pass
        finally:
            client.stop()
            client.close()

    def _start_kafka(self, state: ClusterState, vm: VmLayout, java: Path) -> None:
        if is_alive(state.record(vm.name, "kafka")):
            return
        image = self.image()
        libs = str(image.kafka_libs(state.kafka_version))
        command = (
            kraft.broker_command(str(java), vm, libs, str(image.jolokia_agent))
            if state.kraft
            else render.kafka_command(str(java), state.layout, vm, libs, str(image.jolokia_agent))
        )
        state.set_record(
            vm.name, "kafka", start_process(command, vm.logs_dir / "kafka.log", vm.directory)
        )

    def _start_controller(self, state: ClusterState, vm: VmLayout, java: Path) -> None:
        if state.agents:
            return  # the VM's agent starts (and heals) its controller
        if "controller" not in state.vm_kinds(vm.name) or is_alive(
            state.record(vm.name, "controller")
        ):
            return
        libs = str(self.image().kafka_libs(state.kafka_version))
        state.set_record(
            vm.name,
            "controller",
            start_process(
                kraft.controller_command(str(java), vm, libs),
                vm.logs_dir / "controller.log",
                vm.directory,
            ),
        )

    def _wait_controllers(self, state: ClusterState) -> None:
        """The brokers start once every controller listens: a broker gives up when it cannot
        register within Kafka's initial.broker.registration.timeout.ms."""
        controllers = kraft.controller_vms(state.layout)
        for vm in controllers:
            _wait_for(
                f"the KRaft controller of {vm.name} to listen",
                lambda vm=vm: probes.port_open(vm.address, vm.ports.kafka_controller),  # type: ignore[misc]
                BROKERS_READY_TIMEOUT,
                f"see {vm.logs_dir / 'controller.log'}",
                # With agents, the agent starts the controller: until then there is no record.
                self._watch(state, controllers, "agent" if state.agents else "controller"),
            )

    @staticmethod
    def _watch(state: ClusterState, vms: tuple[VmLayout, ...], kind: str) -> Callable[[], None]:
        def alive() -> None:
            for vm in vms:
                if kind in state.vm_kinds(vm.name) and not is_alive(state.record(vm.name, kind)):
                    log_file = vm.logs_dir / f"{kind}.log"
                    raise KaasError(
                        f"the {kind} process of {vm.name} exited during start-up: see {log_file} "
                        f"(last line: {_last_line(log_file)})"
                    )

        return alive

    def _wait_zookeeper(self, state: ClusterState, vms: tuple[VmLayout, ...]) -> None:
        for vm in vms:
            _wait_for(
                f"the ZooKeeper server of {vm.name} to join the quorum",
                lambda vm=vm: probes.zookeeper_mode(state.layout, vm) in probes.SERVING_MODES,  # type: ignore[misc]
                ZOOKEEPER_READY_TIMEOUT,
                f"see {vm.logs_dir / 'zookeeper.log'}",
                self._watch(state, vms, "zookeeper"),
            )

    def _wait_brokers(self, state: ClusterState, vms: tuple[VmLayout, ...]) -> None:
        layout = state.layout
        if state.agents:
            # The agents claim the ids (a VM that replaced another keeps the id it took
            # over), so only their number is known here.
            wanted_text = f"{len(vms)} brokers"

            def enough(ids: set[int]) -> bool:
                return len(ids) >= len(vms)
        else:
            wanted = {vm.broker_id for vm in vms}
            wanted_text = f"brokers {sorted(wanted)}"

            def enough(ids: set[int]) -> bool:
                return wanted <= ids

        logs = "see " + ", ".join(str(vm.logs_dir / "kafka.log") for vm in vms)
        if state.kraft:
            # No ZooKeeper registration: a KRaft broker registers with the controllers, and
            # the metadata request below lists it once it has.
            for watched in ("agent",) if state.agents else ("controller", "kafka"):
                self._watch(state, vms, watched)()
        else:
            _wait_for(
                f"{wanted_text} to register in ZooKeeper",
                lambda: enough(set(probes.broker_registrations(layout))),
                BROKERS_READY_TIMEOUT,
                logs,
                self._watch(state, vms, "agent" if state.agents else "kafka"),
            )
        _wait_for(
            f"a metadata request to list {wanted_text}",
            lambda: enough(probes.metadata_broker_ids(admin_client(layout))),
            BROKERS_READY_TIMEOUT,
            logs,
            self._watch(state, vms, "agent" if state.agents else "kafka"),
        )

    def _stop_all(self, state: ClusterState) -> None:
        # Agents first, so that none heals a broker being stopped; then brokers, while
        # ZooKeeper still has a quorum for their controlled shutdown.
        for vm in state.layout.vms:
            send_signal(state.record(vm.name, "agent"), signal.SIGTERM)
        for vm in state.layout.vms:
            stop_process(state.record(vm.name, "agent"), AGENT_STOP_TIMEOUT)
            state.set_record(vm.name, "agent", None)
        for vm in state.layout.vms:
            send_signal(state.record(vm.name, "kafka"), signal.SIGCONT)
            send_signal(state.record(vm.name, "kafka"), signal.SIGTERM)
        for vm in state.layout.vms:
            stop_process(state.record(vm.name, "kafka"), KAFKA_STOP_TIMEOUT)
            state.set_record(vm.name, "kafka", None)
        # KRaft controllers after the brokers, whose controlled shutdown they answer.
        for vm in state.layout.vms:
            send_signal(state.record(vm.name, "controller"), signal.SIGCONT)
            send_signal(state.record(vm.name, "controller"), signal.SIGTERM)
        for vm in state.layout.vms:
            stop_process(state.record(vm.name, "controller"), KAFKA_STOP_TIMEOUT)
            state.set_record(vm.name, "controller", None)
        for vm in state.layout.vms:
            stop_process(state.record(vm.name, "zookeeper"), ZOOKEEPER_STOP_TIMEOUT)
            state.set_record(vm.name, "zookeeper", None)
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
    ) -> UpResult:
        started = time.monotonic()
        layout = plan_layout(name, self.home, nodes, address_base, zones)
        java = find_java()
        image = self.image()
        version = kafka_version or image.default_kafka_version
        image.kafka_libs(version)  # an unknown version fails here, before anything starts
        with locked(self.home):
            existing = read_state(self.home)
            decision = decide_up(self._recorded(existing), nodes, address_base, self.home)
            if existing is not None and decision.choice is UpChoice.REUSE:
                return UpResult(existing, decision, time.monotonic() - started)
            if existing is not None and decision.choice is UpChoice.START:
                layout = existing.layout
                version = kafka_version or existing.kafka_version
                agents = existing.agents
            if existing is not None and decision.choice is UpChoice.REPLACE:
                self._discard(existing)
            _check_ports_free(layout.vms)
            state = ClusterState(layout=layout, kafka_version=version, agents=agents)
            try:
                for vm in layout.vms:
                    _write_vm_files(layout, vm, version, agents)
                for vm in layout.vms:
                    self._start_zookeeper(state, vm, java)
                write_state(state)
                self._wait_zookeeper(state, layout.vms)
                if agents:
                    # The pipeline runs before the agents, so their first samples land.
                    targets = start_pipeline(self._monitoring(layout))
                    self._write_spec_if_absent(layout, version, targets)
                if state.kraft:
                    libs = str(image.kafka_libs(version))
                    format_storage(self.home, layout, str(java), libs)
                    for vm in layout.vms:
                        self._start_controller(state, vm, java)
                    write_state(state)
                    if not agents:
                        self._wait_controllers(state)
                for vm in layout.vms:
                    if agents:
                        self._start_agent(state, vm, java)
                    else:
                        self._start_kafka(state, vm, java)
                write_state(state)
                if agents and state.kraft:
                    self._wait_controllers(state)
                self._wait_brokers(state, layout.vms)
                if agents:
                    # Made here, once every broker is up, rather than by the first agent to
                    # publish (which may find fewer brokers than the replication factor).
                    create_topic(
                        admin_client(layout).librdkafka(), METRICS_TOPIC, 6, min(3, len(layout.vms))
                    )
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
        self._stop_all(state)
        for entry in self.home.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def down(self, purge: bool = False, stop_service: bool = True) -> ClusterState | None:
        """Stop every process; with `stop_service`, first the management plane `kaas up`
        started beside the cluster (so it never takes the VMs going away for a loss)."""
        if stop_service:
            stop_background_service(self.home)
        with locked(self.home):
            state = read_state(self.home)
            if state is not None:
                self._stop_all(state)
                write_state(state)
        if purge and self.home.exists():
            shutil.rmtree(self.home)
        return state

    def status(self) -> dict[str, Any]:
        state = require_state(self.home)
        layout = state.layout
        registered: set[int] = set()
        under_replicated: dict[int, int] = {}
        members: dict[str, MemberRecord] = {}
        lock_holder = None
        plan: PlanStatus | None = None
        problems = []
        try:
            if not state.kraft:  # a KRaft broker registers with the controllers instead
                registered = set(probes.broker_registrations(layout, timeout=3.0))
            if state.agents:
                members, lock_holder, plan = probes.agent_members(layout, timeout=3.0)
        except Exception as exc:
            problems.append(f"ZooKeeper ensemble unreachable: {exc}")
        try:
            under_replicated = probes.under_replicated_by_leader(admin_client(layout), timeout=5.0)
            if state.kraft:
                registered = probes.metadata_broker_ids(admin_client(layout), timeout=5.0)
        except Exception as exc:
            problems.append(f"Kafka metadata unavailable: {exc}")
        controller_roles: dict[str, str | None] = {}
        try:
            if state.kraft:
                replicas = quorum_replicas(
                    layout, str(find_java()), str(self.image().kafka_libs(state.kafka_version))
                )
                controller_roles = kraft.controller_roles(layout, replicas)
        except Exception as exc:
            problems.append(f"KRaft controller quorum unavailable: {exc}")
        vms = []
        for vm in layout.vms:
            processes = {}
            for kind in state.vm_kinds(vm.name):
                record = state.record(vm.name, kind)
                alive = is_alive(record)
                processes[kind] = {
                    "pid": record.pid if record and alive else None,
                    "state": ("paused" if is_paused(record) else "running") if alive else "stopped",
                    "rss_bytes": resident_bytes(record),
                }
            member = members.get(vm.name)
            # With agents the broker id is the one the VM's agent claimed.
            broker_id = member.broker_id if member else (None if state.agents else vm.broker_id)
            zookeeper_state = processes["zookeeper"]["state"]
            vms.append(
                {
                    "name": vm.name,
                    "address": vm.address,
                    "zone": vm.zone,
                    "broker_id": broker_id,
                    "processes": processes,
                    "zookeeper_mode": probes.zookeeper_mode(state.layout, vm)
                    if zookeeper_state == "running"
                    else zookeeper_state,
                    "broker_registered": broker_id in registered,
                    "under_replicated_partitions": under_replicated.get(broker_id)
                    if broker_id is not None
                    else None,
                    "agent_sentence": member.sentence if member else None,
                    "agent_state": member.state.value if member else None,
                    "agent_role": member.role.value if member else None,
                    # KRaft only: leader, voter, observer or absent; None without a controller.
                    "controller_role": controller_roles.get(vm.name),
                }
            )
        return {
            "name": layout.name,
            "home": str(layout.home),
            "kafka_version": state.kafka_version,
            "agents": state.agents,
            "restart_lock_holder": lock_holder,
            "plan": plan.to_json() if plan is not None else None,
            "bootstrap_servers": layout.bootstrap_servers,
            "client": client_files(admin_identity(layout)),
            "zookeeper_connect": layout.zookeeper_connect,
            "vms": vms,
            "monitoring": pipeline_status(self._monitoring(layout)) if state.agents else None,
            "problems": problems,
        }

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

    def add_vm(self, zone: str, preferred_broker_id: int | None = None) -> VmLayout:
        """Start one more VM in the running cluster (agents only): its ZooKeeper server starts
        with the live ensemble's config plus itself, and its agent adds it to the ensemble
        (participant or observer, per the spec) and claims a broker id (`preferred_broker_id`
        if it is free: the replacement of a lost VM keeps its id); this returns once the
        server serves and the agent runs, without waiting for the broker."""
        with locked(self.home):
            state = require_state(self.home)
            if not state.agents:
                raise KaasError(
                    f"cluster {state.layout.name} runs without agents: a VM can only be added "
                    "to a cluster whose VMs run kaas-agent (nothing else claims its broker id)"
                )
            java = find_java()
            self.image()
            vm = next_vm(state.layout, zone, self.retired_indexes())
            _check_ports_free((vm,))
            ensemble = _live_ensemble(state.layout)
            layout = replace(state.layout, vms=(*state.layout.vms, vm))
            state.layout = layout
            for folder in (vm.config_dir, vm.kafka_data_dir, vm.zookeeper_data_dir, vm.logs_dir):
                folder.mkdir(parents=True, exist_ok=True)
            (vm.config_dir / render.ZOOKEEPER_DYNAMIC).write_text(
                render.joining_dynamic_file(ensemble, vm)
            )
            _write_vm_files(layout, vm, state.kafka_version, agents=True)
            try:
                self._start_zookeeper(state, vm, java)
                write_state(state)
                self._wait_zookeeper(state, (vm,))
                self._start_agent(state, vm, java, preferred_broker_id)
            except BaseException:
                self._stop_vm(state, vm)
                state.layout = replace(layout, vms=layout.vms[:-1])
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
            self._stop_vm(state, vm)
            state.layout = replace(
                state.layout, vms=tuple(v for v in state.layout.vms if v.name != vm_name)
            )
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

    def _stop_vm(self, state: ClusterState, vm: VmLayout) -> None:
        timeouts = {"kafka": KAFKA_STOP_TIMEOUT, "agent": AGENT_STOP_TIMEOUT}
        for kind in reversed(state.kinds):
            stop_process(state.record(vm.name, kind), timeouts.get(kind, ZOOKEEPER_STOP_TIMEOUT))
            state.set_record(vm.name, kind, None)

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
            self.image()
            _write_vm_files(state.layout, vm, state.kafka_version, state.agents)
            needed = [k for k in starting_order if not is_alive(state.record(vm.name, k))]
            if "zookeeper" in needed:
                _check_ports_free((vm,), ZOOKEEPER_PORT_ROLES)
                self._start_zookeeper(state, vm, java)
                write_state(state)
                self._wait_zookeeper(state, (vm,))
            if "controller" in needed:
                _check_ports_free((vm,), ("kafka_controller",))
                self._start_controller(state, vm, java)
                write_state(state)
            if "agent" in needed:
                self._start_agent(state, vm, java)
                write_state(state)
            if "kafka" in needed and not state.agents:
                _check_ports_free((vm,), KAFKA_PORT_ROLES)
                self._start_kafka(state, vm, java)
                write_state(state)
            if "kafka" in needed or ("agent" in needed and "kafka" in state.kinds):
                self._wait_brokers(state, (vm,))
            return (
                f"{vm.name}: started {', '.join(needed)}"
                if needed
                else f"{vm.name}: already running"
            )
        if action == "stop":
            for kind in stopping_order:
                timeouts = {"kafka": KAFKA_STOP_TIMEOUT, "agent": AGENT_STOP_TIMEOUT}
                stop_process(
                    state.record(vm.name, kind), timeouts.get(kind, ZOOKEEPER_STOP_TIMEOUT)
                )
                state.set_record(vm.name, kind, None)
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
