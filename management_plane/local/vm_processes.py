"""Starting local VMs' processes in order, waiting until they serve, and stopping them.

The order is the cluster's: ZooKeeper first, then the KRaft controllers, then the agents or
brokers; stopping goes the other way. A wait gives up as soon as a process it waits on has
exited, naming its log. One process at the OS level (start, signal, stop by pid and start
time) is `processes.py`.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from management_plane.errors import KaasError
from management_plane.local import kraft, probes, render
from management_plane.local.image import LocalImage
from management_plane.local.layout import VmLayout
from management_plane.local.processes import (
    is_alive,
    kill_process,
    send_signal,
    start_process,
    stop_process,
)
from management_plane.local.state import ClusterState, mirror_maker_record
from management_plane.local.tls import admin_client

log = structlog.get_logger("kaas.local")

ZOOKEEPER_READY_TIMEOUT = 120.0
BROKERS_READY_TIMEOUT = 240.0
KAFKA_STOP_TIMEOUT = 120.0
ZOOKEEPER_STOP_TIMEOUT = 30.0
AGENT_STOP_TIMEOUT = 30.0
MIRROR_MAKER_STOP_TIMEOUT = 30.0
# One VM's processes stopped on their own (a VM command, a VM removed); every other kind
# gets ZooKeeper's timeout.
VM_STOP_TIMEOUTS = {"kafka": KAFKA_STOP_TIMEOUT, "agent": AGENT_STOP_TIMEOUT}

ZOOKEEPER_PORT_ROLES = (
    "zookeeper_client",
    "zookeeper_peer",
    "zookeeper_election",
)
KAFKA_PORT_ROLES = ("kafka_internal", "kafka_tenant", "jolokia", "kafka_controller")


def check_ports_free(
    vms: tuple[VmLayout, ...], roles: tuple[str, ...] = ZOOKEEPER_PORT_ROLES + KAFKA_PORT_ROLES
) -> None:
    for vm in vms:
        for role, port in vm.ports.all().items():
            if role in roles and not probes.port_bindable(vm.address, port):
                raise KaasError(
                    f"address {vm.address}:{port} ({role} of {vm.name}) is already in use: "
                    "stop what holds it, or pick other addresses with --address-base"
                )


# -- starting ---------------------------------------------------------------------------


def start_zookeeper(state: ClusterState, vm: VmLayout, java: Path, image: LocalImage) -> None:
    if is_alive(state.record(vm.name, "zookeeper")):
        return
    command = render.zookeeper_command(str(java), vm, str(image.zookeeper_lib))
    state.set_record(
        vm.name,
        "zookeeper",
        start_process(command, vm.logs_dir / "zookeeper.log", vm.directory),
    )


def start_agent(
    state: ClusterState,
    vm: VmLayout,
    java: Path,
    image: LocalImage,
    preferred_broker_id: int | None = None,
) -> None:
    if is_alive(state.record(vm.name, "agent")):
        return
    settings_file = vm.config_dir / "agent.json"
    settings = render.agent_settings(
        state.layout,
        vm,
        str(image.root),
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


def start_kafka(state: ClusterState, vm: VmLayout, java: Path, image: LocalImage) -> None:
    if is_alive(state.record(vm.name, "kafka")):
        return
    libs = str(image.kafka_libs(state.kafka_version))
    command = (
        kraft.broker_command(str(java), vm, libs, str(image.jolokia_agent))
        if state.kraft
        else render.kafka_command(str(java), state.layout, vm, libs, str(image.jolokia_agent))
    )
    state.set_record(
        vm.name, "kafka", start_process(command, vm.logs_dir / "kafka.log", vm.directory)
    )


def start_controller(state: ClusterState, vm: VmLayout, java: Path, image: LocalImage) -> None:
    if state.agents:
        return  # the VM's agent starts (and heals) its controller
    if "controller" not in state.vm_kinds(vm.name) or is_alive(state.record(vm.name, "controller")):
        return
    libs = str(image.kafka_libs(state.kafka_version))
    state.set_record(
        vm.name,
        "controller",
        start_process(
            kraft.controller_command(str(java), vm, libs, str(image.jolokia_agent)),
            vm.logs_dir / "controller.log",
            vm.directory,
        ),
    )


# -- waiting ----------------------------------------------------------------------------


def _last_line(log_file: Path) -> str:
    try:
        lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def wait_for(
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


def watch(state: ClusterState, vms: tuple[VmLayout, ...], kind: str) -> Callable[[], None]:
    """A check that raises, naming the log, once a `kind` process of `vms` has exited."""

    def alive() -> None:
        for vm in vms:
            if kind in state.vm_kinds(vm.name) and not is_alive(state.record(vm.name, kind)):
                log_file = vm.logs_dir / f"{kind}.log"
                raise KaasError(
                    f"the {kind} process of {vm.name} exited during start-up: see {log_file} "
                    f"(last line: {_last_line(log_file)})"
                )

    return alive


def wait_controllers(state: ClusterState) -> None:
    """The brokers start once every controller listens: a broker gives up when it cannot
    register within Kafka's initial.broker.registration.timeout.ms."""
    controllers = kraft.controller_vms(state.layout)
    for vm in controllers:
        wait_for(
            f"the KRaft controller of {vm.name} to listen",
            lambda vm=vm: probes.port_open(vm.address, vm.ports.kafka_controller),  # type: ignore[misc]
            BROKERS_READY_TIMEOUT,
            f"see {vm.logs_dir / 'controller.log'}",
            # With agents, the agent starts the controller: until then there is no record.
            watch(state, controllers, "agent" if state.agents else "controller"),
        )


def wait_zookeeper(state: ClusterState, vms: tuple[VmLayout, ...]) -> None:
    for vm in vms:
        wait_for(
            f"the ZooKeeper server of {vm.name} to join the quorum",
            lambda vm=vm: probes.zookeeper_mode(state.layout, vm) in probes.SERVING_MODES,  # type: ignore[misc]
            ZOOKEEPER_READY_TIMEOUT,
            f"see {vm.logs_dir / 'zookeeper.log'}",
            watch(state, vms, "zookeeper"),
        )


def wait_brokers(state: ClusterState, vms: tuple[VmLayout, ...]) -> None:
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
            watch(state, vms, watched)()
    else:
        wait_for(
            f"{wanted_text} to register in ZooKeeper",
            lambda: enough(set(probes.broker_registrations(layout))),
            BROKERS_READY_TIMEOUT,
            logs,
            watch(state, vms, "agent" if state.agents else "kafka"),
        )
    wait_for(
        f"a metadata request to list {wanted_text}",
        lambda: enough(probes.metadata_broker_ids(admin_client(layout))),
        BROKERS_READY_TIMEOUT,
        logs,
        watch(state, vms, "agent" if state.agents else "kafka"),
    )


# -- stopping ---------------------------------------------------------------------------


def stop_every_vm(state: ClusterState, discard: bool = False) -> None:
    """Stop every process of every VM, forgetting their records. `discard`: the data goes
    right after (a purge), so no shutdown needs to be orderly: past the agents, every JVM
    is killed. Brokers stopping side by side cannot hand their leaderships to each other,
    and their controlled shutdowns retried for about 40 s of every purge."""
    # Agents first, so that none heals a broker being stopped; then brokers, while
    # ZooKeeper still has a quorum for their controlled shutdown; KRaft controllers after
    # the brokers, whose controlled shutdown they answer; ZooKeeper last.
    _stop_kind_everywhere(state, "agent", AGENT_STOP_TIMEOUT, (signal.SIGTERM,))
    if discard:
        for vm in state.layout.vms:
            kill_process(mirror_maker_record(vm))
        for kind in ("kafka", "controller", "zookeeper"):
            _stop_kind_everywhere(state, kind, 0.0, (signal.SIGKILL,))
        return
    # MirrorMaker next (its agent would start it again), while both clusters still answer.
    for vm in state.layout.vms:
        stop_mirror_maker(vm)
    # A paused JVM is woken first, so that it can shut down in order.
    _stop_kind_everywhere(state, "kafka", KAFKA_STOP_TIMEOUT, (signal.SIGCONT, signal.SIGTERM))
    _stop_kind_everywhere(state, "controller", KAFKA_STOP_TIMEOUT, (signal.SIGCONT, signal.SIGTERM))
    _stop_kind_everywhere(state, "zookeeper", ZOOKEEPER_STOP_TIMEOUT, ())


def _stop_kind_everywhere(
    state: ClusterState, kind: str, timeout_s: float, signals: tuple[signal.Signals, ...]
) -> None:
    """Signal every VM's `kind` process first, so that they stop side by side, then wait for
    each (`stop_process` signals again and kills one past `timeout_s`)."""
    for vm in state.layout.vms:
        for signum in signals:
            send_signal(state.record(vm.name, kind), signum)
    for vm in state.layout.vms:
        if timeout_s > 0:
            stop_process(state.record(vm.name, kind), timeout_s)
        else:
            kill_process(state.record(vm.name, kind))
        state.set_record(vm.name, kind, None)


def stop_mirror_maker(vm: VmLayout) -> None:
    """Stop the VM's MirrorMaker, which its agent started; after the agent, which would
    start it again."""
    stop_process(mirror_maker_record(vm), MIRROR_MAKER_STOP_TIMEOUT)


def stop_vm_processes(state: ClusterState, vm: VmLayout, kinds: tuple[str, ...]) -> None:
    """Stop one VM's processes of `kinds`, in that order, forgetting their records."""
    for kind in kinds:
        stop_process(
            state.record(vm.name, kind), VM_STOP_TIMEOUTS.get(kind, ZOOKEEPER_STOP_TIMEOUT)
        )
        state.set_record(vm.name, kind, None)
