"""The agent's pure core: one snapshot in, at most one action and its reason out.

No I/O here. The cycle builds the Snapshot from ZooKeeper, the local broker and the host;
`decide` reads it; the cycle runs the action it returns. Table-driven tests cover it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.zk_membership import ReconfigChange
from planner.contracts.spec import ClusterSpec

RUNNING, PAUSED, STOPPED = "running", "paused", "stopped"


@dataclass(frozen=True)
class BrokerView:
    process: str  # running | paused | stopped
    registered: bool  # its znode is under /brokers/ids
    responsive: bool  # a metadata request or a JMX read answered this cycle
    unresponsive_for_s: float = 0.0  # how long every read has failed while the process lives


@dataclass(frozen=True)
class ConfigChanges:
    """Differences between the rendered config and what the broker runs (from the classifier)."""

    dynamic: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
    error: str | None = None  # an unknown key or a wrong-typed value: refuse, change nothing

    @property
    def empty(self) -> bool:
        return not self.dynamic and not self.read_only


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


@dataclass(frozen=True)
class Action:
    kind: str  # none | start | restart | zk_reconfig | apply_dynamic
    reason: str
    keys: tuple[str, ...] = field(default=())

    @property
    def is_none(self) -> bool:
        return self.kind == "none"


def nothing(reason: str) -> Action:
    return Action("none", reason)


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

    if s.broker.process == STOPPED:
        return Action("start", f"{who}: broker process gone, starting it{refused}")
    if s.zookeeper_change is not None:
        return Action("zk_reconfig", f"{who}: {s.zookeeper_change.reason}{refused}")
    if s.broker.process == PAUSED and s.broker.unresponsive_for_s >= s.unresponsive_threshold_s:
        return Action(
            "restart",
            f"{who}: broker paused for {s.broker.unresponsive_for_s:.0f}s, restarting it{refused}",
        )
    if not s.broker.responsive and s.broker.unresponsive_for_s >= s.unresponsive_threshold_s:
        return Action(
            "restart",
            f"{who}: broker not answering for {s.broker.unresponsive_for_s:.0f}s, restarting it{refused}",
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
    if s.config.read_only:
        keys = ", ".join(s.config.read_only)
        others = sorted(s.brokers_awaiting_restart - {s.broker_id})
        if s.controller_id == s.broker_id and others:
            waiting = ", ".join(map(str, others))
            return nothing(
                f"{who}: controller restarts last, waiting for brokers {waiting} ({keys} changed){refused}"
            )
        return Action(
            "restart",
            f"{who}: read-only config changed ({keys}), restarting{refused}",
            s.config.read_only,
        )
    if s.config.dynamic:
        keys = ", ".join(s.config.dynamic)
        return Action(
            "apply_dynamic", f"{who}: applying dynamic config ({keys}){refused}", s.config.dynamic
        )
    return nothing(f"{who}: healthy, config at spec generation {s.spec.generation}{refused}")
