"""Tenants' pure core: names, prefixes, plans, ACL bindings, connection details, quota commands."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from management_plane.tenants import (
    PLANS,
    AclGrant,
    AclOperation,
    AclResource,
    ConnectionDetails,
    Tenant,
    TenantError,
    TenantPlan,
    new_tenant,
    plan_from_json,
    prefixes_overlap,
    tenant_acl_grants,
    tenant_from_json,
)
from management_plane.tenants.quotas import (
    last_error_line,
    parse_quota_description,
    quota_command,
)

pytestmark = pytest.mark.unit

PLAN = TenantPlan(
    max_topics=5,
    max_partitions=20,
    producer_byte_rate=1_048_576,
    consumer_byte_rate=2_097_152,
    request_percentage=50.0,
)


@pytest.mark.parametrize(
    ("name", "prefix", "expected_prefix"),
    [
        ("acme", None, "acme."),
        ("acme-corp", None, "acme-corp."),
        ("a1b", None, "a1b."),
        ("x" * 32, None, "x" * 32 + "."),
        ("acme", "acme-", "acme-"),
        ("acme", "ac_", "ac_"),
        ("acme", "team7.orders.", "team7.orders."),
    ],
)
def test_valid_names_and_prefixes(name: str, prefix: str | None, expected_prefix: str) -> None:
    tenant = new_tenant(name, PLAN, prefix)
    assert tenant == Tenant(name, expected_prefix, PLAN)
    assert tenant.username == name
    assert tenant.principal == f"User:{name}"


@pytest.mark.parametrize(
    ("name", "prefix", "field", "says"),
    [
        ("ab", None, "name", "use 3-32 lowercase letters"),
        ("x" * 33, None, "name", "use 3-32 lowercase letters"),
        ("Acme", None, "name", "use 3-32 lowercase letters"),
        ("1acme", None, "name", "starting with a letter"),
        ("acme-", None, "name", "not ending with '-'"),
        ("ac.me", None, "name", "tenant name 'ac.me' is invalid"),
        ("ac_me", None, "name", "tenant name 'ac_me' is invalid"),
        ("admin", None, "name", "tenant name 'admin' is reserved"),
        ("anonymous", None, "name", "reserved for the platform"),
        ("kaas", None, "name", "reserved for the platform"),
        (42, None, "name", "tenant name must be a string"),
        ("acme", "acme", "prefix", "ending with '.', '-' or '_'"),
        ("acme", "_acme.", "prefix", "prefix '_acme.' is invalid"),
        ("acme", ".", "prefix", "prefix '.' is invalid"),
        ("acme", "Acme.", "prefix", "prefix 'Acme.' is invalid"),
        ("acme", "a" * 64 + ".", "prefix", "2-64 lowercase letters"),
        ("acme", 7, "prefix", "prefix must be a string"),
    ],
)
def test_bad_names_and_prefixes_are_refused_naming_the_field(
    name: Any, prefix: Any, field: str, says: str
) -> None:
    with pytest.raises(TenantError) as refused:
        new_tenant(name, PLAN, prefix)
    assert refused.value.code == "invalid"
    assert [p.field for p in refused.value.problems] == [field]
    assert says in str(refused.value)


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(TenantError) as refused:
        new_tenant("A", replace(PLAN, max_topics=0, producer_byte_rate=10), "x")
    assert [p.field for p in refused.value.problems] == [
        "name",
        "prefix",
        "plan.max_topics",
        "plan.producer_byte_rate",
    ]


@pytest.mark.parametrize(
    ("one", "other", "overlap"),
    [
        ("acme.", "acme.", True),
        ("acme.", "acme.eu.", True),  # acme. would own acme.eu.'s topics
        ("acme.eu.", "acme.", True),
        ("acme.", "acme_", True),  # Kafka's '.'/'_' collision: acme.x and acme_x collide
        ("a-b.", "a-", True),
        ("acme.", "acme-", False),
        ("acme.", "acmecorp.", False),
        ("acme.", "beta.", False),
    ],
)
def test_prefix_overlap(one: str, other: str, overlap: bool) -> None:
    assert prefixes_overlap(one, other) is overlap
    assert prefixes_overlap(other, one) is overlap


@pytest.mark.parametrize(
    ("name", "prefix", "says"),
    [
        ("acme", None, "tenant 'acme' exists already"),
        ("acme-eu", "acme.eu.", "prefix 'acme.eu.' overlaps tenant acme's prefix 'acme.'"),
        ("other", "acme_", "overlaps tenant acme's prefix"),
    ],
)
def test_a_taken_name_or_an_overlapping_prefix_is_a_conflict(
    name: str, prefix: str | None, says: str
) -> None:
    existing = [new_tenant("acme", PLAN), new_tenant("beta", PLAN)]
    with pytest.raises(TenantError) as refused:
        new_tenant(name, PLAN, prefix, existing)
    assert refused.value.code == "conflict"
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"max_topics": 0}, "plan.max_topics", "must be 1-10000, got 0"),
        ({"max_topics": True}, "plan.max_topics", "must be an integer"),
        ({"max_partitions": 100_001}, "plan.max_partitions", "must be 1-100000"),
        ({"max_topics": 30}, "plan.max_partitions", "is below max_topics (30)"),
        ({"producer_byte_rate": 1023}, "plan.producer_byte_rate", "must be 1024-"),
        ({"consumer_byte_rate": 2.5}, "plan.consumer_byte_rate", "must be an integer"),
        ({"request_percentage": 0.5}, "plan.request_percentage", "(100 = one request thread)"),
        ({"request_percentage": float("nan")}, "plan.request_percentage", "must be a number"),
        ({"request_percentage": "50"}, "plan.request_percentage", "must be a number"),
    ],
)
def test_bad_plans_are_refused_naming_the_field(
    change: dict[str, Any], field: str, says: str
) -> None:
    problems = replace(PLAN, **change).problems()
    assert [p.field for p in problems] == [field]
    assert says in problems[0].message


def test_the_preset_plans_are_valid_and_grow() -> None:
    assert [plan.problems() for plan in PLANS.values()] == [(), (), ()]
    small, medium, large = PLANS["small"], PLANS["medium"], PLANS["large"]
    for field in ("max_topics", "max_partitions", "producer_byte_rate", "consumer_byte_rate"):
        assert getattr(small, field) < getattr(medium, field) < getattr(large, field)


def test_plan_json_round_trip_and_refusals() -> None:
    assert plan_from_json(PLAN.to_json()) == PLAN
    with pytest.raises(TenantError) as refused:
        plan_from_json({"max_topics": 1, "max_partitons": 3})
    fields = [p.field for p in refused.value.problems]
    assert fields == [
        "plan.max_partitions",
        "plan.producer_byte_rate",
        "plan.consumer_byte_rate",
        "plan.request_percentage",
        "plan.max_partitons",
    ]
    with pytest.raises(TenantError, match="plan must be an object"):
        plan_from_json([1, 2])
    with pytest.raises(TenantError, match=r"plan.max_topics must be 1-10000, got -1"):
        plan_from_json({**PLAN.to_json(), "max_topics": -1})


def test_tenant_json_round_trip_checks_again() -> None:
    tenant = new_tenant("acme", PLAN)
    assert tenant_from_json(tenant.to_json()) == tenant
    with pytest.raises(TenantError, match="prefix 'acme' is invalid"):
        tenant_from_json({**tenant.to_json(), "prefix": "acme"})


def test_quotas_of_a_plan() -> None:
    assert PLAN.quotas() == {
        "producer_byte_rate": 1_048_576.0,
        "consumer_byte_rate": 2_097_152.0,
        "request_percentage": 50.0,
    }


def test_the_exact_acl_bindings_of_a_tenant() -> None:
    tenant = new_tenant("acme", PLAN)

    def grant(resource: AclResource, operation: AclOperation) -> AclGrant:
        return AclGrant(resource, "acme.", operation, "User:acme", "*")

    assert set(tenant_acl_grants(tenant)) == {
        grant(AclResource.TOPIC, AclOperation.READ),
        grant(AclResource.TOPIC, AclOperation.WRITE),
        grant(AclResource.TOPIC, AclOperation.DESCRIBE),
        grant(AclResource.TOPIC, AclOperation.DESCRIBE_CONFIGS),
        grant(AclResource.GROUP, AclOperation.READ),
        grant(AclResource.GROUP, AclOperation.DESCRIBE),
        grant(AclResource.TRANSACTIONAL_ID, AclOperation.WRITE),
        grant(AclResource.TRANSACTIONAL_ID, AclOperation.DESCRIBE),
    }
    assert len(tenant_acl_grants(tenant)) == 8
    assert str(grant(AclResource.TOPIC, AclOperation.READ)) == (
        "ALLOW User:acme read on topics prefixed 'acme.' from *"
    )


@pytest.mark.parametrize(
    ("resource_name", "owned"),
    [("acme.orders", True), ("acme.", False), ("acmecorp.orders", False), ("beta.orders", False)],
)
def test_what_a_tenant_owns(resource_name: str, owned: bool) -> None:
    assert new_tenant("acme", PLAN).owns(resource_name) is owned


CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_connection_details() -> None:
    details = ConnectionDetails("h1:9094,h2:9094", "acme", "acme.", CA_PEM, password="pw")
    assert details.client_config() == {
        "bootstrap.servers": "h1:9094,h2:9094",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "acme",
        "sasl.password": "pw",
        "ssl.ca.pem": CA_PEM,
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert details.to_json()["ca_certificate"] == CA_PEM
    assert CA_PEM not in repr(details)
    shown = replace(details, password=None)
    assert "password" not in shown.to_json()
    assert details.to_json()["password"] == "pw"
    assert shown.client_config("other")["sasl.password"] == "other"
    assert "pw" not in repr(details)
    with pytest.raises(TenantError, match="shown once"):
        shown.client_config()


def test_quota_commands() -> None:
    base = ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", "/libs/*"]
    common = [
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        "h:9092",
        "--command-config",
        "/tmp/client.properties",
        "--entity-type",
        "users",
        "--entity-name",
        "acme",
    ]
    libs = Path("/libs")
    CONFIG = Path("/tmp/client.properties")
    assert quota_command("java", libs, "h:9092", CONFIG, "acme") == [*base, *common, "--describe"]
    assert quota_command(
        "java",
        libs,
        "h:9092",
        CONFIG,
        "acme",
        add={"request_percentage": 12.5, "producer_byte_rate": 1e6},
    ) == [
        *base,
        *common,
        "--alter",
        "--add-config",
        "producer_byte_rate=1000000,request_percentage=12.5",
    ]
    assert quota_command("java", libs, "h:9092", CONFIG, "acme", delete=("a", "b"))[-3:] == [
        "--alter",
        "--delete-config",
        "a,b",
    ]


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            "Quota configs for user-principal 'acme' are consumer_byte_rate=200000.0, "
            "request_percentage=50.0, producer_byte_rate=100000.0\n"
            "SCRAM credential configs for user-principal 'acme' are SCRAM-SHA-512=iterations=8192\n",
            {
                "consumer_byte_rate": 200000.0,
                "request_percentage": 50.0,
                "producer_byte_rate": 100000.0,
            },
        ),
        (
            "SCRAM credential configs for user-principal 'acme' are SCRAM-SHA-512=iterations=8192",
            {},
        ),
        ("Quota configs for user-principal 'acme2' are producer_byte_rate=1.0", {}),
        ("", {}),
    ],
)
def test_parse_quota_description(output: str, expected: dict[str, float]) -> None:
    assert parse_quota_description(output, "acme") == expected


def test_last_error_line_skips_log4j_noise() -> None:
    output = (
        "log4j:WARN No appenders could be found\n"
        "Error while executing config command with args '...'\n"
        "org.apache.kafka.common.errors.InvalidRequestException: bad quota\n"
        "log4j:WARN Please initialize the log4j system properly.\n"
    )
    assert last_error_line(output) == (
        "org.apache.kafka.common.errors.InvalidRequestException: bad quota"
    )
