"""A tenant's topic requests against its prefix, plan, the cluster and the config whitelist."""

from __future__ import annotations

from typing import Any

import pytest

from management_plane.tenants import (
    TOPIC_CONFIG_WHITELIST,
    ExistingTopic,
    TenantError,
    TenantPlan,
    TopicRequest,
    TopicToCreate,
    check_topic_deletion,
    check_topic_request,
    new_tenant,
    topic_request_problems,
)

pytestmark = pytest.mark.unit

TENANT = new_tenant("acme", TenantPlan(3, 12, 1_048_576, 1_048_576, 50.0))
MIB = 1024**2
DEFAULT_RETENTION = str(256 * MIB)  # the plan's default retention.bytes
EXISTING = (  # 8 partitions of 12
    ExistingTopic("acme.orders", 6, 3, 64 * MIB),
    ExistingTopic("acme.audit", 2, 3, 64 * MIB),
)


def check(request: TopicRequest, existing: tuple[ExistingTopic, ...] = EXISTING) -> TopicToCreate:
    return check_topic_request(TENANT, request, existing, broker_count=3, cluster_min_insync=2)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            TopicRequest("acme.events", 4),
            TopicToCreate("acme.events", 4, 3, {"retention.bytes": DEFAULT_RETENTION}),
        ),
        (
            TopicRequest("acme.events", 1, 2),
            TopicToCreate("acme.events", 1, 2, {"retention.bytes": DEFAULT_RETENTION}),
        ),
        (
            TopicRequest("acme.e", 1, 1, {"min.insync.replicas": "1"}),
            TopicToCreate(
                "acme.e",
                1,
                1,
                {"min.insync.replicas": "1", "retention.bytes": DEFAULT_RETENTION},
            ),
        ),
        (
            TopicRequest(
                "acme.compacted",
                2,
                configs={
                    "cleanup.policy": " compact , delete",
                    "retention.ms": "+86400000",
                    "retention.bytes": "1073741824",
                    "min.cleanable.dirty.ratio": "0.25",
                    "compression.type": "zstd",
                },
            ),
            TopicToCreate(
                "acme.compacted",
                2,
                3,
                {
                    "cleanup.policy": "compact,delete",
                    "compression.type": "zstd",
                    "min.cleanable.dirty.ratio": "0.25",
                    "retention.bytes": "1073741824",
                    "retention.ms": "86400000",
                },
            ),
        ),
    ],
)
def test_requests_within_the_plan_give_the_exact_topic(
    request_: TopicRequest, expected: TopicToCreate
) -> None:
    assert check(request_) == expected


def test_the_default_replication_factor_follows_the_broker_count() -> None:
    request = TopicRequest("acme.x", 1)
    one_broker = check_topic_request(TENANT, request, (), broker_count=1, cluster_min_insync=1)
    assert one_broker.replication_factor == 1
    five = check_topic_request(TENANT, request, (), broker_count=5, cluster_min_insync=2)
    assert five.replication_factor == 3


@pytest.mark.parametrize(
    ("request_", "code", "field", "says"),
    [
        (
            TopicRequest("beta.orders", 1),
            "forbidden",
            "name",
            "outside tenant acme's prefix 'acme.'",
        ),
        (TopicRequest("acme.", 1), "forbidden", "name", "outside tenant acme's prefix"),
        (TopicRequest("orders", 1), "forbidden", "name", "outside tenant acme's prefix"),
        (TopicRequest("acme.a b", 1), "invalid", "name", "letters, digits, '.', '_' or '-'"),
        (TopicRequest("acme." + "x" * 245, 1), "invalid", "name", "at most 249"),
        (TopicRequest("acme.x", 0), "invalid", "partitions", "whole number >= 1, got 0"),
        (TopicRequest("acme.x", "3"), "invalid", "partitions", "got '3'"),  # type: ignore[arg-type]
        (TopicRequest("acme.x", True), "invalid", "partitions", "got True"),
        (TopicRequest("acme.x", 1, 0), "invalid", "replication_factor", "got 0"),
        (TopicRequest("acme.x", 1, 4), "invalid", "replication_factor", "above the cluster's 3"),
        (
            TopicRequest("acme.x", 1, 1),
            "invalid",
            "replication_factor",
            "min.insync.replicas 2 is above replication_factor 1",
        ),
        (
            TopicRequest("acme.x", 1, 2, {"min.insync.replicas": "3"}),
            "invalid",
            "configs.min.insync.replicas",
            "set min.insync.replicas to at most 2",
        ),
        (
            TopicRequest("acme.x", 1, configs={"unclean.leader.election.enable": "true"}),
            "invalid",
            "configs.unclean.leader.election.enable",
            "'unclean.leader.election.enable' is not on the whitelist; tenants may set: cleanup.policy",
        ),
        (
            TopicRequest("acme.x", 1, configs={"retention.ms": "-1"}),
            "invalid",
            "configs.retention.ms",
            "retention.ms='-1' is out of range: 60000..2592000000",
        ),
        (
            TopicRequest("acme.x", 1, configs={"retention.ms": "1h"}),
            "invalid",
            "configs.retention.ms",
            "is not a whole number",
        ),
        (
            TopicRequest("acme.x", 1, configs={"retention.bytes": "1000"}),
            "invalid",
            "configs.retention.bytes",
            "out of range: 1048576..1099511627776",
        ),
        (
            TopicRequest("acme.x", 1, configs={"cleanup.policy": "compact,forever"}),
            "invalid",
            "configs.cleanup.policy",
            "valid values: compact, delete",
        ),
        (
            TopicRequest("acme.x", 1, configs={"cleanup.policy": ""}),
            "invalid",
            "configs.cleanup.policy",
            "is not allowed",
        ),
        (
            TopicRequest("acme.x", 1, configs={"min.cleanable.dirty.ratio": "1.5"}),
            "invalid",
            "configs.min.cleanable.dirty.ratio",
            "out of range: 0..1",
        ),
        (
            TopicRequest("acme.x", 1, configs={"min.cleanable.dirty.ratio": "inf"}),
            "invalid",
            "configs.min.cleanable.dirty.ratio",
            "not a finite number",
        ),
        (
            TopicRequest("acme.x", 1, configs={"max.message.bytes": 1000000}),  # type: ignore[dict-item]
            "invalid",
            "configs.max.message.bytes",
            "must be a string",
        ),
        (
            TopicRequest("acme.x", 1, configs=["retention.ms"]),  # type: ignore[arg-type]
            "invalid",
            "configs",
            "configs must be an object",
        ),
        (TopicRequest("acme.orders", 1), "conflict", "name", "topic 'acme.orders' exists"),
        (
            TopicRequest("acme.x", 5),
            "limit_exceeded",
            "partitions",
            "5 more partitions would make 13; tenant acme's plan allows 12 (4 left)",
        ),
    ],
)
def test_bad_requests_are_refused_with_a_code_naming_the_field(
    request_: TopicRequest, code: str, field: str, says: str
) -> None:
    with pytest.raises(TenantError) as refused:
        check(request_)
    assert refused.value.code == code
    assert [p.field for p in refused.value.problems] == [field]
    assert says in str(refused.value)


def test_names_kafka_would_call_colliding_are_a_conflict() -> None:
    existing = (ExistingTopic("acme.a_b", 1, 3),)
    with pytest.raises(TenantError) as refused:
        check(TopicRequest("acme.a.b", 1), existing)
    assert refused.value.code == "conflict"
    assert "collides with 'acme.a_b'" in str(refused.value)


def test_the_topic_count_limit() -> None:
    three = (*EXISTING, ExistingTopic("acme.third", 1, 3, 64 * MIB))
    with pytest.raises(TenantError) as refused:
        check(TopicRequest("acme.fourth", 1), three)
    assert refused.value.code == "limit_exceeded"
    assert str(refused.value) == "tenant acme has 3 topics; its plan allows 3"


def test_both_limits_are_named_at_once() -> None:
    three = (*EXISTING, ExistingTopic("acme.third", 3, 3, 64 * MIB))
    with pytest.raises(TenantError) as refused:
        check(TopicRequest("acme.fourth", 2), three)
    assert [p.field for p in refused.value.problems] == ["name", "partitions"]


def test_static_problems_need_no_cluster_facts() -> None:
    """What the adapter checks before any Kafka call."""
    code, problems = topic_request_problems(
        TENANT, TopicRequest("acme.x", 0, 1, {"preallocate": "true", "retention.ms": "x"})
    )
    assert code == "invalid"
    assert [p.field for p in problems] == [
        "partitions",
        "configs.preallocate",
        "configs.retention.ms",
    ]
    assert topic_request_problems(TENANT, TopicRequest("acme.x", 1, 9)) == ("invalid", [])


@pytest.mark.parametrize(
    ("key", "good", "bad"),
    [
        ("cleanup.policy", "compact", "none"),
        ("compression.type", "lz4", "brotli"),
        ("delete.retention.ms", "0", "-1"),
        ("max.message.bytes", "1048588", "16777216"),
        ("message.timestamp.type", "LogAppendTime", "logappendtime"),
        ("min.cleanable.dirty.ratio", "0.5", "-0.1"),
        ("min.compaction.lag.ms", "0", "-5"),
        ("min.insync.replicas", "1", "0"),
        ("retention.bytes", "1073741824", "0"),
        ("retention.ms", "604800000", "59999"),
        ("segment.bytes", "1073741824", "1073741825"),
        ("segment.ms", "3600000", "1000"),
    ],
)
def test_every_whitelisted_config_takes_good_values_and_refuses_bad_ones(
    key: str, good: str, bad: str
) -> None:
    rule = TOPIC_CONFIG_WHITELIST[key]
    assert rule.problem(key, good) is None
    assert rule.problem(key, bad) is not None


def test_the_whitelist_is_the_documented_one() -> None:
    assert sorted(TOPIC_CONFIG_WHITELIST) == [
        "cleanup.policy",
        "compression.type",
        "delete.retention.ms",
        "max.message.bytes",
        "message.timestamp.type",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "min.insync.replicas",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.ms",
    ]


@pytest.mark.parametrize(
    ("name", "code", "says"),
    [
        ("beta.orders", "forbidden", "outside tenant acme's prefix"),
        ("acme.nope", "not_found", "tenant acme has no topic 'acme.nope'"),
        (3, "invalid", "topic name must be a string"),
    ],
)
def test_deletion_checks(name: Any, code: str, says: str) -> None:
    assert check_topic_deletion(TENANT, "acme.orders", EXISTING) == "acme.orders"
    with pytest.raises(TenantError) as refused:
        check_topic_deletion(TENANT, name, EXISTING)
    assert refused.value.code == code
    assert says in str(refused.value)
