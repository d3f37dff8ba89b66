"""Notifications to a PagerDuty Events API v2-shaped webhook: trigger with the alert's dedup
key, resolve with the same key. Sending runs on its own thread with retries and exponential
backoff: `submit` only queues, so an unreachable webhook never delays the evaluation."""

from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from management_plane.monitoring.evaluate import CLUSTER_SUBJECT, Notification, NotificationKind
from management_plane.monitoring.rules import topic_of

log = structlog.get_logger("kaas.alerts")


def subject_text(subject: str) -> str:
    """An alert's subject as a sentence names it."""
    topic = topic_of(subject)
    if topic is not None:
        return f"topic {topic}"
    return "the cluster" if subject == CLUSTER_SUBJECT else f"broker {subject}"


def event_body(notification: Notification, routing_key: str) -> dict[str, Any]:
    """The Events API v2 body of one notification. Pure."""
    alert = notification.alert
    body: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": notification.kind.value,
        "dedup_key": alert.key.dedup_key,
    }
    if notification.kind is NotificationKind.TRIGGER:
        subject = subject_text(alert.key.subject)
        body["payload"] = {
            "summary": f"{alert.key.cluster}: {alert.summary} ({subject}, value {alert.value:g})",
            "source": f"kaas/{alert.key.cluster}",
            "severity": alert.severity.value,
            "component": subject,
            "group": alert.key.cluster,
            "class": alert.key.rule,
            "custom_details": {"value": alert.value, "breached_since": alert.since},
        }
    return body


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """The wait before retry `attempt` (1-based): base, 2 base, 4 base, ... at most cap."""
    return float(min(cap_s, base_s * 2 ** (attempt - 1)))


@dataclass
class _Pending:
    body: dict[str, Any]
    attempts: int = 0


class WebhookNotifier:
    def __init__(
        self,
        url: str,
        routing_key: str,
        *,
        timeout_s: float = 5.0,
        backoff_base_s: float = 1.0,
        backoff_cap_s: float = 30.0,
        max_attempts: int = 10,
        on_outcome: Callable[[str, str, bool, int], None] | None = None,
    ) -> None:
        self.url = url
        self.routing_key = routing_key
        self.timeout_s = timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.max_attempts = max_attempts
        self.on_outcome = on_outcome  # (dedup key, event action, delivered, attempts)
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kaas-alert-notify", daemon=True)
        self._thread.start()

    def submit(self, notification: Notification) -> None:
        self._queue.put(_Pending(event_body(notification, self.routing_key)))

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _post(self, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
            if not 200 <= answer.status < 300:
                raise OSError(f"HTTP {answer.status}")

    def _run(self) -> None:
        # One at a time, in order: a resolve never overtakes its trigger.
        while not self._stop.is_set():
            item = self._queue.get()
            if item is None:
                return
            while not self._stop.is_set():
                item.attempts += 1
                try:
                    self._post(item.body)
                except (OSError, urllib.error.URLError) as exc:
                    if item.attempts >= self.max_attempts:
                        log.error(
                            "alert_notification_dropped",
                            dedup_key=item.body["dedup_key"],
                            attempts=item.attempts,
                            error=str(exc),
                        )
                        self._outcome(item, delivered=False)
                        break
                    wait = backoff_s(item.attempts, self.backoff_base_s, self.backoff_cap_s)
                    log.warning(
                        "alert_notification_retry",
                        dedup_key=item.body["dedup_key"],
                        attempt=item.attempts,
                        retry_in_s=wait,
                        error=str(exc),
                    )
                    self._stop.wait(wait)
                    continue
                log.info(
                    "alert_notification_sent",
                    dedup_key=item.body["dedup_key"],
                    action=item.body["event_action"],
                    attempts=item.attempts,
                )
                self._outcome(item, delivered=True)
                break

    def _outcome(self, item: _Pending, delivered: bool) -> None:
        if self.on_outcome is not None:
            self.on_outcome(
                item.body["dedup_key"], item.body["event_action"], delivered, item.attempts
            )
