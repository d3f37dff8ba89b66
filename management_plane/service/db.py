"""The service's state in one database, behind one access layer (SQLAlchemy Core).

SQLite in WAL mode is the embedded default; any SQLAlchemy URL (postgresql+psycopg://...)
selects another database with the same tables. Every method is one short transaction, so
the API threads and the operations engine never hold a lock across a slow call.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from management_plane.errors import PermanentError, Refusal, RequestRefused
from management_plane.service.operations import (
    TENANT_KINDS,
    UNFINISHED,
    OperationKind,
    OperationStatus,
    StepRef,
    parse_steps,
)

metadata = MetaData()

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(32), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("role", String(32), nullable=False),  # admin | tenant
    Column("tenant", String(64), nullable=True),
    Column("key_hash", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
)

clusters = Table(
    "clusters",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("instance_type", String(64), nullable=False),
    Column(
        "spec", Text, nullable=False
    ),  # planner.contracts.spec.ClusterSpec JSON: the desired state
    Column(
        "status", String(32), nullable=False
    ),  # creating | running | updating | deleting | deleted | failed
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

vms = Table(
    "vms",
    metadata,
    Column("vm_id", String(128), primary_key=True),
    Column("cluster", String(64), ForeignKey("clusters.name"), nullable=False, index=True),
    Column("zone", String(64), nullable=False),
    Column("address", String(64), nullable=False),
    Column("instance_type", String(64), nullable=False),
    Column("kafka_version", String(32), nullable=False),
    Column("broker_id", Integer, nullable=True),
    Column("state", String(32), nullable=False),  # running | draining | terminated
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

operations = Table(
    "operations",
    metadata,
    Column("op_id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(64), nullable=False, index=True),
    Column("kind", String(32), nullable=False),
    Column("params", Text, nullable=False),
    Column("status", String(16), nullable=False),  # pending | running | succeeded | failed
    Column("steps", Text, nullable=False),  # JSON list of step names, expanded at creation
    Column("step_index", Integer, nullable=False),
    Column("context", Text, nullable=False),  # JSON: what the steps learned (new VM ids...)
    Column("message", Text, nullable=False),
    Column("created_by", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("step_started_at", Float, nullable=False),
)

# One unfinished cluster operation per cluster, kept by the database itself: two requests
# that both found the cluster idle cannot both insert. Tenant operations are left out: they
# run inside their requests, one per tenant at a time, beside the cluster's operations.
one_unfinished_operation_per_cluster = Index(
    "one_unfinished_operation_per_cluster",
    operations.c.cluster,
    unique=True,
    sqlite_where=and_(
        operations.c.status.in_([s.value for s in UNFINISHED]),
        operations.c.kind.not_in(sorted(k.value for k in TENANT_KINDS)),
    ),
    postgresql_where=and_(
        operations.c.status.in_([s.value for s in UNFINISHED]),
        operations.c.kind.not_in(sorted(k.value for k in TENANT_KINDS)),
    ),
)

operation_steps = Table(
    "operation_steps",
    metadata,
    Column("entry_id", Integer, primary_key=True, autoincrement=True),
    Column("op_id", Integer, ForeignKey("operations.op_id"), nullable=False, index=True),
    Column("step", String(64), nullable=False),
    Column("outcome", String(16), nullable=False),  # detected | started | done | failed
    Column("message", Text, nullable=False),
    Column("at", Float, nullable=False),
)

# Tenants (docs/tenants.md): a tenant belongs to one cluster; its name is also its SCRAM user
# and is unique across the service (its API key names it). status: creating | active |
# deleting | deleted | failed. The password is never stored (Kafka keeps a salted hash).
tenants = Table(
    "tenants",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("cluster", String(64), ForeignKey("clusters.name"), nullable=False, index=True),
    Column("prefix", String(64), nullable=False),
    Column("plan", Text, nullable=False),  # TenantPlan JSON
    Column("status", String(16), nullable=False),
    Column("op_id", Integer, nullable=False),  # the create_tenant operation that made it
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)


class ClusterBusy(RequestRefused):
    """A cluster operation asked for while another is unfinished on the same cluster."""

    def __init__(self, cluster: str, running: OperationRow | None) -> None:
        if running is None:
            what = "another operation"
        else:
            what = f"operation {running.op_id} ({running.kind}, step {running.step})"
        super().__init__(
            Refusal.BUSY, f"cluster {cluster} is running {what}; wait for it to finish"
        )
        self.cluster = cluster
        self.running = running


class StoredValueError(PermanentError, ValueError):
    """A row whose stored value this version cannot read."""


@dataclass(frozen=True)
class OperationRow:
    op_id: int
    cluster: str
    kind: OperationKind
    params: dict[str, Any]
    status: OperationStatus
    steps: tuple[StepRef, ...]
    step_index: int
    context: dict[str, Any]
    message: str
    created_by: str
    created_at: float
    updated_at: float
    step_started_at: float

    @property
    def step(self) -> StepRef | None:
        return self.steps[self.step_index] if self.step_index < len(self.steps) else None

    @property
    def unfinished(self) -> bool:
        return self.status in UNFINISHED


def _operation(row: Any) -> OperationRow:
    try:
        kind = OperationKind.parse(row.kind)
        status = OperationStatus(row.status)
        steps = parse_steps(json.loads(row.steps))
    except ValueError as exc:
        raise StoredValueError(f"operation {row.op_id} cannot be read: {exc}") from None
    return OperationRow(
        op_id=row.op_id,
        cluster=row.cluster,
        kind=kind,
        params=json.loads(row.params),
        status=status,
        steps=steps,
        step_index=row.step_index,
        context=json.loads(row.context),
        message=row.message,
        created_by=row.created_by,
        created_at=row.created_at,
        updated_at=row.updated_at,
        step_started_at=row.step_started_at,
    )


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = _make_engine(url)
        # Held across a tenant's check and insert; no slow call runs under it.
        self._tenants_lock = threading.Lock()
        metadata.create_all(self.engine)
        # A database made by an older version has the table without the index.
        try:
            one_unfinished_operation_per_cluster.create(self.engine, checkfirst=True)
        except IntegrityError:
            raise StoredValueError(
                "the database holds two unfinished operations on one cluster; finish or "
                "fail one of them (operations table, status) and start again"
            ) from None

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as connection:
            yield connection

    # -- API keys -------------------------------------------------------------------------

    def add_api_key(
        self, key_id: str, name: str, role: str, key_hash: str, tenant: str | None = None
    ) -> None:
        with self._tx() as c:
            c.execute(
                insert(api_keys).values(
                    key_id=key_id,
                    name=name,
                    role=role,
                    tenant=tenant,
                    key_hash=key_hash,
                    created_at=time.time(),
                )
            )

    def api_key(self, key_id: str) -> dict[str, Any] | None:
        with self._tx() as c:
            row = c.execute(select(api_keys).where(api_keys.c.key_id == key_id)).first()
        return dict(row._mapping) if row else None

    def count_api_keys(self, role: str) -> int:
        with self._tx() as c:
            return int(
                c.execute(
                    select(func.count()).select_from(api_keys).where(api_keys.c.role == role)
                ).scalar_one()
            )

    def delete_api_keys(self, tenant: str) -> None:
        with self._tx() as c:
            c.execute(delete(api_keys).where(api_keys.c.tenant == tenant))

    # -- tenants --------------------------------------------------------------------------

    def add_tenant(
        self,
        name: str,
        cluster: str,
        prefix: str,
        plan: dict[str, Any],
        op_id: int,
        admits: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        """Insert a tenant. `admits` sees the cluster's tenants (not deleted) and raises to
        refuse: it runs in the insert's transaction under the tenants lock, so two requests
        whose prefixes overlap cannot both pass their check before either is stored."""
        now = time.time()
        with self._tenants_lock, self._tx() as c:
            if admits is not None:
                query = select(tenants).where(
                    and_(tenants.c.cluster == cluster, tenants.c.status != "deleted")
                )
                admits([_tenant(r) for r in c.execute(query)])
            c.execute(
                insert(tenants).values(
                    name=name,
                    cluster=cluster,
                    prefix=prefix,
                    plan=json.dumps(plan, sort_keys=True),
                    status="creating",
                    op_id=op_id,
                    created_at=now,
                    updated_at=now,
                )
            )

    def tenant(self, name: str) -> dict[str, Any] | None:
        with self._tx() as c:
            row = c.execute(select(tenants).where(tenants.c.name == name)).first()
        return _tenant(row) if row else None

    def list_tenants(self, cluster: str | None = None) -> list[dict[str, Any]]:
        """Every tenant not deleted (of one cluster, when given), by name."""
        query = select(tenants).where(tenants.c.status != "deleted").order_by(tenants.c.name)
        if cluster is not None:
            query = query.where(tenants.c.cluster == cluster)
        with self._tx() as c:
            return [_tenant(r) for r in c.execute(query)]

    def update_tenant(self, name: str, **values: Any) -> None:
        with self._tx() as c:
            c.execute(
                update(tenants)
                .where(tenants.c.name == name)
                .values(**values, updated_at=time.time())
            )

    def remove_tenant(self, name: str) -> None:
        """Forget a tenant whose onboarding was rolled back, and its keys: the name is free."""
        with self._tx() as c:
            c.execute(delete(api_keys).where(api_keys.c.tenant == name))
            c.execute(delete(tenants).where(tenants.c.name == name))

    # -- clusters -------------------------------------------------------------------------

    def add_cluster(self, name: str, provider: str, instance_type: str, spec: str) -> None:
        now = time.time()
        with self._tx() as c:
            c.execute(
                insert(clusters).values(
                    name=name,
                    provider=provider,
                    instance_type=instance_type,
                    spec=spec,
                    status="creating",
                    created_at=now,
                    updated_at=now,
                )
            )

    def cluster(self, name: str) -> dict[str, Any] | None:
        with self._tx() as c:
            row = c.execute(select(clusters).where(clusters.c.name == name)).first()
        return dict(row._mapping) if row else None

    def list_clusters(self, include_deleted: bool = False) -> list[dict[str, Any]]:
        query = select(clusters).order_by(clusters.c.name)
        if not include_deleted:
            query = query.where(clusters.c.status != "deleted")
        with self._tx() as c:
            return [dict(r._mapping) for r in c.execute(query)]

    def update_cluster(self, name: str, **values: Any) -> None:
        with self._tx() as c:
            c.execute(
                update(clusters)
                .where(clusters.c.name == name)
                .values(**values, updated_at=time.time())
            )

    # -- VMs ------------------------------------------------------------------------------

    def upsert_vm(
        self,
        vm_id: str,
        cluster: str,
        zone: str,
        address: str,
        instance_type: str,
        kafka_version: str,
        state: str,
        broker_id: int | None = None,
    ) -> None:
        now = time.time()
        with self._tx() as c:
            exists = c.execute(select(vms.c.vm_id).where(vms.c.vm_id == vm_id)).first()
            values = dict(
                cluster=cluster,
                zone=zone,
                address=address,
                instance_type=instance_type,
                kafka_version=kafka_version,
                state=state,
                broker_id=broker_id,
                updated_at=now,
            )
            if exists:
                c.execute(update(vms).where(vms.c.vm_id == vm_id).values(**values))
            else:
                c.execute(insert(vms).values(vm_id=vm_id, created_at=now, **values))

    def update_vm(self, vm_id: str, **values: Any) -> None:
        with self._tx() as c:
            c.execute(
                update(vms).where(vms.c.vm_id == vm_id).values(**values, updated_at=time.time())
            )

    def vm(self, vm_id: str) -> dict[str, Any] | None:
        with self._tx() as c:
            row = c.execute(select(vms).where(vms.c.vm_id == vm_id)).first()
        return dict(row._mapping) if row else None

    def cluster_vms(self, cluster: str, include_terminated: bool = False) -> list[dict[str, Any]]:
        query = select(vms).where(vms.c.cluster == cluster).order_by(vms.c.created_at, vms.c.vm_id)
        if not include_terminated:
            query = query.where(vms.c.state != "terminated")
        with self._tx() as c:
            return [dict(r._mapping) for r in c.execute(query)]

    # -- operations -----------------------------------------------------------------------

    def add_operation(
        self,
        cluster: str,
        kind: OperationKind | str,
        params: dict[str, Any],
        steps: Sequence[StepRef],
        created_by: str,
        context: dict[str, Any] | None = None,
        journal: tuple[str, str] | None = None,
    ) -> OperationRow:
        """`journal` = (outcome, message): a first journal entry written with the operation,
        under the step name `decide` (why the service itself started it).

        Raises ClusterBusy when `kind` is a cluster operation and the cluster has an
        unfinished one: the check and the insert are one statement."""
        kind = OperationKind.parse(kind)
        now = time.time()
        try:
            op_id = self._insert_operation(
                cluster, kind, params, steps, created_by, context, journal, now
            )
        except IntegrityError:
            running = [op for op in self.list_operations(cluster, 20) if op.unfinished]
            raise ClusterBusy(cluster, running[-1] if running else None) from None
        found = self.operation(op_id)
        assert found is not None
        return found

    def _insert_operation(
        self,
        cluster: str,
        kind: OperationKind,
        params: dict[str, Any],
        steps: Sequence[StepRef],
        created_by: str,
        context: dict[str, Any] | None,
        journal: tuple[str, str] | None,
        now: float,
    ) -> int:
        with self._tx() as c:
            result = c.execute(
                insert(operations).values(
                    cluster=cluster,
                    kind=kind.value,
                    params=json.dumps(params, sort_keys=True),
                    status=OperationStatus.PENDING.value,
                    steps=json.dumps([str(s) for s in steps]),
                    step_index=0,
                    context=json.dumps(context or {}, sort_keys=True),
                    message="queued",
                    created_by=created_by,
                    created_at=now,
                    updated_at=now,
                    step_started_at=now,
                )
            )
            op_id = int(result.inserted_primary_key[0])  # type: ignore[index]
            if journal is not None:
                c.execute(
                    insert(operation_steps).values(
                        op_id=op_id, step="decide", outcome=journal[0], message=journal[1], at=now
                    )
                )
        return op_id

    def operation(self, op_id: int) -> OperationRow | None:
        with self._tx() as c:
            row = c.execute(select(operations).where(operations.c.op_id == op_id)).first()
        return _operation(row) if row else None

    def list_operations(self, cluster: str | None = None, limit: int = 100) -> list[OperationRow]:
        query = select(operations).order_by(operations.c.op_id.desc()).limit(limit)
        if cluster is not None:
            query = query.where(operations.c.cluster == cluster)
        with self._tx() as c:
            return [_operation(r) for r in c.execute(query)]

    def unfinished_operations(self) -> list[OperationRow]:
        query = (
            select(operations)
            .where(operations.c.status.in_([s.value for s in UNFINISHED]))
            .order_by(operations.c.op_id)
        )
        with self._tx() as c:
            return [_operation(r) for r in c.execute(query)]

    def save_operation(
        self,
        op_id: int,
        status: OperationStatus,
        step_index: int,
        context: dict[str, Any],
        message: str,
        journal: tuple[str, StepRef] | None = None,
        step_started: bool = False,
    ) -> None:
        """Persist the operation's state; `journal` = (outcome, step) adds a journal entry in
        the same transaction, so the journal and the state never disagree."""
        now = time.time()
        values: dict[str, Any] = dict(
            status=OperationStatus(status).value,
            step_index=step_index,
            context=json.dumps(context, sort_keys=True),
            message=message,
            updated_at=now,
        )
        if step_started:
            values["step_started_at"] = now
        with self._tx() as c:
            c.execute(update(operations).where(operations.c.op_id == op_id).values(**values))
            if journal is not None:
                outcome, step = journal
                c.execute(
                    insert(operation_steps).values(
                        op_id=op_id, step=str(step), outcome=outcome, message=message, at=now
                    )
                )

    def operation_journal(self, op_id: int) -> list[dict[str, Any]]:
        query = (
            select(operation_steps)
            .where(operation_steps.c.op_id == op_id)
            .order_by(operation_steps.c.entry_id)
        )
        with self._tx() as c:
            return [dict(r._mapping) for r in c.execute(query)]


def _tenant(row: Any) -> dict[str, Any]:
    found = dict(row._mapping)
    found["plan"] = json.loads(found["plan"])
    return found


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            # WAL: readers (the API) never block the writer (the engine), and a killed
            # service leaves a database the next start recovers.
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)
