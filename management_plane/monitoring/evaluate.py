"""Alert evaluation: rules, the latest values and what KaaS is doing -> alert states and the
notifications to send. Pure: no clock, no Graphite, no network.

An alert is one rule on one subject (the cluster, one broker, or one topic). Its states:

- pending: breached for less than the rule's `for_s`;
- held: breached while KaaS itself restarts or drains the subject (any broker, for a
  cluster- or topic-scoped rule), for at most the operation's expected time, and for the rule set's
  settle time after the operation ended (the agents' samples reach Graphite an interval and
  a flush late, so the breach outlives the operation by that much); then the rule's `for_s`
  starts again;
- firing: breached for `for_s` (or past the operation's expected time): one trigger;
- a firing alert whose value is back within bounds resolves: one resolve.

No data for a subject changes nothing: silence is not recovery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from management_plane.monitoring.rules import (
    HeldBy,
    Rule,
    RuleSet,
    Scope,
    Severity,
    topic_subject,
)

CLUSTER_SUBJECT = "cluster"


class AlertState(Enum):
    PENDING = "pending"
    HELD = "held"
    FIRING = "firing"
    RESOLVED = "resolved"


class OperationKind(Enum):
    RESTART = "restart"
    DRAIN = "drain"


class NotificationKind(Enum):
    TRIGGER = "trigger"
    RESOLVE = "resolve"


@dataclass(frozen=True, order=True)
class AlertKey:
    cluster: str
    rule: str
    subject: str  # CLUSTER_SUBJECT or a broker id

    @property
    def dedup_key(self) -> str:
        return f"kaas/{self.cluster}/{self.rule}/{self.subject}"


@dataclass(frozen=True)
class Alert:
    key: AlertKey
    state: AlertState
    since: float  # when the current breach (or, after a hold, its new count) began
    value: float
    severity: Severity
    summary: str
    held_until: float | None = None


@dataclass(frozen=True)
class Operation:
    """KaaS working on a broker, since the moment it was first seen; `ended`: when it was
    first seen gone (None: still running)."""

    broker_id: int
    kind: OperationKind
    since: float
    ended: float | None = None


@dataclass(frozen=True)
class Seen:
    """What the loop remembers of one operation between rounds."""

    since: float
    ended: float | None = None


@dataclass(frozen=True)
class Notification:
    kind: NotificationKind
    alert: Alert


@dataclass(frozen=True)
class Evaluation:
    alerts: dict[AlertKey, Alert]  # every alert not resolved
    notifications: tuple[Notification, ...]
    changed: tuple[Alert, ...]  # every alert whose state changed this round (for the history)


def _hold_until(
    rule: Rule, subject: str, operations: Iterable[Operation], rules: RuleSet
) -> tuple[float | None, bool]:
    """Until when KaaS's own operations excuse a breach of `rule` on `subject` (None: no
    operation covers it), and whether every operation that covers it has ended."""
    expected = {
        OperationKind.RESTART: rules.maintenance.restart_s,
        OperationKind.DRAIN: rules.maintenance.drain_s,
    }
    settle_s = rule.settle_s if rule.settle_s is not None else rules.maintenance.settle_s
    covering = [
        op
        for op in operations
        if rule.scope is not Scope.BROKER
        or rule.held_by is HeldBy.ANY_BROKER
        or str(op.broker_id) == subject
    ]
    ends = [
        op.since + expected[op.kind] if op.ended is None else op.ended + settle_s for op in covering
    ]
    return (max(ends) if ends else None), all(op.ended is not None for op in covering)


def _step(
    rule: Rule,
    key: AlertKey,
    value: float | None,
    previous: Alert | None,
    hold_until: float | None,
    now: float,
    operations_ended: bool = True,
) -> Alert | None:
    """The alert after this round (None: no alert)."""
    if value is None:
        # No data: a firing alert stands (a dead broker's metric stops too). One that never
        # fired goes once no operation holds it: its series is gone, as a recycled VM's
        # broker's is after KaaS replaced it, and nothing can make it fire any more.
        if previous is None or previous.state is AlertState.FIRING:
            return previous
        if hold_until is not None and now < hold_until:
            return previous
        return None
    if not rule.breached(value, key.subject):
        if previous is not None and previous.state is AlertState.FIRING:
            return replace(previous, state=AlertState.RESOLVED, value=value, held_until=None)
        return None
    if previous is not None and previous.state is AlertState.FIRING:
        return replace(previous, value=value)
    base = Alert(key, AlertState.PENDING, now, value, rule.severity, rule.summary)
    if hold_until is not None and now < hold_until:
        since = previous.since if previous is not None else now
        return replace(base, state=AlertState.HELD, since=since, held_until=hold_until)
    if previous is not None and previous.state is AlertState.HELD and operations_ended:
        # The operations ended and their settle time is over: from here the breach gets the
        # rule's own duration, not the time it was held (a replacement's last fetch errors,
        # still inside a per-minute count, fired the moment the hold ended). An operation
        # that outlasts its expected time fires at once instead.
        return base
    since = previous.since if previous is not None else now
    if now - since >= rule.for_s:
        return replace(base, state=AlertState.FIRING, since=since)
    return replace(base, since=since)


def evaluate(
    rules: RuleSet,
    cluster: str,
    values: Mapping[str, Mapping[str, float | None]],
    previous: Mapping[AlertKey, Alert],
    operations: Iterable[Operation],
    now: float,
) -> Evaluation:
    """`values[rule name][subject]`: the latest value of each series of the rule's target
    (a rule missing from `values` had no answer: its alerts stay as they were)."""
    operations = tuple(operations)
    alerts: dict[AlertKey, Alert] = {}
    notifications: list[Notification] = []
    changed: list[Alert] = []
    for rule in rules.rules:
        series = values.get(rule.name)
        known = {k.subject: a for k, a in previous.items() if k.rule == rule.name}
        if series is None:
            alerts.update({a.key: a for a in known.values()})
            continue
        for subject in sorted(set(series) | set(known)):
            key = AlertKey(cluster, rule.name, subject)
            before = known.get(subject)
            hold, ended = _hold_until(rule, subject, operations, rules)
            after = _step(rule, key, series.get(subject), before, hold, now, ended)
            if after is None:
                continue
            if before is None or after.state is not before.state:
                changed.append(after)
                if after.state is AlertState.FIRING:
                    notifications.append(Notification(NotificationKind.TRIGGER, after))
                elif after.state is AlertState.RESOLVED:
                    notifications.append(Notification(NotificationKind.RESOLVE, after))
            if after.state is not AlertState.RESOLVED:
                alerts[key] = after
    # Alerts of rules no longer in the file are dropped without a notification.
    return Evaluation(alerts, tuple(notifications), tuple(changed))


def track_operations(
    seen: Mapping[tuple[int, OperationKind], Seen],
    current: Iterable[tuple[int, OperationKind]],
    now: float,
    settle_s: float = 0.0,
) -> dict[tuple[int, OperationKind], Seen]:
    """When each operation now in progress was first seen, and the ones that ended less than
    `settle_s` ago with when they ended (an operation that ended and starts again starts a
    new count)."""
    running = set(current)
    result = {
        op: Seen(before.since if before is not None and before.ended is None else now)
        for op in running
        for before in [seen.get(op)]
    }
    for op, before in seen.items():
        if op in running:
            continue
        ended = before.ended if before.ended is not None else now
        if now - ended < settle_s:
            result[op] = Seen(before.since, ended)
    return result


def operations_of(seen: Mapping[tuple[int, OperationKind], Seen]) -> list[Operation]:
    return [Operation(b, k, s.since, s.ended) for (b, k), s in sorted(seen.items(), key=str)]


def subject_of(rule: Rule, series_name: str) -> str:
    """A series' subject: the cluster for cluster-scoped rules, `topic:<topic>` for topic
    rules (their series are named `<topic>.<broker id>`), else the series' name (the broker
    id its target's aliasByNode leaves)."""
    match rule.scope:
        case Scope.CLUSTER:
            return CLUSTER_SUBJECT
        case Scope.TOPIC:
            return topic_subject(series_name.partition(".")[0])
        case Scope.BROKER:
            return series_name
