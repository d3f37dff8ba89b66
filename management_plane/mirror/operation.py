"""The registered steps of the flow operations (run by the one runner, like every cluster
operation): `deliver_source` puts the source credentials on the target's VMs through the
provider, `write_flow` creates the flow's znode; a deletion marks it deleting (`stop_flow`),
so the agents stop mirroring it from a value they still read, removes it (`remove_flow`),
then the credentials (`withdraw_source`). Each step is safe to run again.

A KaaS source gets the flow's read-only bindings for the `kaas-mirror` principal
(`grant_source_acls`, acls.py), and the target's VMs a `kaas-mirror` certificate its CA signed
(`deliver_source`); a deletion revokes the bindings last (`revoke_source_acls`). An outside
source's credentials and ACLs are its operator's.
"""

from __future__ import annotations

import datetime as dt
import json

from management_plane.errors import PermanentError
from management_plane.mirror.acls import MIRROR_PRINCIPAL, SourceAclPort, mirror_source_grants
from management_plane.providers.base import DeliversMirrorSources, client_identity
from management_plane.service.controller import Controller, done, step
from management_plane.service.db import OperationRow
from management_plane.service.operations import FAIL, OperationKind, Outcome, StepName
from planner.contracts.mirror_flow import FlowState, MirrorFlow, SourceKind, parse_mirror_flow
from planner.pki.authority import Role, issue

CREATE = {OperationKind.CREATE_MIRROR_FLOW}
DELETE = {OperationKind.DELETE_MIRROR_FLOW}


def flow_params(flow: MirrorFlow) -> dict[str, object]:
    """The operation's params: the flow's contract value, as the agents will read it."""
    return {"flow": flow.to_json()}


def flow_of(op: OperationRow) -> MirrorFlow:
    return parse_mirror_flow(json.dumps(op.params["flow"]))


def _source_acls(controller: Controller, flow: MirrorFlow) -> SourceAclPort:
    identity = client_identity(controller.provider, flow.source.alias)
    if identity is None:
        raise PermanentError(f"the service holds no client identity of {flow.source.alias}")
    return controller.source_acls(flow.source.bootstrap_servers, identity)


@step(StepName.GRANT_SOURCE_ACLS, CREATE)
def grant_source_acls(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    flow = flow_of(op)
    if flow.source.kind is SourceKind.EXTERNAL:
        return done(f"outside source {flow.source.alias}: its ACLs are its operator's")
    grants = mirror_source_grants(flow)
    _source_acls(controller, flow).grant(grants)
    return done(f"{len(grants)} read-only bindings for {MIRROR_PRINCIPAL} on {flow.source.alias}")


@step(StepName.DELIVER_SOURCE, CREATE)
def deliver_source(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    flow = flow_of(op)
    if flow.source.kind is SourceKind.EXTERNAL:
        return done(
            f"outside source {flow.source.alias}: its operator puts the credentials on the VMs"
        )
    provider = controller.provider
    identity = client_identity(provider, flow.source.alias)
    if not isinstance(provider, DeliversMirrorSources) or identity is None:
        return Outcome(
            FAIL, f"the provider cannot give {op.cluster}'s VMs an identity of {flow.source.alias}"
        )
    issued = issue(
        provider.cluster_authority(flow.source.alias),
        Role.MIRROR,
        (),
        dt.datetime.now(dt.UTC),
    )
    provider.deliver_mirror_source(
        op.cluster,
        flow.name,
        issued.key_pem + issued.certificate_pem,
        identity.trust_bundle.read_bytes(),
    )
    return done(
        f"a {Role.MIRROR.value} certificate of {flow.source.alias}'s CA and the CA put on "
        f"{op.cluster}'s VMs"
    )


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


@step(StepName.WITHDRAW_SOURCE, DELETE)
def withdraw_source(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    name = op.params["name"]
    provider = controller.provider
    if isinstance(provider, DeliversMirrorSources):
        provider.withdraw_mirror_source(op.cluster, name)
    return done(f"flow {name}'s source credentials removed from {op.cluster}'s VMs")


@step(StepName.REVOKE_SOURCE_ACLS, DELETE)
def revoke_source_acls(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    flow = parse_mirror_flow(json.dumps(op.params["flow"]))
    if flow.source.kind is SourceKind.EXTERNAL:
        return done(f"outside source {flow.source.alias}: its ACLs are its operator's")
    grants = mirror_source_grants(flow)
    _source_acls(controller, flow).revoke(grants)
    return done(f"{len(grants)} bindings of {MIRROR_PRINCIPAL} on {flow.source.alias} revoked")
