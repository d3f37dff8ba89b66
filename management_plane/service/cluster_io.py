"""The controller's view of one running cluster: its spec in ZooKeeper (the service is its one
writer), the agents' member znodes, Kafka's broker registrations and partition metadata.

Thin adapters: every decision about what these readings mean is the caller's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import TypeVar

import structlog
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError

from management_plane.errors import TemporaryError
from management_plane.security.znode_acls import AclMigration, migrate_kafka_znodes, secure_tree
from management_plane.service.metadata_version import MetadataVersionLevels
from planner.contracts.ensemble_repair import EnsembleRepairRequest
from planner.contracts.kafka_state import PartitionState
from planner.contracts.kraft_migration import (
    MigrationPhase,
    ZkMigrationRecord,
    parse_kafka_cluster_id,
    parse_zk_migration_record,
)
from planner.contracts.member import MemberReadings, parse_members
from planner.contracts.mirror_flow import MirrorFlow, MirrorFlowReadings, parse_mirror_flows
from planner.contracts.mirror_lag import MirrorFlowLag, parse_mirror_lag
from planner.contracts.paths import ClusterPaths
from planner.contracts.plan_status import PlanStatus
from planner.contracts.spec import ClusterSpec, KafkaMode, SpecError, parse_spec
from planner.live_layout import live_layout_admin, partition_states
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles
from planner.store import PlanStore
from planner.zookeeper_client import zookeeper_client
from planner.zookeeper_ensemble import EnsembleConfig, parse_ensemble_config

logging.getLogger("kazoo.client").setLevel(logging.ERROR)
log = structlog.get_logger("kaas.cluster_io")

ZOOKEEPER_PORT = 2181
KAFKA_PORT = 9092
METADATA_VERSION = "metadata.version"  # Kafka's feature name
ENSEMBLE_CONFIG_PATH = "/zookeeper/config"

T = TypeVar("T")

# One Admin client per cluster address list and identity files: librdkafka may crash the
# process when a client is destroyed with a request still in flight, so clients are kept,
# and one made from identity files written since (a rotation round) is retired, not
# destroyed, until its last request has long timed out.
_ADMINS: dict[tuple[str, str], tuple[object, AdminClient]] = {}
_RETIRED: list[tuple[float, AdminClient]] = []
_RETIRED_FOR_S = 120.0
_ADMINS_LOCK = threading.Lock()


def reads_kafka_from_metadata(spec: ClusterSpec | None) -> bool:
    """Whether the cluster's brokers run in KRaft mode, so Kafka keeps its registrations and
    partition states in the controllers' metadata and no longer in ZooKeeper."""
    if spec is None:
        return False
    if spec.kafka_mode is KafkaMode.KRAFT:
        return True
    migration = spec.migration
    return migration is not None and migration.phase is MigrationPhase.BROKERS_KRAFT


class ClusterUnreachable(TemporaryError, RuntimeError):
    """ZooKeeper or Kafka did not answer; a step reading this waits and tries again."""


class KafkaZnodesHeld(TemporaryError):
    """Kafka's znodes carry its brokers' ACLs, which the service's identity is not in: the
    elected agent (the nodes are ZooKeeper's super user) deletes them; the step waits."""


def zookeeper_hosts(addresses: list[str]) -> str:
    return ",".join(f"{a}:{ZOOKEEPER_PORT}" for a in addresses)


def bootstrap_servers(addresses: list[str]) -> str:
    return ",".join(f"{a}:{KAFKA_PORT}" for a in addresses)


_unreadable_logged: set[tuple[str, int, str]] = set()


def _log_unreadable_once(cluster: str, broker_id: int, reason: str) -> None:
    """Every status poll reads the members: one warning per record and reason is enough."""
    if (cluster, broker_id, reason) not in _unreadable_logged:
        _unreadable_logged.add((cluster, broker_id, reason))
        log.warning("member_unreadable", cluster=cluster, broker_id=broker_id, reason=reason)


class NoClientIdentity(ClusterUnreachable):
    """The provider holds no certificate for the cluster: its ZooKeeper takes no other client."""


class ClusterIO:
    def __init__(self, cluster: str, addresses: list[str], identity: IdentityFiles | None) -> None:
        if not addresses:
            raise ClusterUnreachable(f"cluster {cluster} has no running VM to reach")
        if identity is None:
            raise NoClientIdentity(
                f"cluster {cluster}: the provider holds no client certificate of its CA"
            )
        self.identity = identity
        self.cluster = cluster
        self.paths = ClusterPaths(cluster)
        self.hosts = zookeeper_hosts(addresses)
        self.bootstrap = bootstrap_servers(addresses)

    @contextmanager
    def _zk(self) -> Iterator[KazooClient]:
        client = zookeeper_client(self.hosts, self.identity, timeout=10, connection_retry=None)
        try:
            client.start(timeout=15)
        except Exception as exc:
            client.close()
            raise ClusterUnreachable(f"ZooKeeper of {self.cluster} ({self.hosts}): {exc}") from None
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def _with_zk(self, action: Callable[[KazooClient], T]) -> T:
        with self._zk() as zk:
            return action(zk)

    # -- the spec -------------------------------------------------------------------------

    def _spec_in(self, zk: KazooClient) -> ClusterSpec | None:
        try:
            raw, _ = zk.get(self.paths.spec)
        except NoNodeError:
            return None
        return parse_spec(raw)

    def read_spec(self) -> ClusterSpec | None:
        return self._with_zk(self._spec_in)

    def write_spec(self, change: Callable[[ClusterSpec | None], ClusterSpec]) -> ClusterSpec:
        """Apply `change` to the current spec and write it with a version check (the
        generation is bumped here, by the one writer). A spec no agent could parse is never
        written: parse_spec runs on the encoded value first."""

        def write(zk: KazooClient) -> ClusterSpec:
            for _ in range(5):
                try:
                    raw, stat = zk.get(self.paths.spec)
                    current: ClusterSpec | None = parse_spec(raw)
                    version = stat.version
                except NoNodeError:
                    current, version = None, -1
                except SpecError:
                    current, version = None, zk.exists(self.paths.spec).version
                desired = change(current)
                generation = (current.generation + 1) if current else max(1, desired.generation)
                desired = replace(desired, generation=generation)
                parse_spec(desired.encode())
                try:
                    if version < 0:
                        zk.create(self.paths.spec, desired.encode(), makepath=True)
                    else:
                        zk.set(self.paths.spec, desired.encode(), version=version)
                    return desired
                except (BadVersionError, NodeExistsError):
                    continue
            raise ClusterUnreachable(f"the spec of {self.cluster} kept changing under the writer")

        return self._with_zk(write)

    def plan_status(self) -> PlanStatus:
        """Where the stored plan stands, with the running plan's data movement."""
        return self._with_zk(lambda zk: PlanStore(zk, self.cluster).read_status())

    # -- MirrorMaker 2 flows into the cluster -----------------------------------------------

    def mirror_flows(self) -> MirrorFlowReadings:
        def read(zk: KazooClient) -> MirrorFlowReadings:
            values: dict[str, bytes] = {}
            try:
                children = zk.get_children(self.paths.mirror_flows)
            except NoNodeError:
                return MirrorFlowReadings()
            for child in children:
                with suppress(NoNodeError):
                    values[child] = zk.get(self.paths.mirror_flow(child))[0]
            return parse_mirror_flows(values)

        return self._with_zk(read)

    def mirror_lag(self, name: str) -> MirrorFlowLag | None:
        """The flow's lag as its reporting agent last measured it (None: not yet)."""

        def read(zk: KazooClient) -> MirrorFlowLag | None:
            try:
                return parse_mirror_lag(zk.get(self.paths.mirror_lag(name))[0])
            except NoNodeError:
                return None

        return self._with_zk(read)

    def put_mirror_flow(self, flow: MirrorFlow) -> None:
        """Create the flow's znode, or replace its value (a state change)."""

        def write(zk: KazooClient) -> None:
            path = self.paths.mirror_flow(flow.name)
            try:
                zk.create(path, flow.encode(), makepath=True)
            except NodeExistsError:
                zk.set(path, flow.encode())

        self._with_zk(write)

    def remove_mirror_flow(self, name: str) -> None:
        """The flow's znode, then its lag record."""

        def delete(zk: KazooClient) -> None:
            with suppress(NoNodeError):
                zk.delete(self.paths.mirror_flow(name))
            with suppress(NoNodeError):
                zk.delete(self.paths.mirror_lag(name))

        self._with_zk(delete)

    # -- agents and brokers ---------------------------------------------------------------

    def members(self) -> MemberReadings:
        """The agents' member records by broker id; a record this reader cannot use (an
        agent of another schema during an upgrade) is listed as unreadable and logged once."""

        def read(zk: KazooClient) -> MemberReadings:
            values: dict[str, bytes] = {}
            try:
                children = zk.get_children(self.paths.members)
            except NoNodeError:
                return MemberReadings()
            for child in children:
                try:
                    values[child] = zk.get(f"{self.paths.members}/{child}")[0]
                except NoNodeError:
                    continue
            return parse_members(values)

        readings = self._with_zk(read)
        for broker_id, reason in readings.unreadable.items():
            _log_unreadable_once(self.cluster, broker_id, reason)
        return readings

    def _kafka_admin(self) -> AdminClient:
        key = (self.bootstrap, str(self.identity.directory))
        stamp = self.identity.stamp()
        now = time.monotonic()
        with _ADMINS_LOCK:
            _RETIRED[:] = [(t, c) for t, c in _RETIRED if now - t < _RETIRED_FOR_S]
            kept = _ADMINS.get(key)
            if kept is not None and kept[0] == stamp:
                return kept[1]
            if kept is not None:
                _RETIRED.append((now, kept[1]))
            admin = live_layout_admin(InternalClient(self.bootstrap, self.identity))
            _ADMINS[key] = (stamp, admin)
            return admin

    def _from_metadata(self, what: str, read: Callable[[AdminClient], T]) -> T:
        try:
            return read(self._kafka_admin())
        except Exception as exc:  # librdkafka raises KafkaException or a timeout
            raise ClusterUnreachable(
                f"Kafka of {self.cluster} ({self.bootstrap}): {what}: {exc}"
            ) from None

    def registered_brokers(self) -> set[int]:
        """The brokers Kafka lists as registered: `/brokers/ids` in ZooKeeper mode, the
        unfenced brokers of the controllers' metadata in KRaft mode."""

        def read(zk: KazooClient) -> set[int] | None:
            # The mode and, in ZooKeeper mode, the registrations in one session.
            if reads_kafka_from_metadata(self._spec_in(zk)):
                return None
            try:
                return {int(c) for c in zk.get_children(self.paths.kafka_broker_ids)}
            except NoNodeError:
                return set()

        found = self._with_zk(read)
        if found is not None:
            return found
        return self._from_metadata(
            "registered brokers", lambda admin: set(admin.list_topics(timeout=10).brokers)
        )

    def metadata_version(self) -> MetadataVersionLevels:
        """KRaft: the finalised metadata.version and the highest level a broker supports."""

        def read(admin: KafkaAdminClient) -> MetadataVersionLevels:
            # {feature: {"supported": (min, max), "finalized": (min, max) or absent, ...}}
            feature = admin.describe_features()[METADATA_VERSION]
            finalized = feature.get("finalized") or (0, 0)
            return MetadataVersionLevels(int(finalized[1]), int(feature["supported"][1]))

        return self._features("metadata.version", read)

    def raise_metadata_version(self, level: int) -> None:
        def write(admin: KafkaAdminClient) -> None:
            answer = admin.update_features({METADATA_VERSION: level})
            if answer.get(METADATA_VERSION) != "OK":
                raise RuntimeError(f"refused: {answer.get(METADATA_VERSION)}")

        self._features(f"raising metadata.version to {level}", write)

    def _features(self, what: str, call: Callable[[KafkaAdminClient], T]) -> T:
        """Kafka's feature calls (KIP-584) through kafka-python's Admin (librdkafka has
        none), a short-lived client over the bootstrap servers."""
        try:
            admin = KafkaAdminClient(**InternalClient(self.bootstrap, self.identity).kafka_python())
        except Exception as exc:
            raise ClusterUnreachable(f"Kafka of {self.cluster}: {what}: {exc}") from None
        try:
            return call(admin)
        except Exception as exc:
            raise ClusterUnreachable(f"Kafka of {self.cluster}: {what}: {exc}") from None
        finally:
            admin.close()

    def release_broker_claim(self, broker_id: int) -> None:
        """Forget a recycled broker's id claim, so that a later VM may claim the id afresh."""

        def delete(zk: KazooClient) -> None:
            with suppress(NoNodeError):
                zk.delete(self.paths.broker_id_claim(broker_id))

        self._with_zk(delete)

    # -- the ZooKeeper ensemble -------------------------------------------------------------

    def ensemble_config(self) -> EnsembleConfig:
        """The ZooKeeper ensemble's dynamic config, as /zookeeper/config holds it."""

        def read(zk: KazooClient) -> EnsembleConfig:
            zk.sync(ENSEMBLE_CONFIG_PATH)  # the leader's config, not a lagging follower's
            raw, _ = zk.get(ENSEMBLE_CONFIG_PATH)
            return parse_ensemble_config(raw.decode())

        return self._with_zk(read)

    def request_ensemble_repair(self, request: EnsembleRepairRequest) -> None:
        """Ask the agents to repair the ensemble (they decide how): the request replaces any
        earlier one."""

        def write(zk: KazooClient) -> None:
            path = self.paths.ensemble_repair
            if zk.exists(path) is None:
                with suppress(NodeExistsError):
                    zk.create(path, request.to_bytes(), makepath=True)
                    return
            zk.set(path, request.to_bytes())

        self._with_zk(write)

    def withdraw_ensemble_repair(self) -> None:
        def delete(zk: KazooClient) -> None:
            with suppress(NoNodeError):
                zk.delete(self.paths.ensemble_repair)

        self._with_zk(delete)

    # -- Kafka ----------------------------------------------------------------------------

    def partitions(self) -> list[PartitionState]:
        """Every partition's replicas (with any reassignment's adding and removing ones) and
        ISR, read from Kafka's own znodes: in ZooKeeper mode they are the truth, where a
        broker's metadata cache may lag or answer a topic with an error and no partitions.
        In KRaft mode the brokers' metadata follows the controllers' log: read there."""

        def read(zk: KazooClient) -> list[PartitionState] | None:
            if reads_kafka_from_metadata(self._spec_in(zk)):
                return None
            topics_path = f"{self.paths.kafka_chroot}/brokers/topics"
            try:
                topics = zk.get_children(topics_path)
            except NoNodeError:
                return []
            found = []
            for topic in sorted(topics):
                raw, _ = zk.get(f"{topics_path}/{topic}")
                value = json.loads(raw)
                adding = value.get("adding_replicas") or {}
                removing = value.get("removing_replicas") or {}
                for partition, replicas in sorted(value["partitions"].items()):
                    every = {*replicas, *adding.get(partition, []), *removing.get(partition, [])}
                    state_path = f"{topics_path}/{topic}/partitions/{partition}/state"
                    try:
                        isr = json.loads(zk.get(state_path)[0]).get("isr", [])
                    except NoNodeError:
                        isr = []  # no leader elected yet: not in sync
                    found.append(
                        PartitionState(
                            topic, int(partition), tuple(sorted(every)), tuple(sorted(isr))
                        )
                    )
            return found

        found = self._with_zk(read)
        return found if found is not None else self._from_metadata("partitions", partition_states)

    # -- Kafka's own znodes during a migration to KRaft -------------------------------------

    def kafka_cluster_id(self) -> str | None:
        """The id Kafka gave the cluster (`/cluster/id` under its chroot), None before any."""

        def read(zk: KazooClient) -> str | None:
            try:
                raw, _ = zk.get(self.paths.kafka_cluster_id)
            except NoNodeError:
                return None
            return parse_kafka_cluster_id(raw)

        return self._with_zk(read)

    def zk_migration_record(self) -> ZkMigrationRecord | None:
        """Kafka's migration record, None until a KRaft controller has written one."""

        def read(zk: KazooClient) -> ZkMigrationRecord | None:
            zk.sync(self.paths.kafka_migration)
            try:
                raw, _ = zk.get(self.paths.kafka_migration)
            except NoNodeError:
                return None
            return parse_zk_migration_record(raw)

        return self._with_zk(read)

    def delete_kafka_controller_state(self) -> list[str]:
        """Delete Kafka's controller and migration znodes (a rollback's step, with the KRaft
        controllers stopped, so that a ZooKeeper-mode broker becomes the controller and a
        later migration starts afresh); the paths that were there."""

        def delete(zk: KazooClient) -> list[str]:
            deleted = []
            for path in (self.paths.kafka_controller, self.paths.kafka_migration):
                with suppress(NoNodeError):
                    try:
                        zk.delete(path)
                    except NoAuthError:
                        raise KafkaZnodesHeld(
                            f"{path} is Kafka's: waiting for the elected agent to delete it"
                        ) from None
                    deleted.append(path)
            return deleted

        return self._with_zk(delete)

    def remove_kafka_chroot(self) -> bool:
        """Delete Kafka's whole chroot (a finalised migration's last step); False when it was
        gone already."""

        def delete(zk: KazooClient) -> bool:
            if zk.exists(self.paths.kafka_chroot) is None:
                return False
            with suppress(NoNodeError):
                try:
                    zk.delete(self.paths.kafka_chroot, recursive=True)
                except NoAuthError:
                    raise KafkaZnodesHeld(
                        f"Kafka's chroot {self.paths.kafka_chroot} carries its brokers' ACLs: "
                        "waiting for the elected agent to delete it"
                    ) from None
            return True

        return self._with_zk(delete)

    # -- znode ACLs of a converted pre-TLS cluster ---------------------------------------

    def secure_kaas_znodes(self) -> AclMigration:
        """KaaS's tree of the cluster gets the cluster's ACL policy (its own principals)."""
        return self._with_zk(lambda zk: secure_tree(zk, self.paths.root))

    def secure_kafka_znodes(self, kafka_version: str, node: IdentityFiles) -> None:
        """Kafka's znodes get Kafka's secure ACLs by Kafka's own migration tool, run as the
        brokers' `node` identity (the creator its ACLs name, and the only one that may change
        the znodes brokers made with ACLs). It needs a Java runtime and the Kafka libraries
        of the service's image (of `kafka_version`: the tool is gone from Kafka 4)."""
        # Imported here: only this step needs the local image's layout and Java.
        from management_plane.local.image import find_java, load_image

        migrate_kafka_znodes(
            str(find_java()),
            load_image(verify=False).kafka_libs(kafka_version),
            f"{self.hosts}{self.paths.kafka_chroot}",
            node,
        )
