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
    "Snapshot",
    "StartBroker",
    "decide",
    "nothing",
]


class ActionKind(StrEnum):
    NONE = "none"
    START = "start"
    RESTART = "restart"
    ZK_RECONFIG = "zk_reconfig"
    APPLY_DYNAMIC = "apply_dynamic"


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
    empty when the running config could not be read (a broker that does not answer)."""

    rendered: Mapping[str, str] = field(default_factory=dict)
    diff: ConfigDiff = field(default_factory=ConfigDiff)
    error: str | None = None  # an unknown key or a wrong-typed value: refuse, change nothing

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
    unresponsive_threshold_s: float = 30.0
    zookeeper_change: ReconfigChange | None = None  # from zk_membership.decide_membership
    certificate_restart: str | None = None  # why the broker must restart onto its new certificate


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


Action = DoNothing | StartBroker | RestartBroker | ReconfigureZookeeper | ApplyDynamicConfig


def is_nothing(action: Action) -> bool:
    return isinstance(action, DoNothing)


def nothing(reason: str) -> DoNothing:
    return DoNothing(reason)


def _launch(spec: ClusterSpec, config: ConfigChanges) -> BrokerLaunch:
    if config.error is not None:
        return BrokerLaunch(spec.kafka_version, None, config.error)
    return BrokerLaunch(spec.kafka_version, config.rendered)


def decide(s: Snapshot) -> Action:
    who = f"broker {s.broker_id}"
    if not s.zk_connected:
        return nothing(f"{who}: ZooKeeper unreachable, taking no action until the session is back")
    if s.long_action is not None:
        return nothing(f"{who}: {s.long_action}")
    if s.spec is None:
        reason = f" ({s.spec_error})" if s.spec_error else ""
        return nothing(f"{who}: waiting for a valid cluster spec{reason}")
    refused = (
        f"; refused the new spec: {s.spec_error}, keeping the last good one" if s.spec_error else ""
    )
    launch = _launch(s.spec, s.config)

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
    if s.config.dynamic:
        keys = ", ".join(s.config.dynamic)
        return ApplyDynamicConfig(
            f"{who}: applying dynamic config ({keys}){refused}",
            s.config.diff,
            s.config.rendered,
            s.spec.kafka_version,
        )
    return nothing(f"{who}: healthy, config at spec generation {s.spec.generation}{refused}")
