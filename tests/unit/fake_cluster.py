"""Fakes of the controller's two ports, for unit tests of every operation step: a provider
that keeps its VMs in a dict, and one cluster's ZooKeeper and Kafka as the controller reads
and writes them. Each fake holds plain state a test sets and checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from management_plane.providers.base import ProviderError, VmInfo, VmRequest
from management_plane.service.cluster_io import ClusterUnreachable, PartitionState
from management_plane.service.metadata_version import MetadataVersionLevels
from planner.contracts.ensemble_repair import EnsembleRepairRequest
from planner.contracts.member import MemberReadings, MemberRecord, MemberRole, MemberState
from planner.contracts.mirror_flow import MirrorFlow, MirrorFlowReadings, parse_mirror_flows
from planner.contracts.mirror_lag import MirrorFlowLag, parse_mirror_lag
from planner.contracts.spec import ClusterSpec, parse_spec
from planner.pki.authority import Role
from planner.pki.files import IdentityFiles
from planner.zookeeper_ensemble import EnsembleConfig, parse_ensemble_config


class FakeProvider:
    """A provider with only the interface every provider has."""

    name = "fake"
    zones: tuple[str, ...] = ("zone-a", "zone-b", "zone-c")
    instance_types: tuple[str, ...] = ("small", "large")

    def __init__(self) -> None:
        self.vms: dict[str, VmInfo] = {}
        self.recycled: list[str] = []
        self.released: list[tuple[str, int]] = []
        self.requests: list[VmRequest] = []
        self.refuse_create: str | None = None  # a ProviderError message for create_vm
        self._made = 0

    def kafka_versions(self) -> tuple[str, ...]:
        return ("3.8.1", "3.9.2")

    def create_vm(self, request: VmRequest) -> VmInfo:
        if self.refuse_create is not None:
            raise ProviderError(self.refuse_create)
        self.requests.append(request)
        self._made += 1
        info = VmInfo(
            vm_id=f"{request.cluster}/vm{self._made}",
            cluster=request.cluster,
            zone=request.zone,
            address=f"10.0.0.{self._made}",
            state="running",
            instance_type=request.instance_type,
            kafka_version=request.kafka_version,
            broker_id=request.reuse_broker_id,
            controller=request.controller,
        )
        self.vms[info.vm_id] = info
        return info

    def describe_vm(self, vm_id: str) -> VmInfo:
        if vm_id not in self.vms:
            raise ProviderError(f"VM {vm_id} is unknown")
        return self.vms[vm_id]

    def list_vms(self, cluster: str) -> list[VmInfo]:
        return [vm for vm in self.vms.values() if vm.cluster == cluster]

    def recycle_vm(self, vm_id: str) -> None:
        self.vms.pop(vm_id, None)
        self.recycled.append(vm_id)

    def release_broker_resources(self, cluster: str, broker_id: int) -> None:
        self.released.append((cluster, broker_id))


class BootstrappingProvider(FakeProvider):
    """Starts a new cluster's VMs together (as the local provider does)."""

    def __init__(self) -> None:
        super().__init__()
        self.bootstraps = 0

    def bootstrap_cluster(self, requests: list[VmRequest]) -> list[VmInfo]:
        self.bootstraps += 1
        have = self.list_vms(requests[0].cluster)
        for request in requests[len(have) :]:
            have.append(self.create_vm(request))
        return have


class ZookeeperKeepingProvider(FakeProvider):
    """Holds a client certificate of the cluster, so the service repairs the ensemble."""

    def client_identity(self, cluster: str) -> IdentityFiles | None:
        return IdentityFiles(Path(f"/clusters/{cluster}/client"), Role.ADMIN)


class ClusterDeletingProvider(FakeProvider):
    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[str] = []

    def delete_cluster(self, cluster: str) -> None:
        self.deleted.append(cluster)
        for vm_id in [v.vm_id for v in self.list_vms(cluster)]:
            self.vms.pop(vm_id)


@dataclass
class FakeCluster:
    """One cluster's ZooKeeper and Kafka: the spec znode, the agents' member znodes, Kafka's
    broker registrations and partitions, the id claims, the ZooKeeper ensemble's config and the repair requests."""

    spec: ClusterSpec | None = None
    member_znodes: dict[int, MemberRecord] = field(default_factory=dict)
    registered: set[int] = field(default_factory=set)
    partition_states: list[PartitionState] = field(default_factory=list)
    released_claims: list[int] = field(default_factory=list)
    reachable: bool = True
    ensemble_text: str = "version=100000000\n"
    """/zookeeper/config as the agents left it; tests edit it the way agents would."""
    repair_requests: list[EnsembleRepairRequest] = field(default_factory=list)
    repair_withdrawn: int = 0
    addresses_seen: list[list[str]] = field(default_factory=list)
    identities_seen: list[IdentityFiles | None] = field(default_factory=list)
    flows: dict[str, MirrorFlow] = field(default_factory=dict)
    """/kaas/<cluster>/mirror/flows by name."""
    metadata_levels: MetadataVersionLevels = field(
        default_factory=lambda: MetadataVersionLevels(21, 21)
    )
    """KRaft's finalised metadata.version and the brokers' highest."""
    metadata_raises: list[int] = field(default_factory=list)
    mirror_lags: dict[str, bytes] = field(default_factory=dict)
    """/kaas/<cluster>/mirror/lag by flow name, as the reporting agent wrote it."""

    def connect(
        self, cluster: str, addresses: list[str], identity: IdentityFiles | None
    ) -> FakeCluster:
        """The controller's port factory."""
        self.identities_seen.append(identity)
        if not addresses:
            raise ClusterUnreachable(f"cluster {cluster} has no running VM to reach")
        if not self.reachable:
            raise ClusterUnreachable(f"ZooKeeper of {cluster}: connection refused")
        self.addresses_seen.append(list(addresses))
        return self

    # -- what a test does to the cluster --------------------------------------------------

    def agent_joins(self, address: str, broker_id: int, healthy: bool = True) -> None:
        """The VM's agent claims `broker_id`, starts its broker and reports healthy (its
        sentence never says the word: the controller reads the state)."""
        generation = self.spec.generation if self.spec else 0
        self.member_znodes[broker_id] = MemberRecord(
            broker_id=broker_id,
            vm_id=f"vm-of-{address}",
            address=address,
            jolokia_url=f"http://{address}:8778/jolokia/",
            agent_version="0.1.0",
            state=MemberState.HEALTHY if healthy else MemberState.STARTING,
            sentence="broker serving" if healthy else "starting the broker",
            registered=healthy,
            spec_generation=generation,
            pending_restart=False,
            role=MemberRole.MEMBER,
            updated_at_ms=0,
        )
        if healthy:
            self.registered.add(broker_id)

    def agent_applies(self, broker_id: int, generation: int, pending_restart: bool) -> None:
        self.member_znodes[broker_id] = replace(
            self.member_znodes[broker_id],
            spec_generation=generation,
            pending_restart=pending_restart,
        )

    def place(self, replicas_by_partition: dict[str, tuple[int, ...]]) -> None:
        """Partitions `topic-N` with these replicas, every one in sync."""
        self.partition_states = [
            PartitionState(name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1]), r, r)
            for name, r in replicas_by_partition.items()
        ]

    # -- the ClusterPort ------------------------------------------------------------------

    def read_spec(self) -> ClusterSpec | None:
        return self.spec

    def write_spec(self, change: Callable[[ClusterSpec | None], ClusterSpec]) -> ClusterSpec:
        desired = change(self.spec)
        generation = (self.spec.generation + 1) if self.spec else max(1, desired.generation)
        written = replace(desired, generation=generation)
        parse_spec(written.encode())  # what the real writer refuses, this one refuses too
        self.spec = written
        return written

    def members(self) -> MemberReadings:
        return MemberReadings(records=dict(self.member_znodes))

    def registered_brokers(self) -> set[int]:
        return set(self.registered)

    def release_broker_claim(self, broker_id: int) -> None:
        self.released_claims.append(broker_id)

    def ensemble_config(self) -> EnsembleConfig:
        return parse_ensemble_config(self.ensemble_text)

    def request_ensemble_repair(self, request: EnsembleRepairRequest) -> None:
        self.repair_requests.append(request)

    def withdraw_ensemble_repair(self) -> None:
        self.repair_withdrawn += 1

    def metadata_version(self) -> MetadataVersionLevels:
        if not self.reachable:
            raise ClusterUnreachable("Kafka: connection refused")
        return self.metadata_levels

    def raise_metadata_version(self, level: int) -> None:
        self.metadata_raises.append(level)
        self.metadata_levels = replace(self.metadata_levels, finalized=level)

    def partitions(self) -> list[PartitionState]:
        return list(self.partition_states)

    def mirror_flows(self) -> MirrorFlowReadings:
        # Through the encoded value, as the real reader sees it.
        return parse_mirror_flows({n: f.encode() for n, f in self.flows.items()})

    def mirror_lag(self, name: str) -> MirrorFlowLag | None:
        raw = self.mirror_lags.get(name)
        return None if raw is None else parse_mirror_lag(raw)

    def put_mirror_flow(self, flow: MirrorFlow) -> None:
        self.flows[flow.name] = flow

    def remove_mirror_flow(self, name: str) -> None:
        self.flows.pop(name, None)
        self.mirror_lags.pop(name, None)
