"""Read-only checks of a running local cluster: ZooKeeper modes, broker registrations, metadata."""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from management_plane.local.layout import ClusterLayout, VmLayout
from management_plane.local.tls import admin_identity
from planner.contracts.member import MemberRecord, parse_members
from planner.contracts.paths import ClusterPaths
from planner.contracts.plan_status import PlanStatus
from planner.pki.client_settings import InternalClient
from planner.store import PlanStore
from planner.zookeeper_client import server_mode, zookeeper_client

# kazoo logs every failed connection attempt at WARNING; a probe expects some to fail.
logging.getLogger("kazoo.client").setLevel(logging.ERROR)
# librdkafka reports every refused connection while brokers start; probes expect those.
_RDKAFKA_LOG = logging.getLogger("kaas.probe.rdkafka")
_RDKAFKA_LOG.setLevel(logging.CRITICAL)


SERVING_MODES = ("leader", "follower", "observer", "standalone")


def zookeeper_mode(cluster: ClusterLayout, vm: VmLayout, timeout: float = 2.0) -> str:
    """leader, follower, observer, standalone, 'not serving' or 'down' (ZooKeeper's `srvr`
    command, over TLS as the cluster's admin)."""
    mode = server_mode(
        vm.address,
        vm.ports.zookeeper_client,
        admin_identity(cluster),
        timeout,
        cluster.transport,
    )
    if mode is not None:
        return mode
    return "down" if not port_open(vm.address, vm.ports.zookeeper_client) else "not serving"


def port_open(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_bindable(address: str, port: int) -> bool:
    """Whether a server could listen on address:port now (SO_REUSEADDR, as the JVM sets it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError:
            return False
    return True


def _zookeeper(cluster: ClusterLayout, timeout: float) -> KazooClient:
    return zookeeper_client(
        cluster.zookeeper_hosts,
        admin_identity(cluster),
        transport=cluster.transport,
        timeout=timeout,
        connection_retry=None,
    )


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    rack: str | None
    endpoints: tuple[str, ...]


def broker_registrations(
    cluster: ClusterLayout, timeout: float = 5.0
) -> dict[int, BrokerRegistration]:
    """The brokers registered under Kafka's chroot in ZooKeeper, by id."""
    client = _zookeeper(cluster, timeout)
    try:
        client.start(timeout=timeout)
        ids_path = f"{cluster.kafka_chroot}/brokers/ids"
        registrations = {}
        try:
            children = client.get_children(ids_path)
        except NoNodeError:
            return {}
        for child in children:
            try:
                data, _ = client.get(f"{ids_path}/{child}")
            except NoNodeError:
                continue
            value: dict[str, Any] = json.loads(data)
            endpoints = tuple(value.get("endpoints", []))
            host, port = value.get("host"), int(value.get("port", -1))
            if host is None and endpoints:
                # Kafka fills the legacy host and port only for a PLAINTEXT listener; the
                # first endpoint is the internal listener's.
                host, _, port_text = endpoints[0].partition("://")[2].rpartition(":")
                port = int(port_text)
            registrations[int(child)] = BrokerRegistration(
                broker_id=int(child),
                host=str(host),
                port=port,
                rack=value.get("rack"),
                endpoints=endpoints,
            )
        return registrations
    finally:
        client.stop()
        client.close()


def admin_client(client: InternalClient) -> AdminClient:
    return AdminClient(client.librdkafka(**{"socket.timeout.ms": 5000}), logger=_RDKAFKA_LOG)


def metadata_broker_ids(client: InternalClient, timeout: float = 5.0) -> set[int]:
    metadata = admin_client(client).list_topics(timeout=timeout)
    return set(metadata.brokers)


def under_replicated_by_leader(client: InternalClient, timeout: float = 5.0) -> dict[int, int]:
    """Partitions whose ISR is smaller than their replica list, counted per leader broker
    (the same definition as Kafka's UnderReplicatedPartitions metric); -1 counts leaderless ones."""
    metadata = admin_client(client).list_topics(timeout=timeout)
    counts: dict[int, int] = {broker_id: 0 for broker_id in metadata.brokers}
    for topic in metadata.topics.values():
        for partition in topic.partitions.values():
            if len(partition.isrs) < len(partition.replicas):
                counts[partition.leader] = counts.get(partition.leader, 0) + 1
    return counts


def agent_members(
    cluster: ClusterLayout, timeout: float = 5.0
) -> tuple[dict[str, MemberRecord], str | None, PlanStatus]:
    """The agents' member records by VM id, who holds the restart lock (None if nobody), and
    where the stored plan stands (planner.store.PlanStore.read_status)."""
    paths = ClusterPaths(cluster.name)
    client = _zookeeper(cluster, timeout)
    try:
        client.start(timeout=timeout)
        values: dict[str, bytes] = {}
        try:
            children = client.get_children(paths.members)
        except NoNodeError:
            children = []
        for child in children:
            try:
                values[child] = client.get(f"{paths.members}/{child}")[0]
            except NoNodeError:
                continue
        # A record this reader cannot use shows as an agent without a sentence.
        members = {m.vm_id: m for m in parse_members(values).records.values()}
        holder = None
        try:
            contenders = sorted(
                client.get_children(paths.restart_lock), key=lambda n: n.rsplit("__", 1)[-1]
            )
            if contenders:
                holder = (
                    client.get(f"{paths.restart_lock}/{contenders[0]}")[0].decode() or contenders[0]
                )
        except NoNodeError:
            pass
        return members, holder, PlanStore(client, cluster.name).read_status()
    finally:
        client.stop()
        client.close()


def serving_problem(cluster: ClusterLayout, kraft: bool = False) -> str | None:
    """Why a cluster whose processes all run does not serve (a ZooKeeper server outside
    the quorum, a broker not registered: with the controllers in KRaft mode), or None."""
    for vm in cluster.vms:
        mode = zookeeper_mode(cluster, vm)
        if mode not in SERVING_MODES:
            return f"the ZooKeeper server of {vm.name} is {mode}"
    try:
        registered = len(
            metadata_broker_ids(InternalClient(cluster.bootstrap_servers, admin_identity(cluster)))
            if kraft
            else broker_registrations(cluster)
        )
    except Exception as exc:
        return f"{'Kafka' if kraft else 'ZooKeeper'} did not answer ({exc})"
    if registered < len(cluster.vms):
        return f"{registered} of {len(cluster.vms)} brokers registered"
    return None
