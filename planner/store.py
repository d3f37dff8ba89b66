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

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from planner.errors import PlannerError
from planner.plan import Plan
from planner.zkpaths import ClusterPaths

SCHEMA_VERSION = 1
META_KIND = "kaas.plan.meta"
TOPIC_KIND = "kaas.plan.topic"
PROGRESS_KIND = "kaas.plan.progress"
DEFAULT_MAX_TRANSACTION_BYTES = 900_000
"""Below ZooKeeper's default jute.maxbuffer (0xfffff bytes) with room for the framing."""
PROGRESS_STATES = frozenset({"pending", "executing", "done", "failed", "superseded"})


class PlanStoreError(PlannerError):
    """A stored value is corrupt, foreign, or the store changed under a conditional write."""


class PlanTooLargeError(PlanStoreError):
    pass


class PlanConflictError(PlanStoreError):
    """Someone else wrote the plan since it was read (the meta znode's version moved)."""


@dataclass(frozen=True)
class PlannedStep:
    batch: int
    replicas: tuple[int, ...]


@dataclass(frozen=True)
class PlannedPartition:
    topic: str
    partition: int
    source: tuple[int, ...]
    """The replicas when planned: the executor refuses a step whose start differs."""
    target: tuple[int, ...]
    steps: tuple[PlannedStep, ...]

    def replicas_before(self, batch: int) -> tuple[int, ...]:
        """The list this partition has before `batch` runs, if the plan ran as written."""
        before = self.source
        for step in self.steps:
            if step.batch >= batch:
                break
            before = step.replicas
        return before


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


@dataclass(frozen=True)
class Progress:
    plan_id: int
    completed_batches: int
    state: str
    detail: str = ""
    updated_at: float = 0.0
    version: int = -1
    started_batch: int | None = None
    """The batch handed to Kafka (None: none yet); equal to completed_batches while it runs."""
    batch_started_at: float = 0.0
    controller_moved: bool = False
    """The stall remedy (a new controller) was used for the running batch."""

    def encode(self) -> bytes:
        return _dump(
            {
                "schema_version": SCHEMA_VERSION,
                "kind": PROGRESS_KIND,
                "plan_id": self.plan_id,
                "completed_batches": self.completed_batches,
                "state": self.state,
                "detail": self.detail,
                "updated_at": self.updated_at or time.time(),
                "started_batch": self.started_batch,
                "batch_started_at": self.batch_started_at,
                "controller_moved": self.controller_moved,
            }
        )


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def encode_meta(plan: StoredPlan) -> bytes:
    return _dump(
        {
            "schema_version": SCHEMA_VERSION,
            "kind": META_KIND,
            "cluster": plan.cluster,
            "plan_id": plan.plan_id,
            "batch_count": plan.batch_count,
            "created_at": plan.created_at,
            "topics": {t: len(ps) for t, ps in sorted(plan.topics().items())},
            "inputs": plan.inputs,
            "summary": plan.summary,
        }
    )


def encode_topic(plan: StoredPlan, topic: str, partitions: Iterable[PlannedPartition]) -> bytes:
    return _dump(
        {
            "schema_version": SCHEMA_VERSION,
            "kind": TOPIC_KIND,
            "cluster": plan.cluster,
            "plan_id": plan.plan_id,
            "topic": topic,
            "partitions": [
                {
                    "partition": p.partition,
                    "source": list(p.source),
                    "target": list(p.target),
                    "steps": [{"batch": s.batch, "replicas": list(s.replicas)} for s in p.steps],
                }
                for p in partitions
            ],
        }
    )


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
        progress = Progress(plan.plan_id, 0, "pending", updated_at=time.time()).encode()
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
                self.paths.plan_progress, progress.encode(), version=progress.version
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
                for topic in sorted(meta["topics"]):
                    raw, _ = self.client.get(self.paths.plan_topic(topic))
                    partitions.extend(self._parse_topic(raw, topic, meta))
            except (NoNodeError, _Superseded):
                continue  # rewritten while read: read the new one
            _, after = self.client.get(self.paths.plan_meta)
            if after.version != meta_stat.version:
                continue
            return StoredPlan(
                meta["cluster"],
                meta["plan_id"],
                meta["batch_count"],
                tuple(partitions),
                meta["created_at"],
                meta["inputs"],
                meta["summary"],
                meta_stat.version,
            )
        raise PlanStoreError(f"the plan of {self.paths.cluster} kept changing while read")

    def read_status(self) -> dict[str, Any]:
        """Where the stored plan stands, from its meta and progress znodes only (cheap enough
        for `kaas status`): {"state": "none"} with no plan, "refused" with the reason when a
        value is corrupt or foreign."""
        try:
            raw_meta, _ = self.client.get(self.paths.plan_meta)
        except NoNodeError:
            return {"state": "none"}
        try:
            meta = self._parse_meta(raw_meta)
            progress = self.read_progress()
        except PlanStoreError as exc:
            return {"state": "refused", "detail": str(exc)}
        current = progress is not None and progress.plan_id == meta["plan_id"]
        return {
            "plan_id": meta["plan_id"],
            "state": progress.state if progress is not None and current else "pending",
            "completed_batches": progress.completed_batches if progress and current else 0,
            "batch_count": meta["batch_count"],
            "partitions": sum(meta["topics"].values()),
            "replicas_moved": meta["summary"].get("replicas_moved"),
            "detail": progress.detail if progress is not None and current else "",
        }

    def read_progress(self) -> Progress | None:
        try:
            raw, stat = self.client.get(self.paths.plan_progress)
        except NoNodeError:
            return None
        where = self.paths.plan_progress
        value = _load(raw, where, PROGRESS_KIND)
        state = value.get("state")
        completed = value.get("completed_batches")
        if state not in PROGRESS_STATES:
            raise PlanStoreError(
                f"{where}: state {state!r} is not one of {sorted(PROGRESS_STATES)}"
            )
        if not isinstance(completed, int) or not _is_count(completed):
            raise PlanStoreError(f"{where}: completed_batches {completed!r} is not a count")
        started = value.get("started_batch")
        if started is not None and not _is_count(started):
            raise PlanStoreError(f"{where}: started_batch {started!r} is not a batch number")
        return Progress(
            _require_int(value, "plan_id", where),
            completed,
            state,
            str(value.get("detail", "")),
            float(value.get("updated_at", 0.0)),
            stat.version,
            started,
            float(value.get("batch_started_at", 0.0)),
            bool(value.get("controller_moved", False)),
        )

    def _parse_meta(self, raw: bytes) -> dict[str, Any]:
        where = self.paths.plan_meta
        value = _load(raw, where, META_KIND)
        if value.get("cluster") != self.paths.cluster:
            raise PlanStoreError(
                f"{where}: belongs to cluster {value.get('cluster')!r}, not "
                f"{self.paths.cluster!r}; refusing a foreign plan"
            )
        _require_int(value, "plan_id", where)
        if not _is_count(value.get("batch_count")):
            raise PlanStoreError(
                f"{where}: batch_count {value.get('batch_count')!r} is not a count"
            )
        topics = value.get("topics")
        if not isinstance(topics, dict) or not all(isinstance(t, str) for t in topics):
            raise PlanStoreError(f"{where}: 'topics' must map topic names to partition counts")
        for key in ("inputs", "summary"):
            if not isinstance(value.get(key), dict):
                raise PlanStoreError(f"{where}: '{key}' must be an object")
        if not isinstance(value.get("created_at"), (int, float)):
            raise PlanStoreError(f"{where}: 'created_at' must be a time")
        return value

    def _parse_topic(
        self, raw: bytes, topic: str, meta: Mapping[str, Any]
    ) -> list[PlannedPartition]:
        where = self.paths.plan_topic(topic)
        value = _load(raw, where, TOPIC_KIND)
        if value.get("plan_id") != meta["plan_id"]:
            raise _Superseded()
        if value.get("cluster") != self.paths.cluster or value.get("topic") != topic:
            raise PlanStoreError(
                f"{where}: names cluster {value.get('cluster')!r} topic {value.get('topic')!r}; "
                "refusing a foreign value"
            )
        entries = value.get("partitions")
        if not isinstance(entries, list) or len(entries) != meta["topics"][topic]:
            raise PlanStoreError(
                f"{where}: expected {meta['topics'][topic]} partitions as meta says, "
                f"found {len(entries) if isinstance(entries, list) else entries!r}"
            )
        partitions = []
        for index, entry in enumerate(entries):
            at = f"{where} partitions[{index}]"
            if not isinstance(entry, dict) or not _is_count(entry.get("partition")):
                raise PlanStoreError(f"{at}: needs a non-negative integer 'partition'")
            source = _replicas(entry.get("source"), f"{at} source")
            target = _replicas(entry.get("target"), f"{at} target")
            raw_steps = entry.get("steps")
            if not isinstance(raw_steps, list) or not raw_steps:
                raise PlanStoreError(f"{at}: 'steps' must be a non-empty list")
            steps = []
            for step in raw_steps:
                if not isinstance(step, dict) or not _is_count(step.get("batch")):
                    raise PlanStoreError(f"{at}: a step needs a batch number")
                if step["batch"] >= meta["batch_count"]:
                    raise PlanStoreError(
                        f"{at}: step in batch {step['batch']}, plan has {meta['batch_count']}"
                    )
                steps.append(PlannedStep(step["batch"], _replicas(step.get("replicas"), at)))
            if steps[-1].replicas != target:
                raise PlanStoreError(f"{at}: the last step does not reach the target")
            partitions.append(
                PlannedPartition(topic, entry["partition"], source, target, tuple(steps))
            )
        return partitions


class _Superseded(PlannerError):
    pass


def _load(raw: bytes, where: str, kind: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PlanStoreError(f"{where}: not JSON ({exc}); refusing a corrupt plan") from None
    if not isinstance(value, dict):
        raise PlanStoreError(f"{where}: not a JSON object; refusing a corrupt plan")
    if value.get("kind") != kind:
        raise PlanStoreError(f"{where}: kind {value.get('kind')!r}, expected {kind!r}")
    if value.get("schema_version") != SCHEMA_VERSION:
        raise PlanStoreError(
            f"{where}: schema_version {value.get('schema_version')!r} is not supported "
            f"(this planner reads {SCHEMA_VERSION})"
        )
    return value


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _require_int(value: Mapping[str, Any], key: str, where: str) -> int:
    if not _is_count(value.get(key)):
        raise PlanStoreError(f"{where}: '{key}' must be a non-negative integer")
    return int(value[key])


def _replicas(value: Any, where: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(_is_count(b) for b in value)
        or len(set(value)) != len(value)
    ):
        raise PlanStoreError(f"{where}: replicas {value!r} must be distinct broker ids")
    return tuple(value)
