"""The local cluster's side of the planner fault (`planner_faults.PlanCluster`): the elected
planner, the stored plan and its progress read from ZooKeeper through the contract's
parsers, the replication throttles from Kafka's dynamic configs, the spec's reassignment
budget written back conditionally, and a topic of the drill's own placed by hand."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from management_plane.drills.errors import DrillError
from management_plane.drills.planner_faults import PlanState
from management_plane.local import probes
from management_plane.local.state import ClusterState
from management_plane.local.tls import admin_identity
from planner.client_logs import client_logger
from planner.contracts.member import MemberRole
from planner.contracts.paths import ClusterPaths
from planner.contracts.plan_records import parse_plan_meta
from planner.contracts.spec import ReassignmentBudget, parse_spec
from planner.pki.client_settings import InternalClient
from planner.store import PlanStore
from planner.zookeeper_client import zookeeper_client

_DYNAMIC = (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG)
THROTTLE_KEYS = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "leader.replication.throttled.replicas",
    "follower.replication.throttled.replicas",
)


class LocalPlanReads:
    """Mixed into `local_cluster.LocalFaultCluster`, which gives `_state` and `kafka`."""

    def _state(self) -> ClusterState:
        raise NotImplementedError

    @property
    def kafka(self) -> InternalClient:
        raise NotImplementedError

    @contextmanager
    def _zookeeper(self) -> Iterator[tuple[KazooClient, ClusterPaths]]:
        layout = self._state().layout
        client = zookeeper_client(
            layout.zookeeper_hosts, admin_identity(layout), timeout=5, connection_retry=None
        )
        try:
            client.start(timeout=10)
            yield client, ClusterPaths(layout.name)
        finally:
            client.stop()
            client.close()

    def _admin(self) -> AdminClient:
        return probes.admin_client(self.kafka)

    def broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self._admin().list_topics(timeout=10).brokers))

    def planner_vm(self) -> str | None:
        members, _, _ = probes.agent_members(self._state().layout)
        planners = [vm for vm, m in members.items() if m.role is MemberRole.PLANNER]
        return planners[0] if planners else None

    def plan_state(self) -> PlanState | None:
        with self._zookeeper() as (client, paths):
            progress = PlanStore(client, paths.cluster).read_progress()
            try:
                raw, _ = client.get(paths.plan_meta)
            except NoNodeError:
                return None
        meta = parse_plan_meta(raw, paths.plan_meta)
        if progress is None or progress.plan_id != meta.plan_id:
            return PlanState(meta.plan_id, "pending", 0, frozenset(meta.topics))
        moving = progress.movement.moving if progress.movement is not None else 0
        return PlanState(meta.plan_id, progress.state, moving, frozenset(meta.topics))

    def throttles(self) -> Mapping[str, str]:
        """Every replication throttle set dynamically on a broker or a topic."""
        admin = self._admin()
        metadata = admin.list_topics(timeout=10)
        resources = [ConfigResource("broker", str(b)) for b in sorted(metadata.brokers)]
        resources += [ConfigResource("topic", str(t)) for t in sorted(metadata.topics)]
        found: dict[str, str] = {}
        for resource, future in admin.describe_configs(resources).items():
            try:
                entries = future.result(timeout=30)
            except KafkaException:
                continue  # a topic deleted since the listing
            for key in THROTTLE_KEYS:
                entry = entries.get(key)
                # Set by someone (not a default or the static file): a dynamic config.
                if entry is not None and entry.value and entry.source in _DYNAMIC:
                    where = f"{resource.restype.name.lower()} {resource.name}"
                    found[f"{where} {key}"] = str(entry.value)
        return found

    def reassignment_budget(self) -> ReassignmentBudget:
        with self._zookeeper() as (client, paths):
            raw, _ = client.get(paths.spec)
        return parse_spec(raw).budget

    def set_reassignment_budget(self, budget: ReassignmentBudget) -> None:
        """Written on the spec as it is (its version checked), the generation bumped, as
        every spec writer does."""
        with self._zookeeper() as (client, paths):
            raw, stat = client.get(paths.spec)
            spec = parse_spec(raw)
            if spec.budget == budget:
                return
            changed = replace(spec, budget=budget, generation=spec.generation + 1)
            client.set(paths.spec, changed.encode(), version=stat.version)

    def create_placed_topic(
        self, topic: str, replicas: Mapping[int, Sequence[int]], fill_bytes: int
    ) -> None:
        admin = self._admin()
        assignment = [list(replicas[p]) for p in sorted(replicas)]
        placed = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)
        future = admin.create_topics([placed])[topic]
        try:
            future.result(timeout=60)
        except KafkaException as exc:
            raise DrillError(f"cannot create {topic}: {exc.args[0].str()}") from None
        producer = Producer(
            {**self.kafka.librdkafka(), "acks": "all", "linger.ms": 20},
            logger=client_logger,
        )
        chunk = 16 * 1024
        payload = b"x" * chunk
        errors: list[str] = []

        def delivered(error: object, _message: object) -> None:
            if error is not None:
                errors.append(str(error))

        for partition in sorted(replicas):
            for _ in range(max(1, fill_bytes // chunk)):
                producer.produce(topic, payload, partition=partition, on_delivery=delivered)
                producer.poll(0)
        left = producer.flush(120)
        if left or errors:
            raise DrillError(
                f"filling {topic}: {left} messages unsent, errors {json.dumps(errors[:3])}"
            )

    def delete_topic(self, topic: str) -> None:
        admin = self._admin()
        if topic not in admin.list_topics(timeout=10).topics:
            return
        try:
            admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
        except KafkaException as exc:
            raise DrillError(f"cannot delete {topic}: {exc.args[0].str()}") from None
