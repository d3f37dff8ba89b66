"""Where each local VM lives: its loopback address, zone, ports and folders (pure)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from management_plane.errors import KaasError
from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.contracts.vm_config.kafka_tls import PLAIN_INTERNAL_PORT, PLAIN_TENANT_PORT

DEFAULT_ADDRESS_BASE = "127.0.1"
ZONES = ("zone-a", "zone-b", "zone-c")
MAX_NODES = 250


def zookeeper_participants(nodes: int) -> int:
    """How many of a cluster's VMs vote in ZooKeeper (1, 3 or 5); the others observe."""
    return 1 if nodes < 3 else 3 if nodes < 5 else 5


@dataclass(frozen=True)
class Ports:
    """Every VM serves the standard ports on its own address, as real VMs do."""

    zookeeper_client: int = 2181  # TLS, client certificate required; ZooKeeper's only client port
    zookeeper_peer: int = 2888
    zookeeper_election: int = 3888
    kafka_internal: int = 9092  # mutual TLS: inter-broker, agents, management plane, tools
    kafka_tenant: int = 9094  # SASL_SSL with SCRAM-SHA-512: tenants (docs/tenants.md)
    jolokia: int = 8778
    controller_jolokia: int = 8779  # a KRaft controller's own Jolokia (first VMs only)
    kafka_controller: int = 9093  # KRaft clusters' controller listener (first VMs only)
    mirror_rest: int = 8083  # MirrorMaker 2's internal REST (mutual TLS), when flows run here

    def all(self) -> dict[str, int]:
        return {
            "zookeeper_client": self.zookeeper_client,
            "zookeeper_peer": self.zookeeper_peer,
            "zookeeper_election": self.zookeeper_election,
            "kafka_internal": self.kafka_internal,
            "kafka_tenant": self.kafka_tenant,
            "jolokia": self.jolokia,
            "controller_jolokia": self.controller_jolokia,
            "kafka_controller": self.kafka_controller,
            "mirror_rest": self.mirror_rest,
        }


@dataclass(frozen=True)
class VmLayout:
    name: str
    index: int  # 1-based; also the ZooKeeper server id
    address: str
    zone: str
    broker_id: int
    directory: Path
    ports: Ports = field(default_factory=Ports)

    @property
    def config_dir(self) -> Path:
        return self.directory / "config"

    @property
    def kafka_data_dir(self) -> Path:
        return self.directory / "data" / "kafka"

    @property
    def controller_data_dir(self) -> Path:
        """A KRaft controller's metadata log, apart from the broker's log dir."""
        return self.directory / "data" / "kraft-controller"

    @property
    def zookeeper_data_dir(self) -> Path:
        return self.directory / "data" / "zookeeper"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def kafka_internal_endpoint(self) -> str:
        return f"{self.address}:{self.ports.kafka_internal}"

    @property
    def kafka_tenant_endpoint(self) -> str:
        return f"{self.address}:{self.ports.kafka_tenant}"

    @property
    def zookeeper_endpoint(self) -> str:
        return f"{self.address}:{self.ports.zookeeper_client}"

    @property
    def jolokia_url(self) -> str:
        return f"https://{self.address}:{self.ports.jolokia}/jolokia/"


@dataclass(frozen=True)
class ClusterLayout:
    name: str
    home: Path
    vms: tuple[VmLayout, ...]
    controllers: tuple[str, ...] | None = None
    """KRaft: the names of the VMs that run a controller (None: the first VMs, as many as
    vote in ZooKeeper, which is what cluster files written before this field hold)."""
    # TLS, or a pre-TLS cluster's plaintext listeners (`kaas up --insecure-legacy`).
    transport: TransportSecurity = DEFAULT_TRANSPORT

    @property
    def bootstrap_servers(self) -> str:
        """The internal listener KaaS's clients use: mutual TLS, or a pre-TLS cluster's
        PLAINTEXT one."""
        if not self.transport.clients_use_tls:
            return ",".join(f"{vm.address}:{PLAIN_INTERNAL_PORT}" for vm in self.vms)
        return ",".join(vm.kafka_internal_endpoint for vm in self.vms)

    @property
    def tenant_bootstrap_servers(self) -> str:
        """The SASL_SSL (SCRAM-SHA-512) listener of every VM: what tenants connect to (a
        pre-TLS cluster's SASL_PLAINTEXT one until it has TLS listeners)."""
        if not self.transport.tls_listeners:
            return ",".join(f"{vm.address}:{PLAIN_TENANT_PORT}" for vm in self.vms)
        return ",".join(vm.kafka_tenant_endpoint for vm in self.vms)

    @property
    def zookeeper_hosts(self) -> str:
        return ",".join(vm.zookeeper_endpoint for vm in self.vms)

    @property
    def kafka_chroot(self) -> str:
        return f"/kafka/{self.name}"

    @property
    def zookeeper_connect(self) -> str:
        return self.zookeeper_hosts + self.kafka_chroot

    def vm(self, name: str) -> VmLayout:
        for vm in self.vms:
            if vm.name == name:
                return vm
        known = ", ".join(v.name for v in self.vms)
        raise KaasError(f"unknown VM {name!r} in cluster {self.name} (VMs: {known})")


def validate_cluster_name(name: str) -> str:
    if not name or not all(c.isalnum() or c in "-_" for c in name) or len(name) > 64:
        raise KaasError(f"cluster name {name!r} is invalid: use 1-64 letters, digits, '-' or '_'")
    return name


def plan_layout(
    name: str,
    home: Path,
    nodes: int,
    address_base: str = DEFAULT_ADDRESS_BASE,
    zones: tuple[str, ...] = ZONES,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
) -> ClusterLayout:
    """VM i (1-based) gets address <base>.i, zone zones[(i-1) % len(zones)] and broker id i-1."""
    validate_cluster_name(name)
    if nodes < 1:
        raise KaasError(f"--nodes must be at least 1, got {nodes}")
    if nodes > MAX_NODES:
        raise KaasError(f"--nodes must be at most {MAX_NODES}, got {nodes}")
    try:
        first = ipaddress.IPv4Address(f"{address_base}.1")
    except ValueError:
        raise KaasError(
            f"address base {address_base!r} is not the first three octets of an IPv4 address (e.g. 127.0.1)"
        ) from None
    if not zones:
        raise KaasError("a cluster needs at least one zone")
    if not first.is_loopback:
        raise KaasError(f"address base {address_base!r} is outside the loopback range 127.0.0.0/8")
    vms = tuple(
        VmLayout(
            name=f"vm{i}",
            index=i,
            address=f"{address_base}.{i}",
            zone=zones[(i - 1) % len(zones)],
            broker_id=i - 1,
            directory=home / f"vm{i}",
        )
        for i in range(1, nodes + 1)
    )
    return ClusterLayout(name=name, home=home, vms=vms, transport=transport)


def address_base_of(layout: ClusterLayout) -> str:
    return layout.vms[0].address.rsplit(".", 1)[0]


def next_vm(layout: ClusterLayout, zone: str, retired: frozenset[int] = frozenset()) -> VmLayout:
    """The VM a running cluster adds next: the next index after every VM it has had (`retired`:
    the indexes of recycled VMs), on the same address base, so an address is never reused."""
    index = max({vm.index for vm in layout.vms} | retired) + 1
    if index > MAX_NODES:
        raise KaasError(f"cluster {layout.name} has used every VM index up to {MAX_NODES}")
    return VmLayout(
        name=f"vm{index}",
        index=index,
        address=f"{address_base_of(layout)}.{index}",
        zone=zone,
        broker_id=index - 1,
        directory=layout.home / f"vm{index}",
    )
