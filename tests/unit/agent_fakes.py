"""In-memory fakes of the agent's ports (agent/ports.py), for unit tests that drive a whole
cycle, a restart or a planner tick in milliseconds. Each fake keeps what it was asked to do
so tests can assert on it."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.broker_config import ConfigDiff, ConfigLayer, RunningValue
from agent.cycle import Agent, AgentPorts
from agent.cycle_actions import Running
from agent.pipeline import ConfigChange, Move, Reassigning
from agent.ports import (
    RUNNING,
    STOPPED,
    AdminUnavailable,
    ProcessState,
    StoreUnavailable,
)
from agent.reassign_admin import ReassignmentAdminError
from agent.settings import AgentSettings, parse_settings
from agent.zk_membership import ReconfigChange
from planner.contracts.kafka_state import PartitionState
from planner.contracts.plan_records import Progress
from planner.contracts.plan_status import PlanState, PlanStatus
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import BROKER_CONFIGS, parse_server_properties
from planner.live_layout import LiveLayoutError
from planner.store import PlanConflictError, PlanTooLargeError, StoredPlan


class FakeClock:
    """Monotonic and wall time move only when someone sleeps (or a test advances them)."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start
        self.slept = 0.0
        self.on_sleep: list[Callable[[float], None]] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        for callback in self.on_sleep:
            callback(self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeRestartLock:
    def __init__(self, zookeeper: FakeZooKeeper, identifier: str) -> None:
        self.zookeeper = zookeeper
        self.identifier = identifier

    def acquire(self, timeout: float) -> bool:
        zk = self.zookeeper
        zk.check()
        if zk.lock_holder is None:
            zk.lock_holder = self.identifier
            zk.lock_acquisitions.append(self.identifier)
            return True
        zk.clock.sleep(timeout)  # waited the whole timeout in vain
        return False

    def holders(self) -> list[str]:
        self.zookeeper.check()
        holder = self.zookeeper.lock_holder
        return [holder, self.identifier] if holder is not None else []

    def release(self) -> None:
        self.zookeeper.check()
        if self.zookeeper.lock_holder == self.identifier:
            self.zookeeper.lock_holder = None
            self.zookeeper.lock_releases.append(self.identifier)


class FakeZooKeeper:
    def __init__(self, clock: FakeClock, spec: ClusterSpec | None = None) -> None:
        self.clock = clock
        self.up = True
        self.reads_fail = False
        """Connected, but every call fails (the session is lost in the middle of a cycle)."""
        self.spec_value: bytes | None = spec.encode() if spec is not None else None
        self.members: dict[int, bytes] = {}
        self.journal: list[dict[str, Any]] = []
        self.registered: set[int] = set()
        self.controller: int | None = None
        self.lock_holder: str | None = None
        self.lock_acquisitions: list[str] = []
        self.lock_releases: list[str] = []
        self.controller_elections = 0
        self.claimed: dict[str, int] = {}
        self.on_connected_callbacks: list[Callable[[], None]] = []
        self.spec_watchers: list[Callable[[], None]] = []
        self.measured_load: bytes | None = None
        self.measured_load_writes = 0

    def check(self) -> None:
        if not self.up or self.reads_fail:
            raise StoreUnavailable("connection lost")

    def set_spec(self, spec: ClusterSpec) -> None:
        self.spec_value = spec.encode()
        for watcher in self.spec_watchers:
            watcher()

    def journaled(self, action: str) -> list[dict[str, Any]]:
        return [entry for entry in self.journal if entry["action"] == action]

    # -- the port ---------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.up

    def connect(self, timeout: float) -> None:
        self.check()
        for callback in self.on_connected_callbacks:
            callback()

    def on_connected(self, callback: Callable[[], None]) -> None:
        self.on_connected_callbacks.append(callback)

    def watch_spec(self, callback: Callable[[], None]) -> None:
        self.spec_watchers.append(callback)

    def claim_broker_id(self, vm_id: str, volume_id: str, limit: int, preferred: int | None) -> int:
        self.check()
        if volume_id in self.claimed:
            return self.claimed[volume_id]
        taken = set(self.claimed.values())
        free = [i for i in range(limit) if i not in taken]
        chosen = preferred if preferred is not None and preferred not in taken else free[0]
        self.claimed[volume_id] = chosen
        return chosen

    def close(self) -> None:
        self.up = False

    def read_spec(self) -> bytes | None:
        self.check()
        return self.spec_value

    def set_measured_load(self, value: bytes | None) -> None:
        self.measured_load = value
        self.measured_load_writes += 1

    def read_measured_load(self) -> bytes | None:
        self.check()
        return self.measured_load

    def measured_load_version(self) -> int | None:
        self.check()
        return None if self.measured_load is None else self.measured_load_writes

    def read_members(self) -> dict[int, bytes]:
        self.check()
        return dict(self.members)

    def write_member(self, broker_id: int, value: bytes) -> None:
        self.check()
        self.members[broker_id] = value

    def member(self, broker_id: int) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.members[broker_id])
        return value

    def append_journal(self, value: bytes) -> None:
        self.check()
        self.journal.append(json.loads(value))

    def registered_brokers(self) -> frozenset[int]:
        self.check()
        return frozenset(self.registered)

    def claimed_broker_ids(self) -> frozenset[int]:
        self.check()
        return frozenset(self.claimed.values())

    def controller_id(self) -> int | None:
        self.check()
        return self.controller

    def restart_lock(self, identifier: str) -> FakeRestartLock:
        return FakeRestartLock(self, identifier)

    def restart_lock_held(self) -> bool:
        self.check()
        return self.lock_holder is not None

    def request_controller_election(self) -> None:
        self.check()
        self.controller_elections += 1
        self.controller = None


class FakeBroker:
    """The broker process and what its admin API and Jolokia show: it runs the
    server.properties it found at start, and answers once started (unless told not to)."""

    def __init__(self, config_dir: Path, zookeeper: FakeZooKeeper, broker_id: int = 0) -> None:
        self.config_dir = config_dir
        self.zookeeper = zookeeper
        self.broker_id = broker_id
        self.process: ProcessState = STOPPED
        self.answers = True
        self.running: dict[str, RunningValue] = {}
        self.partitions: list[PartitionState] = []
        self.min_isr_overrides: dict[str, int] = {}
        self.urp: Callable[[str], int] = lambda url: 0
        self.apply_error: str | None = None
        self.starts: list[str] = []
        self.stops: list[float] = []
        self.applied: list[ConfigDiff] = []
        self.calls: list[str] = []
        self.starting = False  # its own state says it is still starting
        self.exits_on_start = False  # the process dies as it starts (a full log directory)
        self.serving_reads = 0

    # -- supervisor -------------------------------------------------------------------------

    def state(self) -> ProcessState:
        return self.process

    def start(self, kafka_version: str) -> None:
        self.calls.append("start")
        self.starts.append(kafka_version)
        text = (self.config_dir / "server.properties").read_text()
        # A broker reports every key it knows: Kafka's default where nothing set it.
        self.running = {key: RunningValue(None, ConfigLayer.DEFAULT) for key in BROKER_CONFIGS}
        self.running.update(
            (key, RunningValue(value, ConfigLayer.STATIC))
            for key, value in parse_server_properties(text).items()
        )
        if self.exits_on_start:
            self.process = STOPPED
            return
        self.process = RUNNING
        self.zookeeper.registered.add(self.broker_id)

    def stop(self, timeout: float) -> None:
        self.calls.append("stop")
        self.stops.append(timeout)
        self.process = STOPPED
        self.zookeeper.registered.discard(self.broker_id)

    def pid(self) -> int | None:
        return 4242 if self.process != STOPPED else None

    # -- admin ------------------------------------------------------------------------------

    def metadata_answers(self, broker_id: int, timeout: float) -> bool:
        return self.process == RUNNING and self.answers

    def partition_states(self) -> list[PartitionState]:
        self.calls.append("partition_states")
        return list(self.partitions)

    def topic_min_isr(self, topics: set[str]) -> dict[str, int]:
        return {t: m for t, m in self.min_isr_overrides.items() if t in topics}

    def running_config(self, broker_id: int) -> dict[str, RunningValue]:
        if not self.metadata_answers(broker_id, 5.0):
            raise AdminUnavailable("describe_configs timed out")
        return dict(self.running)

    def apply_config(self, broker_id: int, diff: ConfigDiff, kafka_version: str) -> str | None:
        self.calls.append("apply_config")
        if self.apply_error is not None:
            return self.apply_error
        self.applied.append(diff)
        for change in diff.per_broker:
            self.running[change.key] = RunningValue(change.desired, ConfigLayer.PER_BROKER)
        for change in diff.cluster_wide:
            self.running[change.key] = RunningValue(change.desired, ConfigLayer.CLUSTER_DEFAULT)
        return None

    def under_replicated(self, jolokia_url: str) -> int:
        return self.urp(jolokia_url)

    def serving(self, jolokia_url: str) -> bool:
        self.serving_reads += 1
        return self.process == RUNNING and self.answers and not self.starting


@dataclass
class FakeEnsemble:
    next_change: ReconfigChange | None = None
    applied: list[ReconfigChange] = field(default_factory=list)

    def change(self, spec: ClusterSpec | None, now: float) -> ReconfigChange | None:
        return self.next_change

    def apply(self, change: ReconfigChange) -> None:
        self.applied.append(change)
        self.next_change = None


@dataclass
class FakePlannerSeat:
    elected: bool = False

    @property
    def is_planner(self) -> bool:
        return self.elected

    def start(self, stop: Any) -> Any:
        raise AssertionError("unit tests run ticks themselves")


class FakePlanStore:
    """The plan store's rules: conditional plan writes, progress conditional on its version
    and on naming the stored plan, and a size limit counted in batches."""

    def __init__(self, cluster: str = "c", max_batches: int | None = None) -> None:
        self.cluster = cluster
        self.plan: StoredPlan | None = None
        self.progress: Progress | None = None
        self.max_batches = max_batches
        self.write_attempts: list[int] = []
        self.conflict_next_write = False
        self.corrupt: str | None = None

    def read(self) -> StoredPlan | None:
        if self.corrupt is not None:
            from planner.store import PlanStoreError

            raise PlanStoreError(self.corrupt)
        return self.plan

    def read_progress(self) -> Progress | None:
        return self.progress

    def read_status(self) -> PlanStatus:
        if self.plan is None:
            return PlanStatus(PlanState.NONE)
        progress = self.progress
        state = PlanState(progress.state) if progress else PlanState.PENDING
        return PlanStatus(
            state, self.plan.plan_id, movement=progress.movement if progress else None
        )

    def write(self, plan: StoredPlan, expected_meta_version: int | None) -> StoredPlan:
        self.write_attempts.append(plan.batch_count)
        if self.max_batches is not None and plan.batch_count > self.max_batches:
            raise PlanTooLargeError(f"plan {plan.plan_id} too large")
        current = self.plan.meta_version if self.plan is not None else None
        if self.conflict_next_write or current != expected_meta_version:
            self.conflict_next_write = False
            raise PlanConflictError("the plan changed")
        stored = replace(plan, meta_version=(current or 0) + 1)
        self.plan = stored
        self.progress = Progress(plan.plan_id, 0, "pending", version=0)
        return stored

    def write_progress(self, progress: Progress) -> Progress:
        current = self.progress
        if current is None or current.plan_id != progress.plan_id:
            raise PlanConflictError("another plan is stored")
        if progress.version != current.version:
            raise PlanConflictError("progress changed under this writer")
        written = replace(progress, version=current.version + 1)
        self.progress = written
        return written


@dataclass
class FakeClusterAdmin:
    live: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    registered: frozenset[int] = frozenset({0, 1, 2})
    racks: dict[int, str] = field(default_factory=dict)
    elections: list[tuple[str, int]] = field(default_factory=list)
    layout_error: str | None = None
    sizes: dict[tuple[str, int], int] = field(default_factory=dict)
    """Bytes of one replica (unlisted partitions weigh 1 byte)."""

    def assignment(self) -> tuple[dict[tuple[str, int], tuple[int, ...]], frozenset[int]]:
        return dict(self.live), self.registered

    def read_layout(self) -> dict[str, Any]:
        """The live assignment as LAYOUT.json (sizes from `sizes`, else 1 byte each)."""
        if self.layout_error is not None:
            raise LiveLayoutError(self.layout_error)
        live, registered = self.assignment()
        return {
            "brokers": [{"id": b, "rack": self.racks.get(b, "a")} for b in sorted(registered)],
            "partitions": [
                {
                    "topic": topic,
                    "partition": number,
                    "replicas": list(replicas),
                    "size_bytes": self.sizes.get((topic, number), 1),
                }
                for (topic, number), replicas in sorted(live.items())
            ],
        }

    def elect_preferred_leaders(self, partitions: Sequence[tuple[str, int]]) -> None:
        self.elections.extend(partitions)


@dataclass
class FakeReassignments:
    """Kafka's reassignment API: `submit` starts moves (applied at once when `instant`);
    a running move lists its arriving replicas in the live assignment, as Kafka does, until
    `finish` (or a test setting the live list to the target) ends it. Throttle configs are
    kept as Kafka would keep them."""

    cluster: FakeClusterAdmin
    instant: bool = False
    refuse: str | None = None
    submitted: list[list[Move]] = field(default_factory=list)
    running: dict[tuple[str, int], Reassigning] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    """"topic t" / "broker 1" -> key -> value."""
    config_writes: list[ConfigChange] = field(default_factory=list)
    short_isr: set[tuple[str, int]] = field(default_factory=set)
    """Partitions whose ISR is down to their min ISR."""
    queues: dict[int, int] = field(default_factory=dict)
    down: str | None = None

    def _check(self) -> None:
        if self.down is not None:
            raise ReassignmentAdminError(self.down)

    def reassigning(self) -> dict[tuple[str, int], Reassigning]:
        self._check()
        for key, moving in list(self.running.items()):
            if self.cluster.live.get(key) == moving.target:
                del self.running[key]  # the test moved it: Kafka finished
        return dict(self.running)

    def submit(self, moves: Sequence[Move]) -> dict[tuple[str, int], str]:
        self._check()
        if self.refuse is not None:
            return {(t, p): self.refuse for t, p, _ in moves}
        self.submitted.append(list(moves))
        for topic, number, target in moves:
            key = (topic, number)
            before = self.cluster.live[key]
            if self.instant or set(target) == set(before):
                self.cluster.live[key] = target
                continue
            removing = tuple(b for b in before if b not in target)
            adding = tuple(b for b in target if b not in before)
            self.running[key] = Reassigning((*target, *removing), adding, removing)
            self.cluster.live[key] = (*target, *removing)
        return {}

    def finish(self, key: tuple[str, int]) -> None:
        self.cluster.live[key] = self.running.pop(key).target

    def finish_all(self) -> None:
        for key in list(self.running):
            self.finish(key)

    def cancel(self, partitions: Any) -> dict[tuple[str, int], str]:
        for key in partitions:
            self.running.pop(key, None)
        return {}

    def elect_preferred(self, partitions: Sequence[tuple[str, int]]) -> None:
        self.cluster.elections.extend(partitions)

    def write_configs(self, changes: Sequence[ConfigChange]) -> None:
        self._check()
        for change in changes:
            self.config_writes.append(change)
            held = self.configs.setdefault(f"{change.kind.value} {change.name}", {})
            for key, value in change.values:
                if value is None:
                    held.pop(key, None)
                else:
                    held[key] = value

    def throttle_configs(self, topics: Any, brokers: Any) -> dict[str, str]:
        names = {f"topic {t}" for t in topics} | {f"broker {b}" for b in brokers}
        return {
            f"{name} {key}": value
            for name, held in self.configs.items()
            if name in names
            for key, value in held.items()
        }

    def isr(self) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[int, ...]]]:
        result = {}
        for key, replicas in self.cluster.live.items():
            adding = self.running[key].adding if key in self.running else ()
            in_sync = tuple(b for b in replicas if b not in adding)
            if key in self.short_isr:
                in_sync = in_sync[:2]
            result[key] = (replicas, in_sync)
        return result

    def min_isr(self, topics: Any) -> dict[str, int]:
        return {t: 2 for t in topics}

    def request_queues(self) -> dict[int, int]:
        return dict(self.queues)


class SpawnLater:
    """Long actions run when the test says so, to look at the cycles in between."""

    def __init__(self) -> None:
        self.work: list[Callable[[], None]] = []
        self.done = 0

    def __call__(self, name: str, work: Callable[[], None]) -> Running:
        self.work.append(work)
        index = len(self.work)
        spawner = self

        class Handle:
            def is_alive(self) -> bool:
                return spawner.done < index

        return Handle()

    def run_all(self) -> None:
        while self.done < len(self.work):
            self.work[self.done]()
            self.done += 1


def settings_for(tmp_path: Path, **overrides: Any) -> AgentSettings:
    (tmp_path / "config").mkdir(exist_ok=True)
    return parse_settings(
        {
            "cluster": "c",
            "zookeeper_hosts": "127.0.0.1:2181",
            "vm_id": "vm-0",
            "address": "127.0.1.1",
            "zone": "zone-a",
            "data_dir": str(tmp_path / "data"),
            "config_dir": str(tmp_path / "config"),
            **overrides,
        }
    )


class FakeProcess:
    """A supervised process (the VM's KRaft controller): stopped until started."""

    def __init__(self) -> None:
        self.process_state = STOPPED
        self.starts: list[str] = []

    def state(self) -> ProcessState:
        return self.process_state

    def start(self, kafka_version: str) -> None:
        self.starts.append(kafka_version)
        self.process_state = RUNNING

    def stop(self, timeout: float) -> None:
        self.process_state = STOPPED

    def pid(self) -> int | None:
        return 4242 if self.process_state != STOPPED else None


class FakeControllerStorage:
    """A migration's controller metadata dir: unformatted until formatted."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.formats: list[tuple[str, str]] = []
        self.discards = 0

    def formatted(self) -> bool:
        return self.cluster_id is not None

    def format(self, cluster_id: str, kafka_version: str) -> None:
        self.formats.append((cluster_id, kafka_version))
        self.cluster_id = cluster_id

    def discard(self) -> None:
        self.discards += 1
        self.cluster_id = None


@dataclass
class Rig:
    """One agent wired to fakes."""

    agent: Agent
    clock: FakeClock
    zookeeper: FakeZooKeeper
    broker: FakeBroker
    ensemble: FakeEnsemble
    seat: FakePlannerSeat
    store: FakePlanStore
    cluster: FakeClusterAdmin
    reassignments: FakeReassignments
    spawn: SpawnLater
    controller: FakeProcess | None = None
    storage: FakeControllerStorage | None = None


def make_rig(
    tmp_path: Path,
    spec: ClusterSpec | None,
    spawn_later: bool = False,
    migration_controller: bool = False,
    **settings: Any,
) -> Rig:
    """`migration_controller`: a ZooKeeper-mode VM wired as the agent is for a migration (a
    controller process and its metadata dir, run only when the spec's phase says)."""
    clock = FakeClock()
    zookeeper = FakeZooKeeper(clock, spec)
    agent_settings = settings_for(tmp_path, **settings)
    broker = FakeBroker(agent_settings.config_dir, zookeeper)
    ensemble = FakeEnsemble()
    seat = FakePlannerSeat()
    store = FakePlanStore(agent_settings.cluster)
    cluster = FakeClusterAdmin()
    reassignments = FakeReassignments(cluster)
    later = SpawnLater()
    runs = agent_settings.runs_controller or migration_controller
    controller = FakeProcess() if runs else None
    storage = FakeControllerStorage() if migration_controller else None

    def spawn_now(name: str, work: Callable[[], None]) -> Running:
        later(name, work)
        later.run_all()
        return type("Done", (), {"is_alive": lambda self: False})()

    agent = Agent(
        agent_settings,
        AgentPorts(
            zookeeper=zookeeper,
            admin=broker,
            supervisor=broker,
            ensemble=ensemble,
            planner_seat=seat,
            plan_store=store,
            cluster_admin=lambda bootstrap: cluster,
            reassignments=lambda bootstrap: reassignments,
            clock=clock,
            spawn=later if spawn_later else spawn_now,
            controller=controller,
            controller_storage=storage,
        ),
    )
    agent.start()
    broker.broker_id = agent.broker_id
    return Rig(
        agent,
        clock,
        zookeeper,
        broker,
        ensemble,
        seat,
        store,
        cluster,
        reassignments,
        later,
        controller,
        storage,
    )
