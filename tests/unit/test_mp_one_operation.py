"""One unfinished cluster operation per cluster, kept by the database (a real SQLite file in
the test's folder) under concurrent requests; and the one mapping of errors to step outcomes
and HTTP answers."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from management_plane.errors import (
    ApiError,
    KaasError,
    PermanentError,
    Refusal,
    RequestRefused,
    StepVerdict,
    TemporaryError,
    http_answer,
    step_verdict,
)
from management_plane.providers.base import ProviderError
from management_plane.service.cluster_io import ClusterUnreachable
from management_plane.service.db import ClusterBusy, Database, StoredValueError
from management_plane.service.operations import (
    FAILED,
    OperationKind,
    StepName,
    StepRef,
    expand_steps,
)
from management_plane.service.service import Service
from management_plane.service.validation import ValidationError
from management_plane.tenants.kafka import TenantKafkaError
from management_plane.tenants.model import Problem, TenantError
from planner.contracts.spec import ClusterSpec
from tests.unit.fake_cluster import FakeProvider

pytestmark = pytest.mark.unit

K = OperationKind
THREADS = 8


def _database(tmp_path: Path) -> Database:
    db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
    spec = ClusterSpec("orders", "3.8.1", 3, ("zone-a", "zone-b", "zone-c"))
    db.add_cluster("orders", "fake", "small", json.dumps(spec.to_json(), sort_keys=True))
    db.update_cluster("orders", status="running")
    return db


def _all_at_once(attempt: Callable[[int], Any]) -> tuple[list[Any], list[Exception]]:
    """Run `attempt(i)` in THREADS threads released together."""
    start = threading.Barrier(THREADS)
    accepted: list[Any] = []
    refused: list[Exception] = []
    guard = threading.Lock()

    def run(i: int) -> None:
        start.wait()
        try:
            result = attempt(i)
        except Exception as exc:
            with guard:
                refused.append(exc)
        else:
            with guard:
                accepted.append(result)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return accepted, refused


def test_concurrent_inserts_let_exactly_one_operation_in(tmp_path: Path) -> None:
    db = _database(tmp_path)
    steps = expand_steps(K.CHANGE_CONFIG)

    accepted, refused = _all_at_once(
        lambda i: db.add_operation("orders", K.CHANGE_CONFIG, {"n": i}, steps, f"caller-{i}")
    )
    assert len(accepted) == 1 and len(refused) == THREADS - 1
    winner = accepted[0]
    for exc in refused:
        assert isinstance(exc, ClusterBusy)
        answer = http_answer(exc)
        assert (answer.status, answer.code) == (409, "cluster_busy")
        assert answer.message == (
            f"cluster orders is running operation {winner.op_id} (change_config, step "
            "write_spec); wait for it to finish"
        )
    assert [op.op_id for op in db.unfinished_operations()] == [winner.op_id]


def test_concurrent_requests_to_the_service_get_one_202_and_the_rest_409(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _database(tmp_path)
    service = Service(tmp_path, db, FakeProvider())
    # Every request passes the early look, as when they all arrive before any is stored:
    # only the database stands between them.
    monkeypatch.setattr(service, "_idle", lambda _name: None)

    accepted, refused = _all_at_once(
        lambda i: service.change_config("orders", {"log.retention.hours": str(i + 1)}, "admin")
    )
    assert len(accepted) == 1
    assert [http_answer(e).status for e in refused] == [409] * (THREADS - 1)
    assert {http_answer(e).code for e in refused} == {"cluster_busy"}
    assert len(db.unfinished_operations()) == 1


def test_the_early_look_refuses_with_the_same_answer(tmp_path: Path) -> None:
    db = _database(tmp_path)
    service = Service(tmp_path, db, FakeProvider())
    first = service.change_config("orders", {"log.retention.hours": "1"}, "admin")
    with pytest.raises(ClusterBusy, match=f"running operation {first.op_id} \\(change_config"):
        service.delete_cluster("orders", "admin")
    assert db.cluster("orders")["status"] == "running"  # type: ignore[index]


def test_a_finished_operation_frees_the_cluster_and_tenants_never_hold_it(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)
    first = db.add_operation("orders", K.CHANGE_CONFIG, {}, expand_steps(K.CHANGE_CONFIG), "a")
    # Tenant operations run inside their requests beside the cluster's operation.
    for kind in (K.CREATE_TOPIC, K.CREATE_TOPIC, K.DELETE_TENANT):
        db.add_operation("orders", kind, {}, expand_steps(kind), "tenant")
    with pytest.raises(ClusterBusy):
        db.add_operation("orders", K.DELETE_CLUSTER, {}, expand_steps(K.DELETE_CLUSTER), "a")
    db.add_operation("other", K.DELETE_CLUSTER, {}, expand_steps(K.DELETE_CLUSTER), "a")
    db.save_operation(first.op_id, FAILED, 0, {}, "broke")
    db.add_operation("orders", K.DELETE_CLUSTER, {}, expand_steps(K.DELETE_CLUSTER), "a")


def test_a_database_from_before_the_index_gets_it_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "kaas.db"
    _database(tmp_path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("DROP INDEX one_unfinished_operation_per_cluster")
    db = Database(f"sqlite:///{path}")
    db.add_operation("orders", K.CHANGE_CONFIG, {}, expand_steps(K.CHANGE_CONFIG), "a")
    with pytest.raises(ClusterBusy):
        db.add_operation("orders", K.CHANGE_CONFIG, {}, expand_steps(K.CHANGE_CONFIG), "a")


def test_a_database_already_holding_two_unfinished_operations_is_refused_clearly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "kaas.db"
    db = _database(tmp_path)
    db.add_operation("orders", K.CHANGE_CONFIG, {}, expand_steps(K.CHANGE_CONFIG), "a")
    db.close()
    with sqlite3.connect(path) as raw:
        raw.execute("DROP INDEX one_unfinished_operation_per_cluster")
        raw.execute(
            "INSERT INTO operations (cluster, kind, params, status, steps, step_index, context,"
            " message, created_by, created_at, updated_at, step_started_at) SELECT cluster, kind,"
            " params, status, steps, step_index, context, message, created_by, created_at,"
            " updated_at, step_started_at FROM operations"
        )
    with pytest.raises(StoredValueError, match="two unfinished operations on one cluster"):
        Database(f"sqlite:///{path}")


def test_stored_steps_stay_readable_text(tmp_path: Path) -> None:
    db = _database(tmp_path)
    op = db.add_operation(
        "orders", K.REPLACE_VM, {}, expand_steps(K.REPLACE_VM, 1), "a", {"batches": [["x"]]}
    )
    with sqlite3.connect(tmp_path / "kaas.db") as raw:
        (steps,) = raw.execute(
            "SELECT steps FROM operations WHERE op_id = ?", (op.op_id,)
        ).fetchone()
    assert json.loads(steps)[:3] == ["write_spec", "create_vm:0", "wait_joined:0"]
    assert op.steps[1] == StepRef(StepName.CREATE_VM, 0)


def test_an_unreadable_stored_step_names_the_operation(tmp_path: Path) -> None:
    db = _database(tmp_path)
    op = db.add_operation("orders", K.CHANGE_CONFIG, {}, expand_steps(K.CHANGE_CONFIG), "a")
    with sqlite3.connect(tmp_path / "kaas.db") as raw:
        raw.execute("UPDATE operations SET steps = '[\"explode:1\"]' WHERE op_id = ?", (op.op_id,))
    with pytest.raises(StoredValueError, match=f"operation {op.op_id} cannot be read: .*explode"):
        db.operation(op.op_id)


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        (ClusterUnreachable("zk down"), StepVerdict.RETRY),
        (ProviderError("throttled"), StepVerdict.RETRY),
        (TemporaryError("later"), StepVerdict.RETRY),
        (KaasError("cluster orders is not in the database"), StepVerdict.RETRY),
        (PermanentError("cannot"), StepVerdict.FAIL),
        (RequestRefused(Refusal.CONFLICT, "no"), StepVerdict.FAIL),
    ],
)
def test_what_an_error_does_to_a_step(error: KaasError, verdict: StepVerdict) -> None:
    assert step_verdict(error) == verdict


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (ApiError(404, "not_found", "no cluster named x"), 404, "not_found"),
        (ValidationError("broker_count must be at least 1"), 400, "invalid_request"),
        (TenantError("invalid", [Problem("name", "bad")]), 400, "invalid_request"),
        (TenantError("forbidden", [Problem("topic", "not yours")]), 403, "forbidden"),
        (TenantError("conflict", [Problem("name", "exists")]), 409, "conflict"),
        (TenantError("not_found", [Problem("topic", "none")]), 404, "not_found"),
        (TenantError("limit_exceeded", [Problem("partitions", "max")]), 409, "limit_exceeded"),
        (TenantError("odd", [Problem("x", "y")]), 400, "invalid_request"),
        (ClusterBusy("orders", None), 409, "cluster_busy"),
        (TenantKafkaError("creating the ACLs: broker down"), 502, "kafka_error"),
        (ClusterUnreachable("zk down"), 503, "unavailable"),
        (ProviderError("throttled"), 503, "unavailable"),
        (PermanentError("cannot"), 409, "failed"),
        (RuntimeError("secret internals"), 500, "internal"),
    ],
)
def test_every_error_family_has_one_http_answer(error: Exception, status: int, code: str) -> None:
    answer = http_answer(error)
    assert (answer.status, answer.code) == (status, code)
    if status == 500:
        assert answer.message == "internal error: RuntimeError"  # no internals leak
    else:
        assert answer.message == str(error)
