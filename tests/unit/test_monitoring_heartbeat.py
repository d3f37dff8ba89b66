"""The synthetic heartbeat: its pure parts table-tested (names, messages, the partitions
each broker's heartbeat goes to, per-broker figures from samples, the SLO's arithmetic),
and the loop in kaas serve against fakes of the tenant service, the probe and statsd."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from management_plane.errors import ApiError
from management_plane.monitoring.heartbeat import (
    ACCEPTED_WINDOW_S,
    AVAILABILITY_WINDOW_S,
    BrokerFigures,
    HeartbeatMessage,
    Sample,
    broker_figures,
    decode_message,
    heartbeat_gauges,
    probe_targets,
    slo_status,
    tenant_name,
)
from management_plane.monitoring.heartbeat_loop import Credential, HeartbeatLoop
from management_plane.service.auth import Caller
from management_plane.tenants.model import PLANS, new_tenant
from management_plane.tenants.topics import ExistingTopic, TopicRequest
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.spec import ClusterSpec

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("cluster", ["shared", "Prod.EU_1", "a" * 60, "x", "--weird--", "agents"])
def test_tenant_name_is_a_valid_tenant_name(cluster: str) -> None:
    name = tenant_name(cluster)
    tenant = new_tenant(name, PLANS["small"])  # the onboarding's own checks
    assert tenant.name == name and len(name) <= 32


def test_tenant_names_of_long_clusters_differ() -> None:
    assert tenant_name("a" * 40 + "1") != tenant_name("a" * 40 + "2")


def test_message_round_trip_and_foreign_messages() -> None:
    message = HeartbeatMessage("c", 2, 1_700_000_000_123, 7)
    assert decode_message(message.encode()) == message
    for raw in (b"", b"not json", b"[]", b'{"schema_version": 2}', None):
        assert decode_message(raw) is None
    bad_broker = json.dumps(
        {"schema_version": 1, "cluster": "c", "broker": True, "sent_ms": 1, "seq": 1}
    ).encode()
    assert decode_message(bad_broker) is None


@pytest.mark.parametrize(
    ("leaders", "targets"),
    [
        ({0: 1, 1: 2, 2: 3}, {1: 0, 2: 1, 3: 2}),
        # broker 1 leads two (after broker 3 lost its leadership); 3 leads none: no heartbeat
        ({0: 1, 1: 2, 2: 1}, {1: 0, 2: 1}),
        ({0: -1, 1: 2}, {2: 1}),
        ({}, {}),
    ],
)
def test_probe_targets(leaders: dict[int, int], targets: dict[int, int]) -> None:
    assert probe_targets(leaders) == targets


def _s(broker: int, at: float, accepted: bool, latency: float | None) -> Sample:
    return Sample(broker, at, accepted, latency)


@pytest.mark.parametrize(
    ("samples", "now", "expected"),
    [
        pytest.param([], 100.0, {}, id="nothing"),
        pytest.param(
            [_s(1, 95, True, 0.01), _s(1, 98, True, 0.02)],
            100.0,
            {1: BrokerFigures(2, 1.0, 1.0, 20.0)},
            id="healthy",
        ),
        pytest.param(
            [_s(1, 80, True, 0.01), _s(1, 92, False, None), _s(1, 97, False, None)],
            100.0,
            {1: BrokerFigures(0, 0.0, 1 / 3, 10.0)},
            id="paused: none accepted over the window",
        ),
        pytest.param(
            [_s(1, 95, True, 1.5), _s(1, 98, True, 0.5)],
            100.0,
            {1: BrokerFigures(2, 1.0, 0.5, 500.0)},
            id="slow heartbeats count against availability",
        ),
        pytest.param(
            [_s(3, 100 - ACCEPTED_WINDOW_S - 1, True, 0.1)],
            100.0,
            {},
            id="a broker that leads no heartbeat partition any more gets no figures",
        ),
        pytest.param(
            [_s(1, 100 - AVAILABILITY_WINDOW_S - 1, False, None), _s(1, 99, True, 0.1)],
            100.0,
            {1: BrokerFigures(1, 1.0, 1.0, 100.0)},
            id="availability forgets samples past its window",
        ),
    ],
)
def test_broker_figures(
    samples: list[Sample], now: float, expected: dict[int, BrokerFigures]
) -> None:
    assert broker_figures(samples, now) == expected


def test_gauge_names() -> None:
    gauges = heartbeat_gauges("c", {2: BrokerFigures(0, 0.0, 0.5, None)})
    assert gauges == [
        ("c.brokers.2.heartbeat.accepted", 0.0),
        ("c.brokers.2.heartbeat.success", 0.0),
        ("c.brokers.2.heartbeat.availability", 0.5),
    ]


@pytest.mark.parametrize(
    ("good", "total", "availability", "allowed", "left", "met"),
    [
        (0, 0, 1.0, 0.0, 1.0, True),
        (1_000_000, 1_000_000, 1.0, 100.0, 1.0, True),
        (999_950, 1_000_000, 0.99995, 100.0, 0.5, True),
        (999_900, 1_000_000, 0.9999, 100.0, 0.0, True),
        (999_800, 1_000_000, 0.9998, 100.0, -1.0, False),
    ],
)
def test_slo_arithmetic(
    good: int, total: int, availability: float, allowed: float, left: float, met: bool
) -> None:
    status = slo_status(good, total)
    assert status.availability == pytest.approx(availability)
    assert status.allowed_bad == pytest.approx(allowed)
    assert status.budget_left == pytest.approx(left)
    assert status.met is met


@pytest.mark.parametrize(("good", "total"), [(2, 1), (-1, 3), (0, -1)])
def test_slo_refuses_impossible_counts(good: int, total: int) -> None:
    with pytest.raises(ValueError, match="good"):
        slo_status(good, total)


# -- the loop ---------------------------------------------------------------------------


class FakeTenants:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.existing: set[str] = set()
        self.topics: set[str] = set()

    def create(
        self, cluster: str, name: str, plan: str | dict[str, Any], prefix: str | None, who: Caller
    ) -> Any:
        self.calls.append(("create", cluster, name, str(plan)))
        self.existing.add(name)

        class Connection:
            bootstrap_servers = "127.0.0.1:9094"
            username = f"tenant-{name}"
            topic_prefix = f"{name}."
            ca_certificate = "PEM"

        class Onboarded:
            connection = Connection()
            password = "secret-password"

        return Onboarded()

    def create_topic(
        self, cluster: str, name: str, request: TopicRequest, who: Caller
    ) -> tuple[Any, int]:
        self.calls.append(("topic", request.name, str(request.partitions)))
        if request.name in self.topics:
            raise ApiError(409, "conflict", "exists")
        self.topics.add(request.name)
        return None, 1

    def list_topics(self, cluster: str, name: str) -> list[ExistingTopic]:
        return [ExistingTopic(t, 3, 3) for t in sorted(self.topics)]

    def delete(self, cluster: str, name: str, who: Caller) -> int:
        self.calls.append(("delete", name))
        self.existing.discard(name)
        return 1

    def exists(self, cluster: str, name: str) -> bool:
        return name in self.existing


class FakeProbe:
    def __init__(self, rounds: list[list[Sample]]) -> None:
        self.rounds = rounds
        self.closed = False

    def round(self) -> list[Sample]:
        if not self.rounds:
            raise RuntimeError("broker gone")
        return self.rounds.pop(0)

    def close(self) -> None:
        self.closed = True


class FakeGauges:
    def __init__(self) -> None:
        self.sent: list[tuple[str, float]] = []

    def gauge(self, name: str, value: float) -> None:
        self.sent.append((name, value))


SPEC = ClusterSpec(
    "c1", "3.9.2", 3, ("a",), monitoring=MonitoringTargets("127.0.0.1", 8125, "http://g")
)


def _loop(
    tmp_path: Path, tenants: FakeTenants, probe: FakeProbe, now: list[float]
) -> tuple[HeartbeatLoop, FakeGauges, list[Credential]]:
    gauges = FakeGauges()
    made: list[Credential] = []

    def probe_of(cluster: str, credential: Credential) -> FakeProbe:
        made.append(credential)
        return probe

    loop = HeartbeatLoop(
        tmp_path,
        lambda: ["c1"],
        lambda _c: SPEC,
        tenants,
        probe_of,
        lambda host, port: gauges,
        clock=lambda: now[0],
    )
    return loop, gauges, made


def test_loop_onboards_once_keeps_the_password_private_and_sends_gauges(tmp_path: Path) -> None:
    tenants = FakeTenants()
    now = [1000.0]
    rounds = [[_s(0, 1000.0, True, 0.02), _s(1, 1000.0, True, 0.03)]]
    loop, gauges, made = _loop(tmp_path, tenants, FakeProbe(rounds), now)
    loop.run_once()
    name = tenant_name("c1")
    assert tenants.calls == [("create", "c1", name, "small"), ("topic", f"{name}.heartbeat", "3")]
    (credential,) = made
    assert credential.client.password == "secret-password"
    stored = tmp_path / "heartbeat" / "c1.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["password"] == "secret-password"
    assert ("c1.brokers.0.heartbeat.accepted", 1.0) in gauges.sent
    assert ("c1.brokers.1.heartbeat.latency_ms", 30.0) in gauges.sent

    # A new service (same home): the stored credential, no second onboarding, and the topic
    # made already is not asked for again (no failed operation in the log).
    again = FakeTenants()
    again.existing.add(name)
    again.topics.add(f"{name}.heartbeat")
    loop2, _gauges, made2 = _loop(tmp_path, again, FakeProbe([[]]), now)
    loop2.run_once()
    assert again.calls == []
    assert made2[0].client.password == "secret-password"


def test_a_tenant_whose_password_is_lost_is_onboarded_anew(tmp_path: Path) -> None:
    tenants = FakeTenants()
    tenants.existing.add(tenant_name("c1"))
    loop, _gauges, _made = _loop(tmp_path, tenants, FakeProbe([[]]), [1000.0])
    loop.run_once()
    assert [c[0] for c in tenants.calls] == ["delete", "create", "topic"]


def test_a_failed_round_makes_a_new_probe_and_a_failed_start_waits(tmp_path: Path) -> None:
    tenants = FakeTenants()
    now = [1000.0]
    probe = FakeProbe([[_s(0, 1000.0, True, 0.01)]])
    loop, _gauges, made = _loop(tmp_path, tenants, probe, now)
    loop.run_once()
    loop.run_once()  # the round raises: the probe is closed, made again next round
    assert probe.closed
    loop.run_once()
    assert len(made) == 2

    broken = FakeTenants()

    def refuse(*_args: object) -> None:
        raise ApiError(503, "unavailable", "no running VM")

    broken.create = refuse  # type: ignore[method-assign,assignment]
    loop3, _g, made3 = _loop(tmp_path / "other", broken, FakeProbe([]), now)
    loop3.run_once()
    now[0] += 5
    loop3.run_once()  # within retry_s: not tried again
    assert made3 == [] and broken.calls == []


def test_the_probe_follows_the_clusters_trust_bundle_across_a_ca_rotation() -> None:
    from management_plane.monitoring.wiring import CurrentTrustProbe

    class Made:
        def __init__(self, ca: str) -> None:
            self.ca, self.closed = ca, False

        def round(self) -> list[Any]:
            return [self.ca]

        def close(self) -> None:
            self.closed = True

    made: list[Made] = []
    bundle = ["old CA"]

    def make(ca: str) -> Made:
        made.append(Made(ca))
        return made[-1]

    probe = CurrentTrustProbe(make, lambda: bundle[0])
    assert probe.round() == ["old CA"] and probe.round() == ["old CA"] and len(made) == 1
    bundle[0] = "old CA + new CA"  # a CA rotation's first round
    assert probe.round() == ["old CA + new CA"]
    assert made[0].closed and len(made) == 2
    probe.close()
    assert made[1].closed
