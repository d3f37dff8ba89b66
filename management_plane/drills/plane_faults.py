"""The faults the management plane must ride out or repair itself: `kaas serve` killed while
one of its journaled operations is between steps (started again, it resumes the operation
from its journal and finishes it), and a VM lost outright, processes and volume gone as a
terminated instance (the management plane notices and replaces it). Both reach the
management plane through the context's port (`faults.ManagementPlane`) and say when it has
finished its part (`faults.SettlesItself`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from management_plane.drills.disk_faults import DiskCluster
from management_plane.drills.errors import DrillError
from management_plane.drills.faults import (
    FaultContext,
    ManagementPlane,
    OperationView,
    ProcessAction,
    ProcessKind,
    follower_broker_vm,
)

# A read-only broker config (not dynamic in Kafka 3.9): changing it makes the agents roll
# every broker, one at a time, so the operation waits between its steps for a while.
ROLLED_CONFIG = "offsets.retention.minutes"
ROLLED_CONFIG_DEFAULT = 10080
STEP_TIMEOUT_S = 180.0  # for the operation to reach the step the drill kills it in
POLL_S = 0.5


def _plane(context: FaultContext, fault: str) -> ManagementPlane:
    if context.plane is None:
        raise DrillError(_no_plane(fault))
    return context.plane


def _no_plane(fault: str) -> str:
    return (
        f"{fault} needs the cluster's management plane (`kaas up` starts it beside a cluster "
        "with agents)"
    )


def _plane_problem(context: FaultContext, fault: str) -> str | None:
    if context.plane is None:
        return _no_plane(fault)
    if not context.cluster.runs_agents():
        return f"{fault} needs a cluster whose VMs run kaas-agent; this one runs none"
    return context.plane.problem()


def toggled_config(config: Mapping[str, str]) -> dict[str, str | None]:
    """The rolled config one minute up or down, so that every run changes it and two runs
    leave it as they found it."""
    current = config.get(ROLLED_CONFIG)
    try:
        minutes = int(current) if current is not None else ROLLED_CONFIG_DEFAULT
    except ValueError:
        minutes = ROLLED_CONFIG_DEFAULT
    changed = minutes + 1 if minutes % 2 == 0 else minutes - 1
    return {ROLLED_CONFIG: str(changed)}


@dataclass
class ManagementPlaneKill:
    """A rolling config change queued through the management plane; `kaas serve` killed
    (SIGKILL) as soon as the operation waits for the agents (`kill_at`), kept down for the
    duration, started again. Settled when the same operation succeeded without running its
    earlier steps again: it resumed from its journal."""

    name: str = "management-plane-kill"
    kill_at: str = "wait_applied"
    settle_timeout_s: float = 900.0  # the roll of every broker, on a loaded host
    op_id: int | None = field(default=None, init=False)
    killed: str | None = field(default=None, init=False)
    done_before_kill: tuple[str, ...] = field(default=(), init=False)

    def describe(self) -> str:
        return (
            f"kaas serve killed (SIGKILL) while a rolling config change ({ROLLED_CONFIG} one "
            "minute up or down) waits for the agents; started again after the duration, it "
            "resumes the operation from its journal"
        )

    def preflight(self, context: FaultContext) -> str | None:
        return _plane_problem(context, self.name)

    def inject(self, context: FaultContext) -> str:
        plane = _plane(context, self.name)
        self.op_id = plane.change_config(toggled_config(plane.broker_config()))
        op = self._wait_for_step(context, plane, self.op_id)
        self.done_before_kill = op.done_steps
        self.killed = plane.kill()
        return f"{self.killed}, operation {op.op_id} ({op.kind}) at {op.step}"

    def _wait_for_step(
        self, context: FaultContext, plane: ManagementPlane, op_id: int
    ) -> OperationView:
        for _ in range(int(STEP_TIMEOUT_S / POLL_S)):
            op = plane.operation(op_id)
            if op.failed or op.succeeded:
                raise DrillError(
                    f"operation {op_id} {op.status} before reaching {self.kill_at}: {op.message}"
                )
            if (op.step or "").split(":")[0] == self.kill_at:
                return op
            context.sleep(POLL_S)
        raise DrillError(f"operation {op_id} did not reach {self.kill_at} in {STEP_TIMEOUT_S:.0f}s")

    def hold(self, context: FaultContext) -> None:
        context.sleep(context.duration_s)

    def heal(self, context: FaultContext) -> None:
        if self.killed is not None and context.plane is not None:
            context.plane.restart()
        self.killed = None

    def unsettled(self, context: FaultContext) -> str | None:
        if self.op_id is None:
            return None
        op = _plane(context, self.name).operation(self.op_id)
        if op.failed:
            raise DrillError(f"operation {op.op_id} failed after the restart: {op.message}")
        if not op.succeeded:
            return f"operation {op.op_id} at {op.step}: {op.message}"
        again = [s for s in self.done_before_kill if op.done_steps.count(s) > 1]
        if again:
            raise DrillError(
                f"operation {op.op_id} ran {', '.join(again)} again: it restarted instead of "
                "resuming from its journal"
            )
        return None

    def settlement(self) -> str:
        return f"operation {self.op_id} resumed at {self.kill_at} after the restart and succeeded"

    def clean_up(self, context: FaultContext) -> None:
        self.heal(context)


@dataclass
class LostVm:
    """A plain broker's VM lost outright: its agent, broker and ZooKeeper server killed
    (SIGKILL) and its volume deleted, as a terminated instance leaves it. Nothing heals it
    but the management plane: once the VM has been gone for its broker-loss threshold it
    replaces it (a new VM keeping the broker id, which Kafka re-replicates onto). Settled
    when that replacement succeeded."""

    name: str = "lost-vm"
    settle_timeout_s: float = 1200.0  # the threshold (5 min by default) and the rebuild
    vm: str | None = field(default=None, init=False)
    known_ops: frozenset[int] = field(default=frozenset(), init=False)
    op_id: int | None = field(default=None, init=False)

    def describe(self) -> str:
        return (
            "a plain broker's VM lost (every process killed, its volume deleted); the "
            "management plane replaces it, keeping its broker id"
        )

    def preflight(self, context: FaultContext) -> str | None:
        if not isinstance(context.cluster, DiskCluster):
            return f"{self.name} needs a cluster whose VM volumes this host reaches"
        return _plane_problem(context, self.name)

    def inject(self, context: FaultContext) -> str:
        plane = _plane(context, self.name)
        cluster = context.cluster
        if not isinstance(cluster, DiskCluster):
            raise DrillError(f"{self.name} needs a cluster whose VM volumes this host reaches")
        self.known_ops = frozenset(op.op_id for op in plane.operations())
        self.vm = follower_broker_vm(context)[0]
        # The agent first, so that it restarts nothing while the rest goes.
        for kind in (ProcessKind.AGENT, ProcessKind.KAFKA, ProcessKind.ZOOKEEPER):
            cluster.act(self.vm, ProcessAction.KILL, kind)
        deleted = cluster.destroy_broker_data(self.vm)
        return f"{self.vm} (every process killed; {deleted})"

    def hold(self, context: FaultContext) -> None:
        context.sleep(context.duration_s)

    def heal(self, context: FaultContext) -> None:
        """Nothing: a lost VM does not come back; the management plane replaces it."""

    def _replacement(self, plane: ManagementPlane) -> OperationView | None:
        for op in plane.operations():
            lost = str(op.params.get("vm_id", "")).rsplit("/", 1)[-1]
            if op.kind == "replace_lost_vm" and op.op_id not in self.known_ops and lost == self.vm:
                return op
        return None

    def unsettled(self, context: FaultContext) -> str | None:
        if self.vm is None:
            return None
        op = self._replacement(_plane(context, self.name))
        if op is None:
            return f"waiting for the management plane to notice {self.vm} lost"
        self.op_id = op.op_id
        if op.failed:
            raise DrillError(
                f"the replacement of {self.vm} (operation {op.op_id}) failed: {op.message}"
            )
        if not op.succeeded:
            return f"operation {op.op_id} replacing {self.vm} at {op.step}: {op.message}"
        return None

    def settlement(self) -> str:
        return f"operation {self.op_id} (replace_lost_vm) replaced {self.vm} and succeeded"

    def clean_up(self, context: FaultContext) -> None:
        """Nothing: the replacement is the cluster's repair, kept."""
