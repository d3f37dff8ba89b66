"""The synthetic heartbeat in `kaas serve` (`--heartbeat`): for each running cluster whose
spec names a monitoring pipeline, a heartbeat tenant onboarded through the tenant service
(the same journaled onboarding a customer gets), its topic with a partition per broker, and
every `interval_s` one round of the probe; the per-broker figures go to the spec's statsd.

The tenant's password exists only in the onboarding's answer: it is kept in
`<service home>/heartbeat/<cluster>.json` (0600). A tenant whose file is gone cannot be
used again: it is deleted and onboarded anew.

Its own thread; a cluster whose heartbeat cannot start or fails costs that cluster the
round, never the loop, and is tried again after `retry_s`.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from management_plane.errors import ApiError, KaasError
from management_plane.monitoring.alert_loop import graphite_segment
from management_plane.monitoring.heartbeat import (
    AVAILABILITY_WINDOW_S,
    Sample,
    broker_figures,
    heartbeat_gauges,
    partitions_for,
    tenant_name,
    topic_name,
)
from management_plane.service.auth import Caller
from management_plane.tenants.topics import TopicRequest
from planner.contracts.spec import ClusterSpec
from planner.pki.client_settings import TenantClient
from planner.private_files import private_dir, write_private

log = structlog.get_logger("kaas.heartbeat")

HEARTBEAT_CALLER = Caller(key_id="heartbeat", name="kaas-heartbeat", role="admin", tenant=None)
HEARTBEAT_PLAN = "small"


class Tenants(Protocol):
    """What the loop asks of the tenant service (TenantService in production)."""

    def create(
        self, cluster: str, name: str, plan: str | dict[str, Any], prefix: str | None, who: Caller
    ) -> Any: ...

    def create_topic(
        self, cluster: str, name: str, request: TopicRequest, who: Caller
    ) -> tuple[Any, int]: ...

    def delete(self, cluster: str, name: str, who: Caller) -> int: ...

    def list_topics(self, cluster: str, name: str) -> Sequence[Any]: ...

    def exists(self, cluster: str, name: str) -> bool: ...


class Probe(Protocol):
    def round(self) -> list[Sample]: ...

    def close(self) -> None: ...


class Gauges(Protocol):
    def gauge(self, name: str, value: float) -> None: ...


@dataclass(frozen=True)
class Credential:
    tenant: str
    topic: str
    group: str
    client: TenantClient

    def to_json(self) -> dict[str, str]:
        return {
            "tenant": self.tenant,
            "topic": self.topic,
            "group": self.group,
            "bootstrap_servers": self.client.bootstrap_servers,
            "username": self.client.username,
            "password": self.client.password,
            "ca_certificate": self.client.ca_pem,
        }


def parse_credential(text: str) -> Credential:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise KaasError("heartbeat credential: not an object")
    try:
        return Credential(
            str(value["tenant"]),
            str(value["topic"]),
            str(value["group"]),
            TenantClient(
                str(value["bootstrap_servers"]),
                str(value["username"]),
                str(value["password"]),
                str(value["ca_certificate"]),
            ),
        )
    except KeyError as exc:
        raise KaasError(f"heartbeat credential: {exc.args[0]} is missing") from None


@dataclass
class _ClusterHeartbeat:
    probe: Probe | None = None
    samples: deque[Sample] | None = None
    retry_at: float = 0.0
    problem: str | None = None
    spec: ClusterSpec | None = None
    spec_read_at: float | None = None


class HeartbeatLoop:
    def __init__(
        self,
        home: Path,
        clusters: Callable[[], list[str]],
        spec_of: Callable[[str], ClusterSpec | None],
        tenants: Tenants,
        probe_of: Callable[[str, Credential], Probe],
        gauges_of: Callable[[str, int], Gauges],
        interval_s: float = 3.0,
        retry_s: float = 30.0,
        spec_every_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.folder = home / "heartbeat"
        self.clusters = clusters
        self.spec_of = spec_of
        self.tenants = tenants
        self.probe_of = probe_of
        self.gauges_of = gauges_of
        self.interval_s = interval_s
        self.retry_s = retry_s
        self.spec_every_s = spec_every_s
        self.clock = clock
        self._state: dict[str, _ClusterHeartbeat] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kaas-heartbeat", daemon=True)

    # -- the tenant and its topic ---------------------------------------------------------

    def _credential_file(self, cluster: str) -> Path:
        return self.folder / f"{graphite_segment(cluster)}.json"

    def credential(self, cluster: str) -> Credential:
        """The cluster's heartbeat tenant, onboarded when there is none this service can use."""
        path = self._credential_file(cluster)
        if path.exists():
            return parse_credential(path.read_text())
        name = tenant_name(cluster)
        if self.tenants.exists(cluster, name):
            # Its password was only in a file that is gone: start over.
            self.tenants.delete(cluster, name, HEARTBEAT_CALLER)
        onboarded = self.tenants.create(cluster, name, HEARTBEAT_PLAN, None, HEARTBEAT_CALLER)
        connection = onboarded.connection
        credential = Credential(
            name,
            topic_name(connection.topic_prefix),
            f"{connection.topic_prefix}heartbeat-probe",
            TenantClient(
                connection.bootstrap_servers,
                connection.username,
                onboarded.password,
                connection.ca_certificate,
            ),
        )
        write_private(private_dir(self.folder) / path.name, json.dumps(credential.to_json()))
        log.info("heartbeat_tenant_onboarded", cluster=cluster, tenant=name)
        return credential

    def ensure_topic(self, cluster: str, spec: ClusterSpec, credential: Credential) -> None:
        """The heartbeat topic, a partition per broker, made as the tenant's own (made
        already: nothing to do, and no operation logged)."""
        if credential.topic in {
            t.name for t in self.tenants.list_topics(cluster, credential.tenant)
        }:
            return
        request = TopicRequest(credential.topic, partitions_for(spec.broker_count))
        try:
            self.tenants.create_topic(cluster, credential.tenant, request, HEARTBEAT_CALLER)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return
        log.info("heartbeat_topic_created", cluster=cluster, topic=credential.topic)

    # -- rounds ---------------------------------------------------------------------------

    def run_cluster(self, cluster: str, now: float) -> None:
        state = self._state.setdefault(cluster, _ClusterHeartbeat())
        # The spec says where statsd is; it is read again now and then, not every round.
        if state.spec_read_at is None or now - state.spec_read_at >= self.spec_every_s:
            state.spec, state.spec_read_at = self.spec_of(cluster), now
        spec = state.spec
        if spec is None or spec.monitoring is None:
            return
        if state.probe is None:
            if now < state.retry_at:
                return
            try:
                credential = self.credential(cluster)
                self.ensure_topic(cluster, spec, credential)
                state.probe = self.probe_of(cluster, credential)
                state.samples = deque()
            except Exception as exc:  # the tenant service's refusals and Kafka's errors
                state.retry_at = now + self.retry_s
                self._problem(state, cluster, f"heartbeat not started: {exc}")
                return
        assert state.samples is not None
        try:
            state.samples.extend(state.probe.round())
        except Exception as exc:  # a round that failed as a whole: a probe made anew
            self._problem(state, cluster, f"heartbeat round failed: {exc}")
            state.probe.close()
            state.probe = None
            return
        while state.samples and now - state.samples[0].sent_at > AVAILABILITY_WINDOW_S:
            state.samples.popleft()
        figures = broker_figures(state.samples, self.clock())
        sink = self.gauges_of(spec.monitoring.statsd_host, spec.monitoring.statsd_port)
        for name, value in heartbeat_gauges(graphite_segment(cluster), figures):
            sink.gauge(name, value)
        if state.problem is not None:
            log.info("heartbeat_running", cluster=cluster)
            state.problem = None

    def _problem(self, state: _ClusterHeartbeat, cluster: str, problem: str) -> None:
        if problem != state.problem:  # once per change, not every round
            log.warning("heartbeat_problem", cluster=cluster, problem=problem)
        state.problem = problem

    def run_once(self) -> None:
        running = set(self.clusters())
        for cluster in sorted(running):
            self.run_cluster(cluster, self.clock())
        for cluster in set(self._state) - running:
            gone = self._state.pop(cluster)
            if gone.probe is not None:
                gone.probe.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.clock()
            try:
                self.run_once()
            except Exception as exc:  # the database or a spec read: the next round tries again
                log.warning("heartbeat_loop_failed", error=str(exc))
            self._stop.wait(max(0.0, self.interval_s - (self.clock() - started)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        for state in self._state.values():
            if state.probe is not None:
                state.probe.close()
