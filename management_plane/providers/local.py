"""The local provider: VMs are folders and processes on loopback addresses (management_plane/
local), one local cluster per KaaS cluster under `<home>/<cluster>/`, each on its own /24
address base taken from a pool.

A VM id is `<cluster>/vmN`. The first VMs of a cluster start together (`bootstrap_cluster`:
a ZooKeeper ensemble has to start as one); every later VM is added to the running cluster.
There are no per-broker resources to keep: a recycled VM's data goes with it, and the
replacement VM's agent claims a broker id of its own, or, with `reuse_broker_id`, that id
(its agent is told to prefer it; the VM starts with an empty data volume and Kafka
re-replicates onto it).
"""

from __future__ import annotations

from pathlib import Path

import structlog

from management_plane.errors import KaasError
from management_plane.local.cluster import LocalCluster
from management_plane.local.image import LocalImage, load_image
from management_plane.local.layout import ZONES, VmLayout, address_base_of
from management_plane.local.mirror_sources import MirrorSourceStore
from management_plane.local.processes import is_alive
from management_plane.local.render import vm_identity
from management_plane.local.state import ClusterState, read_state, require_state
from management_plane.local.tls import admin_identity_in
from management_plane.providers.base import ProviderError, VmInfo, VmRequest
from management_plane.providers.home_authority import HomeAuthorities
from planner.contracts.kafka_release import KAFKA_RELEASES
from planner.contracts.kafka_state import volume_broker_id
from planner.pki.files import IdentityFiles

log = structlog.get_logger("kaas.provider.local")

INSTANCE_TYPES = ("local",)


class LocalProvider(HomeAuthorities):
    name = "local"
    zones = ZONES
    instance_types = INSTANCE_TYPES

    def __init__(
        self, home: Path, address_bases: tuple[str, ...], image: LocalImage | None = None
    ) -> None:
        if not address_bases:
            raise KaasError("the local provider needs at least one address base (e.g. 127.0.2)")
        self.home = home.resolve()
        self.address_bases = address_bases
        self._image = image
        self.adopted: dict[str, Path] = {}
        """Clusters started by `kaas up` elsewhere that the service manages too: name -> folder."""

    def adopt(self, cluster: str, home: Path) -> None:
        self.adopted[cluster] = home.resolve()

    def image(self) -> LocalImage:
        if self._image is None:
            self._image = load_image()
        return self._image

    def kafka_versions(self) -> tuple[str, ...]:
        # Both modes: ZooKeeper-mode releases (3.x) and KRaft ones (4.x).
        return tuple(
            sorted(
                (v for v in self.image().kafka_libs_by_version if v in KAFKA_RELEASES),
                key=lambda v: tuple(int(part) for part in v.split(".")),
            )
        )

    def cluster_home(self, cluster: str) -> Path:
        return self.adopted.get(cluster, self.home / cluster)

    def drill_home(self, cluster: str) -> Path:
        return self.cluster_home(cluster)

    def _local(self, cluster: str) -> LocalCluster:
        return LocalCluster(self.cluster_home(cluster), self.image())

    def _free_address_base(self) -> str:
        used = set()
        folders = [*self.adopted.values()]
        if self.home.is_dir():
            folders += [folder for folder in self.home.iterdir() if folder.is_dir()]
        for folder in folders:
            state = read_state(folder)
            if state is not None and state.layout.vms:
                used.add(address_base_of(state.layout))
        for base in self.address_bases:
            if base not in used:
                return base
        raise ProviderError(
            f"every local address base is taken ({', '.join(self.address_bases)}): delete a "
            "cluster or start the service with more --local-address-base values"
        )

    def _info(
        self,
        cluster: str,
        state: ClusterState,
        vm: VmLayout,
        running: bool,
        kafka_version: str | None = None,
    ) -> VmInfo:
        """`kafka_version`: the release a VM was made with (an upgrade's new VMs run the
        spec's new one while the cluster's file still names the old)."""
        return VmInfo(
            vm_id=f"{cluster}/{vm.name}",
            cluster=cluster,
            zone=vm.zone,
            address=vm.address,
            state="running" if running else "stopped",
            instance_type=INSTANCE_TYPES[0],
            kafka_version=kafka_version or state.kafka_version,
            broker_id=volume_broker_id(vm.kafka_data_dir),
            controller="controller" in state.vm_kinds(vm.name),
        )

    @staticmethod
    def _split(vm_id: str) -> tuple[str, str]:
        cluster, _, name = vm_id.partition("/")
        if not cluster or not name:
            raise ProviderError(f"{vm_id!r} is not a local VM id (<cluster>/vmN)")
        return cluster, name

    # -- the Provider interface -----------------------------------------------------------

    def bootstrap_cluster(self, requests: list[VmRequest]) -> list[VmInfo]:
        """Start a new cluster's first VMs together (their ZooKeeper servers form the
        ensemble); idempotent: a cluster already up is returned as it is."""
        if not requests:
            raise ProviderError("a cluster needs at least one VM")
        cluster = requests[0].cluster
        state = read_state(self.cluster_home(cluster))
        base = (
            address_base_of(state.layout)
            if state is not None and state.layout.vms
            else self._free_address_base()
        )
        zones = tuple(r.zone for r in requests)
        controllers = sum(r.controller for r in requests)
        try:
            result = self._local(cluster).up(
                len(requests),
                name=cluster,
                address_base=base,
                kafka_version=requests[0].kafka_version,
                agents=True,
                zones=zones,
                controllers=controllers or None,
            )
        except KaasError as exc:
            raise ProviderError(f"cannot start cluster {cluster}: {exc}") from None
        return [self._info(cluster, result.state, vm, True) for vm in result.state.layout.vms]

    def create_vm(self, request: VmRequest) -> VmInfo:
        if request.instance_type not in INSTANCE_TYPES:
            raise ProviderError(f"instance type {request.instance_type!r} is not local")
        local = self._local(request.cluster)
        if read_state(local.home) is None:
            return self.bootstrap_cluster([request])[0]
        try:
            vm = local.add_vm(request.zone, request.reuse_broker_id, request.controller)
        except KaasError as exc:
            raise ProviderError(f"cannot add a VM to {request.cluster}: {exc}") from None
        return self._info(
            request.cluster, require_state(local.home), vm, True, request.kafka_version
        )

    def describe_vm(self, vm_id: str) -> VmInfo:
        cluster, name = self._split(vm_id)
        state = read_state(self.cluster_home(cluster))
        if state is None:
            raise ProviderError(f"VM {vm_id} is unknown: no local cluster {cluster}")
        try:
            vm = state.layout.vm(name)
        except KaasError:
            raise ProviderError(f"VM {vm_id} is unknown (recycled or never made)") from None
        running = is_alive(state.record(vm.name, "zookeeper")) or is_alive(
            state.record(vm.name, "agent")
        )
        return self._info(cluster, state, vm, running)

    def list_vms(self, cluster: str) -> list[VmInfo]:
        state = read_state(self.cluster_home(cluster))
        if state is None:
            return []
        return [self.describe_vm(f"{cluster}/{vm.name}") for vm in state.layout.vms]

    def recycle_vm(self, vm_id: str) -> None:
        cluster, name = self._split(vm_id)
        local = self._local(cluster)
        state = read_state(local.home)
        if state is None:
            return
        if len(state.layout.vms) == 1 and state.layout.vms[0].name == name:
            if cluster in self.adopted:
                raise ProviderError(f"{vm_id} is the last VM of a `kaas up` cluster: use kaas down")
            local.down(
                purge=True, stop_service=False
            )  # the last VM: the cluster's folder goes with it
            return
        try:
            local.remove_vm(name)
        except KaasError as exc:
            raise ProviderError(f"cannot recycle {vm_id}: {exc}") from None
        log.info("vm_recycled", vm=vm_id)

    def release_broker_resources(self, cluster: str, broker_id: int) -> None:
        """Local VMs keep no per-broker resources."""

    def client_identity(self, cluster: str) -> IdentityFiles | None:
        """The admin identity `kaas up` and the VM commands issue into the cluster's folder."""
        identity = admin_identity_in(self.cluster_home(cluster))
        return identity if identity.exists() else None

    def node_identity(self, cluster: str) -> IdentityFiles | None:
        """A VM's identity (the brokers' own, ZooKeeper's super user), for what must run as
        the creator of Kafka's znodes."""
        state = read_state(self.cluster_home(cluster))
        for vm in state.layout.vms if state is not None else ():
            identity = vm_identity(vm)
            if identity.exists():
                return identity
        return None

    # -- MirrorMaker flows (management_plane.mirror.operation) ----------------------------

    def _vm_dirs(self, cluster: str) -> list[Path]:
        return [vm.directory for vm in require_state(self.cluster_home(cluster)).layout.vms]

    def deliver_mirror_source(
        self, target: str, flow: str, client_pem: bytes, ca_pem: bytes
    ) -> None:
        """Onto every VM of the target, and kept in its folder for the VMs added later
        (`LocalCluster.add_vm` provisions them)."""
        store = MirrorSourceStore(self.cluster_home(target))
        store.deliver(self._vm_dirs(target), flow, client_pem, ca_pem)

    def withdraw_mirror_source(self, target: str, flow: str) -> None:
        MirrorSourceStore(self.cluster_home(target)).withdraw(self._vm_dirs(target), flow)

    # The cluster's CA (management_plane.security.rotation): HomeAuthorities, in its home.

    def delete_cluster(self, cluster: str) -> None:
        """Stop every VM of the cluster and delete its folder."""
        if cluster in self.adopted:
            raise ProviderError(
                f"cluster {cluster} was started by `kaas up`: stop it with kaas down"
            )
        local = self._local(cluster)
        if local.home.exists():
            local.down(purge=True, stop_service=False)
