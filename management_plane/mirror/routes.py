"""The mirror routes of the HTTP API (admin key). No `from __future__ import annotations`:
FastAPI reads the handlers' annotations.

A create or delete answers 202 with its operation, as every cluster change does: the engine
writes the flow into the target's ZooKeeper (`kaas op watch` follows it).
"""

import time
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from pydantic import BaseModel, ConfigDict, Field

from management_plane.mirror.flows import MirrorFlows
from management_plane.mirror.request import DEFAULT_GROUPS, FlowRequest
from management_plane.service.auth import Caller
from management_plane.service.validation import validate_name
from planner.contracts.mirror_flow import DEFAULT_WORKERS, MAX_WORKERS, MirrorFlow
from planner.contracts.mirror_lag import MirrorFlowLag


class FlowCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64, description="1-40 lowercase letters, digits or '-'")
    topics: str = Field(max_length=1000, description="Java regular expression of source topics")
    groups: str = Field(
        DEFAULT_GROUPS, max_length=1000, description="consumer groups whose offsets are synced"
    )
    source_cluster: str | None = Field(
        None, max_length=64, description="the source: a cluster of this service"
    )
    source_bootstrap: str | None = Field(
        None, max_length=1000, description="the source: host:port,... of a cluster outside it"
    )
    source_alias: str | None = Field(
        None, max_length=64, description="an outside source's name (the mirrored topics' prefix)"
    )
    checkpoint_interval_s: int = Field(10, ge=1, le=3600)
    replication_factor: int | None = Field(
        None, ge=1, le=5, description="of the mirrored topics (default: min(3, brokers))"
    )
    placement: list[int] = Field(
        default_factory=list, max_length=MAX_WORKERS, description="broker ids that run the flow"
    )
    workers: int = Field(
        DEFAULT_WORKERS, ge=1, le=MAX_WORKERS, description="without placement: how many VMs"
    )


class SourceOut(BaseModel):
    kind: str
    alias: str
    bootstrap_servers: str


class FlowOut(BaseModel):
    name: str
    target_cluster: str
    source: SourceOut
    topics: str
    groups: str
    state: str
    checkpoint_interval_s: int
    replication_factor: int
    placement: list[int]
    workers: int


class TopicLagOut(BaseModel):
    topic: str = Field(description="the source topic")
    partitions: int
    lag_records: int = Field(description="records on the source not yet on the target")
    max_partition_lag: int
    missing_partitions: int = Field(description="partitions not yet made on the target")


class FlowLagOut(BaseModel):
    broker_id: int = Field(description="the agent that measured it")
    measured_at: float = Field(description="unix time")
    age_s: float
    lag_records: int
    records_per_s: float | None = Field(description="mirrored per second; null at first")
    method: str
    topics: list[TopicLagOut] = Field(description="the most behind first")
    topics_omitted: int


class FlowDetail(FlowOut):
    lag: FlowLagOut | None = Field(description="null until the flow's agent measured it")


class FlowList(BaseModel):
    flows: list[FlowOut]
    unreadable: dict[str, str] = Field(description="flows this service cannot read, and why")


class PartitionFailoverOut(BaseModel):
    source_topic: str
    partition: int
    target_topic: str
    source_offset: int | None = Field(description="null when the source cannot be read")
    target_offset: int | None
    state: str


class FailoverOut(BaseModel):
    flow: str
    group: str
    partitions: list[PartitionFailoverOut]


def flow_out(flow: MirrorFlow) -> FlowOut:
    value = flow.to_json()
    value.pop("schema_version")
    return FlowOut(**value)


def lag_out(lag: MirrorFlowLag, now: float | None = None) -> FlowLagOut:
    value = lag.to_json()
    value.pop("schema_version")
    value.pop("flow")
    return FlowLagOut(**value, age_s=round(lag.age_s(time.time() if now is None else now), 1))


def add_mirror_routes(
    app: FastAPI,
    flows: MirrorFlows,
    admin: Any,
    operation_out: Any,
    operation_model: Any,
    errors: dict[int | str, dict[str, Any]],
) -> None:
    Admin = Annotated[Caller, Depends(admin)]
    responses = {
        **errors,
        503: {"model": errors[401]["model"], "description": "the cluster cannot be reached"},
    }
    base = "/v1/clusters/{cluster}/mirror/flows"

    @app.post(base, status_code=202, responses=responses, response_model=operation_model)
    def create_flow(cluster: str, body: FlowCreate, who: Admin) -> Any:
        """Mirror a source cluster's topics into `cluster` (the target)."""
        validate_name(cluster)
        request = FlowRequest(
            name=body.name,
            topics=body.topics,
            groups=body.groups,
            source_cluster=body.source_cluster,
            source_bootstrap=body.source_bootstrap,
            source_alias=body.source_alias,
            checkpoint_interval_s=body.checkpoint_interval_s,
            replication_factor=body.replication_factor,
            placement=tuple(body.placement),
            workers=body.workers,
        )
        return operation_out(flows.create(cluster, request, who.name))

    @app.get(base, responses=responses)
    def list_flows(cluster: str, _who: Admin) -> FlowList:
        validate_name(cluster)
        readings = flows.list(cluster)
        return FlowList(
            flows=[flow_out(f) for f in readings.flows.values()], unreadable=readings.unreadable
        )

    @app.get(base + "/{flow}", responses=responses)
    def get_flow(cluster: str, flow: str, _who: Admin) -> FlowDetail:
        """The flow, and its lag per topic as the agent reporting it last measured it."""
        validate_name(cluster)
        found = flow_out(flows.get(cluster, flow))
        lag = flows.lag(cluster, flow)
        return FlowDetail(**found.model_dump(), lag=None if lag is None else lag_out(lag))

    @app.delete(
        base + "/{flow}", status_code=202, responses=responses, response_model=operation_model
    )
    def delete_flow(cluster: str, flow: str, who: Admin) -> Any:
        validate_name(cluster)
        return operation_out(flows.delete(cluster, flow, who.name))

    @app.get(base + "/{flow}/failover", responses=responses)
    def failover(
        cluster: str, flow: str, group: Annotated[str, Query(max_length=249)], _who: Admin
    ) -> FailoverOut:
        """The group's committed offsets on the source beside those synced to the target."""
        validate_name(cluster)
        report = flows.failover(cluster, flow, group)
        return FailoverOut(
            flow=flow,
            group=group,
            partitions=[
                PartitionFailoverOut(
                    source_topic=row.source_topic,
                    partition=row.partition,
                    target_topic=row.target_topic,
                    source_offset=row.source_offset,
                    target_offset=row.target_offset,
                    state=row.state.value,
                )
                for row in report
            ],
        )
