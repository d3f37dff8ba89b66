"""The service's tenant rules that need no Kafka: who may act on a tenant, how the library's
errors become HTTP answers, and which tenant operations the engine leaves to their request
(a real SQLite database in the test's folder)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from management_plane.service.auth import Caller
from management_plane.service.controller import Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import OperationKind
from management_plane.service.service import ApiError
from management_plane.service.tenant_service import (
    TENANT_KINDS,
    TENANT_STEPS,
    TenantService,
    api_error,
)
from management_plane.tenants.kafka import KafkaTenants, TenantKafkaError
from management_plane.tenants.model import Problem, TenantError
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles

pytestmark = pytest.mark.unit

ADMIN = Caller("k0", "admin", "admin", None)
ACME = Caller("k1", "tenant:acme", "tenant", "acme")


def _unused_factory(_internal: InternalClient, _sasl: str) -> KafkaTenants:
    raise AssertionError("no Kafka in these tests")


def _no_identity(_cluster: str) -> IdentityFiles | None:
    return None


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
    database.add_cluster("shared", "local", "local", "{}")
    return database


def test_the_admin_and_the_tenant_itself_may_act_and_nobody_else(db: Database) -> None:
    tenants = TenantService(db, _unused_factory, _no_identity)
    tenants.authorize(ADMIN, "shared", "beta")
    tenants.authorize(ACME, "shared", "acme")
    for who, tenant in [
        (ACME, "beta"),
        (ACME, "nonexistent"),
        (Caller("k2", "odd", "tenant", None), "acme"),
        (Caller("k3", "x", "reader", "acme"), "acme"),
    ]:
        with pytest.raises(ApiError) as refused:
            tenants.authorize(who, "shared", tenant)
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        assert f"tenant {tenant} of cluster shared" in refused.value.message


@pytest.mark.parametrize(
    ("code", "status", "answer"),
    [
        ("invalid", 400, "invalid_request"),
        ("forbidden", 403, "forbidden"),
        ("conflict", 409, "conflict"),
        ("not_found", 404, "not_found"),
        ("limit_exceeded", 409, "limit_exceeded"),
    ],
)
def test_tenant_errors_become_http_answers_with_the_message(
    code: str, status: int, answer: str
) -> None:
    error = api_error(TenantError(code, [Problem("partitions", "plan allows 4 (1 left)")]))
    assert (error.status, error.code, error.message) == (status, answer, "plan allows 4 (1 left)")


def test_a_kafka_failure_is_a_502_naming_the_step() -> None:
    error = api_error(TenantKafkaError("creating the ACLs: broker down"))
    assert (error.status, error.code) == (502, "kafka_error")
    assert "creating the ACLs" in error.message


def test_the_engine_resumes_only_tenant_operations_no_request_is_running(db: Database) -> None:
    before = db.add_operation(
        "shared", "create_tenant", {}, TENANT_STEPS[OperationKind.CREATE_TENANT], "a"
    )
    time.sleep(0.01)
    engine = Engine(db, Controller(db, provider=None))  # type: ignore[arg-type]
    time.sleep(0.01)
    running = db.add_operation(
        "shared", "create_topic", {}, TENANT_STEPS[OperationKind.CREATE_TOPIC], "a"
    )
    handed = db.add_operation(
        "shared",
        "delete_topic",
        {},
        TENANT_STEPS[OperationKind.DELETE_TOPIC],
        "a",
        {"resume": True},
    )
    resumed: list[int] = []

    def resume(op: OperationRow) -> None:
        resumed.append(op.op_id)

    engine.inline_kinds = TENANT_KINDS
    engine.resume_inline = resume
    for op in (before, running, handed):
        engine._resume_inline(op)
    assert resumed == [before.op_id, handed.op_id]
    # run_once: one operation per cluster per cycle, the oldest first.
    resumed.clear()
    engine.run_once()
    assert resumed == [before.op_id]
