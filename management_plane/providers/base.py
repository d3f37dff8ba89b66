"""The one interface every VM provider implements (local processes, AWS EC2).

The management plane's controller decides which VMs a cluster needs; a provider only
creates, describes and recycles them. A VM is immutable: it is never changed in place,
only replaced, so every change is a tested image on a fresh VM. The broker id is not the
provider's to choose: the VM's agent claims it in ZooKeeper. Where a provider keeps
per-broker resources (AWS: an ENI and an EBS volume tagged with the broker id),
`reuse_broker_id` asks for the resources of that id to be attached to the new VM, so a
replacement keeps the broker's address and data.

What only some providers can do (start a cluster's first VMs together, hold the ZooKeeper
super user's password, delete a whole cluster at once) are capability protocols below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from management_plane.errors import TemporaryError
from planner.pki.authority import Authority
from planner.pki.files import IdentityFiles

VM_STATES = ("pending", "running", "stopped", "terminated")


class ProviderError(TemporaryError, RuntimeError):
    """A provider call that failed; the message names the VM or resource and the cause."""


@dataclass(frozen=True)
class VmRequest:
    cluster: str
    zone: str
    instance_type: str
    kafka_version: str
    reuse_broker_id: int | None = None
    """Attach this broker id's network address and data volume (None: fresh ones)."""
    tags: dict[str, str] = field(default_factory=dict)
    controller: bool = False
    """KRaft only: the VM runs a controller beside its broker (a new cluster's first VMs, the
    replacement of a VM that ran one). A new cluster's are its initial voters; a later one
    joins as an observer, and the agents make it a voter once it has caught up."""


@dataclass(frozen=True)
class VmInfo:
    vm_id: str
    """The provider's id (local: the VM name, e.g. vm4; aws: the instance id)."""
    cluster: str
    zone: str
    address: str
    state: str
    """One of VM_STATES."""
    instance_type: str
    kafka_version: str
    broker_id: int | None = None
    """The broker id the provider's resources are tagged with, when it knows one."""
    controller: bool = False
    """The VM runs a KRaft controller."""


class Provider(Protocol):
    name: str

    def create_vm(self, request: VmRequest) -> VmInfo:
        """Start a new VM for the cluster; returns once the provider accepted it."""
        ...

    def describe_vm(self, vm_id: str) -> VmInfo:
        """The VM as the provider sees it now; ProviderError if it is unknown."""
        ...

    def list_vms(self, cluster: str) -> list[VmInfo]:
        """Every VM of the cluster that is not terminated."""
        ...

    def recycle_vm(self, vm_id: str) -> None:
        """Stop and delete the VM. Per-broker resources (ENI, volume) are kept for reuse;
        recycling a VM that is already gone is not an error."""
        ...

    def release_broker_resources(self, cluster: str, broker_id: int) -> None:
        """Delete the per-broker resources of a broker id that will not come back
        (scale-down, cluster deletion). A provider without such resources does nothing."""
        ...


# -- what some providers can do besides ------------------------------------------------
# The controller asks `isinstance(provider, Capability)` and takes the general path when a
# provider lacks one; a provider gains a capability by defining the method.


@runtime_checkable
class BootstrapsClusters(Protocol):
    def bootstrap_cluster(self, requests: list[VmRequest]) -> list[VmInfo]:
        """Start a new cluster's first VMs together (their ZooKeeper servers form one
        ensemble from the start); a cluster already up is returned as it is."""
        ...


@runtime_checkable
class HoldsClusterIdentity(Protocol):
    def client_identity(self, cluster: str) -> IdentityFiles | None:
        """The admin identity (key, certificate, the cluster CA) KaaS's clients present to the
        cluster's ZooKeeper and its internal Kafka listener, issued by the cluster's CA; None
        when the provider has none for it. Without one the service cannot reach the cluster's
        ZooKeeper and leaves the ensemble to its agents."""
        ...


@runtime_checkable
class DeletesClusters(Protocol):
    def delete_cluster(self, cluster: str) -> None:
        """Remove every VM and resource of the cluster at once."""
        ...


@runtime_checkable
class AdoptsClusters(Protocol):
    adopted: dict[str, Path]
    """Clusters started outside the service (`kaas up`), by name: the service runs
    operations on them but never deletes them."""


@runtime_checkable
class DeliversMirrorSources(Protocol):
    def cluster_authority(self, cluster: str) -> Authority:
        """The cluster's CA, which signs a flow's `kaas-mirror` certificate of it."""
        ...

    def deliver_mirror_source(
        self, target: str, flow: str, client_pem: bytes, ca_pem: bytes
    ) -> None:
        """Put the identity a flow's MirrorMaker presents to its source (key and certificate,
        PEM) and the source's CA on every VM of the target cluster (planner.contracts.
        mirror_flow's `source_credentials_dir`), readable by the VM's agent only, and on
        every VM the provider adds to the target later (until withdrawn)."""
        ...

    def withdraw_mirror_source(self, target: str, flow: str) -> None:
        """Remove those files from every VM of the target, and stop giving them to new VMs
        (gone already: nothing to do)."""
        ...


@runtime_checkable
class RunsDrills(Protocol):
    def drill_home(self, cluster: str) -> Path:
        """The folder `kaas drill run --home` takes for this cluster: where its processes
        and network faults are reached from this host."""
        ...


class ServiceProvider(Provider, Protocol):
    """A provider as the service offers it to callers: its choices and versions."""

    zones: tuple[str, ...]
    instance_types: tuple[str, ...]

    def kafka_versions(self) -> tuple[str, ...]: ...


def client_identity(provider: object, cluster: str) -> IdentityFiles | None:
    """The identity the service presents to the cluster, if its provider holds one."""
    if isinstance(provider, HoldsClusterIdentity):
        return provider.client_identity(cluster)
    return None
