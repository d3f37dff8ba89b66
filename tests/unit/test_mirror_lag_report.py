"""A mirror flow's lag from measurement to `kaas mirror get`: which agent reports it (pure,
table-tested), the per-topic record and its one parser, the monitor's measurements against
fakes of both clusters' offsets and of ZooKeeper, the keeper handing the metrics thread only
the flows its VM reports, and the text `kaas mirror get` prints."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from agent.metrics.mirror_lag import (
    FlowLag,
    OffsetSync,
    PartitionMirrorLag,
    decode_offset_sync,
    flow_lag,
    lag_record,
    latest_syncs,
)
from agent.metrics.mirror_offsets import mirrored_source_topic
from agent.mirror_decide import reports_lag
from agent.mirror_lag_monitor import MirrorLagMonitor
from agent.ports import StoreUnavailable
from management_plane.mirror.cli import lag_text
from management_plane.mirror.routes import lag_out
from planner.contracts.fields import ContractError
from planner.contracts.mirror_flow import MirrorFlow, MirrorSource, SourceKind
from planner.contracts.mirror_lag import (
    MAX_TOPICS,
    LagMethod,
    MirrorFlowLag,
    TopicLag,
    parse_mirror_lag,
)
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.mirror import MirrorEndpoint
from tests.unit.test_agent_mirror import KeeperWorld

pytestmark = pytest.mark.unit


def _flow(**changes: Any) -> MirrorFlow:
    flow = MirrorFlow(
        name="orders-dr",
        source=MirrorSource(SourceKind.KAAS, "primary", "127.0.1.1:9092"),
        target_cluster="backup",
        topics="orders\\..*",
        groups=".*",
    )
    return replace(flow, **changes)


@pytest.mark.parametrize(
    ("flow", "broker_id", "live", "reports"),
    [
        (_flow(), 0, {0, 1, 2}, True),  # runs on 0 and 1: the lowest reports
        (_flow(), 1, {0, 1, 2}, False),
        (_flow(), 2, {0, 1, 2}, False),  # does not run it
        (_flow(), 1, {1, 2}, True),  # broker 0's agent is gone: 1 takes over
        (_flow(placement=(2, 1)), 1, {0, 1, 2}, True),
        (_flow(placement=(2, 1)), 2, {0, 1, 2}, False),
        (_flow(placement=(2, 1)), 2, {0, 2}, True),  # 1 placed but not live
        (_flow(placement=(2,)), 0, {0, 1, 2}, False),
        (_flow().deleting(), 0, {0, 1, 2}, False),
        (_flow(), 0, set(), True),  # its own member znode not seen yet
    ],
)
def test_one_live_runner_reports_each_flow(
    flow: MirrorFlow, broker_id: int, live: set[int], reports: bool
) -> None:
    assert reports_lag(flow, broker_id, frozenset(live)) is reports


def test_the_record_sums_per_topic_most_behind_first_and_parses_back() -> None:
    lag = FlowLag(
        "orders-dr",
        (
            PartitionMirrorLag("orders.a", 0, 10, 10),
            PartitionMirrorLag("orders.a", 1, 10, 7),
            PartitionMirrorLag("orders.b", 0, 50, None),
            PartitionMirrorLag("orders.b", 1, 5, 1),
        ),
        12.5,
    )
    record = lag_record(lag, 1, 1000.0)
    assert record.topics == (
        TopicLag("orders.b", 2, 54, 50, missing_partitions=1),
        TopicLag("orders.a", 2, 3, 3),
    )
    assert (record.lag_records, record.records_per_s, record.broker_id) == (57, 12.5, 1)
    assert record.method is LagMethod.END_OFFSETS
    assert parse_mirror_lag(record.encode()) == record
    assert record.age_s(1004.0) == 4.0


def test_a_flow_of_many_topics_keeps_the_most_behind_and_counts_the_rest() -> None:
    lag = FlowLag(
        "orders-dr",
        tuple(PartitionMirrorLag(f"t{i:05d}", 0, i, 0) for i in range(MAX_TOPICS + 5)),
        None,
    )
    record = lag_record(lag, 0, 1.0)
    assert len(record.topics) == MAX_TOPICS and record.topics_omitted == 5
    assert record.topics[0].topic == f"t{MAX_TOPICS + 4:05d}"
    assert min(t.lag_records for t in record.topics) == 5
    assert len(record.encode()) < 1_000_000


def _sync_record(topic: str, partition: int, upstream: int, downstream: int) -> tuple[bytes, bytes]:
    name = topic.encode()
    key = len(name).to_bytes(2, "big") + name + partition.to_bytes(4, "big", signed=True)
    return key, upstream.to_bytes(8, "big", signed=True) + downstream.to_bytes(
        8, "big", signed=True
    )


def test_offset_syncs_decode_and_the_latest_per_partition_wins() -> None:
    assert decode_offset_sync(*_sync_record("orders.a", 3, 1200, 1450)) == (
        ("orders.a", 3),
        OffsetSync(1200, 1450),
    )
    records = [
        _sync_record("orders.a", 0, 0, 0),
        _sync_record("orders.a", 1, 5, 5),
        (b"junk", b"x"),
        (None, None),
        _sync_record("orders.a", 0, 100, 130),
        (b"\x00\x09orders", bytes(16)),  # a length that does not fit
    ]
    latest, bad = latest_syncs({("orders.b", 0): OffsetSync(1, 1)}, records)
    assert bad == 3
    assert latest == {
        ("orders.b", 0): OffsetSync(1, 1),
        ("orders.a", 0): OffsetSync(100, 130),
        ("orders.a", 1): OffsetSync(5, 5),
    }


@pytest.mark.parametrize(
    ("source_end", "target_end", "sync", "lag"),
    [
        (100, 100, None, 0),
        (100, 60, None, 40),
        (100, 130, None, 0),  # written again after a restart: end offsets hide the lag ...
        (100, 130, OffsetSync(50, 80), 0),  # ... the sync after the restart shows none ...
        (150, 130, OffsetSync(50, 80), 50),  # ... and the 50 records not yet mirrored
        (100, None, OffsetSync(50, 80), 100),  # the mirrored partition not made (yet)
        (10, 6, OffsetSync(9, 5), 0),  # source offsets 5-8 compacted away: not lag
    ],
)
def test_a_partitions_lag_reads_the_source_offset_its_mirrored_end_stands_for(
    source_end: int, target_end: int | None, sync: OffsetSync | None, lag: int
) -> None:
    target = {} if target_end is None else {("primary.orders.a", 0): target_end}
    syncs = {} if sync is None else {("orders.a", 0): sync}
    found = flow_lag("dr", "primary", {("orders.a", 0): source_end}, target, None, 0.0, syncs)
    assert found.lag_records == lag


GOOD = lag_record(FlowLag("orders-dr", (PartitionMirrorLag("orders.a", 0, 3, 1),), None), 0, 5.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "schema_version"),
        ({"flow": "Bad_Name"}, "flow name"),
        ({"broker_id": -1}, "broker_id"),
        ({"lag_records": "many"}, "lag_records"),
        ({"records_per_s": -1.0}, "records_per_s must not be negative"),
        ({"measured_at": None}, "measured_at must be a number"),
        ({"topics": {"orders.a": 2}}, "topics must be a list of objects"),
        ({"topics": [{"topic": "a", "partitions": 1}]}, "lag_records"),
        ({"method": "guess"}, "method must be one of"),
    ],
)
def test_a_bad_record_is_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    value = {**GOOD.to_json(), **change}
    with pytest.raises(ContractError, match=message):
        parse_mirror_lag(json.dumps(value))


@pytest.mark.parametrize(
    ("topic", "mirrored"),
    [
        ("orders.eu", True),
        ("orders", False),  # the filter matches whole names
        ("orders.eu-internal", False),  # MirrorMaker's default exclusions
        ("orders.x.replica", False),
        ("billing", False),
    ],
)
def test_the_source_topics_read_are_those_mirrormaker_mirrors(topic: str, mirrored: bool) -> None:
    assert mirrored_source_topic(_flow(), topic) is mirrored


class FakeOffsets:
    def __init__(self) -> None:
        self.source: dict[tuple[str, int], int] = {("orders.a", 0): 100, ("orders.a", 1): 40}
        self.target: dict[tuple[str, int], int] = {("primary.orders.a", 0): 60}
        self.syncs: dict[tuple[str, int], OffsetSync] = {}
        self.syncs_readable = True
        self.reachable = True
        self.read_with: list[MirrorEndpoint] = []

    def source_ends(self, flow: MirrorFlow, endpoint: MirrorEndpoint) -> dict[tuple[str, int], int]:
        if not self.reachable:
            raise StoreUnavailable("source: timed out")
        self.read_with.append(endpoint)
        return dict(self.source)

    def target_ends(self, alias: str) -> dict[tuple[str, int], int]:
        return {tp: end for tp, end in self.target.items() if tp[0].startswith(f"{alias}.")}

    def offset_syncs(self, alias: str) -> dict[tuple[str, int], OffsetSync]:
        if not self.syncs_readable:
            raise StoreUnavailable("offset syncs of primary: timed out")
        return dict(self.syncs)


class FakeLagStore:
    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def write_lag(self, flow: str, value: bytes) -> None:
        self.values[flow] = value


ENDPOINT = MirrorEndpoint("127.0.1.1:9092", TlsFiles("/vm/src/client.pem", "/vm/src/ca.pem"))


def test_the_monitor_measures_stores_and_gauges_the_lag_and_the_rate() -> None:
    offsets, store, now = FakeOffsets(), FakeLagStore(), [1000.0]
    monitor = MirrorLagMonitor("backup", offsets, store, lambda: now[0])
    gauges, problems = monitor.measure(0, [(_flow(), ENDPOINT)])
    assert problems == [] and offsets.read_with == [ENDPOINT]
    assert dict(gauges)["backup.mirror.orders-dr.lag_records"] == 80.0  # 40 + 40 not made
    assert "backup.mirror.orders-dr.records_per_s" not in dict(gauges)  # no rate at first
    first = parse_mirror_lag(store.values["orders-dr"])
    assert (first.lag_records, first.broker_id, first.measured_at) == (80, 0, 1000.0)
    assert first.topics[0].missing_partitions == 1

    offsets.target = {("primary.orders.a", 0): 100, ("primary.orders.a", 1): 40}
    now[0] += 10.0
    gauges, problems = monitor.measure(0, [(_flow(), ENDPOINT)])
    assert dict(gauges)["backup.mirror.orders-dr.lag_records"] == 0.0
    assert dict(gauges)["backup.mirror.orders-dr.records_per_s"] == 4.0  # 40 grown in 10 s
    assert parse_mirror_lag(store.values["orders-dr"]).lag_records == 0

    # A MirrorMaker restart wrote 30 records of partition 0 again: the target's end runs 30
    # ahead of the source's, and its new sync says so. 25 records arrive on the source.
    offsets.source[("orders.a", 0)] = 125
    offsets.target[("primary.orders.a", 0)] = 130
    offsets.syncs = {("orders.a", 0): OffsetSync(upstream=70, downstream=100)}
    gauges, problems = monitor.measure(0, [(_flow(), ENDPOINT)])
    assert dict(gauges)["backup.mirror.orders-dr.lag_records"] == 25.0
    assert parse_mirror_lag(store.values["orders-dr"]).method is LagMethod.OFFSET_SYNCS

    offsets.syncs_readable = False  # measured by end offsets alone, and said
    gauges, problems = monitor.measure(0, [(_flow(), ENDPOINT)])
    assert problems == ["mirror lag of orders-dr: offset syncs of primary: timed out"]
    assert dict(gauges)["backup.mirror.orders-dr.lag_records"] == 0.0  # 125 - 130: hidden
    assert parse_mirror_lag(store.values["orders-dr"]).method is LagMethod.END_OFFSETS
    offsets.syncs_readable = True
    monitor.measure(0, [(_flow(), ENDPOINT)])

    offsets.reachable = False
    gauges, problems = monitor.measure(0, [(_flow(), ENDPOINT)])
    assert gauges == [] and problems == ["mirror lag of orders-dr: source: timed out"]
    assert parse_mirror_lag(store.values["orders-dr"]).lag_records == 25, "the last one kept"


def test_only_the_reporting_vm_hands_the_metrics_thread_its_flows() -> None:
    offsets, store = FakeOffsets(), FakeLagStore()
    world = KeeperWorld()
    world.keeper.lag = MirrorLagMonitor("backup", offsets, store, lambda: 5.0)
    world.flows.flows["orders-dr"] = _flow()
    assert world.keeper.lag_gauges() == ([], [])  # nothing looked at yet
    world.tick(broker_id=1)  # runs the flow, but broker 0 reports it
    assert world.keeper.lag_gauges() == ([], []) and store.values == {}
    world.tick(broker_id=0)
    gauges, _ = world.keeper.lag_gauges()
    assert ("backup.mirror.orders-dr.lag_records", 80.0) in gauges
    assert offsets.read_with[0].tls.keystore.endswith("/orders-dr/client.pem")
    world.flows.reachable = False  # the flows unreadable: no stale report
    world.tick(broker_id=0)
    assert world.keeper.lag_gauges() == ([], [])


def test_kaas_mirror_get_prints_the_lag_per_topic() -> None:
    assert lag_text(None) == "lag: not measured yet\n"
    record = MirrorFlowLag(
        "orders-dr",
        1,
        990.0,
        57,
        12.5,
        (TopicLag("orders.b", 2, 54, 50, missing_partitions=1), TopicLag("orders.a", 2, 3, 3)),
        topics_omitted=2,
    )
    answer = lag_out(record, now=1000.0).model_dump()
    assert answer["age_s"] == 10.0 and answer["method"] == "end_offsets"
    assert lag_text(answer) == (
        "lag: 57 records, 12.5 records/s mirrored (broker 1, 10 s ago, from end_offsets)\n"
        "  orders.b: lag 54 (max 50 of 2 partitions, 1 not yet on the target)\n"
        "  orders.a: lag 3 (max 3 of 2 partitions)\n"
        "  and 2 more topics\n"
    )
