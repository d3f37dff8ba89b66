"""The management plane's alert loop: every interval, for each running cluster whose spec
names a Graphite render API, read every rule's series, read what KaaS is doing (agents
restarting, brokers being drained), evaluate, record the changes and queue notifications.

The loop's own thread; a cluster or Graphite that does not answer costs that cluster one
round, never the loop. A rules file that does not parse is refused with its line and reason
and the running rules are kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import structlog

from management_plane.errors import KaasError
from management_plane.monitoring.evaluate import (
    Alert,
    AlertKey,
    AlertState,
    OperationKind,
    Seen,
    evaluate,
    operations_of,
    track_operations,
)
from management_plane.monitoring.graphite import GraphiteReader
from management_plane.monitoring.history import AlertHistory, alert_json
from management_plane.monitoring.notify import WebhookNotifier
from management_plane.monitoring.rules import DEFAULT_RULES_FILE, RuleSet, load_rules
from management_plane.monitoring.series import rule_values
from planner.contracts.member import MemberState
from planner.contracts.spec import ClusterSpec

log = structlog.get_logger("kaas.alerts")

# Member states in which the agent itself is taking its broker away on purpose.
RESTARTING_STATES = frozenset({MemberState.RESTARTING, MemberState.STARTING})


class ClusterReader(Protocol):
    """What the loop reads of a cluster's ZooKeeper (ClusterIO in production)."""

    def read_spec(self) -> ClusterSpec | None: ...

    def restarting_brokers(self) -> set[int]: ...


def graphite_segment(cluster: str) -> str:
    # The agents' gauge names make every character outside [A-Za-z0-9_-] into '_'.
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in cluster) or "_"


class AlertLoop:
    def __init__(
        self,
        clusters: Callable[[], list[str]],
        reader_of: Callable[[str], ClusterReader],
        history: AlertHistory,
        notifier: WebhookNotifier | None,
        rules_file: Path = DEFAULT_RULES_FILE,
        graphite_of: Callable[[str], GraphiteReader] = GraphiteReader,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.clusters = clusters
        self.reader_of = reader_of
        self.history = history
        self.notifier = notifier
        self.rules_file = rules_file
        self.graphite_of = graphite_of
        self.clock = clock
        self.rules: RuleSet = load_rules(rules_file)  # a bad file at start: kaas serve refuses
        self.rules_problem: str | None = None
        self._rules_mtime = rules_file.stat().st_mtime
        self._alerts: dict[str, dict[AlertKey, Alert]] = {}
        self._operations: dict[str, dict[tuple[int, OperationKind], Seen]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kaas-alerts", daemon=True)

    # -- rules ----------------------------------------------------------------------------

    def reload_rules(self) -> str | None:
        """Read the rules file again; on a refusal keep the running rules and return why."""
        try:
            self.rules = load_rules(self.rules_file)
        except KaasError as exc:
            self.rules_problem = str(exc)
            log.error("alert_rules_refused", problem=str(exc), kept=len(self.rules.rules))
            return str(exc)
        self.rules_problem = None
        log.info("alert_rules_loaded", rules=len(self.rules.rules))
        return None

    def _reload_if_changed(self) -> None:
        try:
            mtime = self.rules_file.stat().st_mtime
        except OSError:
            return
        if mtime != self._rules_mtime:
            self._rules_mtime = mtime
            self.reload_rules()

    # -- evaluation -----------------------------------------------------------------------

    def evaluate_cluster(self, cluster: str) -> None:
        reader = self.reader_of(cluster)
        spec = reader.read_spec()
        if spec is None or spec.monitoring is None:
            return
        now = self.clock()
        current = [(b, OperationKind.RESTART) for b in reader.restarting_brokers()]
        current += [(b, OperationKind.DRAIN) for b in spec.draining_broker_ids]
        seen = track_operations(
            self._operations.get(cluster, {}), current, now, self.rules.longest_settle_s()
        )
        self._operations[cluster] = seen
        graphite = self.graphite_of(spec.monitoring.graphite_url)
        window = f"-{int(max(60, 3 * self.rules.interval_s))}s"
        values: dict[str, dict[str, float | None]] = {}
        segment = graphite_segment(cluster)
        for rule in self.rules.rules:
            try:
                read_back = f"-{int(rule.window_s)}s" if rule.window_s is not None else window
                series = graphite.timed_series(rule.target_for(segment), read_back)
            except KaasError as exc:
                log.warning("alert_rule_unread", cluster=cluster, rule=rule.name, error=str(exc))
                continue
            values[rule.name] = rule_values(rule, series)
        with self._lock:
            previous = self._alerts.get(cluster, {})
        result = evaluate(self.rules, cluster, values, previous, operations_of(seen), now)
        with self._lock:
            self._alerts[cluster] = result.alerts
        self.history.record(result.changed, now)
        for alert in result.changed:
            log.info(
                "alert_state",
                cluster=cluster,
                rule=alert.key.rule,
                subject=alert.key.subject,
                state=alert.state.value,
                value=alert.value,
            )
        if self.notifier is not None:
            for notification in result.notifications:
                self.notifier.submit(notification)

    def run_once(self) -> None:
        self._reload_if_changed()
        for cluster in self.clusters():
            try:
                self.evaluate_cluster(cluster)
            except Exception as exc:  # one cluster's trouble never stops the others
                log.warning("alert_round_failed", cluster=cluster, error=str(exc))

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.clock()
            self.run_once()
            self._stop.wait(max(0.0, self.rules.interval_s - (self.clock() - started)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        if self.notifier is not None:
            self.notifier.close()

    # -- what the API shows ---------------------------------------------------------------

    def active(self, cluster: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            alerts = [
                a
                for name, by_key in self._alerts.items()
                if cluster is None or name == cluster
                for a in by_key.values()
            ]
        order = {AlertState.FIRING: 0, AlertState.HELD: 1, AlertState.PENDING: 2}
        alerts.sort(key=lambda a: (order.get(a.state, 3), a.key))
        return [alert_json(a) for a in alerts]
