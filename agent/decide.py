"""The agent's pure core: one snapshot in, at most one action and its reason out.

No I/O here. The cycle builds the Snapshot from ZooKeeper, the local broker and the host;
`decide` reads it; the cycle runs the action it returns. Every action carries what running
it needs (the config to write, the Kafka version to start, the diff to apply, the reconfig),
so the shell never reads it back from the snapshot or its own fields. Table-driven tests
cover it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from agent.broker_config import ConfigDiff
from agent.ports import PAUSED, RUNNING, STOPPED, ProcessState
from agent.zk_membership import ReconfigChange
from planner.contracts.spec import ClusterSpec

__all__ = [
    "PAUSED",
    "RUNNING",
    "STOPPED",
    "Action",
    "ActionKind",
    "ApplyDynamicConfig",
    "BrokerLaunch",
    "BrokerView",
    "ConfigChanges",
    "DoNothing",
    "ReconfigureZookeeper",
    "RestartBroker",
    "RestartController",
    "Snapshot",
    "StartBroker",
    "StartController",
    "StopController",
    "decide",
    "nothing",
]


class ActionKind(StrEnum):
    NONE = "none"
    START = "start"
    RESTART = "restart"
    ZK_RECONFIG = "zk_reconfig"
    APPLY_DYNAMIC = "apply_dynamic"
    START_CONTROLLER = "start_controller"
    RESTART_CONTROLLER = "restart_controller"
    STOP_CONTROLLER = "stop_controller"


@dataclass(frozen=True)
class BrokerView:
    process: ProcessState
    registered: bool  # its znode is under /brokers/ids
    responsive: bool  # a metadata request or a JMX read answered this cycle
    unresponsive_for_s: float = 0.0  # how long every read has failed while the process lives


@dataclass(frozen=True)
class ConfigChanges:
    """The rendered config and how it differs from what the broker runs (from the classifier).

    `rendered` is empty when the spec does not render (then `error` says why); `diff` is
    empty when the running config could not be read (a broker that does not answer), and
    then `running_known` is false."""

    rendered: Mapping[str, str] = field(default_factory=dict)
    diff: ConfigDiff = field(default_factory=ConfigDiff)
    error: str | None = None  # an unknown key or a wrong-typed value: refuse, change nothing
    running_known: bool = False

    @property
    def applied_unknown(self) -> bool:
        """The spec renders but whether the broker runs it is not known: a broker that does
        not answer may still need a restart, so the others must not count it as done."""
        return self.error is None and bool(self.rendered) and not self.running_known

    @property
    def dynamic(self) -> tuple[str, ...]:
        return self.diff.dynamic_keys

    @property
    def read_only(self) -> tuple[str, ...]:
        return self.diff.read_only_keys

    @property
    def empty(self) -> bool:
        return self.diff.empty


@dataclass(frozen=True)
class Snapshot:
    broker_id: int
    zk_connected: bool
    spec: ClusterSpec | None  # the last good spec
    spec_error: str | None = None  # why the current spec value is refused, if it is
    broker: BrokerView = BrokerView(STOPPED, False, False)
    config: ConfigChanges = ConfigChanges()
    long_action: str | None = None  # a restart or a start running off the loop, with progress
    controller_id: int | None = None
    brokers_awaiting_restart: frozenset[int] = frozenset()  # other members that need a restart
    # Other members whose broker is starting, restarting or not answering yet: a broker that
    # a restart has stopped and started again no longer awaits one, but is not back either.
    brokers_unsettled: frozenset[int] = frozenset()
    unresponsive_threshold_s: float = 30.0
    zookeeper_change: ReconfigChange | None = None  # from zk_membership.decide_membership
    controller: ProcessState | None = None  # this VM's KRaft controller; None: it runs none
    controller_restarting: bool = False  # a RestartController runs off the loop
    controller_node_id: int | None = None
    controller_changed: tuple[str, ...] = ()  # controller.properties keys the running one lacks
    controller_properties: Mapping[str, str] = field(default_factory=dict)  # as rendered
    quorum_leader_id: int | None = None  # the active controller, from the last describe
    quorum_caught_up: bool = False  # every other voter caught up at the last describe
    controllers_awaiting_restart: frozenset[int] = frozenset()  # members whose controller waits
    certificate_restart: str | None = None  # why the broker must restart onto its new certificate
    # A migration's controller: the cluster id an unformatted metadata dir is formatted with
    # before its first start (None: formatted already, or formatted by `kaas up`).
    controller_format_cluster_id: str | None = None
    # A controller process runs that the spec's phase no longer has on this VM (a rollback).
    stray_controller: bool = False
    # Seconds before the broker may be started again: it exited while starting, in a row
    # (agent.restart.start_backoff_s); 0: now.
    start_wait_s: float = 0.0


def awaits_restart(snap: Snapshot) -> bool:
    """What this member's record reports as `pending_restart`: the running broker needs a
    restart for a read-only change, or it runs but did not answer, so whether it runs the
    current spec is unknown (the other members must not count it as done). A stopped broker
    does not count: its start applies the rendered config."""
    if snap.config.read_only:
        return True
    return snap.broker.process == RUNNING and snap.config.applied_unknown


@dataclass(frozen=True)
class BrokerLaunch:
    """What a start or a restart writes and runs: server.properties (None: the spec did not
    render, `config_error` says why, and nothing is started) and the Kafka version."""

    kafka_version: str
    server_properties: Mapping[str, str] | None
    config_error: str | None = None


@dataclass(frozen=True)
class DoNothing:
    kind: ClassVar[ActionKind] = ActionKind.NONE
    reason: str


@dataclass(frozen=True)
class StartBroker:
    kind: ClassVar[ActionKind] = ActionKind.START
    reason: str
    launch: BrokerLaunch


@dataclass(frozen=True)
class RestartBroker:
    kind: ClassVar[ActionKind] = ActionKind.RESTART
    reason: str
    launch: BrokerLaunch
    keys: tuple[str, ...] = ()
    """The read-only keys that changed (empty: a restart of a broker that stopped answering)."""


@dataclass(frozen=True)
class StartController:
    """Start this VM's KRaft controller process (healing: it is not running). Quick, on the
    loop: a controller holds no partitions, so no restart lock or safety check applies."""

    kind: ClassVar[ActionKind] = ActionKind.START_CONTROLLER
    reason: str
    kafka_version: str
    format_cluster_id: str | None = None
    """Format the metadata dir with this cluster id first (a migration's static quorum)."""


@dataclass(frozen=True)
class StopController:
    """Stop this VM's controller, which the spec's phase no longer runs (a migration rolled
    back), and discard its metadata log: a later migration copies the metadata afresh."""

    kind: ClassVar[ActionKind] = ActionKind.STOP_CONTROLLER
    reason: str


@dataclass(frozen=True)
class RestartController:
    """Restart this VM's controller with a new controller.properties, off the loop under the
    restart lock, once the rest of the quorum has caught up (checked again under the lock)."""

    kind: ClassVar[ActionKind] = ActionKind.RESTART_CONTROLLER
    reason: str
    kafka_version: str
    controller_properties: Mapping[str, str]
    keys: tuple[str, ...]


@dataclass(frozen=True)
class ReconfigureZookeeper:
    kind: ClassVar[ActionKind] = ActionKind.ZK_RECONFIG
    reason: str
    change: ReconfigChange


@dataclass(frozen=True)
class ApplyDynamicConfig:
    kind: ClassVar[ActionKind] = ActionKind.APPLY_DYNAMIC
    reason: str
    diff: ConfigDiff
    server_properties: Mapping[str, str]
    """Written to the file once the diff is applied, so a later restart keeps it."""
    kafka_version: str

    @property
    def keys(self) -> tuple[str, ...]:
        return self.diff.dynamic_keys


Action = (
    DoNothing
    | StartBroker
    | RestartBroker
    | ReconfigureZookeeper
    | ApplyDynamicConfig
    | StartController
    | RestartController
    | StopController
)


def is_nothing(action: Action) -> bool:
    return isinstance(action, DoNothing)


def nothing(reason: str) -> DoNothing:
    return DoNothing(reason)


def _launch(spec: ClusterSpec, config: ConfigChanges) -> BrokerLaunch:
    if config.error is not None:
        return BrokerLaunch(spec.kafka_version, None, config.error)
    return BrokerLaunch(spec.kafka_version, config.rendered)


def _controller_restart(s: Snapshot, who: str, refused: str) -> Action:
    """The roller's order in KRaft: every broker first, then the follower controllers one
    at a time, the active controller last; a controller only while the rest of the quorum
    has caught up, so the restart never costs the majority."""
    assert s.spec is not None
    keys = ", ".join(s.controller_changed)
    brokers = sorted((s.brokers_awaiting_restart | s.brokers_unsettled) - {s.broker_id})
    if brokers:
        waiting = ", ".join(map(str, brokers))
        return nothing(
            f"{who}: controller restarts after the brokers, waiting for brokers {waiting} "
            f"({keys} changed){refused}"
        )
    others = sorted(s.controllers_awaiting_restart - {s.broker_id})
    if s.controller_node_id is not None and s.quorum_leader_id == s.controller_node_id and others:
        waiting = ", ".join(map(str, others))
        return nothing(
            f"{who}: the active controller restarts last, waiting for the controllers of "
            f"{waiting} ({keys} changed){refused}"
        )
    if not s.quorum_caught_up:
        return nothing(
            f"{who}: controller restart waits until the rest of the quorum has caught up "
            f"({keys} changed){refused}"
        )
    return RestartController(
        f"{who}: controller config changed ({keys}), restarting the controller{refused}",
        s.spec.kafka_version,
        s.controller_properties,
        s.controller_changed,
    )


def decide(s: Snapshot) -> Action:
    who = f"broker {s.broker_id}"
    if not s.zk_connected:
        return nothing(f"{who}: ZooKeeper unreachable, taking no action until the session is back")
    # The controller before anything of the broker's: a broker start waits for a quorum
    # that a dead controller may be the missing vote of.
    if s.spec is not None and s.controller == STOPPED and not s.controller_restarting:
        if s.controller_format_cluster_id is not None:
            return StartController(
                f"{who}: the migration runs a controller on this VM, formatting and starting it",
                s.spec.kafka_version,
                s.controller_format_cluster_id,
            )
        return StartController(f"{who}: controller process gone, starting it", s.spec.kafka_version)
    if s.long_action is not None:
        return nothing(f"{who}: {s.long_action}")
    if s.spec is not None and s.stray_controller and not s.controller_restarting:
        phase = s.spec.migration.phase.value if s.spec.migration else "ZooKeeper mode"
        return StopController(f"{who}: {phase} runs no controller on this VM, stopping it")
    if s.spec is None:
        reason = f" ({s.spec_error})" if s.spec_error else ""
        return nothing(f"{who}: waiting for a valid cluster spec{reason}")
    refused = (
        f"; refused the new spec: {s.spec_error}, keeping the last good one" if s.spec_error else ""
    )
    launch = _launch(s.spec, s.config)

    if s.broker.process == STOPPED and s.start_wait_s > 0:
        return nothing(
            f"{who}: broker exited while starting, starting it again in "
            f"{s.start_wait_s:.0f}s{refused}"
        )
    if s.broker.process == STOPPED:
        return StartBroker(f"{who}: broker process gone, starting it{refused}", launch)
    if s.zookeeper_change is not None:
        return ReconfigureZookeeper(
            f"{who}: {s.zookeeper_change.reason}{refused}", s.zookeeper_change
        )
    if s.broker.process == PAUSED and s.broker.unresponsive_for_s >= s.unresponsive_threshold_s:
        return RestartBroker(
            f"{who}: broker paused for {s.broker.unresponsive_for_s:.0f}s, restarting it{refused}",
            launch,
        )
    if not s.broker.responsive and s.broker.unresponsive_for_s >= s.unresponsive_threshold_s:
        return RestartBroker(
            f"{who}: broker not answering for {s.broker.unresponsive_for_s:.0f}s, restarting it{refused}",
            launch,
        )
    if not s.broker.responsive or not s.broker.registered:
        state = (
            "not registered"
            if s.broker.responsive
            else f"not answering for {s.broker.unresponsive_for_s:.0f}s"
        )
        return nothing(f"{who}: broker {state}, watching{refused}")

    if s.config.error is not None:
        return nothing(f"{who}: refusing config change: {s.config.error}; nothing applied{refused}")
    if s.certificate_restart is not None:
        return RestartBroker(f"{who}: {s.certificate_restart}, restarting{refused}", launch)
    if s.config.read_only:
        keys = ", ".join(s.config.read_only)
        others = sorted(s.brokers_awaiting_restart - {s.broker_id})
        if s.controller_id == s.broker_id and others:
            waiting = ", ".join(map(str, others))
            return nothing(
                f"{who}: controller restarts last, waiting for brokers {waiting} ({keys} changed){refused}"
            )
        return RestartBroker(
            f"{who}: read-only config changed ({keys}), restarting{refused}",
            launch,
            s.config.read_only,
        )
    if s.controller_changed:
        return _controller_restart(s, who, refused)
    if s.config.dynamic:
        keys = ", ".join(s.config.dynamic)
        return ApplyDynamicConfig(
            f"{who}: applying dynamic config ({keys}){refused}",
            s.config.diff,
            s.config.rendered,
            s.spec.kafka_version,
        )
    return nothing(f"{who}: healthy, config at spec generation {s.spec.generation}{refused}")
