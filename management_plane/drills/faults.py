"""The faults a drill injects, each behind one interface (`Fault`: describe, preflight,
inject, heal), and the port (`FaultCluster`) through which they reach a cluster.

A fault picks its target when it is injected (the leader of the drill topic's first
partition, the controller, a ZooKeeper follower...), from what the port reports then, so the
same drill runs on any cluster. Heal is idempotent: the drill calls it after the fault's
duration and again when it is interrupted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from management_plane.drills.errors import DrillError


class ProcessKind(StrEnum):
    KAFKA = "kafka"
    ZOOKEEPER = "zookeeper"
    AGENT = "agent"
    CONTROLLER = "controller"  # a KRaft controller's own process


class ProcessAction(StrEnum):
    KILL = "kill"  # SIGKILL
    STOP = "stop"  # SIGTERM: Kafka's controlled shutdown
    START = "start"  # start again (a no-op when it runs)
    PAUSE = "pause"  # SIGSTOP
    RESUME = "resume"  # SIGCONT


class ZookeeperMode(StrEnum):
    LEADER = "leader"
    FOLLOWER = "follower"


@runtime_checkable
class FaultCluster(Protocol):
    """What a fault needs of a cluster; `local_cluster.LocalFaultCluster` is the local
    provider's, the unit tests use a fake."""

    def vm_names(self) -> tuple[str, ...]: ...

    def vm_address(self, vm: str) -> str: ...

    def vm_pids(self, vm: str) -> tuple[int, ...]: ...  # its running processes

    def runs_agents(self) -> bool: ...

    def broker_vm(self, broker_id: int) -> str: ...

    def partition_leader(self, topic: str, partition: int) -> int: ...

    def controller_id(self) -> int: ...  # ZooKeeper mode: the controller broker's id

    def zookeeper_modes(self) -> Mapping[str, str]: ...

    def act(self, vm: str, action: ProcessAction, kind: ProcessKind) -> str: ...

    def wait_broker_serving(self, vm: str, timeout_s: float) -> None: ...

    # -- KRaft: the controllers run in processes of their own --

    def runs_kraft(self) -> bool: ...

    def controller_vms(self) -> tuple[str, ...]: ...  # the VMs running a controller

    def quorum_leader(self) -> str | None: ...  # the active controller's VM, None: no leader

    def quorum_whole(self) -> str | None: ...  # what the quorum lacks, None: all caught up

    def controller_pid(self, vm: str) -> int | None: ...  # None: not running

    # The first controller leadership taken after `since_s` (epoch seconds): VM and when.
    def leader_elected_since(self, since_s: float) -> tuple[str, float] | None: ...


class NetworkRules(Protocol):
    """Rules that cut one address off from every other (`network.NftablesRules`)."""

    def problem(self) -> str | None: ...

    # `pids`: the VM's processes, whose outgoing packets leave from 127.0.0.1
    def isolate(self, address: str, pids: Iterable[int]) -> str: ...  # a handle for `remove`

    def degrade(self, address: str, pids: Iterable[int], loss_percent: int) -> str: ...

    def remove(self, handle: str) -> None: ...


@dataclass(frozen=True)
class OperationView:
    """One management-plane operation as a drill follows it."""

    op_id: int
    kind: str
    status: str  # pending | running | succeeded | failed
    step: str | None
    message: str
    params: Mapping[str, object] = field(default_factory=dict)
    done_steps: tuple[str, ...] = ()  # every step the journal records done, in order

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


class ManagementPlane(Protocol):
    """The management plane of the drill's cluster (`local_plane.BackgroundPlane`: the
    `kaas serve` beside a `kaas up` cluster; the unit tests use a fake)."""

    def problem(self) -> str | None: ...  # why no drill can reach it here, or None

    def broker_config(self) -> Mapping[str, str]: ...  # the cluster's spec, as it holds it

    def change_config(self, config: Mapping[str, str | None]) -> int: ...  # the operation's id

    def operation(self, op_id: int) -> OperationView: ...

    def operations(self) -> list[OperationView]: ...  # the cluster's

    def kill(self) -> str: ...  # SIGKILL; says what was killed

    def restart(self) -> None: ...  # as it ran before; nothing when it runs


@dataclass(frozen=True)
class FaultContext:
    cluster: FaultCluster
    topic: str  # the drill's topic: the leader of its partition 0 is "the partition leader"
    duration_s: float
    bounces: int = 3
    network: NetworkRules | None = None
    sleep: Callable[[float], None] = time.sleep
    plane: ManagementPlane | None = None


class Fault(Protocol):
    name: str

    def describe(self) -> str: ...

    def preflight(self, context: FaultContext) -> str | None:
        """Why this fault cannot run on that cluster here, or None; touches nothing."""
        ...

    def inject(self, context: FaultContext) -> str:
        """Start the fault; returns its target in words ("vm2's broker")."""
        ...

    def hold(self, context: FaultContext) -> None:
        """Keep the fault for the duration (bounces do their bouncing here)."""
        ...

    def heal(self, context: FaultContext) -> None:
        """Undo the fault; does nothing when it is undone already."""
        ...


@runtime_checkable
class SettlesItself(Protocol):
    """A fault KaaS itself must repair (an operation resumed, a VM replaced, a plan
    finished): the drill's recovery also waits, up to `settle_timeout_s`, until `unsettled`
    says nothing is left, and then (or when the drill is interrupted) calls `clean_up`."""

    settle_timeout_s: float

    def unsettled(self, context: FaultContext) -> str | None:
        """What KaaS has still to do, or None; DrillError when it failed at it."""
        ...

    def settlement(self) -> str:
        """What KaaS did, in words, once settled."""
        ...

    def clean_up(self, context: FaultContext) -> None:
        """Undo what the drill changed to provoke the fault; idempotent."""
        ...


@runtime_checkable
class ReportsFigures(Protocol):
    """A fault with figures of its own for the report (a controller failover's times)."""

    def figures(self, context: FaultContext) -> Mapping[str, float | None]:
        """Its figures, read once the drill has recovered from it; None: not measured."""
        ...


# --- process faults --------------------------------------------------------------------


@dataclass
class ProcessFault:
    """One process of one VM killed, stopped or paused for the duration, then started or
    resumed. `pick` chooses the VM when injected."""

    name: str
    summary: str
    kind: ProcessKind
    action: ProcessAction
    pick: Callable[[FaultContext], tuple[str, ...]]
    needs_agents: bool = False
    victims: tuple[str, ...] = field(default=(), init=False)

    def describe(self) -> str:
        return self.summary

    def preflight(self, context: FaultContext) -> str | None:
        if self.needs_agents and not context.cluster.runs_agents():
            return f"{self.name} needs a cluster whose VMs run kaas-agent; this one runs none"
        return None

    def inject(self, context: FaultContext) -> str:
        self.victims = self.pick(context)
        for vm in self.victims:
            context.cluster.act(vm, self.action, self.kind)
        return ", ".join(f"{vm}'s {self.kind.value}" for vm in self.victims)

    def hold(self, context: FaultContext) -> None:
        context.sleep(context.duration_s)

    def heal(self, context: FaultContext) -> None:
        undo = ProcessAction.RESUME if self.action is ProcessAction.PAUSE else ProcessAction.START
        for vm in self.victims:
            context.cluster.act(vm, undo, self.kind)
        self.victims = ()


@dataclass
class BounceFault:
    """Ducktape's bounce: the partition leader's or the controller's broker stopped (clean:
    SIGTERM, controlled shutdown; hard: SIGKILL) and started again, `bounces` times, each
    time choosing the target anew, waiting until it serves before the next. With `controller`
    on a KRaft cluster the active controller's own process is bounced instead, and it serves
    again once the quorum has a leader and every voter caught up."""

    name: str
    summary: str
    hard: bool
    pick: Callable[[FaultContext], tuple[str, ...]]
    controller: bool = False
    targets: list[str] = field(default_factory=list, init=False)
    down: str | None = field(default=None, init=False)
    down_kind: ProcessKind = field(default=ProcessKind.KAFKA, init=False)

    def describe(self) -> str:
        return self.summary

    def preflight(self, context: FaultContext) -> str | None:
        if context.bounces < 1:
            return f"{self.name} needs at least one bounce; got {context.bounces}"
        return None

    def inject(self, context: FaultContext) -> str:
        self._bounce_down(context)
        return (
            f"{context.bounces} x {'hard' if self.hard else 'clean'} bounce of "
            f"{self.down}{'' if self.down_kind is ProcessKind.KAFKA else ' (controller)'}"
        )

    def _bounce_down(self, context: FaultContext) -> None:
        vm = self.pick(context)[0]
        self.down = vm
        self.down_kind = (
            ProcessKind.CONTROLLER
            if self.controller and context.cluster.runs_kraft()
            else ProcessKind.KAFKA
        )
        self.targets.append(vm)
        action = ProcessAction.KILL if self.hard else ProcessAction.STOP
        context.cluster.act(vm, action, self.down_kind)

    def _bring_up(self, context: FaultContext) -> None:
        if self.down is None:
            return
        vm = self.down
        if self.down_kind is ProcessKind.CONTROLLER:
            start_controller(context, vm)
            wait_quorum_whole(context, timeout_s=180)
        else:
            context.cluster.act(vm, ProcessAction.START, ProcessKind.KAFKA)
            context.cluster.wait_broker_serving(vm, timeout_s=180)
        self.down = None

    def hold(self, context: FaultContext) -> None:
        pause = context.duration_s / context.bounces
        for bounce in range(context.bounces):
            if bounce > 0:
                self._bounce_down(context)
            context.sleep(pause)
            self._bring_up(context)

    def heal(self, context: FaultContext) -> None:
        self._bring_up(context)


def start_controller(context: FaultContext, vm: str) -> None:
    """A stopped KRaft controller started again: by its VM's agent where agents run (it
    starts a controller it finds gone; a second start beside it would race for the port),
    by the drill where none do."""
    if not context.cluster.runs_agents():
        context.cluster.act(vm, ProcessAction.START, ProcessKind.CONTROLLER)


def wait_quorum_whole(context: FaultContext, timeout_s: float, poll_s: float = 1.0) -> None:
    """Until the controller quorum has a leader and every voter has caught up."""
    deadline = time.monotonic() + timeout_s
    missing = context.cluster.quorum_whole()
    # Bounded by looks too: a look (Kafka's quorum tool) takes seconds, a test's sleep none.
    for _ in range(int(timeout_s / poll_s)):
        if missing is None or time.monotonic() > deadline:
            break
        context.sleep(poll_s)
        missing = context.cluster.quorum_whole()
    if missing is not None:
        raise DrillError(
            f"the KRaft controller quorum not whole within {timeout_s:.0f}s: {missing}"
        )


# --- targets ---------------------------------------------------------------------------


def leader_vm(context: FaultContext) -> tuple[str, ...]:
    cluster = context.cluster
    return (cluster.broker_vm(cluster.partition_leader(context.topic, 0)),)


def controller_vm(context: FaultContext) -> tuple[str, ...]:
    """The controller's VM: the controller broker's in ZooKeeper mode, the active KRaft
    controller's (the quorum's leader) in KRaft mode, where brokers answer clients with a
    random broker as "the controller"."""
    cluster = context.cluster
    if cluster.runs_kraft():
        leader = cluster.quorum_leader()
        if leader is None:
            raise DrillError("the KRaft controller quorum has no leader now")
        return (leader,)
    return (cluster.broker_vm(cluster.controller_id()),)


def follower_broker_vm(context: FaultContext) -> tuple[str, ...]:
    """A broker that is neither the controller nor partition 0's leader, when there is one:
    a broker lost by itself, without an election of either."""
    cluster = context.cluster
    busy = {controller_vm(context)[0], leader_vm(context)[0]}
    spare = [vm for vm in cluster.vm_names() if vm not in busy]
    return (spare[0] if spare else cluster.vm_names()[-1],)


def _zookeeper_in_mode(context: FaultContext, mode: ZookeeperMode, count: int) -> tuple[str, ...]:
    modes = context.cluster.zookeeper_modes()
    chosen = tuple(vm for vm in sorted(modes) if modes[vm] == mode.value)[:count]
    if len(chosen) < count:
        raise DrillError(
            f"the ensemble has {len(chosen)} ZooKeeper {mode.value}(s), the fault needs {count} "
            f"(modes: {dict(sorted(modes.items()))})"
        )
    return chosen


def zookeeper_leader(context: FaultContext) -> tuple[str, ...]:
    return _zookeeper_in_mode(context, ZookeeperMode.LEADER, 1)


def zookeeper_follower(context: FaultContext) -> tuple[str, ...]:
    return _zookeeper_in_mode(context, ZookeeperMode.FOLLOWER, 1)


def zookeeper_quorum(context: FaultContext) -> tuple[str, ...]:
    """Two servers of three, the leader and a follower: the ensemble has no quorum left."""
    return zookeeper_leader(context) + zookeeper_follower(context)


# --- the network -----------------------------------------------------------------------


@dataclass
class NetworkRuleFault:
    """What the network faults share: they need the drill's network rules (nftables), keep
    the fault for the duration, and heal by removing the one rule they added."""

    name: str
    handle: str | None = field(default=None, init=False)

    def preflight(self, context: FaultContext) -> str | None:
        if context.network is None:
            return self._without_rules()
        return context.network.problem()

    def rules(self, context: FaultContext) -> NetworkRules:
        if context.network is None:
            raise DrillError(self._without_rules())
        return context.network

    def hold(self, context: FaultContext) -> None:
        context.sleep(context.duration_s)

    def heal(self, context: FaultContext) -> None:
        if self.handle is not None and context.network is not None:
            context.network.remove(self.handle)
        self.handle = None

    def _without_rules(self) -> str:
        return f"{self.name} needs network rules, and this drill has none"


@dataclass
class NetworkPartition(NetworkRuleFault):
    """One VM cut off from the other VMs and from the clients: every packet from or to its
    address, but its own traffic to itself, dropped for the duration."""

    name: str = "network-partition"
    vm: str | None = field(default=None, init=False)

    def describe(self) -> str:
        return (
            "one broker's VM (neither the controller nor the leader of partition 0, when there "
            "is one) cut off from the others and from clients by firewall rules on its address"
        )

    def inject(self, context: FaultContext) -> str:
        rules = self.rules(context)
        self.vm = follower_broker_vm(context)[0]
        self.handle = rules.isolate(
            context.cluster.vm_address(self.vm), context.cluster.vm_pids(self.vm)
        )
        return f"{self.vm} ({context.cluster.vm_address(self.vm)})"


@dataclass
class DegradedNetwork(NetworkRuleFault):
    """One VM's packets, both ways, dropped at random (`loss_percent` of them) for the
    duration: TCP retransmits, so the VM's traffic slows and stalls without stopping.
    Loss only: this kernel has no netem qdisc for delay."""

    name: str = "degraded-network"
    loss_percent: int = 20

    def describe(self) -> str:
        return f"one broker's VM losing {self.loss_percent}% of its packets each way"

    def inject(self, context: FaultContext) -> str:
        rules = self.rules(context)
        vm = follower_broker_vm(context)[0]
        address = context.cluster.vm_address(vm)
        self.handle = rules.degrade(address, context.cluster.vm_pids(vm), self.loss_percent)
        return f"{vm} ({address}): {self.loss_percent}% loss"
