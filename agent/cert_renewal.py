"""What the agent does next about its VM's leaf certificate (pure: no I/O, table-tested).

The VM's key stays on the VM: a renewal makes a new key beside the old one (staged), sends
its public half as a request through ZooKeeper, installs the certificate the management
plane signed for it, and has the broker restarted under the restart lock until the broker
presents it, then the VM's ZooKeeper server (ZooKeeper 3.8 loads its client-port key store
once, at start); then it reports what the broker presents. A request comes from a rotation
round of the management plane, or from the agent itself when its certificate comes within
`window` of expiring.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from planner.contracts.certificates import (
    CertRound,
    InstalledLeaf,
    LeafRequest,
    RequestReason,
    SignedLeaf,
)

DEFAULT_RENEWAL_WINDOW = dt.timedelta(days=30)


class CertStepKind(StrEnum):
    NOTHING = "nothing"
    REQUEST = "request"  # make and stage a key, write its request
    INSTALL = "install"  # write the staged key, the signed certificate and the trust bundle
    RESTART = "restart"  # the broker presents an older certificate than the one installed
    RESTART_ZOOKEEPER = "restart_zookeeper"  # the VM's ZooKeeper server does
    REPORT = "report"  # write what the broker presents now


@dataclass(frozen=True)
class LocalLeaf:
    """The VM's installed certificate and what its broker presents."""

    serial: str
    expires_at: dt.datetime
    presented_serial: str | None  # None: the broker's listener did not answer
    zookeeper_presented_serial: str | None = None
    """What the VM's ZooKeeper server presents on its secure client port. None: the VM runs
    none, or it does not answer (a stopped server reads the new files when it starts)."""


@dataclass(frozen=True)
class CertView:
    broker_id: int
    now: dt.datetime
    window: dt.timedelta
    leaf: LocalLeaf
    round: CertRound | None
    request: LeafRequest | None  # this VM's, in ZooKeeper
    signed: SignedLeaf | None  # the answer to it
    signed_serial: str | None  # the serial of `signed`'s certificate
    signed_matches_staged: bool  # `signed`'s certificate carries the staged key's public half
    staged_matches_request: bool  # the staged key is the one `request` names
    installed: InstalledLeaf | None  # this VM's last report


@dataclass(frozen=True)
class CertStep:
    kind: CertStepKind
    reason: str
    round_id: str = ""
    request_reason: RequestReason = RequestReason.ROTATION


def _nothing(reason: str) -> CertStep:
    return CertStep(CertStepKind.NOTHING, reason)


def expiry_round_id(serial: str) -> str:
    """The id of the agent's own renewal of the certificate with this serial."""
    return f"expiry-{serial}"


def decide_certificate(v: CertView) -> CertStep:
    who = f"broker {v.broker_id}"
    leaf = v.leaf
    request = v.request
    signed = v.signed
    if (
        request is not None
        and signed is not None
        and signed.round_id == request.round_id
        and v.staged_matches_request
        and v.signed_matches_staged
        and v.signed_serial != leaf.serial
    ):
        return CertStep(
            CertStepKind.INSTALL,
            f"{who}: installing certificate {v.signed_serial} of round {signed.round_id}",
            signed.round_id,
        )
    if leaf.presented_serial is not None and leaf.presented_serial != leaf.serial:
        return CertStep(
            CertStepKind.RESTART,
            f"certificate {leaf.serial} installed, the broker presents {leaf.presented_serial}",
        )
    if leaf.presented_serial is None:
        return _nothing(f"{who}: the broker's listener does not answer; certificate check waits")
    # Before the report: the next round of a CA rotation may drop the CA that signed what
    # the ZooKeeper server still presents.
    zookeeper = leaf.zookeeper_presented_serial
    if zookeeper is not None and zookeeper != leaf.serial:
        return CertStep(
            CertStepKind.RESTART_ZOOKEEPER,
            f"certificate {leaf.serial} installed, the ZooKeeper server presents {zookeeper}",
        )
    answered = (
        request is not None
        and signed is not None
        and signed.round_id == request.round_id
        and v.signed_serial == leaf.serial
    )
    installed_round = request.round_id if answered and request is not None else None
    if installed_round is not None and (
        v.installed is None
        or (v.installed.round_id, v.installed.serial) != (installed_round, leaf.serial)
    ):
        return CertStep(
            CertStepKind.REPORT,
            f"{who}: the broker presents certificate {leaf.serial} of round {installed_round}",
            installed_round,
        )
    wanted = v.round
    if wanted is not None and not (
        v.installed is not None and v.installed.round_id == wanted.round_id
    ):
        if request is None or request.round_id != wanted.round_id or not v.staged_matches_request:
            return CertStep(
                CertStepKind.REQUEST,
                f"{who}: rotation round {wanted.round_id}: requesting a new certificate",
                wanted.round_id,
            )
        return _nothing(f"{who}: waiting for the certificate of round {wanted.round_id}")
    if leaf.expires_at - v.now <= v.window:
        round_id = expiry_round_id(leaf.serial)
        if request is None or request.round_id != round_id or not v.staged_matches_request:
            return CertStep(
                CertStepKind.REQUEST,
                f"{who}: certificate {leaf.serial} expires {leaf.expires_at:%Y-%m-%d %H:%M} UTC, "
                "requesting its renewal",
                round_id,
                RequestReason.EXPIRY,
            )
        return _nothing(f"{who}: waiting for the renewal of certificate {leaf.serial}")
    return _nothing(f"{who}: certificate {leaf.serial} current")
