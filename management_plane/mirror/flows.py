"""What the mirror routes ask of the service: check a request against the service's
clusters and the target's flows, then queue one journaled operation (the engine writes the
flow); read the flows from the target's ZooKeeper.

A refused request stores nothing: every check runs before the operation is added.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING

from management_plane.errors import ApiError, Refusal, RequestRefused
from management_plane.mirror.failover import (
    PartitionOffsets,
    TopicPartition,
    failover_report,
    validate_group,
)
from management_plane.mirror.kafka import committed_offsets
from management_plane.mirror.operation import flow_params
from management_plane.mirror.request import (
    ClusterFacts,
    FlowRequest,
    check_against_existing,
    check_flow_request,
)
from management_plane.providers.base import DeliversMirrorSources, client_identity
from management_plane.service.cluster_io import bootstrap_servers
from management_plane.service.db import OperationRow
from management_plane.service.operations import OperationKind
from planner.contracts.fields import ContractError
from planner.contracts.mirror_flow import (
    MirrorFlow,
    MirrorFlowReadings,
    SourceKind,
    validate_flow_name,
)
from planner.contracts.mirror_lag import MirrorFlowLag
from planner.pki.files import IdentityFiles

if TYPE_CHECKING:
    from management_plane.service.service import Service

LIVE_VM_STATES = ("running", "draining", "joining")

GroupOffsets = Callable[[str, IdentityFiles, str], dict[TopicPartition, int]]
"""(a cluster's bootstrap servers, the identity to present, group) -> committed offsets."""


class MirrorFlows:
    def __init__(self, service: Service, group_offsets: GroupOffsets = committed_offsets) -> None:
        self.service = service
        self.db = service.db
        self.group_offsets = group_offsets

    def _facts(self) -> dict[str, ClusterFacts]:
        facts = {}
        for row in self.db.list_clusters(include_deleted=False):
            vms = [v for v in self.db.cluster_vms(row["name"]) if v["state"] in LIVE_VM_STATES]
            facts[row["name"]] = ClusterFacts(
                status=row["status"],
                bootstrap_servers=bootstrap_servers([v["address"] for v in vms]),
                broker_ids=frozenset(
                    int(v["broker_id"]) for v in vms if v["broker_id"] is not None
                ),
            )
        return facts

    def _readings(self, target: str) -> MirrorFlowReadings:
        self.service._cluster(target)
        return self.service.engine.controller.cluster_port(target).mirror_flows()

    def create(self, target: str, request: FlowRequest, caller: str) -> OperationRow:
        flow = check_flow_request(request, target, self._facts())
        if flow.source.kind is SourceKind.KAAS:
            self._check_deliverable(flow)
        self.service._idle(target)
        check_against_existing(flow, self._readings(target).flows)
        return self.service._queue(
            target, OperationKind.CREATE_MIRROR_FLOW, flow_params(flow), caller
        )

    def _check_deliverable(self, flow: MirrorFlow) -> None:
        provider = self.service.provider
        if not isinstance(provider, DeliversMirrorSources):
            raise RequestRefused(
                Refusal.CONFLICT,
                f"source_cluster: the {provider.name} provider cannot put a client identity of "
                f"{flow.source.alias} on {flow.target_cluster}'s VMs",
            )
        if client_identity(provider, flow.source.alias) is None:
            raise RequestRefused(
                Refusal.CONFLICT,
                f"source_cluster: the service holds no client identity of {flow.source.alias}",
            )

    def delete(self, target: str, name: str, caller: str) -> OperationRow:
        flow = self.get(target, name)
        self.service._idle(target)
        return self.service._queue(
            target, OperationKind.DELETE_MIRROR_FLOW, {"name": name, **flow_params(flow)}, caller
        )

    def list(self, target: str) -> MirrorFlowReadings:
        return self._readings(target)

    def get(self, target: str, name: str) -> MirrorFlow:
        try:
            validate_flow_name(name)
        except ContractError:
            raise ApiError(404, "not_found", f"cluster {target} has no flow {name!r}") from None
        readings = self._readings(target)
        if name in readings.unreadable:
            raise ApiError(409, "unreadable", f"flow {name}: {readings.unreadable[name]}")
        flow = readings.flows.get(name)
        if flow is None:
            raise ApiError(404, "not_found", f"cluster {target} has no flow {name}")
        return flow

    def lag(self, target: str, name: str) -> MirrorFlowLag | None:
        """The flow's lag as its reporting agent last measured it (None: not yet)."""
        return self.service.engine.controller.cluster_port(target).mirror_lag(name)

    def failover(self, target: str, name: str, group: str) -> builtins.list[PartitionOffsets]:
        """The group's committed offsets on the flow's source beside those MirrorMaker
        synced to the target. The source is read only when it is a cluster of this service."""
        validate_group(group)
        flow = self.get(target, name)
        facts = self._facts()
        identity = client_identity(self.service.provider, target)
        if identity is None:
            raise RequestRefused(
                Refusal.CONFLICT, f"the service holds no client identity of {target}"
            )
        on_target = self.group_offsets(facts[target].bootstrap_servers, identity, group)
        on_source = None
        if flow.source.kind is SourceKind.KAAS and flow.source.alias in facts:
            source_identity = client_identity(self.service.provider, flow.source.alias)
            if source_identity is not None:
                on_source = self.group_offsets(
                    facts[flow.source.alias].bootstrap_servers, source_identity, group
                )
        return failover_report(flow, group, on_source, on_target)
