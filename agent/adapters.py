"""The real adapters behind agent/ports.py: kazoo for ZooKeeper, confluent-kafka and Jolokia
for Kafka, and the system clock. They translate, they do not decide."""

from __future__ import annotations

import contextlib
import json
import ssl
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    LockTimeout,
    NodeExistsError,
    NoNodeError,
)
from kazoo.recipe.lock import Lock

from agent import brokerview
from agent.broker_config import ConfigDiff, RunningValue
from agent.broker_config.apply import (
    ConfigApplyError,
    ConfigCommandClusterDefaults,
    apply_config_diff,
    describe_running_config,
)
from agent.brokerview import RUNNING_STATE
from agent.identity import claim_broker_id
from agent.kraft_migration import kafka_reads_kraft
from agent.ports import AdminUnavailable, StoreUnavailable
from agent.supervisor import kafka_libs
from planner.contracts.kafka_state import PartitionState
from planner.contracts.kraft_migration import CONTROLLER_NODE_ID_OFFSET
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec
from planner.live_layout import live_layout_admin, read_live_layout
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles
from planner.zookeeper_client import zookeeper_client

log = structlog.get_logger("kaas.agent")


class KazooRestartLock:
    def __init__(self, lock: Lock) -> None:
        self.lock = lock

    def acquire(self, timeout: float) -> bool:
        try:
            return bool(self.lock.acquire(timeout=timeout))
        except LockTimeout:
            return False
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc

    def holders(self) -> list[str]:
        try:
            return [str(c) for c in self.lock.contenders()]
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc

    def release(self) -> None:
        try:
            self.lock.release()
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc


class KazooAgentZooKeeper:
    """The agent's znodes through one kazoo client (shared with the planner election and the
    ensemble keeper, which use kazoo recipes of their own)."""

    def __init__(self, hosts: str, paths: ClusterPaths, identity: IdentityFiles) -> None:
        self.client = zookeeper_client(hosts, identity, timeout=10.0)
        self.paths = paths
        self._connected = False
        self._on_connected: list[Callable[[], None]] = []
        self.client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        self._connected = state == KazooState.CONNECTED
        if self._connected:
            for callback in self._on_connected:
                callback()

    @property
    def connected(self) -> bool:
        return self._connected

    def connect(self, timeout: float) -> None:
        self.client.start(timeout=timeout)
        self._connected = True
        self.client.ensure_path(self.paths.members)

    def on_connected(self, callback: Callable[[], None]) -> None:
        self._on_connected.append(callback)

    def watch_spec(self, callback: Callable[[], None]) -> None:
        def on_change(data: bytes | None, stat: object) -> bool:
            callback()
            return True  # keep watching

        self.client.DataWatch(self.paths.spec, on_change)

    def claim_broker_id(self, vm_id: str, volume_id: str, limit: int, preferred: int | None) -> int:
        return claim_broker_id(self.client, self.paths, vm_id, volume_id, limit, preferred)

    def close(self) -> None:
        with contextlib.suppress(KazooException):
            self.client.stop()
            self.client.close()

    def read_spec(self) -> bytes | None:
        try:
            raw, _ = self.client.get(self.paths.spec)
        except NoNodeError:
            return None
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return bytes(raw)

    def read_measured_load(self) -> bytes | None:
        try:
            raw, _ = self.client.get(self.paths.measured_load)
        except NoNodeError:
            return None
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return bytes(raw)

    def measured_load_version(self) -> int | None:
        try:
            stat = self.client.exists(self.paths.measured_load)
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return None if stat is None else int(stat.version)

    def read_members(self) -> dict[int, bytes]:
        result: dict[int, bytes] = {}
        try:
            children = self.client.get_children(self.paths.members)
        except NoNodeError:
            return result
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        for child in children:
            if not child.isdigit():
                continue
            try:
                raw, _ = self.client.get(f"{self.paths.members}/{child}")
            except NoNodeError:
                continue  # the member left between the listing and the read
            except KazooException as exc:
                raise StoreUnavailable(str(exc)) from exc
            result[int(child)] = bytes(raw)
        return result

    def write_member(self, broker_id: int, value: bytes) -> None:
        """Set this broker's member znode, owned by this session. A node left by this
        agent's previous process (killed, its session not yet expired) is deleted and made
        again: set alone, the record would vanish when that session expires, and
        the controllers' roll reads a missing record as a broker with nothing pending."""
        path = self.paths.member(broker_id)
        session_id = self.client.client_id[0] if self.client.client_id else None
        try:
            # One set while the node is this session's (every cycle but the first); a few
            # passes cover a node that changes between the write and the look at its owner.
            for _ in range(5):
                try:
                    stat = self.client.set(path, value)
                except NoNodeError:
                    with contextlib.suppress(NodeExistsError):
                        self.client.create(path, value, ephemeral=True, makepath=True)
                        return
                    continue
                if stat.ephemeralOwner == session_id:
                    return
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self.client.delete(path, version=stat.version)
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        raise StoreUnavailable(f"member znode {path} kept changing under this agent's writes")

    def append_journal(self, value: bytes) -> None:
        try:
            self.client.create(self.paths.journal_entry_prefix, value, sequence=True, makepath=True)
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc

    def registered_brokers(self) -> frozenset[int]:
        try:
            children = self.client.get_children(self.paths.kafka_broker_ids)
        except NoNodeError:
            return frozenset()
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return frozenset(int(c) for c in children if c.isdigit())

    def claimed_broker_ids(self) -> frozenset[int]:
        try:
            children = self.client.get_children(self.paths.ids)
        except NoNodeError:
            return frozenset()
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return frozenset(int(c) for c in children if c.isdigit())

    def controller_id(self) -> int | None:
        try:
            raw, _ = self.client.get(self.paths.kafka_controller)
            return int(json.loads(raw)["brokerid"])
        except (NoNodeError, ValueError, KeyError, TypeError):
            return None
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc

    def restart_lock(self, identifier: str) -> KazooRestartLock:
        return KazooRestartLock(Lock(self.client, self.paths.restart_lock, identifier=identifier))

    def restart_lock_held(self) -> bool:
        try:
            return bool(self.client.get_children(self.paths.restart_lock))
        except NoNodeError:
            return False
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc

    def request_controller_election(self) -> None:
        try:
            self.client.delete(self.paths.kafka_controller)
        except NoNodeError:
            pass
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc


class KraftAgentZooKeeper(KazooAgentZooKeeper):
    """A KRaft cluster's agent: KaaS's own znodes as in ZooKeeper mode, and what Kafka keeps
    in the controllers (registered brokers) through a metadata request over the cluster's
    bootstrap servers, since Kafka writes nothing to ZooKeeper in KRaft mode."""

    def __init__(
        self,
        hosts: str,
        paths: ClusterPaths,
        identity: IdentityFiles,
        kafka: InternalClient,
        bootstrap: Callable[[], str],
    ) -> None:
        super().__init__(hosts, paths, identity)
        self.kafka = kafka
        self.bootstrap = bootstrap
        self._admins: dict[str, AdminClient] = {}

    def _admin(self) -> AdminClient:
        servers = self.bootstrap()
        if servers not in self._admins:
            self._admins.clear()
            self._admins[servers] = brokerview.admin_client(self.kafka.with_servers(servers))
        return self._admins[servers]

    def registered_brokers(self) -> frozenset[int]:
        """The brokers the controllers list as registered and unfenced; none when no broker
        answers (a cold start), which the cycle reads as "not registered yet"."""
        try:
            return frozenset(self._admin().list_topics(timeout=5.0).brokers)
        except Exception as exc:  # librdkafka raises KafkaException or a timeout
            log.warning("kraft_metadata_unreadable", error=str(exc))
            return frozenset()

    def controller_id(self) -> int | None:
        # No broker is the controller in KRaft: the quorum's leader is a controller process,
        # which restarts after every broker (the roller's order, agent/kraft_roll.py).
        return None

    def request_controller_election(self) -> None:
        # Kafka's controller znode does not exist in KRaft: the quorum elects its leader.
        log.info("controller_election_not_available_in_kraft")


class MigratingAgentZooKeeper(KraftAgentZooKeeper):
    """A ZooKeeper-mode cluster's agent: Kafka's znodes as in ZooKeeper mode until a
    migration's phase runs the brokers as KRaft brokers (they stop registering in
    ZooKeeper), the KRaft readings from then on (`kraft_migration.kafka_reads_kraft`)."""

    def __init__(
        self,
        hosts: str,
        paths: ClusterPaths,
        identity: IdentityFiles,
        kafka: InternalClient,
        bootstrap: Callable[[], str],
        spec: Callable[[], ClusterSpec | None],
    ) -> None:
        super().__init__(hosts, paths, identity, kafka, bootstrap)
        self.spec = spec

    def registered_brokers(self) -> frozenset[int]:
        if kafka_reads_kraft(False, self.spec()):
            return super().registered_brokers()
        return KazooAgentZooKeeper.registered_brokers(self)

    def controller_id(self) -> int | None:
        if kafka_reads_kraft(False, self.spec()):
            return None
        return KazooAgentZooKeeper.controller_id(self)

    def delete_kafka_chroot(self) -> list[str]:
        chroot = self.paths.kafka_chroot
        try:
            if self.client.exists(chroot) is None:
                return []
            self.client.delete(chroot, recursive=True)
        except NoNodeError:
            return []
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return [chroot]

    def delete_kraft_controller_state(self) -> list[str]:
        """Kafka's controller znode while a KRaft controller holds it (a ZooKeeper-mode
        broker's claim is left alone), and the migration record."""
        deleted = []
        try:
            if (KazooAgentZooKeeper.controller_id(self) or -1) >= CONTROLLER_NODE_ID_OFFSET:
                with contextlib.suppress(NoNodeError):
                    self.client.delete(self.paths.kafka_controller)
                    deleted.append(self.paths.kafka_controller)
            if self.client.exists(self.paths.kafka_migration) is not None:
                with contextlib.suppress(NoNodeError):
                    self.client.delete(self.paths.kafka_migration)
                    deleted.append(self.paths.kafka_migration)
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return deleted

    def request_controller_election(self) -> None:
        spec = self.spec()
        if spec is not None and spec.migration is not None:
            # The KRaft controllers hold Kafka's controller znode during a migration.
            log.info("controller_election_not_available_in_migration")
            return
        KazooAgentZooKeeper.request_controller_election(self)


class ConfluentBrokerAdmin:
    """This VM's broker through librdkafka's Admin client, Jolokia for its gauges, and
    Kafka's ConfigCommand (from the image's jars) for cluster-wide config defaults."""

    def __init__(
        self,
        kafka: InternalClient,
        java: str,
        image_root: Path,
        jolokia_context: ssl.SSLContext | None = None,
    ) -> None:
        self.kafka = kafka
        self.java = java
        self.image_root = image_root
        self.jolokia_context = jolokia_context  # presents the node's certificate to Jolokia
        self.client = brokerview.admin_client(kafka)

    def metadata_answers(self, broker_id: int, timeout: float) -> bool:
        return brokerview.metadata_answers(self.client, broker_id, timeout)

    def partition_states(self) -> list[PartitionState]:
        return brokerview.partition_states(self.client)

    def topic_min_isr(self, topics: set[str]) -> dict[str, int]:
        return brokerview.topic_min_isr(self.client, topics)

    def running_config(self, broker_id: int) -> dict[str, RunningValue]:
        try:
            return describe_running_config(self.client, broker_id, timeout=5.0)
        except ConfigApplyError as exc:
            raise AdminUnavailable(str(exc)) from exc

    def apply_config(self, broker_id: int, diff: ConfigDiff, kafka_version: str) -> str | None:
        defaults = ConfigCommandClusterDefaults(
            self.java, kafka_libs(self.image_root, kafka_version), self.kafka
        )
        return apply_config_diff(self.client, broker_id, diff, defaults).error

    def under_replicated(self, jolokia_url: str) -> int:
        return brokerview.under_replicated(jolokia_url, self.jolokia_context)

    def serving(self, jolokia_url: str) -> bool:
        try:
            return brokerview.broker_state(jolokia_url, self.jolokia_context) == RUNNING_STATE
        except Exception:  # Jolokia not up yet, or the MBean not registered yet
            return False


class ConfluentClusterAdmin:
    """The whole cluster for the elected planner: one Admin client per bootstrap list."""

    def __init__(
        self,
        kafka: InternalClient,
        jolokia_port: int,
        jolokia_context: ssl.SSLContext | None = None,
    ) -> None:
        self.kafka = kafka
        self.jolokia_port = jolokia_port
        self.jolokia_context = jolokia_context
        # One client for the agent's life: librdkafka can crash the process when a client
        # is destroyed while a request that timed out is still in flight.
        self._admin: AdminClient | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = live_layout_admin(self.kafka)
        return self._admin

    def assignment(self) -> tuple[dict[tuple[str, int], tuple[int, ...]], frozenset[int]]:
        metadata = self._client().list_topics(timeout=10)
        live = {
            (str(t.topic), p.id): tuple(p.replicas)
            for t in metadata.topics.values()
            for p in t.partitions.values()
        }
        return live, frozenset(metadata.brokers)

    def read_layout(self) -> dict[str, Any]:
        return read_live_layout(
            self.kafka,
            self.jolokia_port,
            timeout_s=10.0,
            jolokia_context=self.jolokia_context,
            admin=self._client(),
        )

    def elect_preferred_leaders(self, partitions: Sequence[tuple[str, int]]) -> None:
        if not partitions:
            return
        wanted = [TopicPartition(topic, number) for topic, number in partitions]
        try:
            results = (
                self._client().elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=30)
            )
        except KafkaException as exc:
            log.warning("preferred_leader_election_failed", error=str(exc))
            return
        # ELECTION_NOT_NEEDED is the common answer: the preferred leader already leads.
        failed = {
            f"{tp.topic}-{tp.partition}": str(err)
            for tp, err in results.items()
            if err is not None and _error_code(err) != KafkaError.ELECTION_NOT_NEEDED
        }
        if failed:
            log.warning("preferred_leader_election_partial", failed=failed)


def _error_code(error: object) -> object:
    """elect_leaders answers KafkaError or KafkaException (wrapping one) per partition."""
    if isinstance(error, KafkaException) and error.args:
        error = error.args[0]
    return error.code() if isinstance(error, KafkaError) else None


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
