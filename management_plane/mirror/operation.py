"""The registered steps of the flow operations (run by the one runner, like every cluster
operation): `write_flow` creates the flow's znode; a deletion marks it deleting
(`stop_flow`), so the agents stop mirroring it from a value they still read, then removes it
(`remove_flow`). Each step is safe to run again."""

from __future__ import annotations

import json

from management_plane.service.controller import Controller, done, step
from management_plane.service.db import OperationRow
from management_plane.service.operations import FAIL, OperationKind, Outcome, StepName
from planner.contracts.mirror_flow import FlowState, MirrorFlow, parse_mirror_flow

CREATE = {OperationKind.CREATE_MIRROR_FLOW}
DELETE = {OperationKind.DELETE_MIRROR_FLOW}


def flow_params(flow: MirrorFlow) -> dict[str, object]:
    """The operation's params: the flow's contract value, as the agents will read it."""
    return {"flow": flow.to_json()}


def flow_of(op: OperationRow) -> MirrorFlow:
    return parse_mirror_flow(json.dumps(op.params["flow"]))


@step(StepName.WRITE_FLOW, CREATE)
def write_flow(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    flow = flow_of(op)
    cluster = controller.cluster_port(op.cluster)
    found = cluster.mirror_flows().flows.get(flow.name)
    if found == flow:
        return done(f"flow {flow.name} is in ZooKeeper")
    if found is not None:
        # Another request's flow of the same name, written since this one was checked.
        return Outcome(FAIL, f"cluster {op.cluster} has another flow named {flow.name}")
    cluster.put_mirror_flow(flow)
    return done(
        f"flow {flow.name} written: {flow.source.alias} -> {flow.target_cluster}, "
        f"topics {flow.topics!r}, groups {flow.groups!r}"
    )


@step(StepName.STOP_FLOW, DELETE)
def stop_flow(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    name = op.params["name"]
    cluster = controller.cluster_port(op.cluster)
    found = cluster.mirror_flows().flows.get(name)
    if found is None:
        return done(f"flow {name} is gone already")
    if found.state is not FlowState.DELETING:
        cluster.put_mirror_flow(found.deleting())
    return done(f"flow {name} marked deleting: the agents stop mirroring it")


@step(StepName.REMOVE_FLOW, DELETE)
def remove_flow(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    name = op.params["name"]
    controller.cluster_port(op.cluster).remove_mirror_flow(name)
    return done(f"flow {name} removed")
