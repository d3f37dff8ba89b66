"""The synthetic heartbeat's pure parts: the tenant and topic it uses, its messages, and
from its samples the per-broker figures that go to statsd, and the SLO arithmetic.

A heartbeat is one timestamped message produced, as the heartbeat tenant over the tenant
listener, to a partition of the heartbeat topic that one broker leads, and consumed back.
It counts for the broker that led the partition when it was sent:

- accepted: the broker acknowledged the message within the probe's timeout;
- delivered: the consumer read it back; its latency is send to read, end to end;
- good (the SLO's unit): delivered within `SLO_LATENCY_S`.

The SLO: 99.99% of heartbeats good over 30 days.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SLO_OBJECTIVE = 0.9999
SLO_LATENCY_S = 1.0
SLO_WINDOW_S = 30 * 24 * 3600.0
ACCEPTED_WINDOW_S = 15.0
"""`heartbeat.accepted` counts the heartbeats a broker acknowledged over this window: 0
means it accepted none for that long, what the alert rule looks for (the window is the
rule's duration: a broker that stops answering loses its leadership to the others once its
ZooKeeper session or KRaft lease expires, 18 s or 9 s, and from then on gets no heartbeat
to refuse)."""
AVAILABILITY_WINDOW_S = 300.0
"""`heartbeat.availability`: the share of good heartbeats over this window."""

_TENANT_UNSAFE = re.compile(r"[^a-z0-9-]+")


def tenant_name(cluster: str) -> str:
    """The heartbeat tenant of `cluster`: tenant names are unique across the service, so the
    cluster's name is in it (shortened to the 32 characters a tenant name may have, with a
    hash of the whole name so two long names never meet)."""
    readable = _TENANT_UNSAFE.sub("-", cluster.lower()).strip("-")[:15].strip("-") or "c"
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:6]
    return f"heartbeat-{readable}-{digest}"


def topic_name(prefix: str) -> str:
    return f"{prefix}heartbeat"


def partitions_for(broker_count: int) -> int:
    """One partition per broker: Kafka's assignment of a new topic gives each broker the
    preferred leadership of one (round-robin from a random start)."""
    return max(1, broker_count)


@dataclass(frozen=True)
class HeartbeatMessage:
    cluster: str
    broker_id: int
    sent_ms: int
    sequence: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "schema_version": 1,
                "cluster": self.cluster,
                "broker": self.broker_id,
                "sent_ms": self.sent_ms,
                "seq": self.sequence,
            }
        ).encode()


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def decode_message(raw: bytes | None) -> HeartbeatMessage | None:
    """A heartbeat read back (None: not one of ours: the topic is the tenant's own, but a
    message that does not parse is skipped, never a crash)."""
    try:
        value = json.loads(raw or b"")
    except ValueError:
        return None
    if not isinstance(value, dict) or value.get("schema_version") != 1:
        return None
    cluster, broker, sent_ms, sequence = (
        value.get("cluster"),
        value.get("broker"),
        value.get("sent_ms"),
        value.get("seq"),
    )
    if not isinstance(cluster, str):
        return None
    if not (_whole(broker) and _whole(sent_ms) and _whole(sequence)):
        return None
    assert isinstance(broker, int) and isinstance(sent_ms, int) and isinstance(sequence, int)
    return HeartbeatMessage(cluster, int(broker), int(sent_ms), int(sequence))


def probe_targets(leaders: Mapping[int, int]) -> dict[int, int]:
    """broker id -> the partition its heartbeat goes to, from partition -> leader (-1: no
    leader). A broker leading several takes the lowest; one leading none has no heartbeat
    this round."""
    targets: dict[int, int] = {}
    for partition, leader in sorted(leaders.items()):
        if leader >= 0:
            targets.setdefault(leader, partition)
    return targets


@dataclass(frozen=True)
class Sample:
    """One heartbeat's outcome."""

    broker_id: int
    sent_at: float  # unix seconds
    accepted: bool
    latency_s: float | None  # None: not read back within the probe's timeout

    @property
    def good(self) -> bool:
        return self.latency_s is not None and self.latency_s <= SLO_LATENCY_S


@dataclass(frozen=True)
class BrokerFigures:
    accepted: int  # over ACCEPTED_WINDOW_S
    success: float  # accepted share over ACCEPTED_WINDOW_S
    availability: float  # good share over AVAILABILITY_WINDOW_S
    latency_ms: float | None  # the newest delivered heartbeat's


def broker_figures(samples: Iterable[Sample], now: float) -> dict[int, BrokerFigures]:
    """Per broker, from the samples kept: only brokers with a heartbeat sent within
    ACCEPTED_WINDOW_S get figures (a broker that leads no heartbeat partition any more, or
    is gone, stops getting them rather than reading as failing)."""
    by_broker: dict[int, list[Sample]] = {}
    for sample in samples:
        if now - sample.sent_at <= AVAILABILITY_WINDOW_S:
            by_broker.setdefault(sample.broker_id, []).append(sample)
    figures: dict[int, BrokerFigures] = {}
    for broker, kept in by_broker.items():
        recent = [s for s in kept if now - s.sent_at <= ACCEPTED_WINDOW_S]
        if not recent:
            continue
        accepted = sum(s.accepted for s in recent)
        delivered = sorted((s for s in kept if s.latency_s is not None), key=lambda s: s.sent_at)
        latency = delivered[-1].latency_s if delivered else None
        figures[broker] = BrokerFigures(
            accepted=accepted,
            success=accepted / len(recent),
            availability=sum(s.good for s in kept) / len(kept),
            latency_ms=None if latency is None else latency * 1000.0,
        )
    return figures


def heartbeat_gauges(
    cluster_segment: str, figures: Mapping[int, BrokerFigures]
) -> list[tuple[str, float]]:
    """The statsd gauges (without the "kaas." prefix), beside the agents' broker gauges:

    <cluster>.brokers.<id>.heartbeat.{accepted,success,availability,latency_ms}
    """
    gauges: list[tuple[str, float]] = []
    for broker, f in sorted(figures.items()):
        base = f"{cluster_segment}.brokers.{broker}.heartbeat"
        gauges += [
            (f"{base}.accepted", float(f.accepted)),
            (f"{base}.success", f.success),
            (f"{base}.availability", f.availability),
        ]
        if f.latency_ms is not None:
            gauges.append((f"{base}.latency_ms", f.latency_ms))
    return gauges


@dataclass(frozen=True)
class SloStatus:
    total: int
    good: int
    availability: float  # 1.0 with no heartbeat yet
    allowed_bad: float  # what the objective allows over these heartbeats
    budget_left: float  # share of the error budget not spent (negative: overspent)

    @property
    def met(self) -> bool:
        return self.availability >= SLO_OBJECTIVE


def slo_status(good: int, total: int, objective: float = SLO_OBJECTIVE) -> SloStatus:
    if total < 0 or not 0 <= good <= total:
        raise ValueError(f"good ({good}) must be between 0 and total ({total})")
    if not 0 < objective < 1:
        raise ValueError(f"objective must be between 0 and 1, got {objective}")
    allowed = (1 - objective) * total
    bad = total - good
    left = 1.0 if total == 0 else (allowed - bad) / allowed
    return SloStatus(total, good, good / total if total else 1.0, allowed, left)
