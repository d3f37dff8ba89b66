"""Tenants through the service: onboarding, topics, deletion (docs/tenants.md, "Through the
service").

Tenant operations run inside the request, synchronously, because onboarding ends with a
password and an API key that exist only in this process's memory and are returned once.
Each is still a journaled operation in the operations log (same table, same journal, one
transaction per step), so `kaas op list` shows it and a service killed mid-operation finds
it unfinished at its next start. The engine then finishes it without the request
(`resume`): an interrupted onboarding is rolled back (nobody ever got its password or key,
and none is stored, so the caller creates the tenant again), an interrupted deletion or
topic deletion is run again, an interrupted topic creation is settled by whether Kafka made
the topic.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy.exc import IntegrityError

from management_plane.errors import ApiError, KaasError, http_answer
from management_plane.service import operations
from management_plane.service.auth import Caller, hash_key, new_key
from management_plane.service.cluster_io import KAFKA_PORT
from management_plane.service.db import Database, OperationRow
from management_plane.service.operations import (
    FAILED,
    SUCCEEDED,
    OperationKind,
    StepName,
    expand_steps,
)
from management_plane.service.runner import OperationRunner
from management_plane.tenants.kafka import KafkaTenants
from management_plane.tenants.model import (
    PLANS,
    ConnectionDetails,
    Problem,
    Tenant,
    TenantError,
    new_tenant,
    plan_from_json,
    tenant_from_json,
)
from management_plane.tenants.topics import (
    ExistingTopic,
    TopicRequest,
    check_topic_deletion,
    topic_change_problems,
    topic_request_problems,
)
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles

log = structlog.get_logger("kaas.tenants")

TENANT_SASL_PORT = 9094  # the brokers' SASL_SSL (SCRAM) listener for tenants

# The operation kinds this module runs inside requests; the engine only resumes them.
TENANT_KINDS = operations.TENANT_KINDS
TENANT_STEPS = {kind: expand_steps(kind) for kind in sorted(TENANT_KINDS)}


KafkaTenantsFactory = Callable[[InternalClient, str], KafkaTenants]
"""(the admin client of the internal listener, tenant bootstrap) -> the adapter for that
cluster."""
ClientIdentities = Callable[[str], IdentityFiles | None]
"""cluster -> the admin identity the service presents to it (None: none known)."""


def api_error(exc: KaasError) -> ApiError:
    answer = http_answer(exc)
    return ApiError(answer.status, answer.code, answer.message)


def _admits(tenant: Tenant, rows: list[dict[str, Any]]) -> None:
    """Refuse `tenant` if its name or prefix conflicts with a stored one (TenantError)."""
    new_tenant(tenant.name, tenant.plan, tenant.prefix, [tenant_from_json(r) for r in rows])


@dataclass(frozen=True)
class Onboarded:
    tenant: dict[str, Any]
    connection: ConnectionDetails
    password: str
    api_key: str
    op_id: int


class TenantService:
    def __init__(
        self, db: Database, kafka_tenants: KafkaTenantsFactory, identities: ClientIdentities
    ) -> None:
        self.db = db
        self.runner = OperationRunner(db)
        self._factory = kafka_tenants
        self._identities = identities
        self._adapters: dict[tuple[str, str], KafkaTenants] = {}
        self._guard = threading.Lock()
        self._tenant_locks: dict[str, threading.Lock] = {}

    # -- what a request may see -----------------------------------------------------------

    def authorize(self, who: Caller, cluster: str, tenant: str) -> None:
        """The admin key may do anything; a tenant key only its own tenant (403 otherwise,
        whether or not the other tenant exists, so a key learns nothing of others)."""
        if who.role == "admin":
            return
        if who.role == "tenant" and who.tenant == tenant:
            return
        raise ApiError(
            403, "forbidden", f"this API key may not act on tenant {tenant} of cluster {cluster}"
        )

    def _running_cluster(self, cluster: str) -> dict[str, Any]:
        row = self.db.cluster(cluster)
        if row is None or row["status"] == "deleted":
            raise ApiError(404, "not_found", f"no cluster named {cluster}")
        if row["status"] not in ("running", "updating"):
            raise ApiError(
                409, "not_ready", f"cluster {cluster} is {row['status']}; tenants need it running"
            )
        return row

    def _tenant_row(self, cluster: str, name: str) -> dict[str, Any]:
        row = self.db.tenant(name)
        if row is None or row["cluster"] != cluster or row["status"] == "deleted":
            raise ApiError(404, "not_found", f"cluster {cluster} has no tenant {name}")
        return row

    def _adapter(self, cluster: str) -> KafkaTenants:
        addresses = [v["address"] for v in self.db.cluster_vms(cluster) if v["state"] == "running"]
        if not addresses:
            raise ApiError(503, "unavailable", f"cluster {cluster} has no running VM")
        internal = ",".join(f"{a}:{KAFKA_PORT}" for a in addresses)
        sasl = ",".join(f"{a}:{TENANT_SASL_PORT}" for a in addresses)
        with self._guard:
            found = self._adapters.get((internal, sasl))
            if found is None:
                try:
                    found = self._factory(InternalClient(internal, self._identity(cluster)), sasl)
                except KaasError as exc:  # e.g. no Kafka libs on the service's host
                    raise api_error(exc) from None
                self._adapters[(internal, sasl)] = found
            return found

    def _lock(self, tenant: str) -> threading.Lock:
        # One topic change of a tenant at a time: two creates checked at once could both fit
        # the plan and together exceed it.
        with self._guard:
            return self._tenant_locks.setdefault(tenant, threading.Lock())

    def view(self, row: dict[str, Any]) -> dict[str, Any]:
        tenant = tenant_from_json(row)
        connection = self._connection(row["cluster"], tenant)
        return {
            "name": row["name"],
            "cluster": row["cluster"],
            "prefix": row["prefix"],
            "plan": tenant.plan.to_json(),  # a plan stored without storage figures: defaults
            "status": row["status"],
            "created_at": row["created_at"],
            "connection": connection.to_json(),
        }

    def _identity(self, cluster: str) -> IdentityFiles:
        identity = self._identities(cluster)
        if identity is None:
            raise ApiError(
                503, "unavailable", f"the service holds no client certificate for cluster {cluster}"
            )
        return identity

    def _connection(self, cluster: str, tenant: Tenant) -> ConnectionDetails:
        addresses = [v["address"] for v in self.db.cluster_vms(cluster)]
        return ConnectionDetails(
            bootstrap_servers=",".join(f"{a}:{TENANT_SASL_PORT}" for a in addresses),
            username=tenant.username,
            topic_prefix=tenant.prefix,
            ca_certificate=self._identity(cluster).trust_bundle.read_text(),
        )

    def get(self, cluster: str, name: str) -> dict[str, Any]:
        return self.view(self._tenant_row(cluster, name))

    def list_tenants(self, cluster: str) -> list[dict[str, Any]]:
        if self.db.cluster(cluster) is None:
            raise ApiError(404, "not_found", f"no cluster named {cluster}")
        return [self.view(row) for row in self.db.list_tenants(cluster)]

    # -- journaled operations run inside the request --------------------------------------

    def _journaled(
        self,
        op: OperationRow,
        actions: dict[StepName, Callable[[], str]],
        on_fail: Callable[[], None],
    ) -> None:
        self.runner.run_through(op, actions, on_fail)

    def _op(
        self, cluster: str, kind: OperationKind, params: dict[str, Any], who: Caller
    ) -> OperationRow:
        return self.db.add_operation(cluster, kind, params, expand_steps(kind), who.name)

    def create(
        self,
        cluster: str,
        name: str,
        plan: str | dict[str, Any],
        prefix: str | None,
        who: Caller,
    ) -> Onboarded:
        self._running_cluster(cluster)
        if isinstance(plan, str):
            if plan not in PLANS:
                raise ApiError(
                    400,
                    "invalid_request",
                    f"plan {plan!r} is unknown; plans: {', '.join(PLANS)}, or a plan object",
                )
            chosen = PLANS[plan]
        else:
            chosen = plan_from_json(plan)
        others = [tenant_from_json(row) for row in self.db.list_tenants(cluster)]
        tenant = new_tenant(name, chosen, prefix, others)
        if self.db.tenant(tenant.name) is not None:
            raise ApiError(409, "conflict", f"a tenant named {tenant.name} exists already")
        kafka = self._adapter(cluster)
        op = self._op(cluster, OperationKind.CREATE_TENANT, tenant.to_json(), who)
        password = secrets.token_urlsafe(24)
        key_id, api_key = new_key()

        registered: list[bool] = []

        def register() -> str:
            try:
                self.db.add_tenant(
                    tenant.name,
                    cluster,
                    tenant.prefix,
                    tenant.plan.to_json(),
                    op.op_id,
                    admits=lambda rows: _admits(tenant, rows),
                )
            except IntegrityError:
                raise TenantError(
                    "conflict", [Problem("name", f"tenant {tenant.name} exists already")]
                ) from None
            registered.append(True)
            return f"tenant {tenant.name} registered"

        def credential() -> str:
            kafka.set_password(tenant, password)
            return "SCRAM-SHA-512 credential set"

        def acls() -> str:
            kafka.create_acls(tenant)
            return f"prefixed ACLs on {tenant.prefix} created"

        def quotas() -> str:
            kafka.set_quotas(tenant)
            return "quotas set"

        def verify() -> str:
            kafka.wait_until_authenticated(tenant.username, password)
            return "the credential authenticates on every broker"

        def api_key_step() -> str:
            self.db.add_api_key(
                key_id, f"tenant:{tenant.name}", "tenant", hash_key(api_key), tenant.name
            )
            self.db.update_tenant(tenant.name, status="active")
            return f"tenant {tenant.name} onboarded"

        def rollback() -> None:
            if registered:  # never another request's tenant of the same name
                self._roll_back(kafka, tenant)

        try:
            self._journaled(
                op,
                {
                    StepName.REGISTER: register,
                    StepName.CREDENTIAL: credential,
                    StepName.ACLS: acls,
                    StepName.QUOTAS: quotas,
                    StepName.VERIFY: verify,
                    StepName.API_KEY: api_key_step,
                },
                rollback,
            )
        except KaasError as exc:
            raise api_error(exc) from None
        row = self._tenant_row(cluster, tenant.name)
        log.info("tenant_onboarded", tenant=tenant.name, cluster=cluster, op_id=op.op_id)
        return Onboarded(
            self.view(row), kafka.connection_details(tenant, password), password, api_key, op.op_id
        )

    def _roll_back(self, kafka: KafkaTenants, tenant: Tenant) -> None:
        """Undo a half onboarding: Kafka's side (idempotent), then the rows (name free again)."""
        kafka.delete_tenant(tenant)
        self.db.remove_tenant(tenant.name)

    def delete(self, cluster: str, name: str, who: Caller) -> int:
        row = self._tenant_row(cluster, name)
        tenant = tenant_from_json(row)
        kafka = self._adapter(cluster)
        op = self._op(cluster, OperationKind.DELETE_TENANT, tenant.to_json(), who)
        self.db.update_tenant(name, status="deleting")

        def delete_in_kafka() -> str:
            deletion = kafka.delete_tenant(tenant)
            left = f"; groups with members left: {list(deletion.groups_left)}"
            return (
                f"credential, ACLs, quotas, {len(deletion.deleted_topics)} topics and "
                f"{len(deletion.deleted_groups)} groups deleted"
                + (left if deletion.groups_left else "")
            )

        def forget() -> str:
            self.db.remove_tenant(name)
            return f"tenant {name} and its API keys removed"

        try:
            with self._lock(name):
                self._journaled(
                    op,
                    {StepName.DELETE_IN_KAFKA: delete_in_kafka, StepName.FORGET: forget},
                    lambda: None,
                )
        except KaasError as exc:
            raise api_error(exc) from None
        return op.op_id

    # -- topics ---------------------------------------------------------------------------

    def list_topics(self, cluster: str, name: str) -> list[ExistingTopic]:
        tenant = tenant_from_json(self._tenant_row(cluster, name))
        try:
            return list(self._adapter(cluster).list_topics(tenant))
        except KaasError as exc:
            raise api_error(exc) from None

    def create_topic(
        self, cluster: str, name: str, request: TopicRequest, who: Caller
    ) -> tuple[ExistingTopic, int]:
        row = self._tenant_row(cluster, name)
        if row["status"] != "active":
            raise ApiError(409, "not_ready", f"tenant {name} is {row['status']}")
        tenant = tenant_from_json(row)
        # Bad input is refused before anything is logged or asked of Kafka.
        code, problems = topic_request_problems(tenant, request)
        if problems:
            raise api_error(TenantError(code, problems))
        kafka = self._adapter(cluster)
        created: list[ExistingTopic] = []

        def create_topic() -> str:
            created.append(kafka.create_topic(tenant, request))
            topic = created[0]
            return (
                f"topic {topic.name} created ({topic.partitions} partitions, "
                f"replication factor {topic.replication_factor})"
            )

        params = {
            "tenant": name,
            "topic": request.name,
            "partitions": request.partitions,
            "replication_factor": request.replication_factor,
            "configs": dict(request.configs),
        }
        try:
            with self._lock(name):
                op = self._op(cluster, OperationKind.CREATE_TOPIC, params, who)
                self._journaled(op, {StepName.CREATE_TOPIC: create_topic}, lambda: None)
        except KaasError as exc:
            raise api_error(exc) from None
        return created[0], op.op_id

    def alter_topic(
        self, cluster: str, name: str, topic: str, changes: dict[str, str], who: Caller
    ) -> tuple[dict[str, str], int]:
        """Set configs of a tenant's topic; bad input is refused before anything is logged,
        the storage budget (which needs Kafka's figures) inside the journaled step."""
        row = self._tenant_row(cluster, name)
        if row["status"] != "active":
            raise ApiError(409, "not_ready", f"tenant {name} is {row['status']}")
        tenant = tenant_from_json(row)
        code, problems = topic_change_problems(tenant, topic, changes)
        if problems:
            raise api_error(TenantError(code, problems))
        kafka = self._adapter(cluster)
        settled: list[dict[str, str]] = []

        def alter_topic() -> str:
            settled.append(kafka.alter_topic_configs(tenant, topic, changes))
            shown = ", ".join(f"{k}={v}" for k, v in settled[0].items())
            return f"topic {topic}: {shown}"

        params = {"tenant": name, "topic": topic, "configs": dict(changes)}
        try:
            with self._lock(name):
                op = self._op(cluster, OperationKind.ALTER_TOPIC, params, who)
                self._journaled(op, {StepName.ALTER_TOPIC: alter_topic}, lambda: None)
        except KaasError as exc:
            raise api_error(exc) from None
        return settled[0], op.op_id

    def delete_topic(self, cluster: str, name: str, topic: str, who: Caller) -> int:
        tenant = tenant_from_json(self._tenant_row(cluster, name))
        kafka = self._adapter(cluster)

        def delete_topic() -> str:
            kafka.delete_topic(tenant, topic)
            return f"topic {topic} deleted"

        try:
            with self._lock(name):
                # Checked before the operation is logged: a refused request changes nothing.
                check_topic_deletion(tenant, topic, kafka.list_topics(tenant))
                op = self._op(
                    cluster, OperationKind.DELETE_TOPIC, {"tenant": name, "topic": topic}, who
                )
                self._journaled(op, {StepName.DELETE_TOPIC: delete_topic}, lambda: None)
        except KaasError as exc:
            raise api_error(exc) from None
        return op.op_id

    # -- after a restart ------------------------------------------------------------------

    def resume(self, op: OperationRow) -> None:
        """Finish a tenant operation its request did not (the service stopped, or a clean-up
        failed): called by the engine; raises to be tried again at its next cycle."""
        if op.kind in ("create_tenant", "delete_tenant"):
            tenant = tenant_from_json(op.params)
            row = self.db.tenant(tenant.name)
            # Only this operation's own tenant: a name another request registered stays.
            if op.kind == "delete_tenant" or row is None or row["op_id"] == op.op_id:
                self._adapter(op.cluster).delete_tenant(tenant)
                self.db.remove_tenant(tenant.name)
            if op.kind == "create_tenant":
                self._finish(
                    op,
                    "failed",
                    "rolled_back",
                    f"onboarding of {tenant.name} was interrupted and rolled back (its "
                    "password and API key were never returned nor stored); create it again",
                )
            else:
                self._finish(op, "succeeded", "done", f"tenant {tenant.name} deleted")
            return
        row = self.db.tenant(op.params["tenant"])
        topic = op.params["topic"]
        if row is None:
            self._finish(op, "failed", "failed", f"tenant {op.params['tenant']} is gone")
            return
        tenant = tenant_from_json(row)
        kafka = self._adapter(op.cluster)
        present = topic in {t.name for t in kafka.list_topics(tenant)}
        if op.kind == "delete_topic":
            if present:
                kafka.delete_topic(tenant, topic)
            self._finish(op, "succeeded", "done", f"topic {topic} deleted")
        elif op.kind == "alter_topic":
            # Setting configs again is harmless, and checks the budget again.
            if present:
                kafka.alter_topic_configs(tenant, topic, dict(op.params["configs"]))
                self._finish(op, "succeeded", "done", f"topic {topic} altered")
            else:
                self._finish(op, "failed", "failed", f"topic {topic} is gone")
        elif present:
            self._finish(op, "succeeded", "done", f"topic {topic} created")
        else:
            self._finish(op, "failed", "failed", f"topic {topic} was not created; ask again")

    def _finish(self, op: OperationRow, status: str, journal: str, message: str) -> None:
        self.runner.settle(op, SUCCEEDED if status == "succeeded" else FAILED, journal, message)
        log.info("tenant_operation_resumed", op_id=op.op_id, kind=op.kind, status=status)
