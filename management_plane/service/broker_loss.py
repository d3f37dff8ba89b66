"""Broker loss: noticing a VM whose agent and broker are gone, and deciding to replace it.

The decision is pure (`decide_losses`): a VM counts as lost only after its agent's member
znode AND its broker's registration (/brokers/ids/<id>) have both been absent for the whole
threshold, on every look in between. A rolling restart takes the broker away but keeps the
agent; an agent healing itself (restarting) keeps the broker registered; a VM the provider is
still booting is left alone. No loss is decided while the cluster runs another operation,
and the clock starts again after one, so an operation's own VM changes never count.

`BrokerLossWatcher` is the thin adapter: it reads ZooKeeper and the provider and queues one
journaled `replace_lost_vm` operation per decision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from management_plane.providers.base import Provider, ProviderError, client_identity
from management_plane.service.cluster_io import ClusterIO, ClusterUnreachable
from management_plane.service.db import ClusterBusy, Database
from management_plane.service.interval_gate import IntervalGate
from management_plane.service.operations import OperationKind, expand_steps

log = structlog.get_logger("kaas.broker_loss")

DEFAULT_THRESHOLD_S = 300.0
CHECK_INTERVAL_S = 5.0


@dataclass(frozen=True)
class VmObservation:
    """One look at one VM of a running cluster."""

    vm_id: str
    broker_id: int
    agent_present: bool
    """Its agent's ephemeral member znode exists (the agent's heartbeat)."""
    broker_registered: bool
    """Kafka's ephemeral /brokers/ids/<id> exists."""
    provider_state: str
    """What the provider says: pending | running | stopped | terminated | unknown."""


@dataclass(frozen=True)
class LossDecision:
    vm_id: str
    broker_id: int
    absent_for_s: float
    reason: str


def decide_losses(
    observations: list[VmObservation],
    absent_since: Mapping[str, float],
    now: float,
    threshold_s: float,
    busy: bool,
) -> tuple[dict[str, float], list[LossDecision]]:
    """The new absence clocks and at most one VM to replace.

    `absent_since` maps a VM id to the time its agent and broker were first seen both gone
    (kept by the caller between looks). `busy`: another operation runs on the cluster.
    """
    if threshold_s <= 0:
        raise ValueError(f"the broker-loss threshold must be positive, got {threshold_s}")
    if busy:
        return {}, []  # an operation changes VMs on purpose; count again after it
    clocks: dict[str, float] = {}
    candidates: list[LossDecision] = []
    for seen in observations:
        if seen.agent_present or seen.broker_registered or seen.provider_state == "pending":
            continue  # alive, restarting, or still booting: the clock (if any) stops
        since = absent_since.get(seen.vm_id, now)
        clocks[seen.vm_id] = since
        absent = now - since
        if absent >= threshold_s:
            candidates.append(
                LossDecision(
                    seen.vm_id,
                    seen.broker_id,
                    absent,
                    f"{seen.vm_id} (broker {seen.broker_id}): agent and broker both gone for "
                    f"{absent:.0f}s (threshold {threshold_s:.0f}s), provider says "
                    f"{seen.provider_state}",
                )
            )
    # One at a time: a second lost VM is replaced after the first (its clock keeps running).
    candidates.sort(key=lambda d: (-d.absent_for_s, d.broker_id))
    return clocks, candidates[:1]


class BrokerLossWatcher:
    """Looks at every running cluster now and then; queues a replacement for a lost VM."""

    def __init__(
        self,
        db: Database,
        provider: Provider,
        threshold_s: float = DEFAULT_THRESHOLD_S,
        interval_s: float = CHECK_INTERVAL_S,
        on_queued: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if threshold_s <= 0:
            raise ValueError(f"the broker-loss threshold must be positive, got {threshold_s}")
        self.db = db
        self.provider = provider
        self.threshold_s = threshold_s
        self.on_queued = on_queued
        self.clock = clock
        self._absent_since: dict[str, dict[str, float]] = {}
        self._gate = IntervalGate(interval_s, clock)

    def check_if_due(self) -> None:
        if not self._gate.due():
            return
        for cluster in self.db.list_clusters():
            if cluster["status"] == "running":
                self.check_cluster(cluster["name"])
            else:
                self._absent_since.pop(cluster["name"], None)

    def _busy(self, cluster: str) -> bool:
        return any(op.unfinished for op in self.db.list_operations(cluster, 20))

    def _provider_state(self, vm_id: str) -> str:
        try:
            return self.provider.describe_vm(vm_id).state
        except ProviderError:
            return "unknown"

    def observe(self, cluster: str) -> list[VmObservation] | None:
        """None when the cluster's ZooKeeper does not answer: nothing can be told then."""
        vms = [
            vm
            for vm in self.db.cluster_vms(cluster)
            if vm["state"] == "running" and vm["broker_id"] is not None
        ]
        if not vms:
            return []
        try:
            io = ClusterIO(
                cluster, [vm["address"] for vm in vms], client_identity(self.provider, cluster)
            )
            members = io.members().alive
            registered = io.registered_brokers()
        except ClusterUnreachable as exc:
            log.warning("broker_loss_cannot_look", cluster=cluster, error=str(exc))
            return None
        return [
            VmObservation(
                vm["vm_id"],
                int(vm["broker_id"]),
                int(vm["broker_id"]) in members,
                int(vm["broker_id"]) in registered,
                self._provider_state(vm["vm_id"]),
            )
            for vm in vms
        ]

    def check_cluster(self, cluster: str) -> int | None:
        """The id of the operation queued, if a loss was decided."""
        busy = self._busy(cluster)
        observations = [] if busy else self.observe(cluster)
        if observations is None:
            self._absent_since.pop(cluster, None)  # unseen is not absent: start again
            return None
        previous = self._absent_since.get(cluster, {})
        clocks, decisions = decide_losses(
            observations, previous, self.clock(), self.threshold_s, busy
        )
        for vm_id in clocks.keys() - previous.keys():
            log.warning("broker_absent", cluster=cluster, vm=vm_id, threshold_s=self.threshold_s)
        for vm_id in previous.keys() - clocks.keys():
            if not busy:
                log.info("broker_back", cluster=cluster, vm=vm_id)
        self._absent_since[cluster] = clocks
        if not decisions or self._busy(cluster):
            return None
        decision = decisions[0]
        try:
            op = self.db.add_operation(
                cluster,
                OperationKind.REPLACE_LOST_VM,
                {"vm_id": decision.vm_id, "broker_id": decision.broker_id},
                expand_steps(OperationKind.REPLACE_LOST_VM, 1),
                "broker-loss-watcher",
                {"batches": [[decision.vm_id]], "decision": decision.reason},
                journal=("detected", decision.reason),
            )
        except ClusterBusy:  # a request's operation got in first: look again after it
            self._absent_since[cluster] = {}
            return None
        self._absent_since[cluster] = {}
        log.warning(
            "broker_lost_replacing",
            cluster=cluster,
            vm=decision.vm_id,
            broker_id=decision.broker_id,
            op_id=op.op_id,
            reason=decision.reason,
        )
        if self.on_queued is not None:
            self.on_queued()
        return op.op_id
