"""Certificate rotation as rounds (pure: no I/O).

Every round gives every VM a new leaf and a trust bundle, installed by one rolling restart.
A leaf rotation is one round. A CA rotation is three, so that no VM ever meets a peer whose
certificate it cannot verify:

    round 0: trust old + new CA, leaves still signed by the old CA
    round 1: trust old + new CA, leaves signed by the new CA
    round 2: trust the new CA only (the old one dropped), leaves signed by the new CA

A VM restarted in round r meets VMs still running round r-1's files: round 0's and 1's
leaves are trusted by both bundles, and round 2's VMs trust the new CA that signed round
1's leaves.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from enum import StrEnum

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from planner.pki.authority import (
    DEFAULT_LEAF_DAYS,
    Authority,
    PkiError,
    Role,
    load_certificate,
    sign,
)

LOCAL_SOURCE_ADDRESS = "127.0.0.1"


class Signer(StrEnum):
    CURRENT = "current"  # the CA the cluster runs on
    NEXT = "next"  # the CA a CA rotation moves it to


class RotationKind(StrEnum):
    LEAVES = "leaves"
    CA = "ca"


@dataclass(frozen=True)
class RoundPlan:
    signer: Signer
    trusted: tuple[Signer, ...]


ROUNDS: dict[RotationKind, tuple[RoundPlan, ...]] = {
    RotationKind.LEAVES: (RoundPlan(Signer.CURRENT, (Signer.CURRENT,)),),
    RotationKind.CA: (
        RoundPlan(Signer.CURRENT, (Signer.CURRENT, Signer.NEXT)),
        RoundPlan(Signer.NEXT, (Signer.CURRENT, Signer.NEXT)),
        RoundPlan(Signer.NEXT, (Signer.NEXT,)),
    ),
}


def round_plan(kind: RotationKind, index: int) -> RoundPlan:
    rounds = ROUNDS[kind]
    if not 0 <= index < len(rounds):
        raise PkiError(f"a {kind} rotation has rounds 0-{len(rounds) - 1}, not {index}")
    return rounds[index]


def authority_of(signer: Signer, current: Authority, following: Authority | None) -> Authority:
    if signer is Signer.CURRENT:
        return current
    if following is None:
        raise PkiError("this round needs the new CA, and none is staged")
    return following


def trust_bundle(plan: RoundPlan, current: Authority, following: Authority | None) -> bytes:
    """The CA certificates a round's VMs and clients trust, in one PEM bundle."""
    return b"".join(authority_of(s, current, following).certificate_pem for s in plan.trusted)


def serial_hex(certificate_pem: bytes | str) -> str:
    pem = certificate_pem.encode() if isinstance(certificate_pem, str) else certificate_pem
    return format(load_certificate(pem).serial_number, "x")


def serial_of_der(certificate_der: bytes) -> str:
    """The serial of a certificate as a TLS peer presented it (DER)."""
    try:
        return format(x509.load_der_x509_certificate(certificate_der).serial_number, "x")
    except ValueError as exc:
        raise PkiError(f"not a DER certificate: {exc}") from None


def certificate_hosts(certificate_pem: bytes) -> tuple[str, ...]:
    """The alternative names of a certificate, addresses and DNS names, in their order."""
    certificate = load_certificate(certificate_pem)
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    hosts: list[str] = []
    for name in names:
        if isinstance(name, x509.IPAddress):
            hosts.append(str(name.value))
        elif isinstance(name, x509.DNSName):
            hosts.append(name.value)
    return tuple(hosts)


def certificate_public_key_pem(certificate_pem: bytes) -> bytes:
    return (
        load_certificate(certificate_pem)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def sign_request(
    authority: Authority,
    public_key_pem: bytes,
    hosts: tuple[str, ...],
    vm_address: str,
    now: dt.datetime,
    days: int = DEFAULT_LEAF_DAYS,
) -> bytes:
    """A VM's new node leaf. The VM names its hosts; the CA signs only names that include
    the address the management plane knows for the VM, and no other address but 127.0.0.1
    (where a local VM's connections come from), so a VM cannot take another VM's address."""
    if vm_address not in hosts:
        raise PkiError(
            f"the request names {', '.join(hosts)}, not the VM's address {vm_address}: refused"
        )
    for host in hosts:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            continue
        if str(address) not in (vm_address, LOCAL_SOURCE_ADDRESS):
            raise PkiError(f"the request names another VM's address {host}: refused")
    return sign(authority, public_key_pem, Role.NODE, hosts, now, days)
