"""Tenants through the real `kaas serve` on the shared real cluster (entered into the
service's database): onboarding over HTTP, per-tenant keys and 403s, limits as 4xx, a SCRAM
client with the returned details, the CLI, and an onboarding killed midway and rolled back
at the next start. Every tenant made here is deleted through the API after the module."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient, ConfigResource

from management_plane.service.client import tenant_client_config
from tests import harness
from tests.harness import ClusterHandle
from tests.integration.test_tenants import first_consumer_error, produce
from tests.mp_service import ServiceHandle, adopt_cluster, free_port

pytestmark = pytest.mark.integration

PLAN = {
    "max_topics": 2,
    "max_partitions": 4,
    "producer_byte_rate": 10 * 1024**2,
    "consumer_byte_rate": 10 * 1024**2,
    "request_percentage": 200.0,
}


def _name(base: str) -> str:
    return f"{base}-{uuid.uuid4().hex[:6]}"


def _error(response: tuple[int, Any], status: int, fragment: str) -> None:
    code, body = response
    assert code == status, body
    assert set(body) == {"code", "message"}, body
    assert fragment in body["message"], body


@pytest.fixture(scope="module")
def service_on_shared(
    kafka_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceHandle, str]]:
    home = tmp_path_factory.mktemp("tenants-api")
    cluster = adopt_cluster(home, kafka_cluster)
    handle = ServiceHandle(home, free_port(), harness.SCRATCH_BASE)
    handle.start()
    try:
        yield handle, cluster
    finally:
        deleted: list[tuple[int, Any]] = []
        try:
            if handle.process is None or handle.process.poll() is not None:
                handle.start()
            status, tenants = handle.call("GET", f"/v1/clusters/{cluster}/tenants")
            # One at a time: each waits mostly on two ConfigCommand JVMs, and on a loaded
            # 2-core machine parallel ones only outlast the client's timeout together. One
            # took 85 s under a CI run's load, past the client's usual 60 s.
            for tenant in tenants if status == 200 else []:
                path = f"/v1/clusters/{cluster}/tenants/{tenant['name']}"
                deleted.append(handle.call("DELETE", path, timeout_s=300.0))
        finally:
            handle.tear_down()
        assert all(code == 200 for code, _ in deleted), deleted


@pytest.fixture(scope="module")
def two_tenants(
    service_on_shared: tuple[ServiceHandle, str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Tenants A and B, onboarded once for the module (each takes 10-15 s)."""
    api, cluster = service_on_shared
    made = []
    for base in ("acme", "beta"):
        started = time.monotonic()
        status, body = api.call(
            "POST", f"/v1/clusters/{cluster}/tenants", {"name": _name(base), "plan": PLAN}
        )
        assert status == 201, body
        print(
            f"onboarding {body['tenant']['name']} through the API: {time.monotonic() - started:.1f}s"
        )
        made.append(body)
    return made[0], made[1]


def test_onboarding_returns_connection_details_once_and_stores_no_secret(
    service_on_shared: tuple[ServiceHandle, str], two_tenants: tuple[dict[str, Any], ...]
) -> None:
    api, cluster = service_on_shared
    a, _ = two_tenants
    tenant = a["tenant"]
    assert tenant["status"] == "active" and tenant["prefix"] == f"{tenant['name']}."
    assert tenant["connection"]["bootstrap_servers"].count(":9094") == 3
    assert tenant["connection"]["sasl_mechanism"] == "SCRAM-SHA-512"
    assert tenant["connection"]["security_protocol"] == "SASL_SSL"
    # The CA the brokers' certificates chain to, as the cluster's view names its file.
    status, view = api.call("GET", f"/v1/clusters/{cluster}")
    assert status == 200, view
    ca_file = Path(view["client"]["ca_file"])
    assert tenant["connection"]["ca_certificate"] == ca_file.read_text()
    assert Path(view["client"]["java_properties"]).is_file()
    assert tenant["connection"]["username"] == tenant["name"]
    assert len(a["password"]) >= 24 and a["api_key"].startswith("kaas_")
    # Reading it again shows no secret.
    status, shown = api.call("GET", f"/v1/clusters/{cluster}/tenants/{tenant['name']}")
    assert status == 200 and shown == tenant
    assert "password" not in str(shown) and a["password"] not in str(shown)
    with sqlite3.connect(api.home / "kaas.db") as db:
        dump = "\n".join(db.iterdump())
        (key_hash,) = db.execute(
            "SELECT key_hash FROM api_keys WHERE tenant = ?", (tenant["name"],)
        ).fetchone()
    assert a["password"] not in dump and a["api_key"] not in dump
    assert len(key_hash) == 64 and key_hash not in a["api_key"]
    # Each step of the onboarding is in the operations log and its journal.
    status, op = api.call("GET", f"/v1/operations/{a['op_id']}")
    assert status == 200 and (op["kind"], op["status"]) == ("create_tenant", "succeeded")
    assert [j["step"] for j in op["journal"]] == [
        "register",
        "credential",
        "acls",
        "quotas",
        "verify",
        "api_key",
    ]
    _error(
        api.call("POST", f"/v1/clusters/{cluster}/tenants", {"name": tenant["name"]}),
        409,
        "exists already",
    )


def test_a_tenant_key_reaches_only_its_own_tenant(
    service_on_shared: tuple[ServiceHandle, str], two_tenants: tuple[dict[str, Any], ...]
) -> None:
    api, cluster = service_on_shared
    a, b = two_tenants
    a_name, b_name = a["tenant"]["name"], b["tenant"]["name"]
    a_key, b_key = a["api_key"], b["api_key"]
    base = f"/v1/clusters/{cluster}/tenants"

    status, topic = api.call(
        "POST", f"{base}/{a_name}/topics", {"name": f"{a_name}.orders", "partitions": 2}, key=a_key
    )
    assert status == 201, topic
    assert (topic["name"], topic["partitions"], topic["replication_factor"]) == (
        f"{a_name}.orders",
        2,
        3,
    )
    assert api.call("GET", f"{base}/{a_name}/topics", key=a_key) == (
        200,
        [{"name": f"{a_name}.orders", "partitions": 2, "replication_factor": 3}],
    )
    assert api.call("GET", f"{base}/{a_name}", key=a_key)[0] == 200
    status, b_topic = api.call(
        "POST", f"{base}/{b_name}/topics", {"name": f"{b_name}.secret"}, key=b_key
    )
    assert status == 201, b_topic

    # Tenant A's key on tenant B's things, on the admin's, and outside its prefix: 403.
    for method, path, body in [
        ("GET", f"{base}/{b_name}", None),
        ("GET", f"{base}/{b_name}/topics", None),
        ("POST", f"{base}/{b_name}/topics", {"name": f"{b_name}.mine"}),
        ("DELETE", f"{base}/{b_name}/topics/{b_name}.secret", None),
        ("DELETE", f"{base}/{b_name}", None),
        ("GET", base, None),
        ("POST", base, {"name": "sneaky"}),
        ("GET", f"/v1/clusters/{cluster}", None),
        ("GET", "/v1/operations", None),
    ]:
        _error(api.call(method, path, body, key=a_key), 403, "")
    _error(
        api.call("POST", f"{base}/{a_name}/topics", {"name": f"{b_name}.x"}, key=a_key),
        403,
        "outside tenant",
    )
    for key in (None, "kaas_0000_wrong", a_key + "x"):
        _error(api.call("GET", f"{base}/{a_name}/topics", key=key), 401, "API key")
    # B's topic is still there; the admin sees both tenants.
    assert [t["name"] for t in api.call("GET", f"{base}/{b_name}/topics", key=b_key)[1]] == [
        f"{b_name}.secret"
    ]
    status, listed = api.call("GET", base)
    assert status == 200 and {a_name, b_name} <= {t["name"] for t in listed}


def test_requests_beyond_the_plan_get_4xx_naming_the_problem(
    service_on_shared: tuple[ServiceHandle, str], two_tenants: tuple[dict[str, Any], ...]
) -> None:
    api, cluster = service_on_shared
    a, _ = two_tenants
    name, key = a["tenant"]["name"], a["api_key"]
    path = f"/v1/clusters/{cluster}/tenants/{name}/topics"
    existing = {t["name"] for t in api.call("GET", path, key=key)[1]}
    used = sum(t["partitions"] for t in api.call("GET", path, key=key)[1])
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"name": f"{name}.big", "partitions": 5 - used}, 409, "plan allows 4"),
        ({"name": f"{name}.rf", "replication_factor": 4}, 400, "above the cluster's 3 brokers"),
        (
            {"name": f"{name}.cfg", "configs": {"unclean.leader.election.enable": "true"}},
            400,
            "'unclean.leader.election.enable' is not on the whitelist",
        ),
        ({"name": f"{name}.ret", "configs": {"retention.ms": "-1"}}, 400, "out of range"),
        ({"name": f"{name}.zero", "partitions": 0}, 400, "partitions must be"),
        ({"name": f"{name}.typo", "partition": 1}, 422, "partition"),
    ]
    for body, status, fragment in cases:
        _error(api.call("POST", path, body, key=key), status, fragment)
    bad_plans: list[tuple[Any, str]] = [
        ({**PLAN, "max_topics": 0}, "plan.max_topics must be 1-10000"),
        ("gold", "plan 'gold' is unknown"),
    ]
    for plan, fragment in bad_plans:
        _error(
            api.call(
                "POST", f"/v1/clusters/{cluster}/tenants", {"name": _name("bad"), "plan": plan}
            ),
            400,
            fragment,
        )
    _error(
        api.call("POST", f"/v1/clusters/{cluster}/tenants", {"name": "Bad_Name"}),
        400,
        "tenant name 'Bad_Name' is invalid",
    )
    # Refused requests changed nothing.
    assert {t["name"] for t in api.call("GET", path, key=key)[1]} == existing


def test_a_scram_client_with_the_returned_details_stays_in_its_own_topics(
    service_on_shared: tuple[ServiceHandle, str], two_tenants: tuple[dict[str, Any], ...]
) -> None:
    api, cluster = service_on_shared
    a, b = two_tenants
    a_name, b_name = a["tenant"]["name"], b["tenant"]["name"]
    topic = f"{a_name}.orders"
    status, _ = api.call("GET", f"/v1/clusters/{cluster}/tenants/{a_name}/topics", key=a["api_key"])
    assert status == 200
    config = tenant_client_config(a)
    deliveries = produce(config, topic, 100)
    assert deliveries.errors == [] and len(deliveries.acked) == 100
    consumer = Consumer({**config, "group.id": f"{a_name}.g", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(values) < 100 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value() or b"")
    consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(100))

    secret = f"{b_name}.secret"
    refused = produce(config, secret, 3, **{"message.timeout.ms": 10_000})
    assert refused.acked == []
    assert {e.code() for e in refused.errors} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    read = first_consumer_error(config, secret, f"{a_name}.spy")
    assert read is not None and read.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, read
    assert secret not in AdminClient(config).list_topics(timeout=15).topics


def test_the_command_line_covers_tenants_and_topics(
    service_on_shared: tuple[ServiceHandle, str], two_tenants: tuple[dict[str, Any], ...]
) -> None:
    api, cluster = service_on_shared
    a, b = two_tenants
    name = a["tenant"]["name"]
    env = {**os.environ, "KAAS_SERVICE_HOME": str(api.home), "KAAS_API_URL": api.url}
    env.pop("KAAS_API_KEY", None)
    listed = harness.kaas_cli("tenant", "list", cluster, env=env)
    assert listed.returncode == 0 and name in listed.stdout and b["tenant"]["name"] in listed.stdout
    tenant_env = {**env, "KAAS_API_KEY": a["api_key"]}
    shown = harness.kaas_cli("tenant", "get", cluster, name, env=tenant_env)
    assert shown.returncode == 0, shown.stderr
    assert f"tenant {name} of cluster {cluster}: active" in shown.stdout
    assert "sasl.mechanism=SCRAM-SHA-512" in shown.stdout
    made = harness.kaas_cli(
        "topic",
        "create",
        cluster,
        name,
        f"{name}.cli",
        "--config",
        "retention.ms=3600000",
        env=tenant_env,
    )
    assert made.returncode == 0, made.stderr
    assert f"topic {name}.cli created: 1 partitions, replication factor 3" in made.stdout
    topics = harness.kaas_cli("topic", "list", cluster, name, env=tenant_env)
    assert topics.returncode == 0 and f"{name}.cli" in topics.stdout
    other = harness.kaas_cli("topic", "list", cluster, b["tenant"]["name"], env=tenant_env)
    assert other.returncode == 1 and "(403 forbidden)" in other.stderr
    gone = harness.kaas_cli("topic", "delete", cluster, name, f"{name}.cli", env=tenant_env)
    assert gone.returncode == 0 and f"topic {name}.cli deleted" in gone.stdout
    again = harness.kaas_cli("topic", "delete", cluster, name, f"{name}.cli", env=tenant_env)
    assert again.returncode == 1 and "(404 not_found)" in again.stderr


def test_an_onboarding_killed_midway_is_rolled_back_at_the_next_start(
    service_on_shared: tuple[ServiceHandle, str], kafka_cluster: ClusterHandle
) -> None:
    api, cluster = service_on_shared
    name = _name("crash")
    answers: list[Any] = []

    def onboard() -> None:
        try:
            answers.append(api.call("POST", f"/v1/clusters/{cluster}/tenants", {"name": name}))
        except OSError as exc:  # the service died under the request
            answers.append(exc)

    request = threading.Thread(target=onboard)
    request.start()
    # Kill it once the credential is set and the quotas (a ConfigCommand JVM) are under way.
    deadline = time.monotonic() + 60
    step = None
    while time.monotonic() < deadline:
        with sqlite3.connect(api.home / "kaas.db") as db:
            row = db.execute(
                "SELECT steps, step_index FROM operations WHERE kind = 'create_tenant' "
                "AND params LIKE ? ORDER BY op_id DESC",
                (f'%"{name}"%',),
            ).fetchone()
        if row is not None and row[1] >= 3:
            step = row[1]
            break
        time.sleep(0.05)
    api.kill()
    request.join(60)
    assert step is not None, "the onboarding never reached its quotas step"
    assert len(answers) == 1 and not isinstance(answers[0], tuple), answers
    admin = AdminClient(kafka_cluster.client_config())
    described = admin.describe_user_scram_credentials([name])
    assert isinstance(described, dict)
    described[name].result(timeout=30)  # the credential exists now: the kill left it behind

    api.start()
    deadline = time.monotonic() + 120
    op: dict[str, Any] = {}
    while time.monotonic() < deadline:
        ops = [o for o in api.call("GET", "/v1/operations")[1] if o["params"].get("name") == name]
        op = ops[0]
        if op["status"] != "running" and op["status"] != "pending":
            break
        time.sleep(1)
    assert op["status"] == "failed" and "rolled back" in op["message"], op
    _error(api.call("GET", f"/v1/clusters/{cluster}/tenants/{name}"), 404, name)

    def credential_gone() -> bool:
        # A broker answers from its own ZooKeeper session, which may not have seen the
        # rollback's delete yet: wait for it rather than read once.
        try:
            admin.describe_user_scram_credentials([name])[name].result(timeout=30)  # type: ignore[index]
        except Exception as exc:
            if re.search(r"RESOURCE_NOT_FOUND|not found", str(exc)):
                return True
            raise
        return False

    harness.wait_until(credential_gone, 30, f"{name}'s SCRAM credential deleted")
    acls = harness_acls(kafka_cluster, name)
    assert acls == [], acls
    # The name is free again: the caller's retry onboards it.
    status, body = api.call("POST", f"/v1/clusters/{cluster}/tenants", {"name": name})
    assert status == 201, body


def harness_acls(kafka_cluster: ClusterHandle, user: str) -> list[str]:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(kafka_cluster.client_config())
    found = admin.describe_acls(
        AclBindingFilter(
            ResourceType.ANY,
            None,  # type: ignore[arg-type]
            ResourcePatternType.ANY,
            f"User:{user}",
            None,  # type: ignore[arg-type]
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(timeout=30)
    return [str(binding) for binding in found]


def _retention_bytes(admin: AdminClient, topic: str) -> str:
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return str(entries["retention.bytes"].value)


def test_the_storage_budget_is_kept_through_topic_configs(
    service_on_shared: tuple[ServiceHandle, str], kafka_cluster: ClusterHandle
) -> None:
    api, cluster = service_on_shared
    tenants = f"/v1/clusters/{cluster}/tenants"
    for body, fragment in [
        ({"name": _name("res"), "prefix": "kaas."}, "prefix 'kaas.' is reserved"),
        ({"name": _name("res"), "prefix": "kafka_"}, "is reserved"),
        ({"name": "abc\n"}, "tenant name 'abc\\n' is invalid"),
    ]:
        _error(api.call("POST", tenants, body), 400, fragment)
    mib = 1024**2
    plan = {**PLAN, "storage_bytes": 1024 * mib, "retention_bytes": 64 * mib}
    status, made = api.call("POST", tenants, {"name": _name("budget"), "plan": plan})
    assert status == 201, made
    name, key = made["tenant"]["name"], made["api_key"]
    assert made["tenant"]["plan"]["storage_bytes"] == 1024 * mib
    path = f"{tenants}/{name}/topics"
    admin = AdminClient(kafka_cluster.client_config())
    # 2 partitions x 3 replicas x the plan's 64 MiB: 384 of 1024 MiB.
    status, first = api.call("POST", path, {"name": f"{name}.a", "partitions": 2}, key=key)
    assert status == 201, first
    assert _retention_bytes(admin, f"{name}.a") == str(64 * mib)
    refused_topics: list[tuple[dict[str, Any], int, str]] = [
        (
            {"name": f"{name}.b", "partitions": 2, "configs": {"retention.bytes": str(128 * mib)}},
            409,
            "uses 402653184 bytes (0.38 GiB) of its plan's storage budget of 1073741824 bytes",
        ),
        ({"name": f"{name}.c", "configs": {"retention.bytes": "-1"}}, 400, "out of range"),
        ({"name": f"{name}.d", "configs": {"cleanup.policy": "compact"}}, 400, "also delete"),
    ]
    for body, code, fragment in refused_topics:
        _error(api.call("POST", path, body, key=key), code, fragment)
    assert [t["name"] for t in api.call("GET", path, key=key)[1]] == [f"{name}.a"]
    # A change: 2 x 3 x 170 MiB = 1020 MiB fits; 171 MiB (1026 MiB) does not.
    topic_path = f"{path}/{name}.a"
    status, changed = api.call(
        "PATCH", topic_path, {"configs": {"retention.bytes": str(170 * mib)}}, key=key
    )
    assert status == 200 and changed["configs"] == {"retention.bytes": str(170 * mib)}, changed
    assert _retention_bytes(admin, f"{name}.a") == str(170 * mib)
    refused_changes: list[tuple[dict[str, str], int, str]] = [
        ({"retention.bytes": str(171 * mib)}, 409, "storage budget of 1073741824 bytes"),
        ({"retention.bytes": "-1"}, 400, "out of range"),
        ({"cleanup.policy": "compact"}, 400, "also delete"),
    ]
    for configs, code, fragment in refused_changes:
        _error(api.call("PATCH", topic_path, {"configs": configs}, key=key), code, fragment)
    assert _retention_bytes(admin, f"{name}.a") == str(170 * mib)
    _error(
        api.call("PATCH", f"{path}/{name}.zz", {"configs": {"retention.ms": "60000"}}, key=key),
        404,
        "no topic",
    )


def test_of_two_concurrent_onboardings_with_overlapping_prefixes_one_is_registered(
    service_on_shared: tuple[ServiceHandle, str],
) -> None:
    api, cluster = service_on_shared
    tenants = f"/v1/clusters/{cluster}/tenants"
    base = f"ov{uuid.uuid4().hex[:6]}"
    bodies = [
        {"name": f"{base}-a", "plan": PLAN, "prefix": f"{base}."},
        {"name": f"{base}-b", "plan": PLAN, "prefix": f"{base}.eu."},
    ]
    answers: dict[str, tuple[int, Any]] = {}
    go = threading.Barrier(2, timeout=30)

    def onboard(body: dict[str, Any]) -> None:
        go.wait()
        answers[body["name"]] = api.call("POST", tenants, body)

    threads = [threading.Thread(target=onboard, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    statuses = sorted(code for code, _ in answers.values())
    assert statuses == [201, 409], answers
    refused = next(body for code, body in answers.values() if code == 409)
    assert refused["code"] == "conflict" and "overlaps" in refused["message"], refused
    status, listed = api.call("GET", tenants)
    assert status == 200
    assert len([t for t in listed if t["name"].startswith(base)]) == 1, listed
