"""The disk faults: a broker's volume destroyed while it runs, and its log directory full.
Both need a cluster whose broker disks the drill reaches (`DiskCluster`; the local
provider's); on any other the drill refuses before it starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from management_plane.drills.errors import DrillError
from management_plane.drills.faults import (
    FaultCluster,
    FaultContext,
    ProcessAction,
    ProcessKind,
    follower_broker_vm,
)

RESTART_TIMEOUT_S = 180.0


@runtime_checkable
class DiskCluster(FaultCluster, Protocol):
    def broker_pid(self, vm: str) -> int | None: ...  # the VM's running broker, if one runs

    def destroy_broker_data(self, vm: str) -> str: ...

    def limit_log_dir(self, vm: str, headroom_bytes: int) -> int: ...  # the size it got

    def fill_log_dir(self, vm: str) -> int: ...  # bytes written

    def restore_log_dir(self, vm: str) -> bool: ...


def _disks(context: FaultContext, fault: str) -> DiskCluster:
    if not isinstance(context.cluster, DiskCluster):
        raise DrillError(f"{fault} needs a cluster whose broker disks it reaches")
    return context.cluster


def _no_disks(context: FaultContext, fault: str) -> str | None:
    if isinstance(context.cluster, DiskCluster):
        return None
    return f"{fault} needs a cluster whose broker disks this host reaches (a local cluster)"


def _stop_broker(cluster: DiskCluster, vm: str) -> None:
    """The agent first (it would start the broker again), then the broker."""
    if cluster.runs_agents():
        cluster.act(vm, ProcessAction.STOP, ProcessKind.AGENT)
    cluster.act(vm, ProcessAction.STOP, ProcessKind.KAFKA)


def _start_broker(cluster: DiskCluster, vm: str) -> None:
    """With agents the agent starts the broker; without, the drill does."""
    if cluster.runs_agents():
        cluster.act(vm, ProcessAction.START, ProcessKind.AGENT)
    else:
        cluster.act(vm, ProcessAction.START, ProcessKind.KAFKA)
    cluster.wait_broker_serving(vm, RESTART_TIMEOUT_S)


@dataclass
class DestroyedVolume:
    """A plain broker's log directory deleted while the broker runs: Kafka finds its only
    log directory failed at its next checkpoint and stops; the agent (or, without agents,
    the heal) starts it on an empty volume, and it re-replicates every partition from the
    others. Held until the broker noticed, at least the duration."""

    name: str = "destroyed-volume"
    notice_timeout_s: float = 240.0  # a loaded host takes a minute to halt the broker
    vm: str | None = field(default=None, init=False)
    broker_pid: int | None = field(default=None, init=False)

    def describe(self) -> str:
        return (
            "a plain broker's log directory deleted while it runs; it stops, starts again "
            "empty and re-replicates from the others"
        )

    def preflight(self, context: FaultContext) -> str | None:
        return _no_disks(context, self.name)

    def inject(self, context: FaultContext) -> str:
        cluster = _disks(context, self.name)
        self.vm = follower_broker_vm(context)[0]
        self.broker_pid = cluster.broker_pid(self.vm)
        deleted = cluster.destroy_broker_data(self.vm)
        return f"{self.vm}'s broker volume ({deleted})"

    def hold(self, context: FaultContext) -> None:
        # The broker must have noticed before the drill heals and waits for the recovery:
        # until then its metadata still shows it serving every replica.
        _hold_until_stopped(
            context,
            self.name,
            self.vm,
            self.broker_pid,
            self.notice_timeout_s,
            "volume was deleted",
        )

    def heal(self, context: FaultContext) -> None:
        if self.vm is None:
            return
        cluster = _disks(context, self.name)
        if cluster.broker_pid(self.vm) is None and not cluster.runs_agents():
            cluster.act(self.vm, ProcessAction.START, ProcessKind.KAFKA)
        cluster.wait_broker_serving(self.vm, RESTART_TIMEOUT_S)
        self.vm = None


def _hold_until_stopped(
    context: FaultContext,
    name: str,
    vm: str | None,
    broker_pid: int | None,
    timeout_s: float,
    after: str,
) -> None:
    """The fault's duration, then until `vm`'s broker process `broker_pid` has stopped."""
    context.sleep(context.duration_s)
    if vm is None or broker_pid is None:
        return
    cluster = _disks(context, name)
    deadline = time.monotonic() + timeout_s
    while cluster.broker_pid(vm) == broker_pid:
        if time.monotonic() > deadline:
            raise DrillError(f"{vm}'s broker still runs {timeout_s:.0f}s after its {after}")
        context.sleep(0.5)


@dataclass
class FullDisk:
    """A plain broker's log directory moved onto a small filesystem and filled: Kafka's
    writes fail with ENOSPC, the directory goes offline and the broker stops (the agent's
    restarts fail the same way) until heal frees the space and moves the data back. Held
    until the broker started on it stopped, at least the duration."""

    name: str = "full-disk"
    headroom_bytes: int = 32 << 20
    notice_timeout_s: float = 240.0  # a loaded host takes a minute to start the broker
    vm: str | None = field(default=None, init=False)
    broker_pid: int | None = field(default=None, init=False)  # the one started on it

    def describe(self) -> str:
        return "a plain broker's log directory on a size-limited filesystem, filled to the brim"

    def preflight(self, context: FaultContext) -> str | None:
        return _no_disks(context, self.name)

    def inject(self, context: FaultContext) -> str:
        cluster = _disks(context, self.name)
        vm = follower_broker_vm(context)[0]
        _stop_broker(cluster, vm)
        self.vm = vm
        size = cluster.limit_log_dir(vm, self.headroom_bytes)
        _start_broker(cluster, vm)
        self.broker_pid = cluster.broker_pid(vm)
        ballast = cluster.fill_log_dir(vm)
        return f"{vm}'s log directory ({size >> 20} MiB filesystem, {ballast >> 20} MiB ballast)"

    def hold(self, context: FaultContext) -> None:
        # The broker started on the full filesystem must have hit it (its log directory
        # offline, the broker stopped) before the heal: a short duration on a loaded host
        # otherwise heals a broker still starting up, and the drill faulted nothing.
        _hold_until_stopped(
            context,
            self.name,
            self.vm,
            self.broker_pid,
            self.notice_timeout_s,
            "log directory filled",
        )

    def heal(self, context: FaultContext) -> None:
        if self.vm is None:
            return
        cluster = _disks(context, self.name)
        _stop_broker(cluster, self.vm)
        cluster.restore_log_dir(self.vm)
        _start_broker(cluster, self.vm)
        self.vm = None
