"""A tenant's storage budget and the hardened tenant input rules (pure, table tests)."""

from __future__ import annotations

import pytest

from management_plane.tenants import (
    ExistingTopic,
    TenantError,
    TenantPlan,
    TopicRequest,
    check_topic_request,
    new_tenant,
    plan_from_json,
    tenant_from_json,
    topic_request_problems,
)
from management_plane.tenants.model import (
    PLANS,
    Tenant,
    name_problems,
    prefix_problems,
    reserved_prefix_problems,
)
from management_plane.tenants.storage import TopicShare, cleanup_policy_problem, storage_problems
from management_plane.tenants.topics import check_topic_config_change

pytestmark = pytest.mark.unit

MIB = 1024**2
GIB = 1024**3
# 10 GiB budget; a topic that names no retention.bytes gets 100 MiB per partition.
PLAN = TenantPlan(10, 100, MIB, MIB, 50.0, storage_bytes=10 * GIB, retention_bytes=100 * MIB)
TENANT = new_tenant("acme", PLAN)


def check(request: TopicRequest, existing: tuple[ExistingTopic, ...] = ()) -> dict[str, str]:
    topic = check_topic_request(TENANT, request, existing, broker_count=3, cluster_min_insync=1)
    return dict(topic.configs)


@pytest.mark.parametrize(
    ("wanted", "others", "fits"),
    [
        (TopicShare("acme.a", 10, 3, 100 * MIB), (), True),  # 3000 MiB
        (TopicShare("acme.a", 10, 3, 341 * MIB), (), True),  # 10230 MiB: just fits
        (TopicShare("acme.a", 10, 3, 342 * MIB), (), False),  # 10260 MiB: 20 MiB over
        (TopicShare("acme.a", 1, 1, GIB), (TopicShare("acme.b", 9, 1, GIB),), True),
        (TopicShare("acme.a", 1, 1, GIB + 1), (TopicShare("acme.b", 9, 1, GIB),), False),
        (TopicShare("acme.a", 1, 1, MIB), (TopicShare("acme.old", 1, 3, None),), False),
    ],
)
def test_the_budget_counts_partitions_replicas_and_retention(
    wanted: TopicShare, others: tuple[TopicShare, ...], fits: bool
) -> None:
    assert (storage_problems(TENANT, wanted, others) == []) is fits


def test_a_refusal_names_the_numbers() -> None:
    problems = storage_problems(
        TENANT, TopicShare("acme.big", 4, 3, GIB), (TopicShare("acme.a", 2, 3, 512 * MIB),)
    )
    assert [p.field for p in problems] == ["configs.retention.bytes"]
    message = problems[0].message
    assert "4 partitions x 3 replicas x retention.bytes 1073741824 = 12884901888 bytes" in message
    assert "uses 3221225472 bytes (3.00 GiB)" in message
    assert "storage budget of 10737418240 bytes (10.00 GiB)" in message
    assert "(7516192768 bytes (7.00 GiB) left)" in message


def test_an_unbounded_topic_of_the_tenant_is_named() -> None:
    problems = storage_problems(
        TENANT, TopicShare("acme.new", 1, 1, MIB), (TopicShare("acme.old", 1, 3, None),)
    )
    assert "acme.old have no finite retention.bytes" in problems[0].message


@pytest.mark.parametrize(
    ("configs", "refused"),
    [
        ({}, False),
        ({"cleanup.policy": "delete"}, False),
        ({"cleanup.policy": "compact,delete"}, False),
        ({"cleanup.policy": "delete, compact"}, False),
        ({"cleanup.policy": "compact"}, True),
        ({"cleanup.policy": " compact "}, True),
    ],
)
def test_a_compacted_topic_must_also_delete(configs: dict[str, str], refused: bool) -> None:
    assert (cleanup_policy_problem(configs) is not None) is refused


@pytest.mark.parametrize(
    ("request_", "code", "field", "says"),
    [
        (
            TopicRequest("acme.x", 1, configs={"retention.bytes": "-1"}),
            "invalid",
            "configs.retention.bytes",
            "retention.bytes='-1' is out of range: 1048576..1099511627776",
        ),
        (
            TopicRequest("acme.x", 1, configs={"cleanup.policy": "compact"}),
            "invalid",
            "configs.cleanup.policy",
            "must also delete ('compact,delete')",
        ),
        (
            TopicRequest("acme.x", 1, configs={"retention.bytes": "9" * 5000}),
            "invalid",
            "configs.retention.bytes",
            "is out of range: it has 5000 characters",
        ),
        (
            TopicRequest("acme.x", 1, configs={"retention.ms": "\u0663" * 8}),
            "invalid",
            "configs.retention.ms",
            "is not a whole number",
        ),
        (TopicRequest("acme.x", 10**30), "invalid", "partitions", "at most 100000"),
        (TopicRequest("acme.x", 1, 10**30), "invalid", "replication_factor", "at most 64"),
        (
            TopicRequest("acme.x", 10, 3, {"retention.bytes": str(GIB)}),
            "limit_exceeded",
            "configs.retention.bytes",
            "tenant acme uses 0 bytes (0.00 GiB) of its plan's storage budget",
        ),
        (
            TopicRequest("acme.x", 100, 3, {"cleanup.policy": "compact,delete"}),
            "limit_exceeded",
            "configs.retention.bytes",
            "100 partitions x 3 replicas x retention.bytes 104857600",
        ),
    ],
)
def test_topics_beyond_the_budget_or_unbounded_are_refused(
    request_: TopicRequest, code: str, field: str, says: str
) -> None:
    with pytest.raises(TenantError) as refused:
        check(request_)
    assert refused.value.code == code
    assert [p.field for p in refused.value.problems] == [field]
    assert says in str(refused.value)


def test_a_topic_gets_the_plans_retention_bytes_when_it_sets_none() -> None:
    assert check(TopicRequest("acme.x", 2))["retention.bytes"] == str(100 * MIB)
    compacted = check(TopicRequest("acme.c", 2, configs={"cleanup.policy": "compact,delete"}))
    assert compacted == {"cleanup.policy": "compact,delete", "retention.bytes": str(100 * MIB)}
    assert check(TopicRequest("acme.y", 2, configs={"retention.bytes": "+2097152"})) == {
        "retention.bytes": "2097152"
    }


def test_existing_topics_count_against_the_budget() -> None:
    existing = (ExistingTopic("acme.a", 5, 3, 600 * MIB),)  # 9000 MiB of 10240
    check(TopicRequest("acme.b", 4, 3, {"retention.bytes": str(100 * MIB)}), existing)
    with pytest.raises(TenantError) as refused:
        check(TopicRequest("acme.b", 5, 3, {"retention.bytes": str(100 * MIB)}), existing)
    assert refused.value.code == "limit_exceeded"


@pytest.mark.parametrize(
    ("plan", "field", "says"),
    [
        ({"storage_bytes": 10**30}, "plan.storage_bytes", "must be 1048576-1125899906842624"),
        ({"retention_bytes": -1}, "plan.retention_bytes", "must be 1048576-1099511627776"),
        ({"retention_bytes": 1.5}, "plan.retention_bytes", "must be an integer"),
        (
            {"storage_bytes": 2 * MIB, "retention_bytes": 4 * MIB},
            "plan.storage_bytes",
            "is below retention_bytes",
        ),
        ({"max_topics": 10**30}, "plan.max_topics", "must be 1-10000"),
    ],
)
def test_bad_storage_figures_of_a_plan_are_refused(
    plan: dict[str, object], field: str, says: str
) -> None:
    base = PLANS["small"].to_json()
    with pytest.raises(TenantError) as refused:
        plan_from_json({**base, **plan})
    assert [p.field for p in refused.value.problems] == [field]
    assert says in str(refused.value)


def test_a_plan_object_without_storage_figures_gets_the_defaults() -> None:
    base = {k: v for k, v in PLANS["small"].to_json().items() if "bytes" not in k or "rate" in k}
    plan = plan_from_json(base)
    assert (plan.storage_bytes, plan.retention_bytes) == (100 * GIB, 256 * MIB)
    for preset in PLANS.values():  # every preset's partitions fit at the default retention
        assert preset.max_partitions * 3 * preset.retention_bytes <= preset.storage_bytes


@pytest.mark.parametrize(
    "prefix",
    ["kaas.", "kaas_", "kaas.metrics.", "kafka.", "kafka_", "kafka.connect-"],
)
def test_the_platforms_and_kafkas_prefixes_are_reserved(prefix: str) -> None:
    problems = reserved_prefix_problems(prefix)
    assert [p.field for p in problems] == ["prefix"]
    assert "is reserved" in problems[0].message
    with pytest.raises(TenantError) as refused:
        new_tenant("acme", PLAN, prefix)
    assert refused.value.code == "invalid"


@pytest.mark.parametrize("prefix", ["__", "_kaas", "_kaas_metrics.", "_schemas.", "_confluent-"])
def test_internal_topic_prefixes_are_refused(prefix: str) -> None:
    assert prefix_problems(prefix), prefix


@pytest.mark.parametrize("prefix", ["kaasx.", "kafkaesque.", "acme.kaas.", "ka."])
def test_prefixes_near_the_reserved_ones_are_allowed(prefix: str) -> None:
    assert prefix_problems(prefix) == () and reserved_prefix_problems(prefix) == ()
    assert new_tenant("acme", PLAN, prefix).prefix == prefix


@pytest.mark.parametrize("name", ["abc\n", "abc\n\n", "ab²", "ab\u0663", "ABC", "abc "])
def test_tenant_names_are_full_ascii_matches(name: str) -> None:
    assert [p.field for p in name_problems(name)] == ["name"]


def test_a_tenant_stored_before_its_prefix_was_reserved_stays_readable() -> None:
    stored = Tenant("acme", "kaas.", PLAN).to_json()
    assert tenant_from_json(stored).prefix == "kaas."  # so that it can be deleted
    with pytest.raises(TenantError, match="is reserved"):
        new_tenant("acme", PLAN, "kaas.")


def test_static_problems_include_the_compaction_rule() -> None:
    code, problems = topic_request_problems(
        TENANT, TopicRequest("acme.c", 1, configs={"cleanup.policy": "compact"})
    )
    assert code == "invalid" and [p.field for p in problems] == ["configs.cleanup.policy"]


MINE = (
    ExistingTopic("acme.a", 10, 3, 100 * MIB),  # 3000 MiB
    ExistingTopic("acme.b", 4, 2, 512 * MIB),  # 4096 MiB; 3144 MiB of the 10240 left
)


@pytest.mark.parametrize(
    ("name", "changes", "policy", "expected"),
    [
        ("acme.a", {"retention.bytes": str(200 * MIB)}, "delete", {"retention.bytes": "209715200"}),
        ("acme.a", {"retention.ms": "+3600000"}, "delete", {"retention.ms": "3600000"}),
        (
            "acme.a",
            {"cleanup.policy": "compact , delete"},
            "delete",
            {"cleanup.policy": "compact,delete"},
        ),
        ("acme.b", {"min.insync.replicas": "2"}, "compact,delete", {"min.insync.replicas": "2"}),
    ],
)
def test_a_config_change_within_the_budget_gives_the_configs_to_set(
    name: str, changes: dict[str, str], policy: str, expected: dict[str, str]
) -> None:
    assert check_topic_config_change(TENANT, name, changes, MINE, policy) == expected


@pytest.mark.parametrize(
    ("name", "changes", "policy", "code", "says"),
    [
        (
            "acme.a",
            {"retention.bytes": str(205 * MIB)},  # 6150 MiB: 6 MiB over
            "delete",
            "limit_exceeded",
            "10 partitions x 3 replicas x retention.bytes 214958080",
        ),
        ("acme.a", {"retention.bytes": "-1"}, "delete", "invalid", "out of range"),
        ("acme.a", {"cleanup.policy": "compact"}, "delete", "invalid", "must also delete"),
        ("acme.a", {"retention.ms": "3600000"}, "compact", "invalid", "must also delete"),
        ("acme.a", {"min.insync.replicas": "4"}, "delete", "invalid", "replication factor 3"),
        ("acme.a", {}, "delete", "invalid", "at least one config"),
        ("acme.a", {"preallocate": "true"}, "delete", "invalid", "not on the whitelist"),
        ("acme.zz", {"retention.ms": "3600000"}, "delete", "not_found", "no topic 'acme.zz'"),
        ("beta.a", {"retention.ms": "3600000"}, "delete", "forbidden", "outside tenant acme"),
    ],
)
def test_a_config_change_beyond_the_budget_or_the_rules_is_refused(
    name: str, changes: dict[str, str], policy: str, code: str, says: str
) -> None:
    with pytest.raises(TenantError) as refused:
        check_topic_config_change(TENANT, name, changes, MINE, policy)
    assert refused.value.code == code
    assert says in str(refused.value)


def test_an_unbounded_topic_may_only_be_given_a_finite_retention() -> None:
    old = (ExistingTopic("acme.old", 1, 3, None),)
    with pytest.raises(TenantError, match=r"has no finite retention\.bytes: set one"):
        check_topic_config_change(TENANT, "acme.old", {"retention.ms": "3600000"}, old, "delete")
    settled = check_topic_config_change(
        TENANT, "acme.old", {"retention.bytes": str(MIB)}, old, "delete"
    )
    assert settled == {"retention.bytes": str(MIB)}
