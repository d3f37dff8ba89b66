"""The API's input checks and its secrets, against the real app on a loopback port (engine
paused, database in the test's folder): every bad request gets a 4xx naming the problem and
stores nothing; the OpenAPI document needs a key; the service's files are private."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from management_plane.service.auth import ADMIN_KEY_FILE
from management_plane.service.db import Database
from management_plane.service.main import DATABASE_FILE, admin_key_notice
from management_plane.service.tenant_service import _admits
from management_plane.service.validation import ValidationError, validated_log_limits
from management_plane.tenants.model import PLANS, Tenant, TenantError
from planner.contracts.log_limits import LogLimits
from planner.contracts.vm_config.validation import (
    SECURITY_KEYS,
    broker_config_problems,
    spec_broker_config_problems,
)
from tests.unit.api_server import RunningApi, running_api

pytestmark = pytest.mark.unit

HUGE = "9" * 5000  # past the 4300 digits Python's int() reads from a string


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    with running_api(tmp_path_factory.mktemp("api") / "service") as running:
        yield running


def _refused(answer: tuple[int, Any], status: int, fragment: str) -> None:
    code, body = answer
    assert code == status, body
    assert set(body) == {"code", "message"}, body
    assert fragment in body["message"], body


def _stored(api: RunningApi) -> tuple[list[str], list[int]]:
    clusters = [c["name"] for c in api.service.db.list_clusters(include_deleted=True)]
    operations = [op.op_id for op in api.service.db.list_operations(None, 1000)]
    return clusters, operations


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"name": "abc\n"}, 400, "name 'abc\\n' is invalid"),
        ({"name": "a²"}, 400, "name 'a²' is invalid"),
        ({"name": "a\u0663"}, 400, "is invalid"),  # an Arabic-Indic digit three
        ({"name": "big", "broker_count": 10**30}, 400, "broker_count: the number is out of range"),
        ({"name": "big", "broker_count": 2**63}, 400, "broker_count must be at most 64"),
        ({"name": "big", "batch_size": 10**40}, 400, "batch_size: the number is out of range"),
        ({"name": "sup", "broker_count": "²"}, 422, "broker_count"),
        (
            {"name": "parts", "broker_config": {"num.partitions": "0"}},
            400,
            "broker_config.num.partitions: num.partitions='0' is out of range",
        ),
        (
            {"name": "seg", "broker_config": {"log.segment.bytes": "1"}},
            400,
            "broker_config.log.segment.bytes: log.segment.bytes='1' is out of range",
        ),
        (
            {"name": "ibp", "broker_config": {"inter.broker.protocol.version": "99.0"}},
            400,
            "broker_config.inter.broker.protocol.version: inter.broker.protocol.version='99.0' "
            "is not one of the valid values",
        ),
        (
            {"name": "digits", "broker_config": {"num.partitions": "\u0663"}},
            400,
            "is not a whole number",
        ),
        (
            {"name": "long", "broker_config": {"log.retention.bytes": HUGE}},
            400,
            "broker_config.log.retention.bytes: log.retention.bytes='9999",
        ),
        (
            {"name": "owned", "broker_config": {"listeners": "PLAINTEXT://:1"}},
            400,
            "'listeners' is set by the agent",
        ),
        (
            {"name": "auth", "broker_config": {"ssl.client.auth": "none"}},
            400,
            "broker_config.ssl.client.auth: 'ssl.client.auth' decides how clients authenticate",
        ),
        (
            {"name": "who", "broker_config": {"principal.builder.class": "a.B"}},
            400,
            "KaaS sets the cluster's security",
        ),
    ],
)
def test_bad_cluster_requests_get_4xx_naming_the_field_and_store_nothing(
    api: RunningApi, body: dict[str, Any], status: int, fragment: str
) -> None:
    before = _stored(api)
    _refused(api.call("POST", "/v1/clusters", body), status, fragment)
    assert _stored(api) == before


def test_an_integer_of_thousands_of_digits_is_a_400_naming_the_field(api: RunningApi) -> None:
    before = _stored(api)
    raw = f'{{"name": "huge", "broker_count": {HUGE}}}'.encode()
    _refused(api.call("POST", "/v1/clusters", raw=raw), 400, "broker_count: the number is out")
    raw = f'{{"name": "huge", "broker_count": -{HUGE}}}'.encode()
    _refused(api.call("POST", "/v1/clusters", raw=raw), 400, "broker_count: the number is out")
    _refused(api.call("GET", f"/v1/operations/{HUGE}"), 422, "op_id")
    assert _stored(api) == before


def test_a_config_change_the_agent_would_refuse_is_refused_and_the_spec_stays(
    api: RunningApi,
) -> None:
    status, op = api.call("POST", "/v1/clusters", {"name": "cfg", "broker_count": 3})
    assert status == 202, op
    spec_before = api.service.db.cluster("cfg")["spec"]  # type: ignore[index]
    before = _stored(api)
    for config, fragment in [
        ({"num.partitions": "0"}, "broker_config.num.partitions"),
        ({"log.segment.bytes": "1"}, "broker_config.log.segment.bytes"),
        ({"inter.broker.protocol.version": "99.0"}, "broker_config.inter.broker.protocol.version"),
        ({"num.partitions": HUGE}, "does not fit in a 32-bit int"),
        ({"sasl.enabled.mechanisms": "PLAIN"}, "set by KaaS"),
    ]:
        answer = api.call("PATCH", "/v1/clusters/cfg/config", {"broker_config": config})
        _refused(answer, 400, fragment)
    assert api.service.db.cluster("cfg")["spec"] == spec_before  # type: ignore[index]
    assert _stored(api) == before


def test_log_bounds_are_checked_at_the_boundary_and_stored_in_the_spec(api: RunningApi) -> None:
    before = _stored(api)
    for logs, fragment in [
        ({"max_file_mb": 0}, "logs.max_file_mb must be an integer 1-10240, got 0"),
        ({"files": 101}, "logs.files must be an integer 1-100, got 101"),
    ]:
        answer = api.call("POST", "/v1/clusters", {"name": "logs1", "logs": logs})
        _refused(answer, 400, fragment)
    _refused(api.call("POST", "/v1/clusters", {"name": "logs1", "logs": {"size": 1}}), 422, "size")
    assert _stored(api) == before
    status, op = api.call(
        "POST", "/v1/clusters", {"name": "logs1", "logs": {"max_file_mb": 20, "files": 4}}
    )
    assert status == 202, op
    spec = json.loads(api.service.db.cluster("logs1")["spec"])  # type: ignore[index]
    assert spec["logs"] == {"max_file_mb": 20, "files": 4}
    before = _stored(api)
    _refused(api.call("PATCH", "/v1/clusters/logs1/logs", {"files": 0}), 400, "logs.files")
    _refused(api.call("PATCH", "/v1/clusters/logs1/logs", {}), 400, "logs must name")
    _refused(api.call("PATCH", "/v1/clusters/nope/logs", {"files": 2}), 404, "nope")
    assert _stored(api) == before


def test_a_log_bound_not_given_keeps_its_current_value() -> None:
    current = LogLimits(max_file_mb=20, files=4)
    assert validated_log_limits({"files": 2}, current) == LogLimits(20, 2)
    assert validated_log_limits({"max_file_mb": 5}) == LogLimits(5, 10)  # a new cluster
    with pytest.raises(ValidationError, match=r"logs\.files must be an integer 1-100, got 0"):
        validated_log_limits({"files": 0}, current)


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc"])
def test_the_api_document_needs_a_key(api: RunningApi, path: str) -> None:
    status, _body = api.call("GET", path, key=None)
    assert status in (401, 404)
    if path != "/redoc":
        _refused(api.call("GET", path, key=None), 401, "API key")
        _refused(api.call("GET", path, key="kaas_0000_wrong"), 401, "API key")


def test_the_api_document_is_served_to_a_caller_with_a_key(api: RunningApi) -> None:
    status, document = api.call("GET", "/openapi.json")
    assert status == 200
    assert "/v1/clusters" in document["paths"]
    assert "/openapi.json" not in document["paths"] and "/docs" not in document["paths"]
    status, page = api.call("GET", "/docs")
    assert status == 200 and "SwaggerUIBundle" in page and '"/v1/clusters"' in page


def test_the_service_home_database_and_key_file_are_private(api: RunningApi) -> None:
    home = Path(api.service.home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    files = [home / DATABASE_FILE, home / ADMIN_KEY_FILE]
    files += [p for p in home.iterdir() if p.name.startswith(f"{DATABASE_FILE}-")]  # -wal, -shm
    assert len(files) >= 3, files
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert (home / ADMIN_KEY_FILE).read_text().strip() == api.key
    assert not [p for p in home.iterdir() if p.name.endswith(".tmp")]


def test_an_older_wider_home_is_narrowed_and_the_key_is_never_printed(tmp_path: Path) -> None:
    home = tmp_path / "service"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    with running_api(home) as running:
        notice = admin_key_notice(home)
        assert running.key not in notice
        assert str(home.resolve() / ADMIN_KEY_FILE) in notice
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def _registering(
    db: Database, tenant: Tenant, results: dict[str, str], go: threading.Barrier
) -> None:
    def slow_admits(rows: list[dict[str, Any]]) -> None:
        # Long enough that, were the check and the insert not one guarded step, the other
        # request would read the tenants before this one is inserted.
        time.sleep(0.3)
        _admits(tenant, rows)

    go.wait()
    try:
        db.add_tenant(tenant.name, "shared", tenant.prefix, tenant.plan.to_json(), 1, slow_admits)
        results[tenant.name] = "registered"
    except TenantError as refused:
        results[tenant.name] = f"{refused.code}: {refused}"


def test_of_two_concurrent_overlapping_prefixes_exactly_one_is_registered(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
    db.add_cluster("shared", "local", "local", "{}")
    one = Tenant("acme", "acme.", PLANS["small"])
    other = Tenant("acmeeu", "acme.eu.", PLANS["small"])
    go = threading.Barrier(2, timeout=10)
    results: dict[str, str] = {}
    threads = [
        threading.Thread(target=_registering, args=(db, t, results, go)) for t in (one, other)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    stored = [row["name"] for row in db.list_tenants("shared")]
    assert len(stored) == 1, (stored, results)
    loser = other.name if stored == [one.name] else one.name
    assert results[stored[0]] == "registered"
    assert results[loser].startswith("conflict: prefix") and "overlaps" in results[loser]
    db.close()


@pytest.mark.parametrize("key", sorted(SECURITY_KEYS))
def test_security_keys_are_refused_in_a_spec_and_left_to_what_kaas_renders(key: str) -> None:
    value = {"ssl.client.auth": "required", "zookeeper.set.acl": "true"}.get(key, "x.Y")
    refused = spec_broker_config_problems({key: value, "num.io.threads": "8"})
    assert [p.key for p in refused] == [key]
    assert "KaaS sets the cluster's security" in refused[0].message
    # The agent's check of a rendered change (its own keys included) does not refuse it.
    assert not [p for p in broker_config_problems({key: value}) if "security" in p.message]
