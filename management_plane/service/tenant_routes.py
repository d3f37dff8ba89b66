"""The tenant routes of the HTTP API (docs/tenants.md, "Through the service"). No `from
__future__ import annotations`: FastAPI reads the handlers' annotations.

Onboarding and topic changes answer when they are done (201/200), not 202: the request runs
its journaled operation itself (tenant_service.py says why). The admin key may do anything;
a tenant's key may read its own tenant and manage its own topics, nothing else (403).
"""

from typing import Annotated, Any

from fastapi import Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from management_plane.errors import ApiError
from management_plane.service.auth import Caller
from management_plane.service.tenant_service import TenantService
from management_plane.service.validation import validate_name
from management_plane.tenants.model import (
    DEFAULT_RETENTION_BYTES,
    DEFAULT_STORAGE_BYTES,
    name_problems,
)
from management_plane.tenants.topics import TopicRequest


class PlanIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_topics: int
    max_partitions: int = Field(description="over all the tenant's topics")
    producer_byte_rate: int = Field(description="bytes/s per broker")
    consumer_byte_rate: int = Field(description="bytes/s per broker")
    request_percentage: float = Field(description="100 = one broker request thread")
    storage_bytes: int = Field(
        DEFAULT_STORAGE_BYTES, description="bytes the tenant's topics may keep, replicas counted"
    )
    retention_bytes: int = Field(
        DEFAULT_RETENTION_BYTES, description="retention.bytes of a topic that sets none"
    )


class TenantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64, description="also the SCRAM user name")
    plan: str | PlanIn = Field("small", description="a plan name (small, medium, large) or a plan")
    prefix: str | None = Field(None, max_length=64, description="default: '<name>.'")


class ConnectionOut(BaseModel):
    bootstrap_servers: str
    security_protocol: str
    sasl_mechanism: str
    username: str
    topic_prefix: str
    ca_certificate: str = Field(
        description="PEM: the cluster CA the brokers' certificates chain to (ssl.ca.pem, or "
        "a file for ssl.ca.location)"
    )


class TenantOut(BaseModel):
    name: str
    cluster: str
    prefix: str
    plan: dict[str, Any]
    status: str
    created_at: float
    connection: ConnectionOut


class TenantCreated(BaseModel):
    tenant: TenantOut
    password: str = Field(description="the SCRAM password: shown once, stored nowhere")
    api_key: str = Field(description="the tenant's API key: shown once, stored hashed")
    op_id: int


class TopicCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=249, description="starts with the tenant's prefix")
    partitions: int = 1
    replication_factor: int | None = Field(None, description="default: min(3, brokers)")
    configs: dict[str, str] = Field(default_factory=dict, description="whitelisted configs")


class TopicOut(BaseModel):
    name: str
    partitions: int
    replication_factor: int


class TopicCreated(TopicOut):
    op_id: int


class TopicConfigChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    configs: dict[str, str] = Field(description="whitelisted configs to set")


class TopicConfigsSet(BaseModel):
    name: str
    configs: dict[str, str]
    op_id: int


class Done(BaseModel):
    op_id: int
    message: str


def _checked_names(cluster: str, tenant: str | None = None) -> None:
    validate_name(cluster)
    if tenant is not None and name_problems(tenant):
        raise ApiError(404, "not_found", f"cluster {cluster} has no tenant {tenant!r}")


def add_tenant_routes(
    app: FastAPI,
    tenants: TenantService,
    caller: Any,
    admin: Any,
    errors: dict[int | str, dict[str, Any]],
) -> None:
    """`caller` and `admin` are the app's dependencies: any valid key, the admin key."""
    Who = Annotated[Caller, Depends(caller)]
    Admin = Annotated[Caller, Depends(admin)]
    responses = {
        **errors,
        502: {"model": errors[401]["model"], "description": "Kafka refused or failed"},
        503: {"model": errors[401]["model"], "description": "the cluster cannot be reached"},
    }

    def allowed(who: Caller, cluster: str, tenant: str) -> None:
        tenants.authorize(who, cluster, tenant)
        _checked_names(cluster, tenant)

    @app.post("/v1/clusters/{cluster}/tenants", status_code=201, responses=responses)
    def create_tenant(cluster: str, body: TenantCreate, who: Admin) -> TenantCreated:
        _checked_names(cluster)
        plan = body.plan if isinstance(body.plan, str) else body.plan.model_dump()
        done = tenants.create(cluster, body.name, plan, body.prefix, who)
        return TenantCreated(
            tenant=TenantOut(**done.tenant),
            password=done.password,
            api_key=done.api_key,
            op_id=done.op_id,
        )

    @app.get("/v1/clusters/{cluster}/tenants", responses=responses)
    def list_tenants(cluster: str, _who: Admin) -> list[TenantOut]:
        _checked_names(cluster)
        return [TenantOut(**t) for t in tenants.list_tenants(cluster)]

    @app.get("/v1/clusters/{cluster}/tenants/{tenant}", responses=responses)
    def get_tenant(cluster: str, tenant: str, who: Who) -> TenantOut:
        allowed(who, cluster, tenant)
        return TenantOut(**tenants.get(cluster, tenant))

    @app.delete("/v1/clusters/{cluster}/tenants/{tenant}", responses=responses)
    def delete_tenant(cluster: str, tenant: str, who: Admin) -> Done:
        _checked_names(cluster, tenant)
        op_id = tenants.delete(cluster, tenant, who)
        return Done(op_id=op_id, message=f"tenant {tenant} deleted")

    @app.get("/v1/clusters/{cluster}/tenants/{tenant}/topics", responses=responses)
    def list_topics(cluster: str, tenant: str, who: Who) -> list[TopicOut]:
        allowed(who, cluster, tenant)
        return [
            TopicOut(name=t.name, partitions=t.partitions, replication_factor=t.replication_factor)
            for t in tenants.list_topics(cluster, tenant)
        ]

    @app.post(
        "/v1/clusters/{cluster}/tenants/{tenant}/topics", status_code=201, responses=responses
    )
    def create_topic(cluster: str, tenant: str, body: TopicCreate, who: Who) -> TopicCreated:
        allowed(who, cluster, tenant)
        request = TopicRequest(body.name, body.partitions, body.replication_factor, body.configs)
        topic, op_id = tenants.create_topic(cluster, tenant, request, who)
        return TopicCreated(
            name=topic.name,
            partitions=topic.partitions,
            replication_factor=topic.replication_factor,
            op_id=op_id,
        )

    @app.patch("/v1/clusters/{cluster}/tenants/{tenant}/topics/{topic}", responses=responses)
    def alter_topic(
        cluster: str, tenant: str, topic: str, body: TopicConfigChange, who: Who
    ) -> TopicConfigsSet:
        allowed(who, cluster, tenant)
        configs, op_id = tenants.alter_topic(cluster, tenant, topic, body.configs, who)
        return TopicConfigsSet(name=topic, configs=configs, op_id=op_id)

    @app.delete("/v1/clusters/{cluster}/tenants/{tenant}/topics/{topic}", responses=responses)
    def delete_topic(cluster: str, tenant: str, topic: str, who: Who) -> Done:
        allowed(who, cluster, tenant)
        op_id = tenants.delete_topic(cluster, tenant, topic, who)
        return Done(op_id=op_id, message=f"topic {topic} deleted")
