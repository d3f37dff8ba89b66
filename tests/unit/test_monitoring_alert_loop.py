"""The alert loop against fakes of the cluster and Graphite, the history table on SQLite,
and the webhook notifier against an in-process HTTP receiver (and a closed port)."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import create_engine

from management_plane.monitoring.alert_loop import AlertLoop
from management_plane.monitoring.evaluate import (
    Alert,
    AlertKey,
    AlertState,
    Notification,
    NotificationKind,
)
from management_plane.monitoring.history import AlertHistory
from management_plane.monitoring.notify import WebhookNotifier, backoff_s, event_body
from management_plane.monitoring.rules import Severity
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.spec import ClusterSpec

pytestmark = pytest.mark.unit

RULES = """schema_version = 1
interval_s = 10
[maintenance]
restart_s = 100

[[rules]]
name = "urp"
target = "sumSeries(kaas.{cluster}.brokers.*.under_replicated_partitions)"
op = ">"
threshold = 0
for_s = 20
severity = "critical"
"""


class FakeReader:
    def __init__(self) -> None:
        self.restarting: set[int] = set()
        self.draining: frozenset[int] = frozenset()

    def read_spec(self) -> ClusterSpec:
        return ClusterSpec(
            "c1",
            "3.9.2",
            3,
            ("a",),
            monitoring=MonitoringTargets("127.0.0.1", 8125, "http://graphite"),
            draining_broker_ids=self.draining,
        )

    def restarting_brokers(self) -> set[int]:
        return self.restarting


class FakeGraphite:
    value: ClassVar[float | None] = 0.0
    targets: ClassVar[list[str]] = []
    windows: ClassVar[dict[str, str]] = {}

    def __init__(self, url: str) -> None:
        assert url == "http://graphite"

    def timed_series(self, target: str, since: str) -> dict[str, list[tuple[float | None, float]]]:
        FakeGraphite.targets.append(target)
        FakeGraphite.windows[target] = since
        return {target: [(FakeGraphite.value, 0.0)]}


class Receiver:
    """A local webhook receiver: notes each POST's body and when it came, and answers every
    one with `status` (202: accepted; 503: refused, to be retried)."""

    def __init__(self, status: int = 202) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.attempts: list[float] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner.attempts.append(time.monotonic())
                length = int(self.headers["Content-Length"])
                owner.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v2/enqueue"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _wait(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not check():
        time.sleep(0.02)


def _loop(
    tmp_path: Path, notifier: WebhookNotifier | None
) -> tuple[AlertLoop, FakeReader, list[float]]:
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    reader = FakeReader()
    now = [1000.0]
    loop = AlertLoop(
        lambda: ["c1"],
        lambda _cluster: reader,
        AlertHistory(create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")),
        notifier,
        rules,
        graphite_of=FakeGraphite,  # type: ignore[arg-type]
        clock=lambda: now[0],
    )
    return loop, reader, now


def test_loop_fires_once_resolves_and_records_history(tmp_path: Path) -> None:
    receiver = Receiver()
    notifier = WebhookNotifier(receiver.url, "routing-1")
    loop, _reader, now = _loop(tmp_path, notifier)
    try:
        for t, value in [
            (0, 0.0),
            (10, 2.0),
            (20, 2.0),
            (30, 2.0),
            (40, 1.0),
            (50, 0.0),
            (60, 0.0),
        ]:
            now[0] = 1000.0 + t
            FakeGraphite.value = value
            loop.run_once()
        _wait(lambda: len(receiver.bodies) >= 2)
    finally:
        notifier.close()
        receiver.close()
    assert "sumSeries(kaas.c1.brokers.*.under_replicated_partitions)" in FakeGraphite.targets
    assert [b["event_action"] for b in receiver.bodies] == ["trigger", "resolve"]
    assert {b["dedup_key"] for b in receiver.bodies} == {"kaas/c1/urp/cluster"}
    assert receiver.bodies[0]["routing_key"] == "routing-1"
    assert receiver.bodies[0]["payload"]["severity"] == "critical"
    states = [(e["at"] - 1000.0, e["state"]) for e in loop.history.entries("c1")]
    assert states == [(10, "pending"), (30, "firing"), (50, "resolved")]
    assert loop.active() == []


def test_a_rule_with_its_own_window_is_read_back_that_far(tmp_path: Path) -> None:
    loop, _reader, _now = _loop(tmp_path, None)
    (tmp_path / "rules.toml").write_text(
        RULES
        + """
[[rules]]
name = "audit"
target = "kaas.{cluster}.audit.completeness_percent"
op = "<"
threshold = 100
window_s = 86400
severity = "critical"
"""
    )
    assert loop.reload_rules() is None
    FakeGraphite.value = 99.0
    loop.run_once()
    assert FakeGraphite.windows["kaas.c1.audit.completeness_percent"] == "-86400s"
    assert (
        FakeGraphite.windows["sumSeries(kaas.c1.brokers.*.under_replicated_partitions)"] == "-60s"
    )
    states = {a["rule"]: a["state"] for a in loop.active()}
    assert states["audit"] == "firing"  # for_s 0: at once


def test_loop_holds_while_an_agent_restarts_its_broker(tmp_path: Path) -> None:
    loop, reader, now = _loop(tmp_path, None)
    reader.restarting = {1}
    FakeGraphite.value = 3.0
    for t in (0, 10, 20, 30, 40):
        now[0] = 1000.0 + t
        loop.run_once()
    (alert,) = loop.active("c1")
    assert alert["state"] == "held" and alert["held_until"] == 1100.0
    now[0] = 1100.0
    loop.run_once()
    assert loop.active("c1")[0]["state"] == "firing"


def test_loop_holds_while_the_spec_drains_a_broker_then_fires_past_drain_s(
    tmp_path: Path,
) -> None:
    """A drain is read from the spec (draining_broker_ids), not from the agents' states: it
    holds for [maintenance] drain_s (3600 by default), far longer than a restart's 100."""
    loop, reader, now = _loop(tmp_path, None)
    reader.draining = frozenset({2})
    FakeGraphite.value = 3.0
    for t in (0, 10, 150, 1800, 3590):
        now[0] = 1000.0 + t
        loop.run_once()
    (alert,) = loop.active("c1")
    assert alert["state"] == "held" and alert["held_until"] == 4600.0
    now[0] = 4600.0
    loop.run_once()
    assert loop.active("c1")[0]["state"] == "firing"
    states = [e["state"] for e in loop.history.entries("c1")]
    assert states == ["held", "firing"]


def test_bad_rules_file_is_refused_and_running_rules_kept(tmp_path: Path) -> None:
    loop, _reader, _now = _loop(tmp_path, None)
    loop.rules_file.write_text(RULES.replace('"critical"', '"loud"'))
    problem = loop.reload_rules()
    assert problem is not None and "line 6: rule 'urp': severity must be one of" in problem
    assert [r.name for r in loop.rules.rules] == ["urp"]
    assert loop.rules_problem == problem


def _alert(kind: NotificationKind) -> Notification:
    key = AlertKey("c1", "urp", "cluster")
    return Notification(kind, Alert(key, AlertState.FIRING, 5.0, 2.0, Severity.CRITICAL, "urp"))


def test_event_bodies_follow_the_events_api_v2() -> None:
    trigger = event_body(_alert(NotificationKind.TRIGGER), "k")
    assert trigger["event_action"] == "trigger" and trigger["dedup_key"] == "kaas/c1/urp/cluster"
    assert set(trigger["payload"]) >= {"summary", "source", "severity"}
    resolve = event_body(_alert(NotificationKind.RESOLVE), "k")
    assert resolve == {
        "routing_key": "k",
        "event_action": "resolve",
        "dedup_key": "kaas/c1/urp/cluster",
    }


def test_backoff_doubles_up_to_the_cap() -> None:
    assert [backoff_s(n, 1.0, 5.0) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_unreachable_webhook_is_retried_with_backoff_without_blocking_submit() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    outcomes: list[tuple[str, str, bool, int]] = []
    notifier = WebhookNotifier(
        f"http://127.0.0.1:{closed_port}/",
        "k",
        backoff_base_s=0.05,
        backoff_cap_s=0.2,
        max_attempts=4,
        on_outcome=lambda *outcome: outcomes.append(outcome),
    )
    try:
        started = time.monotonic()
        for _ in range(20):
            notifier.submit(_alert(NotificationKind.TRIGGER))
        assert time.monotonic() - started < 0.1  # queued, not sent, by the caller
        _wait(lambda: len(outcomes) >= 1)
        elapsed = time.monotonic() - started
    finally:
        notifier.close(timeout_s=1.0)
    assert outcomes[0] == ("kaas/c1/urp/cluster", "trigger", False, 4)
    assert elapsed >= 0.05 + 0.1 + 0.2  # three waits between four attempts


class TogglingGraphite:
    """Graphite answering a breach, then a clear, then a breach...: every round of a for_s 0
    rule changes state and queues a notification. Counts the rounds."""

    reads: ClassVar[list[float]] = []

    def __init__(self, url: str) -> None:
        assert url == "http://graphite"

    def timed_series(self, target: str, since: str) -> dict[str, list[tuple[float | None, float]]]:
        TogglingGraphite.reads.append(time.monotonic())
        value = 2.0 if len(TogglingGraphite.reads) % 2 else 0.0
        return {target: [(value, 0.0)]}


FAST_RULES = RULES.replace("interval_s = 10", "interval_s = 0.2").replace("for_s = 20", "for_s = 0")


def _running_loop(tmp_path: Path, notifier: WebhookNotifier) -> AlertLoop:
    rules = tmp_path / "rules.toml"
    rules.write_text(FAST_RULES)
    TogglingGraphite.reads = []
    loop = AlertLoop(
        lambda: ["c1"],
        lambda _cluster: FakeReader(),
        AlertHistory(create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")),
        notifier,
        rules,
        graphite_of=TogglingGraphite,  # type: ignore[arg-type]
    )
    loop.start()
    return loop


def test_a_refusing_webhook_backs_off_while_the_loop_keeps_its_interval(tmp_path: Path) -> None:
    receiver = Receiver(status=503)
    outcomes: list[tuple[str, str, bool, int]] = []
    notifier = WebhookNotifier(
        receiver.url,
        "k",
        backoff_base_s=0.2,
        backoff_cap_s=5.0,
        max_attempts=100,
        on_outcome=lambda *outcome: outcomes.append(outcome),
    )
    loop = _running_loop(tmp_path, notifier)
    try:
        _wait(lambda: len(receiver.attempts) >= 4, timeout=10)
        time.sleep(0.5)
    finally:
        loop.stop()
        receiver.close()
    # Four attempts of the first notification spaced 0.2, 0.4, 0.8 s apart (at least)...
    gaps = [b - a for a, b in itertools.pairwise(receiver.attempts)]
    assert len(gaps) >= 3 and all(
        g >= 0.95 * w for g, w in zip(gaps[:3], (0.2, 0.4, 0.8), strict=True)
    ), gaps
    assert outcomes == []  # still retrying: nothing delivered, nothing dropped yet
    # ...while the loop went on every 0.2 s: over 1.4 s and more, at least 6 rounds, each
    # queueing its notification behind the undelivered first one.
    span = TogglingGraphite.reads[-1] - TogglingGraphite.reads[0]
    assert span >= 1.4 and len(TogglingGraphite.reads) >= 6, TogglingGraphite.reads
    assert max(b - a for a, b in itertools.pairwise(TogglingGraphite.reads)) < 1.0
    assert len(loop.history.entries("c1")) >= 5


def test_a_webhook_that_never_answers_does_not_stall_the_loop(tmp_path: Path) -> None:
    """A receiver whose port accepts the connection and never answers: the notifier's POST
    waits for its 30 s timeout; the loop meanwhile completes round after round."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # connections complete in the kernel's backlog; none is ever read
    notifier = WebhookNotifier(
        f"http://127.0.0.1:{silent.getsockname()[1]}/", "k", timeout_s=30.0, max_attempts=2
    )
    outcomes: list[tuple[str, str, bool, int]] = []
    notifier.on_outcome = lambda *outcome: outcomes.append(outcome)
    loop = _running_loop(tmp_path, notifier)
    try:
        _wait(lambda: len(TogglingGraphite.reads) >= 8, timeout=10)
        rounds = len(TogglingGraphite.reads)
        span = TogglingGraphite.reads[-1] - TogglingGraphite.reads[0]
    finally:
        silent.close()  # resets the waiting connection: the notifier's thread ends
        loop.stop()
    assert rounds >= 8 and span < 5.0, TogglingGraphite.reads
    assert outcomes == []  # the first POST was still waiting for its answer
    assert len(loop.history.entries("c1")) >= 7
