"""Certificate rotation steps (`kaas cluster rotate-certs NAME [--ca]`), registered with the
controller's other steps and run by the one runner.

Each round (planner/pki/rotation.py) is three steps: publish the round (the management
plane's own identity first gets the round's trust, and a certificate of the round's CA),
sign every VM's request for it (the VM keeps its key: only the public half comes), then wait
until every VM's broker presents its new certificate (each agent installs it and restarts
its broker under the restart lock). A CA rotation stages the new CA before the first round
and makes it the cluster's CA after the last.
"""

from __future__ import annotations

import datetime as dt

from management_plane.errors import PermanentError
from management_plane.providers.base import client_identity
from management_plane.security.rotation_store import CertificateStore, HoldsClusterAuthority
from management_plane.service.controller import STEPS, Controller, done, wait
from management_plane.service.db import OperationRow
from management_plane.service.operations import OperationKind, Outcome, StepName
from management_plane.service.steps import Patience
from planner.contracts.certificates import CertRound, SignedLeaf
from planner.pki.authority import Authority, PkiError, Role, create_authority, issue, issued_by
from planner.pki.rotation import (
    RotationKind,
    authority_of,
    certificate_public_key_pem,
    round_plan,
    serial_hex,
    sign_request,
    trust_bundle,
)

K = OperationKind
ROTATING = frozenset({K.ROTATE_CERTS, K.ROTATE_CA})


class NoAuthority(PermanentError):
    """The provider keeps no CA for the cluster: nothing here can sign its certificates."""


def _rotation(kind: OperationKind) -> RotationKind:
    return RotationKind.CA if kind == K.ROTATE_CA else RotationKind.LEAVES


def _holder(controller: Controller) -> HoldsClusterAuthority:
    provider = controller.provider
    if not isinstance(provider, HoldsClusterAuthority):
        raise NoAuthority(f"the {provider.name} provider keeps no cluster CA to rotate")
    return provider


def round_id(op: OperationRow, index: int) -> str:
    return f"op{op.op_id}-round{index}"


def _round(controller: Controller, op: OperationRow, index: int) -> tuple[Authority, bytes]:
    """The signing CA and the trust bundle of round `index`."""
    holder = _holder(controller)
    plan = round_plan(_rotation(op.kind), index)
    current = holder.cluster_authority(op.cluster)
    following = holder.staged_authority(op.cluster)
    try:
        signer = authority_of(plan.signer, current, following)
    except PkiError as exc:
        raise NoAuthority(str(exc)) from None
    return signer, trust_bundle(plan, current, following)


def _brokers(controller: Controller, cluster: str) -> dict[int, str]:
    """broker id -> the VM's address, for every running VM with a broker."""
    return {
        int(vm["broker_id"]): vm["address"]
        for vm in controller.db.cluster_vms(cluster)
        if vm["state"] == "running" and vm["broker_id"] is not None
    }


def _store(controller: Controller, cluster: str) -> CertificateStore:
    return controller.certificates(
        cluster,
        [vm["address"] for vm in controller.db.cluster_vms(cluster) if vm["state"] == "running"],
        client_identity(controller.provider, cluster),
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@STEPS.register(StepName.STAGE_CA, {K.ROTATE_CA})
def stage_ca(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    holder = _holder(controller)
    if holder.staged_authority(op.cluster) is None:
        holder.stage_authority(op.cluster, create_authority(op.cluster, _now()))
    staged = holder.staged_authority(op.cluster)
    assert staged is not None
    return done(f"new CA staged (serial {serial_hex(staged.certificate_pem)})")


@STEPS.register(StepName.CERT_ROUND, ROTATING)
def cert_round(controller: Controller, op: OperationRow, batch: int) -> Outcome:
    signer, bundle = _round(controller, op, batch)
    holder = _holder(controller)
    identity = client_identity(controller.provider, op.cluster)
    issued = None
    if identity is None or not issued_by(identity.certificate.read_bytes(), signer.certificate_pem):
        issued = issue(signer, Role.ADMIN, (), _now())
    # The management plane's own clients trust the round's CAs before any VM presents a
    # certificate of the new one.
    holder.install_admin_identity(op.cluster, issued, bundle)
    value = CertRound(round_id(op, batch), bundle.decode(), f"operation {op.op_id}")
    _store(controller, op.cluster).write_round(value)
    return done(f"round {value.round_id} published: every VM renews its certificate")


@STEPS.register(StepName.SIGN_LEAVES, ROTATING, Patience.APPLIED)
def sign_leaves(controller: Controller, op: OperationRow, batch: int) -> Outcome:
    wanted = round_id(op, batch)
    signer, bundle = _round(controller, op, batch)
    store = _store(controller, op.cluster)
    requests = store.requests()
    signed = store.signed()
    waiting: list[str] = []
    issued: list[int] = []
    for broker_id, address in sorted(_brokers(controller, op.cluster).items()):
        request = requests.get(broker_id)
        if request is None or request.round_id != wanted:
            waiting.append(f"broker {broker_id}")
            continue
        answer = signed.get(broker_id)
        if (
            answer is not None
            and answer.round_id == wanted
            and certificate_public_key_pem(answer.certificate_pem.encode()).decode()
            == request.public_key_pem
        ):
            continue
        try:
            certificate = sign_request(
                signer, request.public_key_pem.encode(), request.hosts, address, _now()
            )
        except PkiError as exc:
            raise PermanentError(f"broker {broker_id}: {exc}") from None
        store.write_signed(broker_id, SignedLeaf(wanted, certificate.decode(), bundle.decode()))
        issued.append(broker_id)
    if waiting:
        return wait(
            f"round {wanted}: signed brokers {issued or 'none new'}; waiting for the requests of "
            + ", ".join(waiting)
        )
    return done(f"round {wanted}: every VM's request signed")


@STEPS.register(StepName.WAIT_LEAVES, ROTATING, Patience.APPLIED)
def wait_leaves(controller: Controller, op: OperationRow, batch: int) -> Outcome:
    wanted = round_id(op, batch)
    store = _store(controller, op.cluster)
    signed = store.signed()
    installed = store.installed()
    behind = []
    serials = {}
    for broker_id in sorted(_brokers(controller, op.cluster)):
        answer = signed.get(broker_id)
        report = installed.get(broker_id)
        serial = serial_hex(answer.certificate_pem) if answer is not None else None
        if answer is None or report is None or (report.round_id, report.serial) != (wanted, serial):
            behind.append(f"broker {broker_id}")
        else:
            serials[broker_id] = serial
    if behind:
        return wait(
            f"round {wanted}: waiting for {', '.join(behind)} to present the new certificate"
        )
    return done(f"round {wanted}: every broker presents its new certificate: {serials}")


@STEPS.register(StepName.PROMOTE_CA, {K.ROTATE_CA})
def promote_ca(controller: Controller, op: OperationRow, _batch: int) -> Outcome:
    holder = _holder(controller)
    staged = holder.staged_authority(op.cluster)
    if staged is None:  # promoted by an earlier run of this step
        current = holder.cluster_authority(op.cluster)
        return done(f"the cluster's CA is {serial_hex(current.certificate_pem)}")
    holder.promote_authority(op.cluster)
    return done(
        f"the new CA {serial_hex(staged.certificate_pem)} is the cluster's CA; the old one is dropped"
    )
