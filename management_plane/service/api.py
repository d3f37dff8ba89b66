"""The HTTP API (FastAPI; the OpenAPI document is at /openapi.json, for a valid API key). No `from __future__
import annotations` here: FastAPI reads the handlers' annotations, which name local aliases.

Every write is an operation: the handler validates, stores the operation and returns it
(202); the engine does the work. Errors are JSON {"code", "message"}.
"""

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from management_plane.drills.operation import DrillAsk
from management_plane.errors import ApiError, KaasError, http_answer
from management_plane.mirror.flows import MirrorFlows
from management_plane.mirror.routes import add_mirror_routes
from management_plane.monitoring.dashboard_routes import DashboardSessions, add_dashboard_routes
from management_plane.monitoring.dashboard_source import DashboardSource
from management_plane.monitoring.routes import add_alert_routes
from management_plane.service.auth import Caller, authenticate
from management_plane.service.db import OperationRow
from management_plane.service.http_input import BoundedJsonRoute, add_docs_routes, is_out_of_range
from management_plane.service.operations import SUCCEEDED, progress
from management_plane.service.runner import state_of
from management_plane.service.service import Service
from management_plane.service.tenant_routes import add_tenant_routes

API_KEY_HEADER = "X-API-Key"


class ErrorOut(BaseModel):
    code: str
    message: str


class LogLimitsIn(BaseModel):
    """How much log each Kafka, controller and ZooKeeper process of a VM keeps: files roll at
    max_file_mb and `files` rolled ones are kept (checked by the spec's parser)."""

    model_config = ConfigDict(extra="forbid")
    max_file_mb: int | None = Field(
        None, description="size at which a log file rolls, 1-10240 MB (absent: 100, or kept)"
    )
    files: int | None = Field(
        None, description="rolled files kept beside the live one, 1-100 (absent: 10, or kept)"
    )


class ClusterCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64, description="lower-case letters, digits and '-'")
    broker_count: int = Field(3, description="number of broker VMs")
    zones: list[str] | None = Field(None, description="availability zones (default: all)")
    instance_type: str | None = None
    kafka_version: str | None = Field(
        None, description="default: the newest ZooKeeper-mode release available"
    )
    kraft_controllers: int | None = Field(
        None,
        description="KRaft versions (4.x) only: the controller quorum's size, 1, 3 or 5, at "
        "most the broker count (default: 3, or 1 below three brokers)",
    )
    broker_config: dict[str, str] = Field(default_factory=dict)
    batch_size: int = Field(1, description="VMs replaced at a time by later operations")
    logs: LogLimitsIn | None = Field(None, description="log file bounds (default 100 MB x 10)")


class ScaleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    broker_count: int
    batch_size: int = 1


class UpgradeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kafka_version: str
    batch_size: int = 1


class MigrateToKraftRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rollback: bool = False  # back to ZooKeeper mode, possible until the finalisation
    finalize: bool = True  # False: stop with the controllers still writing to ZooKeeper


class InstanceTypeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instance_type: str
    batch_size: int = 1


class ConfigRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    broker_config: dict[str, str | None] = Field(
        description="configs to set; null removes a config"
    )


class RotateCertsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ca: bool = Field(
        default=False,
        description="also replace the cluster's CA (trusted beside the old one, then new "
        "certificates, then the old CA dropped)",
    )


class BootIdentityRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=200, description="the VM's one-time boot token")
    public_key_pem: str = Field(max_length=4000, description="the VM's new public key, PEM")
    hosts: list[str] = Field(
        min_length=1, max_length=16, description="the names the certificate carries"
    )


class BootIdentityOut(BaseModel):
    certificate_pem: str
    trust_bundle_pem: str


class ReplaceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    vm_id: str = Field(max_length=200, description="the VM to replace (e.g. mycluster/vm2 or vm2)")


class DrillRequestIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    drill: str = Field(max_length=64, description="the drill (`kaas drill list`)")
    duration_s: float | None = Field(
        None, description="seconds each fault lasts (default: the drill's)"
    )
    rate_per_s: float = Field(200.0, description="messages per second of the drill's workload")
    bounces: int = Field(3, description="bounces of the bounce drills")
    drills: list[str] | None = Field(
        None, max_length=50, description="game-day only: the drills it runs in turn"
    )


class VmOut(BaseModel):
    vm_id: str
    zone: str
    address: str
    instance_type: str
    kafka_version: str
    broker_id: int | None
    state: str


class ClusterOut(BaseModel):
    name: str
    status: str
    provider: str
    instance_type: str
    spec: dict[str, Any]
    bootstrap_servers: str
    client: dict[str, str] | None = Field(
        default=None,
        description="the CA and the admin identity's files for the internal listener (mutual "
        "TLS), where the provider keeps them on the service's host",
    )
    vms: list[VmOut]


class JournalEntryOut(BaseModel):
    step: str
    outcome: str
    message: str
    at: float


class OperationOut(BaseModel):
    op_id: int
    cluster: str
    kind: str
    status: str
    step: str | None
    steps: list[str]
    steps_done: int
    message: str
    params: dict[str, Any]
    created_by: str
    created_at: float
    updated_at: float
    journal: list[JournalEntryOut] = Field(default_factory=list)


def operation_out(op: OperationRow, journal: list[dict[str, Any]] | None = None) -> OperationOut:
    finished, _ = progress(state_of(op))
    return OperationOut(
        op_id=op.op_id,
        cluster=op.cluster,
        kind=op.kind.value,
        status=op.status.value,
        step=str(op.step) if op.step is not None and op.status != SUCCEEDED else None,
        steps=[str(s) for s in op.steps],
        steps_done=finished,
        message=op.message,
        params=op.params,
        created_by=op.created_by,
        created_at=op.created_at,
        updated_at=op.updated_at,
        journal=[
            JournalEntryOut(step=j["step"], outcome=j["outcome"], message=j["message"], at=j["at"])
            for j in journal or []
        ],
    )


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"code": code, "message": message})


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "invalid input"},
    401: {"model": ErrorOut, "description": "missing or wrong API key"},
    403: {"model": ErrorOut, "description": "this key may not do that"},
    404: {"model": ErrorOut, "description": "no such resource"},
    409: {"model": ErrorOut, "description": "conflicts with the current state"},
    422: {"model": ErrorOut, "description": "malformed request"},
}


def create_app(service: Service) -> FastAPI:
    app = FastAPI(
        title="KaaS management plane",
        version="1",
        description="Clusters, their VMs, tenants and their topics, and the operations that "
        "change them.",
        # Served by add_docs_routes, behind the API key: the document maps the whole API.
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.router.route_class = BoundedJsonRoute
    header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False, description="an API key")

    def caller(key: Annotated[str | None, Depends(header)]) -> Caller:
        found = authenticate(service.db, key)
        if found is None:
            raise ApiError(401, "unauthorized", f"a valid API key is required in {API_KEY_HEADER}")
        return found

    def admin(who: Annotated[Caller, Depends(caller)]) -> Caller:
        if who.role != "admin":
            raise ApiError(
                403,
                "forbidden",
                "this needs the admin key (a tenant key may only "
                "read its own tenant and manage its own topics)",
            )
        return who

    Admin = Annotated[Caller, Depends(admin)]

    # Every error the service knows is answered by the one mapping in management_plane.errors.
    @app.exception_handler(KaasError)
    def _kaas_error(_request: Request, exc: KaasError) -> JSONResponse:
        answer = http_answer(exc)
        return _error(answer.status, answer.code, answer.message)

    @app.exception_handler(RequestValidationError)
    def _request_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        status = 422
        for error in exc.errors():
            where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
            if is_out_of_range(error.get("input")):
                # A value, not a shape, is wrong: the same 400 as every range check.
                status = 400
                problems.append(f"{where or 'body'}: the number is out of range")
            else:
                problems.append(f"{where or 'body'}: {error.get('msg')}")
        return _error(status, "invalid_request", "; ".join(problems) or "malformed request")

    @app.exception_handler(StarletteHTTPException)
    def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    def _internal(_request: Request, exc: Exception) -> JSONResponse:
        answer = http_answer(exc)
        return _error(answer.status, answer.code, answer.message)

    @app.get("/v1/health", responses=ERRORS)
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/clusters", status_code=202, responses=ERRORS)
    def create_cluster(body: ClusterCreate, who: Admin) -> OperationOut:
        return operation_out(service.create_cluster(body.model_dump(), who.name))

    @app.get("/v1/clusters", responses=ERRORS)
    def list_clusters(_who: Admin) -> list[ClusterOut]:
        return [ClusterOut(**service.cluster_view(c["name"])) for c in service.db.list_clusters()]

    @app.get("/v1/clusters/{name}", responses=ERRORS)
    def get_cluster(name: str, _who: Admin) -> ClusterOut:
        return ClusterOut(**service.cluster_view(name))

    @app.get("/v1/clusters/{name}/plan", responses=ERRORS)
    def get_plan(name: str, _who: Admin) -> dict[str, Any]:
        """The stored plan's state and, while it runs, bytes moved and to move, the rate
        and the estimated time left."""
        return service.plan_status(name)

    @app.post("/v1/clusters/{name}/scale", status_code=202, responses=ERRORS)
    def scale(name: str, body: ScaleRequest, who: Admin) -> OperationOut:
        return operation_out(service.scale(name, body.broker_count, body.batch_size, who.name))

    @app.post("/v1/clusters/{name}/upgrade", status_code=202, responses=ERRORS)
    def upgrade(name: str, body: UpgradeRequest, who: Admin) -> OperationOut:
        return operation_out(
            service.replace_all(
                name, "upgrade", {"kafka_version": body.kafka_version}, body.batch_size, who.name
            )
        )

    @app.post("/v1/clusters/{name}/migrate-to-kraft", status_code=202, responses=ERRORS)
    def migrate_to_kraft(name: str, body: MigrateToKraftRequest, who: Admin) -> OperationOut:
        """Migrate a Kafka 3.9 ZooKeeper-mode cluster to KRaft (KIP-866), or roll an
        unfinalised migration back to ZooKeeper mode."""
        return operation_out(service.migrate_to_kraft(name, who.name, body.rollback, body.finalize))

    @app.post("/v1/clusters/{name}/instance-type", status_code=202, responses=ERRORS)
    def instance_type(name: str, body: InstanceTypeRequest, who: Admin) -> OperationOut:
        return operation_out(
            service.replace_all(
                name,
                "change_instance_type",
                {"instance_type": body.instance_type},
                body.batch_size,
                who.name,
            )
        )

    @app.patch("/v1/clusters/{name}/logs", status_code=202, responses=ERRORS)
    def change_logs(name: str, body: LogLimitsIn, who: Admin) -> OperationOut:
        return operation_out(
            service.change_logs(name, body.model_dump(exclude_none=True), who.name)
        )

    @app.patch("/v1/clusters/{name}/config", status_code=202, responses=ERRORS)
    def change_config(name: str, body: ConfigRequest, who: Admin) -> OperationOut:
        return operation_out(service.change_config(name, body.broker_config, who.name))

    @app.post("/v1/clusters/{name}/rotate-certs", status_code=202, responses=ERRORS)
    def rotate_certs(name: str, body: RotateCertsRequest, who: Admin) -> OperationOut:
        """Renew every VM's certificate (and with `ca`, the CA) by rolling restarts."""
        return operation_out(service.rotate_certs(name, body.ca, who.name))

    @app.post("/v1/clusters/{name}/secure", status_code=202, responses=ERRORS)
    def secure_cluster(name: str, who: Admin) -> OperationOut:
        """Convert a cluster made before TLS to TLS on every channel by rolling phases: the
        TLS listeners beside the plain ones, the clients moved to TLS and the znodes given
        ACLs, the plain listeners removed."""
        return operation_out(service.secure_cluster(name, who.name))

    @app.post("/v1/boot/identity", responses=ERRORS)
    def boot_identity(body: BootIdentityRequest) -> BootIdentityOut:
        """A new VM's certificate for its own key, against its one-time boot token (no API
        key: the token is the credential, good once, for the address it was made for)."""
        certificate, bundle = service.boot_identity(body.token, body.public_key_pem, body.hosts)
        return BootIdentityOut(certificate_pem=certificate, trust_bundle_pem=bundle)

    @app.post("/v1/clusters/{name}/replace", status_code=202, responses=ERRORS)
    def replace_vm(name: str, body: ReplaceRequest, who: Admin) -> OperationOut:
        return operation_out(service.replace_vm(name, body.vm_id, who.name))

    @app.post("/v1/clusters/{name}/drills", status_code=202, responses=ERRORS)
    def run_drill(name: str, body: DrillRequestIn, who: Admin) -> OperationOut:
        """A chaos drill under load; its report's folder is in the operation's params."""
        chosen = None if body.drills is None else tuple(body.drills)
        ask = DrillAsk(body.drill, body.duration_s, body.rate_per_s, body.bounces, chosen)
        return operation_out(service.run_drill(name, ask, who.name))

    @app.delete("/v1/clusters/{name}", status_code=202, responses=ERRORS)
    def delete_cluster(name: str, who: Admin) -> OperationOut:
        return operation_out(service.delete_cluster(name, who.name))

    @app.get("/v1/operations", responses=ERRORS)
    def list_operations(
        _who: Admin,
        cluster: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[OperationOut]:
        return [operation_out(op) for op in service.db.list_operations(cluster, limit)]

    @app.get("/v1/operations/{op_id}", responses=ERRORS)
    def get_operation(op_id: int, _who: Admin) -> OperationOut:
        if not -(2**62) < op_id < 2**62:
            raise ApiError(404, "not_found", f"no operation {op_id}")
        op = service.db.operation(op_id)
        if op is None:
            raise ApiError(404, "not_found", f"no operation {op_id}")
        return operation_out(op, service.db.operation_journal(op_id))

    if service.tenants is not None:
        add_tenant_routes(app, service.tenants, caller, admin, ERRORS)
    add_mirror_routes(app, MirrorFlows(service), admin, operation_out, OperationOut, ERRORS)
    add_alert_routes(app, service.alerts, admin, ERRORS)
    add_dashboard_routes(app, service.db, DashboardSource(service), DashboardSessions(), ERRORS)
    add_docs_routes(app, caller)

    return app
