"""The plan in ZooKeeper: /kaas/<cluster>/plan/meta, one znode per topic under
/kaas/<cluster>/plan/topics, and the executor's progress, all written in one transaction
conditional on the meta znode's version, so a reader sees one whole plan or none.

A stored plan holds only the partitions it changes: each with its target replicas and its
steps (which batch moves it to which list). Every value is JSON with a schema version and
names its cluster and plan id; a value that does not parse, belongs to another cluster or
another plan id is reported as PlanStoreError and never executed.

ZooKeeper refuses a transaction larger than its jute.maxbuffer (1 MiB by default), so a
plan bigger than `max_transaction_bytes` is refused with PlanTooLargeError; the caller
stores a prefix of the batches (`Plan` -> `StoredPlan.from_plan(..., max_batches=...)`)
and plans again once it has run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from planner.contracts.paths import ClusterPaths
from planner.contracts.plan_records import (
    PlanMeta,
    PlannedPartition,
    PlannedStep,
    PlanRecordError,
    Progress,
    ProgressState,
    TopicAssignment,
    parse_plan_meta,
    parse_progress,
    parse_topic_assignment,
)
from planner.contracts.plan_status import PlanState, PlanStatus
from planner.errors import PlannerError
from planner.plan import Plan

DEFAULT_MAX_TRANSACTION_BYTES = 900_000
"""Below ZooKeeper's default jute.maxbuffer (0xfffff bytes) with room for the framing."""


class PlanStoreError(PlannerError):
    """A stored value is corrupt, foreign, or the store changed under a conditional write."""


class PlanTooLargeError(PlanStoreError):
    pass


class PlanConflictError(PlanStoreError):
    """Someone else wrote the plan since it was read (the meta znode's version moved)."""


@dataclass(frozen=True)
class StoredPlan:
    cluster: str
    plan_id: int
    batch_count: int
    partitions: tuple[PlannedPartition, ...]
    created_at: float
    inputs: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    meta_version: int = -1
    """The meta znode's version when read (-1: not stored yet)."""

    @classmethod
    def from_plan(
        cls,
        cluster: str,
        plan_id: int,
        plan: Plan,
        inputs: Mapping[str, Any] | None = None,
        max_batches: int | None = None,
    ) -> StoredPlan:
        batches = plan.batches if max_batches is None else plan.batches[:max_batches]
        steps: dict[tuple[str, int], list[PlannedStep]] = {}
        sources: dict[tuple[str, int], tuple[int, ...]] = {}
        for index, batch in enumerate(batches):
            for step in batch.steps:
                key = (step.topic, step.partition)
                sources.setdefault(key, step.previous)
                steps.setdefault(key, []).append(PlannedStep(index, step.replicas))
        partitions = tuple(
            PlannedPartition(
                topic, number, sources[(topic, number)], planned[-1].replicas, tuple(planned)
            )
            for (topic, number), planned in sorted(steps.items())
        )
        summary = plan.summary()
        if max_batches is not None and max_batches < len(plan.batches):
            summary["truncated_from_batches"] = len(plan.batches)
        return cls(
            cluster, plan_id, len(batches), partitions, time.time(), dict(inputs or {}), summary
        )

    def batch(self, index: int) -> list[tuple[str, int, tuple[int, ...]]]:
        """(topic, partition, replicas) of every step in batch `index`."""
        return [
            (p.topic, p.partition, s.replicas)
            for p in self.partitions
            for s in p.steps
            if s.batch == index
        ]

    def topics(self) -> dict[str, list[PlannedPartition]]:
        by_topic: dict[str, list[PlannedPartition]] = {}
        for p in self.partitions:
            by_topic.setdefault(p.topic, []).append(p)
        return by_topic


def encode_meta(plan: StoredPlan) -> bytes:
    return PlanMeta(
        plan.cluster,
        plan.plan_id,
        plan.batch_count,
        plan.created_at,
        {t: len(ps) for t, ps in plan.topics().items()},
        plan.inputs,
        plan.summary,
    ).to_bytes()


def encode_topic(plan: StoredPlan, topic: str, partitions: Iterable[PlannedPartition]) -> bytes:
    return TopicAssignment(plan.cluster, plan.plan_id, topic, tuple(partitions)).to_bytes()


class PlanStore:
    def __init__(
        self,
        client: KazooClient,
        cluster: str,
        max_transaction_bytes: int = DEFAULT_MAX_TRANSACTION_BYTES,
    ) -> None:
        self.client = client
        self.paths = ClusterPaths(cluster)
        self.max_transaction_bytes = max_transaction_bytes

    # ----- writing -----------------------------------------------------------------------

    def write(self, plan: StoredPlan, expected_meta_version: int | None) -> StoredPlan:
        """Replace the stored plan in one transaction. `expected_meta_version`: the meta
        version the caller read (None: there must be no plan yet). Resets the progress to
        pending. Returns the plan with its new meta version."""
        if plan.cluster != self.paths.cluster:
            raise PlanStoreError(
                f"plan is for cluster {plan.cluster!r}, store is {self.paths.cluster!r}"
            )
        paths = self.paths
        self.client.ensure_path(paths.plan_topics)
        existing = set(self.client.get_children(paths.plan_topics))
        topics = plan.topics()
        values = {topic: encode_topic(plan, topic, ps) for topic, ps in topics.items()}
        meta = encode_meta(plan)
        progress = Progress(
            plan.plan_id, 0, ProgressState.PENDING, updated_at=time.time()
        ).to_bytes(time.time())
        size = len(meta) + len(progress) + sum(len(v) + 200 for v in values.values())
        if size > self.max_transaction_bytes:
            raise PlanTooLargeError(
                f"plan {plan.plan_id} needs {size} bytes in one ZooKeeper transaction, over "
                f"the {self.max_transaction_bytes} allowed; store fewer batches"
            )
        transaction = self.client.transaction()
        if expected_meta_version is None:
            transaction.create(paths.plan_meta, meta)
        else:
            transaction.set_data(paths.plan_meta, meta, version=expected_meta_version)
        for topic, value in sorted(values.items()):
            if topic in existing:
                transaction.set_data(paths.plan_topic(topic), value)
            else:
                transaction.create(paths.plan_topic(topic), value)
        for topic in sorted(existing - set(values)):
            transaction.delete(paths.plan_topic(topic))
        if self.client.exists(paths.plan_progress):
            transaction.set_data(paths.plan_progress, progress)
        else:
            transaction.create(paths.plan_progress, progress)
        results = transaction.commit()
        failure = next((r for r in results if isinstance(r, Exception)), None)
        if failure is not None:
            if isinstance(failure, (BadVersionError, NodeExistsError, NoNodeError)):
                raise PlanConflictError(
                    f"the plan of {paths.cluster} changed while plan {plan.plan_id} was "
                    f"written ({type(failure).__name__}); read it again"
                )
            raise PlanStoreError(f"writing plan {plan.plan_id} failed: {failure!r}")
        _, stat = self.client.get(paths.plan_meta)
        return StoredPlan(
            plan.cluster,
            plan.plan_id,
            plan.batch_count,
            plan.partitions,
            plan.created_at,
            plan.inputs,
            plan.summary,
            stat.version,
        )

    def write_progress(self, progress: Progress) -> Progress:
        """Conditional on the progress version read (so two executors cannot both advance)
        and on the plan id it names still being the stored one."""
        current = self.read_progress()
        if current is None or current.plan_id != progress.plan_id:
            raise PlanConflictError(
                f"progress of plan {progress.plan_id} not written: the stored plan is "
                f"{current.plan_id if current else 'absent'}"
            )
        try:
            stat = self.client.set(
                self.paths.plan_progress, progress.to_bytes(time.time()), version=progress.version
            )
        except BadVersionError:
            raise PlanConflictError(
                f"progress of plan {progress.plan_id} changed under this writer"
            ) from None
        return replace(progress, version=stat.version)

    # ----- reading -----------------------------------------------------------------------

    def read(self, attempts: int = 5) -> StoredPlan | None:
        """The stored plan, whole, or None when there is none. Raises PlanStoreError on a
        corrupt or foreign value."""
        for _ in range(attempts):
            try:
                raw_meta, meta_stat = self.client.get(self.paths.plan_meta)
            except NoNodeError:
                return None
            meta = self._parse_meta(raw_meta)
            partitions: list[PlannedPartition] = []
            try:
                for topic in sorted(meta.topics):
                    raw, _ = self.client.get(self.paths.plan_topic(topic))
                    partitions.extend(self._parse_topic(raw, topic, meta))
            except (NoNodeError, _Superseded):
                continue  # rewritten while read: read the new one
            _, after = self.client.get(self.paths.plan_meta)
            if after.version != meta_stat.version:
                continue
            return StoredPlan(
                meta.cluster,
                meta.plan_id,
                meta.batch_count,
                tuple(partitions),
                meta.created_at,
                meta.inputs,
                meta.summary,
                meta_stat.version,
            )
        raise PlanStoreError(f"the plan of {self.paths.cluster} kept changing while read")

    def read_status(self) -> PlanStatus:
        """Where the stored plan stands, from its meta and progress znodes only (cheap enough
        for `kaas status`): state NONE with no plan, REFUSED with the reason when a value is
        corrupt or foreign."""
        try:
            raw_meta, _ = self.client.get(self.paths.plan_meta)
        except NoNodeError:
            return PlanStatus(PlanState.NONE)
        try:
            meta = self._parse_meta(raw_meta)
            progress = self.read_progress()
        except PlanStoreError as exc:
            return PlanStatus(PlanState.REFUSED, detail=str(exc))
        current = progress if progress is not None and progress.plan_id == meta.plan_id else None
        moved = meta.summary.get("replicas_moved")
        return PlanStatus(
            state=PlanState(current.state) if current is not None else PlanState.PENDING,
            plan_id=meta.plan_id,
            completed_batches=current.completed_batches if current is not None else 0,
            batch_count=meta.batch_count,
            partitions=sum(meta.topics.values()),
            replicas_moved=moved if isinstance(moved, int) else None,
            detail=current.detail if current is not None else "",
            movement=current.movement if current is not None else None,
        )

    def read_progress(self) -> Progress | None:
        try:
            raw, stat = self.client.get(self.paths.plan_progress)
        except NoNodeError:
            return None
        try:
            return parse_progress(raw, self.paths.plan_progress, stat.version)
        except PlanRecordError as exc:
            raise PlanStoreError(str(exc)) from None

    def _parse_meta(self, raw: bytes) -> PlanMeta:
        where = self.paths.plan_meta
        try:
            meta = parse_plan_meta(raw, where)
        except PlanRecordError as exc:
            raise PlanStoreError(str(exc)) from None
        if meta.cluster != self.paths.cluster:
            raise PlanStoreError(
                f"{where}: belongs to cluster {meta.cluster!r}, not "
                f"{self.paths.cluster!r}; refusing a foreign plan"
            )
        return meta

    def _parse_topic(self, raw: bytes, topic: str, meta: PlanMeta) -> list[PlannedPartition]:
        """One topic's assignment, refused unless it belongs to the plan `meta` describes."""
        where = self.paths.plan_topic(topic)
        try:
            value = parse_topic_assignment(raw, where)
        except PlanRecordError as exc:
            raise PlanStoreError(str(exc)) from None
        if value.plan_id != meta.plan_id:
            raise _Superseded()
        if value.cluster != self.paths.cluster or value.topic != topic:
            raise PlanStoreError(
                f"{where}: names cluster {value.cluster!r} topic {value.topic!r}; "
                "refusing a foreign value"
            )
        if len(value.partitions) != meta.topics[topic]:
            raise PlanStoreError(
                f"{where}: expected {meta.topics[topic]} partitions as meta says, "
                f"found {len(value.partitions)}"
            )
        for index, partition in enumerate(value.partitions):
            late = [s.batch for s in partition.steps if s.batch >= meta.batch_count]
            if late:
                raise PlanStoreError(
                    f"{where} partitions[{index}]: step in batch {late[0]}, "
                    f"plan has {meta.batch_count}"
                )
        return list(value.partitions)


class _Superseded(PlannerError):
    pass
