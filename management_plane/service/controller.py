"""The steps of every operation: what each does to the provider, the spec and the database.

Every step is safe to run again after a crash at any point: it first looks at what is already
true (VMs the provider has that the database does not know are adopted, a spec that already
says the thing is left alone) and only then acts. A step returns an Outcome: done (next
step), wait (run me again soon) or fail.

Each step is registered (`@step`) with the operation kinds it serves, its timeout class and
its retry policy; the controller reaches the provider and the cluster only through its two
injected ports, so unit tests drive every step against fakes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import structlog

from management_plane.drills.process import DrillProcesses, LocalDrillProcesses
from management_plane.errors import KaasError, StepVerdict, step_verdict
from management_plane.mirror.acls import SourceAclPort
from management_plane.mirror.kafka import KafkaSourceAcls
from management_plane.providers.base import (
    BootstrapsClusters,
    DeletesClusters,
    Provider,
    ProviderError,
    VmInfo,
    VmRequest,
    client_identity,
)
from management_plane.security.rotation_store import (
    CertificateStoreFactory,
    ZooKeeperCertificates,
)
from management_plane.service.cluster_io import ClusterIO, ClusterUnreachable, PartitionState
from management_plane.service.db import Database, OperationRow
from management_plane.service.metadata_version import (
    MetadataVersionLevels,
    raise_metadata_version,
)
from management_plane.service.operations import (
    CLUSTER_KINDS,
    DONE,
    FAIL,
    WAIT,
    OperationKind,
    Outcome,
    StepName,
)
from management_plane.service.steps import (
    Patience,
    RetryPolicy,
    Step,
    StepRegistry,
    StepTimeouts,
    UnknownStep,
)
from planner.contracts.ensemble_repair import EnsembleRepairRequest
from planner.contracts.kafka_release import KAFKA_RELEASES, KafkaMode
from planner.contracts.log_limits import parse_log_limits
from planner.contracts.member import MemberReadings
from planner.contracts.mirror_flow import MirrorFlow, MirrorFlowReadings
from planner.contracts.mirror_lag import MirrorFlowLag
from planner.contracts.spec import ClusterSpec, parse_spec
from planner.pki.files import IdentityFiles
from planner.zookeeper_ensemble import EnsembleConfig, EnsembleConfigError, repair_outstanding

log = structlog.get_logger("kaas.controller")

__all__ = ["STEPS", "ClusterPort", "Controller", "StepTimeouts"]


class ClusterPort(Protocol):
    """What the steps read and write in a running cluster (ClusterIO; a fake in unit tests)."""

    def read_spec(self) -> ClusterSpec | None: ...

    def write_spec(self, change: Callable[[ClusterSpec | None], ClusterSpec]) -> ClusterSpec: ...

    def members(self) -> MemberReadings: ...

    def registered_brokers(self) -> set[int]: ...

    def release_broker_claim(self, broker_id: int) -> None: ...

    def ensemble_config(self) -> EnsembleConfig: ...

    def request_ensemble_repair(self, request: EnsembleRepairRequest) -> None: ...

    def withdraw_ensemble_repair(self) -> None: ...

    def partitions(self) -> list[PartitionState]: ...

    def metadata_version(self) -> MetadataVersionLevels: ...

    def raise_metadata_version(self, level: int) -> None: ...

    def mirror_flows(self) -> MirrorFlowReadings: ...

    def mirror_lag(self, name: str) -> MirrorFlowLag | None: ...

    def put_mirror_flow(self, flow: MirrorFlow) -> None: ...

    def remove_mirror_flow(self, name: str) -> None: ...


SourceAclsFactory = Callable[[str, IdentityFiles], SourceAclPort]
"""(a cluster's bootstrap servers, the admin identity the provider holds for it) -> its ACLs."""
ClusterPortFactory = Callable[[str, list[str], IdentityFiles | None], ClusterPort]
"""(cluster, the addresses of its VMs, the client identity the provider holds for it) -> the
port; ClusterUnreachable when it cannot be."""

K = OperationKind
# The operations that replace every VM of a batch by a new one.
REPLACING = frozenset({K.REPLACE_VM, K.CHANGE_INSTANCE_TYPE, K.UPGRADE})
REMOVING = REPLACING | {K.SCALE_DOWN}
CHANGING_SPEC = REPLACING | {K.SCALE_UP, K.SCALE_DOWN, K.CHANGE_CONFIG}
JOINING = REPLACING | {K.SCALE_UP, K.REPLACE_LOST_VM}
MIGRATION_KINDS = frozenset({K.MIGRATE_TO_KRAFT, K.ROLLBACK_KRAFT_MIGRATION})

STEPS: StepRegistry[Controller] = StepRegistry()
step = STEPS.register


PROTOCOL_KEY = "inter.broker.protocol.version"


def protocol_version(kafka_version: str) -> str:
    """Kafka 3.8.1 speaks inter-broker protocol 3.8."""
    return ".".join(kafka_version.split(".")[:2])


def _upgrades_to_kraft(op: OperationRow) -> bool:
    return KAFKA_RELEASES.get(op.params.get("kafka_version", "")) is KafkaMode.KRAFT


def done(message: str, **context: Any) -> Outcome:
    return Outcome(DONE, message, context)


def wait(message: str, **context: Any) -> Outcome:
    return Outcome(WAIT, message, context)


class Controller:
    def __init__(
        self,
        db: Database,
        provider: Provider,
        cluster_io: ClusterPortFactory = ClusterIO,
        drill_processes: DrillProcesses | None = None,
        certificates: CertificateStoreFactory = ZooKeeperCertificates,
        source_acls: SourceAclsFactory = KafkaSourceAcls,
    ) -> None:
        self.db = db
        self.provider = provider
        self.cluster_io = cluster_io
        # Drills run as processes of their own (management_plane.drills.operation's steps).
        self.drill_processes = drill_processes or LocalDrillProcesses()
        self.certificates = certificates
        """The cluster's certificate znodes, for the rotation steps."""
        self.source_acls = source_acls
        """A mirror flow's source cluster's ACLs (management_plane.mirror.operation)."""

    # -- helpers --------------------------------------------------------------------------

    def _cluster(self, name: str) -> dict[str, Any]:
        row = self.db.cluster(name)
        if row is None:
            raise KaasError(f"cluster {name} is not in the database")
        return row

    def _spec(self, name: str) -> ClusterSpec:
        return parse_spec(self._cluster(name)["spec"])

    def _io(self, cluster: str, exclude: tuple[str, ...] = ()) -> ClusterPort:
        addresses = [
            vm["address"]
            for vm in self.db.cluster_vms(cluster)
            if vm["vm_id"] not in exclude and vm["state"] in ("running", "draining", "joining")
        ]
        return self.cluster_io(cluster, addresses, client_identity(self.provider, cluster))

    def cluster_port(self, cluster: str) -> ClusterPort:
        """The running cluster's ZooKeeper and Kafka, for steps registered elsewhere."""
        return self._io(cluster)

    def _record(self, info: VmInfo, state: str) -> None:
        self.db.upsert_vm(
            info.vm_id,
            info.cluster,
            info.zone,
            info.address,
            info.instance_type,
            info.kafka_version,
            state,
            info.broker_id,
        )

    def _write_spec(self, cluster: str, **changes: Any) -> ClusterSpec:
        stored = self._spec(cluster)

        def change(current: ClusterSpec | None) -> ClusterSpec:
            base = current or stored
            return replace(base, **changes)

        written = self._io(cluster).write_spec(change)
        self.db.update_cluster(cluster, spec=json.dumps(written.to_json(), sort_keys=True))
        return written

    # -- dispatch -------------------------------------------------------------------------

    def step_of(self, op: OperationRow) -> Step[Controller]:
        """The registered step the operation is at; UnknownStep if its kind has none."""
        current = op.step
        if current is None:
            raise UnknownStep(f"operation {op.op_id} has no step left to run")
        return STEPS.lookup(current, op.kind)

    def run(self, op: OperationRow) -> Outcome:
        current = op.step
        assert current is not None
        try:
            step = self.step_of(op)
        except UnknownStep as exc:
            return Outcome(FAIL, f"{current}: {exc}")
        try:
            return step.run(self, op, current.batch_index)
        except KaasError as exc:
            if step.retry == RetryPolicy.NEVER or step_verdict(exc) == StepVerdict.FAIL:
                return Outcome(FAIL, f"{current}: {exc}")
            if isinstance(exc, ClusterUnreachable):
                return wait(f"{current}: cluster not reachable yet ({exc})")
            return wait(f"{current}: {exc}")

    # -- steps ----------------------------------------------------------------------------

    @step(StepName.CREATE_VMS, {K.CREATE_CLUSTER}, Patience.CREATE)
    def create_vms(self, op: OperationRow, _batch: int) -> Outcome:
        p = op.params
        zones = p["zones"]
        spec = self._spec(op.cluster)
        # A KRaft cluster's first VMs host its controllers, the initial voters.
        controllers = spec.kraft_controllers if spec.kafka_mode is KafkaMode.KRAFT else 0
        requests = [
            VmRequest(
                cluster=op.cluster,
                zone=zones[i % len(zones)],
                instance_type=p["instance_type"],
                kafka_version=p["kafka_version"],
                # The first brokers' ids are 0..n-1 (agents claim the lowest free): a provider
                # with per-broker resources (aws: ENI, EBS) makes them now, tagged with the id.
                reuse_broker_id=i,
                controller=i < controllers,
            )
            for i in range(p["broker_count"])
        ]
        known = {vm.vm_id for vm in self.provider.list_vms(op.cluster)}
        if isinstance(self.provider, BootstrapsClusters):
            infos = self.provider.bootstrap_cluster(requests)
        else:
            infos = self.provider.list_vms(op.cluster)
            for request in requests[len(infos) :]:
                infos.append(self.provider.create_vm(request))
        for info in infos:
            self._record(info, "joining" if info.vm_id not in known else "running")
        return done(f"{len(infos)} VMs started: {', '.join(i.vm_id for i in infos)}")

    @step(StepName.WRITE_SPEC, {K.CREATE_CLUSTER})
    def write_initial_spec(self, op: OperationRow, _batch: int) -> Outcome:
        stored = self._spec(op.cluster)

        def initial(current: ClusterSpec | None) -> ClusterSpec:
            # The provider may have set the VMs up with a monitoring pipeline and named it
            # in the spec it wrote (the local provider's `kaas up`): the agents send there.
            if stored.monitoring is None and current is not None and current.monitoring:
                return replace(stored, monitoring=current.monitoring)
            return stored

        written = self._io(op.cluster).write_spec(initial)
        self.db.update_cluster(op.cluster, spec=json.dumps(written.to_json(), sort_keys=True))
        return done(
            f"spec generation {written.generation} written", spec_generation=written.generation
        )

    @step(StepName.WRITE_SPEC, CHANGING_SPEC)
    def write_spec(self, op: OperationRow, _batch: int) -> Outcome:
        changes: dict[str, Any] = dict(op.params.get("spec_changes", {}))
        if "zones" in changes:
            changes["zones"] = tuple(changes["zones"])
        if "logs" in changes:
            changes["logs"] = parse_log_limits(changes["logs"])
        written = self._write_spec(op.cluster, **changes)
        return done(
            f"spec generation {written.generation} written", spec_generation=written.generation
        )

    def _joined(self, cluster: str, vm_ids: list[str]) -> Outcome | None:
        """Done when every VM's agent reports its broker HEALTHY, registered and at the spec
        generation in ZooKeeper; the agent's sentence only explains a wait."""
        io = self._io(cluster)
        readings = io.members()
        registered = io.registered_brokers()
        spec = io.read_spec()
        generation = spec.generation if spec is not None else 0
        by_address = {m.address: m for m in readings.records.values()}
        waiting = []
        for vm_id in vm_ids:
            vm = self.db.vm(vm_id)
            if vm is None:
                return Outcome(FAIL, f"VM {vm_id} vanished from the database")
            member = by_address.get(vm["address"])
            if member is None:
                # An unreadable record may be this VM's: say so, the address is in it.
                unreadable = "; ".join(
                    f"broker {b}: {r}" for b, r in sorted(readings.unreadable.items())
                )
                waiting.append(
                    f"{vm_id}: agent not joined yet"
                    + (f" (unreadable member records: {unreadable})" if unreadable else "")
                )
                continue
            broker_id = member.broker_id
            if broker_id not in registered or not member.has_joined(generation):
                waiting.append(
                    f"{vm_id} (broker {broker_id}, {member.state.value}, spec generation "
                    f"{member.spec_generation}/{generation}): {member.sentence}"
                )
                continue
            if vm["state"] == "joining" or vm["broker_id"] != broker_id:
                self.db.update_vm(vm_id, broker_id=broker_id, state="running")
        if waiting:
            return wait("waiting for " + "; ".join(waiting))
        return None

    @step(StepName.WAIT_JOINED, {K.CREATE_CLUSTER}, Patience.JOINED)
    def wait_all_joined(self, op: OperationRow, _batch: int) -> Outcome:
        vm_ids = [vm["vm_id"] for vm in self.db.cluster_vms(op.cluster)]
        pending = self._joined(op.cluster, vm_ids)
        if pending is not None:
            return pending
        self.db.update_cluster(op.cluster, status="running")
        return self._all_joined(vm_ids)

    @step(StepName.WAIT_JOINED, JOINING, Patience.JOINED)
    def wait_joined(self, op: OperationRow, batch: int) -> Outcome:
        vm_ids = op.context.get("new_vms", {}).get(str(batch), [])
        pending = self._joined(op.cluster, vm_ids)
        if pending is not None:
            return pending
        return self._all_joined(vm_ids)

    def _all_joined(self, vm_ids: list[str]) -> Outcome:
        brokers = [self.db.vm(v)["broker_id"] for v in vm_ids]  # type: ignore[index]
        return done(f"{', '.join(vm_ids)} joined as brokers {brokers}")

    @step(StepName.CREATE_VM, {K.SCALE_UP}, Patience.CREATE)
    def add_vms(self, op: OperationRow, batch: int) -> Outcome:
        count = int(op.params["add"])
        zones = self._zones_for_new(op.cluster, self._spec(op.cluster), count)
        return self._create_vms(op, batch, zones, [False] * count, reuse_broker_id=None)

    @step(StepName.CREATE_VM, REPLACING, Patience.CREATE)
    def create_replacements(self, op: OperationRow, batch: int) -> Outcome:
        olds = op.context["batches"][batch]
        zones = [self.db.vm(v)["zone"] for v in olds]  # type: ignore[index]
        controllers = [self._runs_controller(v) for v in olds]
        return self._create_vms(op, batch, zones, controllers, reuse_broker_id=None)

    @step(StepName.CREATE_VM, {K.REPLACE_LOST_VM}, Patience.CREATE)
    def create_lost_replacement(self, op: OperationRow, batch: int) -> Outcome:
        olds = op.context["batches"][batch]
        zones = [self.db.vm(v)["zone"] for v in olds]  # type: ignore[index]
        controllers = [self._runs_controller(v) for v in olds]
        # A lost VM's replacement keeps its broker id (and, on aws, its ENI and EBS).
        return self._create_vms(
            op, batch, zones, controllers, reuse_broker_id=op.params.get("broker_id")
        )

    def _runs_controller(self, vm_id: str) -> bool:
        """Whether the provider says `vm_id` runs a KRaft controller: its replacement takes
        the role over (False for a VM the provider no longer knows)."""
        try:
            return self.provider.describe_vm(vm_id).controller
        except ProviderError:
            return False

    def _create_vms(
        self,
        op: OperationRow,
        batch: int,
        zones: list[str],
        controllers: list[bool],
        reuse_broker_id: int | None,
    ) -> Outcome:
        """One new VM per zone in `zones`, for batch `batch`; `controllers[i]`: the i-th
        runs a KRaft controller."""
        new_vms: dict[str, list[str]] = dict(op.context.get("new_vms", {}))
        created = list(new_vms.get(str(batch), []))
        spec = self._spec(op.cluster)
        cluster = self._cluster(op.cluster)
        count = len(zones)
        # A VM the provider has but the database does not is one this step made before the
        # service stopped: adopt it rather than make another.
        known = {vm["vm_id"] for vm in self.db.cluster_vms(op.cluster, include_terminated=True)}
        for info in self.provider.list_vms(op.cluster):
            if info.vm_id not in known and len(created) < count:
                self._record(info, "joining")
                created.append(info.vm_id)
        while len(created) < count:
            request = VmRequest(
                cluster=op.cluster,
                zone=zones[len(created)],
                instance_type=op.params.get("instance_type", cluster["instance_type"]),
                kafka_version=op.params.get("kafka_version", spec.kafka_version),
                reuse_broker_id=reuse_broker_id,
                controller=controllers[len(created)],
            )
            info = self.provider.create_vm(request)
            self._record(info, "joining")
            created.append(info.vm_id)
            new_vms[str(batch)] = created
            # Persisted through the outcome's context only at the end; the adoption above
            # covers a crash between two creations.
        new_vms[str(batch)] = created
        return done(f"created {', '.join(created)}", new_vms=new_vms)

    def _zones_for_new(self, cluster: str, spec: ClusterSpec, count: int) -> list[str]:
        load = Counter({z: 0 for z in spec.zones})
        load.update(vm["zone"] for vm in self.db.cluster_vms(cluster) if vm["zone"] in load)
        zones = []
        for _ in range(count):
            zone = min(spec.zones, key=lambda z: (load[z], spec.zones.index(z)))
            zones.append(zone)
            load[zone] += 1
        return zones

    def _old_brokers(self, op: OperationRow, batch: int) -> list[int]:
        ids = []
        for vm_id in op.context["batches"][batch]:
            vm = self.db.vm(vm_id)
            if vm is None or vm["broker_id"] is None:
                raise KaasError(f"the broker id of {vm_id} is unknown")
            ids.append(int(vm["broker_id"]))
        return ids

    @step(StepName.DRAIN, REMOVING)
    def drain(self, op: OperationRow, batch: int) -> Outcome:
        brokers = self._old_brokers(op, batch)
        spec = self._io(op.cluster).read_spec()
        if spec is None:
            raise ClusterUnreachable(f"cluster {op.cluster} has no spec in ZooKeeper")
        if not set(brokers) <= spec.draining_broker_ids:
            self._write_spec(
                op.cluster, draining_broker_ids=spec.draining_broker_ids | frozenset(brokers)
            )
        for vm_id in op.context["batches"][batch]:
            self.db.update_vm(vm_id, state="draining")
        return done(f"brokers {brokers} marked draining: the planner moves their data away")

    @step(StepName.WAIT_DRAINED, REMOVING, Patience.DRAINED)
    def wait_drained(self, op: OperationRow, batch: int) -> Outcome:
        brokers = set(self._old_brokers(op, batch))
        partitions = self._io(op.cluster).partitions()
        holding = sum(1 for p in partitions for r in p.replicas if r in brokers)
        short = sum(1 for p in partitions if set(p.isr) != set(p.replicas))
        if holding or short:
            return wait(
                f"brokers {sorted(brokers)} still hold {holding} replicas; "
                f"{short} partitions below a full ISR"
            )
        return done(f"brokers {sorted(brokers)} hold no replica and every ISR is complete")

    @step(StepName.RECYCLE, REMOVING)
    def recycle(self, op: OperationRow, batch: int) -> Outcome:
        olds = op.context["batches"][batch]
        brokers = self._old_brokers(op, batch)
        # The last check before any data could go: nothing may live on these brokers.
        partitions = self._io(op.cluster, exclude=tuple(olds)).partitions()
        holding = [f"{p.topic}-{p.partition}" for p in partitions if set(p.replicas) & set(brokers)]
        if holding:
            return Outcome(
                FAIL, f"refusing to recycle {olds}: brokers {brokers} hold {holding[:5]}"
            )
        for vm_id in olds:
            self.provider.recycle_vm(vm_id)
            self.db.update_vm(vm_id, state="terminated")
        io = self._io(op.cluster)
        for broker_id in brokers:
            io.release_broker_claim(broker_id)
            self.provider.release_broker_resources(op.cluster, broker_id)
        return done(f"recycled {', '.join(olds)}")

    @step(StepName.ENSEMBLE, REMOVING | {K.REPLACE_LOST_VM})
    def ensemble(self, op: OperationRow, batch: int) -> Outcome:
        if client_identity(self.provider, op.cluster) is None:
            return done("the provider's agents keep the ZooKeeper ensemble")
        # The agents decide every membership change; this step only tells them which VMs are
        # recycled for good (so they need not wait out their gone threshold) and waits until
        # the ensemble shows the repair done. A replacement that kept the old address (aws:
        # the ENI moved) keeps its server, so a live address is never named recycled.
        live = frozenset(vm["address"] for vm in self.db.cluster_vms(op.cluster))
        recycled = (
            frozenset(
                vm["address"]
                for vm_id in op.context["batches"][batch]
                if (vm := self.db.vm(vm_id)) is not None
            )
            - live
        )
        spec = self._spec(op.cluster)
        io = self._io(op.cluster)
        try:
            config = io.ensemble_config()
        except EnsembleConfigError as exc:
            return wait(f"ZooKeeper ensemble config unreadable: {exc}")
        outstanding = repair_outstanding(config, recycled, live, spec.zookeeper_participants)
        if outstanding:
            if config.at_addresses(recycled):
                io.request_ensemble_repair(EnsembleRepairRequest(recycled, f"operation {op.op_id}"))
            return wait(
                f"the agents are repairing the ZooKeeper ensemble: {'; '.join(outstanding)}"
            )
        io.withdraw_ensemble_repair()
        return done(
            f"ZooKeeper ensemble repaired by the agents: participants {sorted(config.participants)}"
            f", observers {sorted(config.observers)}"
        )

    @step(StepName.RECYCLE_LOST, {K.REPLACE_LOST_VM})
    def recycle_lost(self, op: OperationRow, batch: int) -> Outcome:
        """Recycle the lost VM for good (so it can never come back beside its replacement),
        and free its broker id's claim for the new VM's agent."""
        (vm_id,) = op.context["batches"][batch]
        broker_id = int(op.params["broker_id"])
        vm = self.db.vm(vm_id)
        if vm is None:
            return Outcome(FAIL, f"lost VM {vm_id} is not in the database")
        if vm["state"] != "terminated":
            # The decision may be old (the service was down in between): look once more.
            io = self._io(op.cluster, exclude=(vm_id,))
            if broker_id in io.members().alive and broker_id in io.registered_brokers():
                return Outcome(
                    FAIL,
                    f"{vm_id} came back (agent and broker {broker_id} present): not replaced",
                )
            self.provider.recycle_vm(vm_id)
            self.db.update_vm(vm_id, state="terminated")
        self._io(op.cluster, exclude=(vm_id,)).release_broker_claim(broker_id)
        return done(f"recycled lost VM {vm_id}; broker id {broker_id} is free for its replacement")

    @step(StepName.WAIT_REPLICATED, {K.REPLACE_LOST_VM}, Patience.DRAINED)
    def wait_replicated(self, op: OperationRow, batch: int) -> Outcome:
        """The new VM must hold the lost broker id, and every partition naming that id must
        have it back in its ISR (Kafka re-replicates onto the same id by itself)."""
        broker_id = int(op.params["broker_id"])
        new_vms = op.context.get("new_vms", {}).get(str(batch), [])
        held = [self.db.vm(v)["broker_id"] for v in new_vms]  # type: ignore[index]
        if held != [broker_id]:
            return Outcome(
                FAIL,
                f"the replacement {new_vms} holds broker ids {held}, not the lost id {broker_id}: "
                "its replicas cannot come back on it",
            )
        partitions = self._io(op.cluster).partitions()
        naming = [p for p in partitions if broker_id in p.replicas]
        behind = [f"{p.topic}-{p.partition}" for p in naming if broker_id not in p.isr]
        if behind:
            return wait(
                f"broker {broker_id} back in {len(naming) - len(behind)}/{len(naming)} ISRs; "
                f"waiting for {', '.join(behind[:5])}{' ...' if len(behind) > 5 else ''}"
            )
        return done(
            f"broker {broker_id} on {new_vms[0]} is in the ISR of all {len(naming)} partitions "
            "naming it: replication restored"
        )

    @step(StepName.UNDRAIN, REMOVING)
    def undrain(self, op: OperationRow, batch: int) -> Outcome:
        brokers = frozenset(self._old_brokers(op, batch))
        spec = self._io(op.cluster).read_spec()
        if spec is not None and spec.draining_broker_ids & brokers:
            self._write_spec(op.cluster, draining_broker_ids=spec.draining_broker_ids - brokers)
        return done(f"brokers {sorted(brokers)} no longer draining")

    @step(StepName.PIN_PROTOCOL, {K.UPGRADE})
    def pin_protocol(self, op: OperationRow, _batch: int) -> Outcome:
        spec = self._io(op.cluster).read_spec() or self._spec(op.cluster)
        if _upgrades_to_kraft(op):
            # KRaft brokers have no protocol to pin: the finalised metadata.version keeps
            # mixed releases compatible until every broker runs the new one (unpin_protocol).
            return done(
                f"KRaft: metadata.version stays until every broker runs "
                f"{op.params['kafka_version']}",
                pinned_protocol=False,
            )
        if PROTOCOL_KEY in spec.broker_config:
            return done(
                f"{PROTOCOL_KEY} is set by the cluster's config "
                f"({spec.broker_config[PROTOCOL_KEY]}); left as it is",
                pinned_protocol=False,
            )
        pinned = protocol_version(spec.kafka_version)
        written = self._write_spec(
            op.cluster, broker_config={**spec.broker_config, PROTOCOL_KEY: pinned}
        )
        return done(
            f"{PROTOCOL_KEY} pinned to {pinned} while versions mix",
            pinned_protocol=True,
            spec_generation=written.generation,
        )

    @step(StepName.UNPIN_PROTOCOL, {K.UPGRADE})
    def unpin_protocol(self, op: OperationRow, _batch: int) -> Outcome:
        if _upgrades_to_kraft(op):
            return raise_metadata_version(
                self._io(op.cluster), self.db.cluster_vms(op.cluster), op.params["kafka_version"]
            )
        spec = self._io(op.cluster).read_spec() or self._spec(op.cluster)
        if not op.context.get("pinned_protocol") or PROTOCOL_KEY not in spec.broker_config:
            return done(f"{PROTOCOL_KEY} left as the cluster's config sets it")
        config = {k: v for k, v in spec.broker_config.items() if k != PROTOCOL_KEY}
        written = self._write_spec(op.cluster, broker_config=config)
        return done(
            f"{PROTOCOL_KEY} unpinned: every broker runs {spec.kafka_version}",
            spec_generation=written.generation,
        )

    # A migration's phases wait for more (management_plane/migration/steps.py).
    @step(StepName.WAIT_APPLIED, {K.UPGRADE, K.CHANGE_CONFIG, K.SECURE_CLUSTER}, Patience.APPLIED)
    def wait_applied(self, op: OperationRow, _batch: int) -> Outcome:
        generation = int(op.context.get("spec_generation", 0))
        readings = self._io(op.cluster).members()
        members = readings.records
        behind = [
            f"broker {b}: {m.sentence}"
            for b, m in sorted(members.items())
            if m.spec_generation < generation or m.pending_restart
        ] + [f"broker {b}: record unreadable ({r})" for b, r in sorted(readings.unreadable.items())]
        expected = len(self.db.cluster_vms(op.cluster))
        if behind or len(members) < expected:
            return wait(f"{len(members)}/{expected} agents; waiting for " + "; ".join(behind))
        return done(f"every agent applied spec generation {generation}")

    @step(StepName.RECYCLE_ALL, {K.DELETE_CLUSTER}, Patience.CREATE)
    def recycle_all(self, op: OperationRow, _batch: int) -> Outcome:
        vms = self.db.cluster_vms(op.cluster)
        if isinstance(self.provider, DeletesClusters):
            self.provider.delete_cluster(op.cluster)
        else:
            for info in self.provider.list_vms(op.cluster):
                self.provider.recycle_vm(info.vm_id)
            for vm in vms:
                if vm["broker_id"] is not None:
                    self.provider.release_broker_resources(op.cluster, int(vm["broker_id"]))
        for vm in vms:
            self.db.update_vm(vm["vm_id"], state="terminated")
        return done(f"recycled {len(vms)} VMs")

    @step(StepName.FINISH, CLUSTER_KINDS - {K.DELETE_CLUSTER})
    def finish(self, op: OperationRow, _batch: int) -> Outcome:
        spec = self._io(op.cluster).read_spec()
        if spec is not None:
            self.db.update_cluster(op.cluster, spec=json.dumps(spec.to_json(), sort_keys=True))
        if "instance_type" in op.params:
            self.db.update_cluster(op.cluster, instance_type=op.params["instance_type"])
        self.db.update_cluster(op.cluster, status="running")
        return done(f"{op.kind} of {op.cluster} finished")

    @step(StepName.FINISH, {K.DELETE_CLUSTER})
    def finish_delete(self, op: OperationRow, _batch: int) -> Outcome:
        self.db.update_cluster(op.cluster, status="deleted")
        return done(f"{op.kind} of {op.cluster} finished")


# The drills, the migration to KRaft, the conversion to TLS and the certificate rotation
# register their steps in the same registry from modules of their own; imported here, once
# every name they use exists, so the registry is whole wherever the controller is.
import management_plane.drills.operation  # noqa: E402, F401
from management_plane.migration import steps as _migration_steps  # noqa: E402, F401
from management_plane.mirror import operation as _mirror_steps  # noqa: E402, F401
from management_plane.security import conversion as _conversion  # noqa: E402, F401
from management_plane.security import rotation as _rotation  # noqa: E402, F401
