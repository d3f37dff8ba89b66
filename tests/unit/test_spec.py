from __future__ import annotations

import json

import pytest

from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec, ReassignmentBudget, SpecError, parse_spec

pytestmark = pytest.mark.unit

GOOD = {
    "schema_version": 1,
    "cluster": "c1",
    "kafka_version": "3.9.2",
    "broker_count": 3,
    "zones": ["zone-a", "zone-b", "zone-c"],
}


def test_round_trip_keeps_every_field() -> None:
    spec = ClusterSpec(
        cluster="c1",
        kafka_version="3.9.2",
        broker_count=4,
        zones=("zone-a", "zone-b"),
        zookeeper_participants=5,
        broker_config={"log.retention.hours": "48"},
        draining_broker_ids=frozenset({3}),
        budget=ReassignmentBudget(throttle_bytes_per_s=1000),
        generation=7,
    )
    assert parse_spec(spec.encode()) == spec


def test_defaults_fill_optional_fields() -> None:
    spec = parse_spec(json.dumps(GOOD))
    assert spec.zookeeper_participants == 3
    assert spec.broker_config == {}
    assert spec.draining_broker_ids == frozenset()
    assert spec.budget == ReassignmentBudget()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "spec.schema_version is 2"),
        ({"broker_count": "3"}, "spec.broker_count must be an integer, got str"),
        ({"broker_count": True}, "spec.broker_count must be an integer, got a boolean"),
        ({"broker_count": 0}, "spec.broker_count must be at least 1"),
        ({"zones": []}, "spec.zones must be a non-empty list"),
        ({"zookeeper": {"participants": 4}}, "spec.zookeeper.participants must be one of"),
        (
            {"broker_config": {"num.io.threads": [8]}},
            "spec.broker_config.num.io.threads must be a string or a number",
        ),
        ({"draining_broker_ids": [-1]}, "spec.draining_broker_ids must be a list of broker ids"),
        ({"budget": {"throttle": 5}}, "spec.budget has unknown keys: throttle"),
        (
            {"budget": {"max_partitions_per_broker": 0}},
            "spec.budget.max_partitions_per_broker must be a positive integer",
        ),
    ],
)
def test_bad_values_are_named(change: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace(".", r"\.")):
        parse_spec(json.dumps({**GOOD, **change}))


def test_missing_and_malformed() -> None:
    with pytest.raises(SpecError, match=r"spec\.kafka_version is missing"):
        parse_spec(json.dumps({k: v for k, v in GOOD.items() if k != "kafka_version"}))
    with pytest.raises(SpecError, match="not valid JSON"):
        parse_spec(b"{not json")
    with pytest.raises(SpecError, match="must be a JSON object"):
        parse_spec(b"[1, 2]")


def test_paths_live_under_the_cluster() -> None:
    paths = ClusterPaths("c1")
    assert paths.spec == "/kaas/c1/spec"
    assert paths.member(2) == "/kaas/c1/members/2"
    assert paths.broker_id_claim(0) == "/kaas/c1/ids/0"
    assert paths.plan_topic("t") == "/kaas/c1/plan/topics/t"
    assert paths.restart_lock == "/kaas/c1/locks/restart"
    assert paths.kafka_broker_ids == "/kafka/c1/brokers/ids"
    with pytest.raises(ValueError, match=r"cluster name '\.\./x' is invalid"):
        ClusterPaths("../x")
