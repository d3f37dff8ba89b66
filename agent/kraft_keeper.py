"""The agent's shell around the KRaft controller quorum: every `quorum_check_interval_s` it
describes the quorum (agent/kraft_quorum_tool.py), keeps since when each voter has not caught
up, asks the pure `kraft_quorum.decide_quorum` for at most one voter change and makes it; the
elected agent also unregisters brokers whose id no VM claims any more (a recycled VM's).

Who acts: adding a controller reads that controller's own properties and metadata directory,
so only the VM whose controller joins adds it; every removal and unregistration is the
elected agent's alone, so two agents never race for one change. It runs on its own thread:
a describe is two JVM runs of Kafka's tool, seconds the broker's cycle should not wait for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agent.errors import AgentError
from agent.kraft_quorum import (
    ControllerIdentity,
    QuorumChange,
    QuorumChangeKind,
    QuorumView,
    decide_quorum,
)
from agent.kraft_quorum_tool import ControllerQuorum
from planner.contracts.kafka_state import META_PROPERTIES
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.kraft import CONTROLLER_NODE_ID_OFFSET

log = structlog.get_logger("kaas.agent")

Journal = Callable[[str, str, str], None]


def metadata_directory_id(metadata_dir: Path) -> str | None:
    """The `directory.id` Kafka's storage format wrote into a metadata dir, None before."""
    try:
        content = (metadata_dir / META_PROPERTIES).read_text()
    except OSError:
        return None
    for line in content.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "directory.id" and value.strip():
            return value.strip()
    return None


def track_unseen(
    since: Mapping[int, float],
    replicas: tuple[QuorumReplica, ...],
    now: float,
    caught_up_within_ms: int,
) -> dict[int, float]:
    """Since when each voter has not been caught up (monotonic seconds); a voter caught up
    now leaves the map, one not caught up keeps the time it was first found so. Pure."""
    result: dict[int, float] = {}
    for replica in replicas:
        if replica.role is QuorumRole.OBSERVER or replica.role is QuorumRole.LEADER:
            continue
        caught_up = (
            replica.caught_up_ago_ms is not None and replica.caught_up_ago_ms <= caught_up_within_ms
        )
        if not caught_up:
            result[replica.node_id] = since.get(replica.node_id, now)
    return result


def rest_caught_up(
    replicas: tuple[QuorumReplica, ...], my_node_id: int | None, caught_up_within_ms: int
) -> bool:
    """Whether every voter but this VM's controller has caught up with the leader lately
    (a leader among them). Pure."""
    others = [r for r in replicas if r.role is not QuorumRole.OBSERVER and r.node_id != my_node_id]
    if not any(r.role is QuorumRole.LEADER for r in replicas):
        return False
    return all(
        r.role is QuorumRole.LEADER
        or (r.caught_up_ago_ms is not None and r.caught_up_ago_ms <= caught_up_within_ms)
        for r in others
    )


def allowed(change: QuorumChange, me: ControllerIdentity | None, elected: bool) -> bool:
    """Additions by the joining VM's own agent, removals by the elected agent only. Pure."""
    if change.kind is QuorumChangeKind.ADD:
        return me is not None and change.node_id == me.node_id
    return elected


def stale_brokers(
    seen_registered: frozenset[int], claimed: frozenset[int], registered_now: frozenset[int]
) -> frozenset[int]:
    """Broker ids once registered that no VM claims and that do not answer now: their VMs
    were recycled, so their registrations go (KIP-1073's unregister). Pure."""
    return frozenset(seen_registered - claimed - registered_now)


def recycled_controllers(seen_claimed: frozenset[int], claimed: frozenset[int]) -> frozenset[int]:
    """The controller node ids of brokers whose id claim this agent saw and that is gone: only
    a recycled VM's claim is released, so its voter may go at once instead of after the gone
    threshold. A claim never seen (a cluster still starting) never counts. Pure."""
    return frozenset(CONTROLLER_NODE_ID_OFFSET + b for b in seen_claimed - claimed)


@dataclass
class QuorumKeeperState:
    unseen_since: dict[int, float] = field(default_factory=dict)
    seen_registered: frozenset[int] = frozenset()
    seen_claimed: frozenset[int] = frozenset()
    unregistered: frozenset[int] = frozenset()
    sentence: str = ""
    leader_id: int | None = None  # the active controller at the last describe
    replicas: tuple[QuorumReplica, ...] = ()  # as the last describe listed them


class QuorumKeeper:
    def __init__(
        self,
        quorum: ControllerQuorum,
        me: Callable[[], ControllerIdentity | None],
        spec: Callable[[], ClusterSpec | None],
        elected: Callable[[], bool],
        registered: Callable[[], frozenset[int]],
        claimed: Callable[[], frozenset[int]],
        journal: Journal,
        monotonic: Callable[[], float],
        gone_threshold_s: float,
        caught_up_within_ms: int,
        static_only: bool = False,
    ) -> None:
        self.quorum = quorum
        self.me = me
        self.spec = spec
        self.elected = elected
        self.registered = registered
        self.claimed = claimed
        self.journal = journal
        self.monotonic = monotonic
        self.gone_threshold_s = gone_threshold_s
        self.caught_up_within_ms = caught_up_within_ms
        # A ZooKeeper-mode cluster's keeper: a quorum only while a migration runs one.
        self.static_only = static_only
        self.state = QuorumKeeperState()
        # The last look found the quorum as the spec wants it with nothing to do: the next
        # may wait longer (each look costs two JVM runs of Kafka's tool).
        self.steady = False

    @property
    def sentence(self) -> str:
        return self.state.sentence

    def describe(self) -> tuple[int | None, tuple[QuorumReplica, ...]]:
        """A fresh look at the quorum (leader id, replicas), for a controller restart that
        checks again under the restart lock; AgentError when unreadable."""
        status, replicas = self.quorum.describe()
        self.state.leader_id, self.state.replicas = status.leader_id, replicas
        return status.leader_id, replicas

    def tick(self) -> QuorumChange | None:
        """One look: describe, decide, make the change this agent may make. The change made
        (or None)."""
        self.steady = False
        spec = self.spec()
        if spec is None:
            return None
        if spec.migration is not None or self.static_only:
            self._watch_static(spec)
            return None
        try:
            status, replicas = self.quorum.describe()
        except AgentError as exc:
            self.state.sentence = f"controller quorum unreadable: {exc}"
            log.warning("quorum_describe_failed", error=str(exc))
            return None
        self.state.leader_id, self.state.replicas = status.leader_id, replicas
        now = self.monotonic()
        self.state.unseen_since = track_unseen(
            self.state.unseen_since, replicas, now, self.caught_up_within_ms
        )
        me = self.me()
        elected = self.elected()
        recycled: frozenset[int] = frozenset()
        if elected:  # removals are the elected agent's only
            claimed = self.claimed()
            self.state.seen_claimed |= claimed
            recycled = recycled_controllers(self.state.seen_claimed, claimed)
        view = QuorumView(
            replicas=replicas,
            high_watermark=status.high_watermark,
            me=me,
            desired_voters=spec.kraft_controllers,
            gone_for_s={node: now - t for node, t in self.state.unseen_since.items()},
            gone_threshold_s=self.gone_threshold_s,
            caught_up_within_ms=self.caught_up_within_ms,
            recycled_node_ids=recycled,
        )
        voters = sum(1 for r in replicas if r.role is not QuorumRole.OBSERVER)
        self.state.sentence = f"controller quorum {voters}/{spec.kraft_controllers} voters"
        if elected:
            self._unregister_stale()
        change = decide_quorum(view)
        if change is None:
            self.steady = (
                status.leader_id is not None
                and voters == spec.kraft_controllers
                and not self.state.unseen_since
                and (me is None or any(r.node_id == me.node_id for r in _voters(replicas)))
            )
        if change is None or not allowed(change, me, elected):
            return None
        self.journal(str(change.kind).replace("-", "_"), change.reason, "started")
        try:
            if change.kind is QuorumChangeKind.ADD:
                self.quorum.add_controller()
            else:
                self.quorum.remove_controller(change.node_id, change.directory_id)
        except AgentError as exc:
            # Kafka refuses a second change while one is pending: decided again next look.
            self.journal(str(change.kind).replace("-", "_"), change.reason, f"failed: {exc}")
            return None
        self.journal(str(change.kind).replace("-", "_"), change.reason, "done")
        self.state.sentence += f"; {change.reason}"
        return change

    def _watch_static(self, spec: ClusterSpec) -> None:
        """A migration's static quorum: looked at (a controller restart waits until the rest
        has caught up), never changed."""
        migration = spec.migration
        if migration is None or not migration.phase.runs_controllers:
            self.state = QuorumKeeperState()
            return
        try:
            status, replicas = self.quorum.describe()
        except AgentError as exc:
            self.state.sentence = f"migration controller quorum unreadable: {exc}"
            self.state.leader_id, self.state.replicas = None, ()
            return
        self.state.leader_id, self.state.replicas = status.leader_id, replicas
        leader = "no leader" if status.leader_id is None else f"leader {status.leader_id}"
        self.state.sentence = f"migration controller quorum ({migration.phase.value}): {leader}"

    def _unregister_stale(self) -> None:
        registered = self.registered()
        self.state.seen_registered |= registered
        stale = stale_brokers(self.state.seen_registered, self.claimed(), registered)
        for broker_id in sorted(stale - self.state.unregistered):
            reason = f"broker {broker_id} is claimed by no VM (recycled): unregistering it"
            try:
                self.quorum.unregister_broker(broker_id)
            except AgentError as exc:
                self.journal("unregister_broker", reason, f"failed: {exc}")
                continue
            self.journal("unregister_broker", reason, "done")
            self.state.unregistered |= {broker_id}
            self.state.seen_registered -= {broker_id}


def _voters(replicas: tuple[QuorumReplica, ...]) -> list[QuorumReplica]:
    return [r for r in replicas if r.role is not QuorumRole.OBSERVER]


def start_quorum_keeper(
    keeper: QuorumKeeper, interval_s: float, stop: threading.Event, steady_interval_s: float
) -> threading.Thread:
    """Looks every `interval_s`, or every `steady_interval_s` after a look that found the
    quorum steady."""

    def loop() -> None:
        while not stop.is_set():
            try:
                keeper.tick()
            except Exception as exc:  # never let one bad look end the keeper
                log.error("quorum_keeper_failed", error=str(exc))
                keeper.steady = False
            stop.wait(steady_interval_s if keeper.steady else interval_s)

    thread = threading.Thread(target=loop, name="agent-quorum", daemon=True)
    thread.start()
    return thread
