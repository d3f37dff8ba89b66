"""Leaf certificate renewal between the planes, under /kaas/<cluster>/certs.

A VM's private key never leaves it: the agent makes a new key, keeps it on the VM and sends
only the public half in a request; the management plane, which holds the cluster's CA, signs
it and answers with the certificate and the trust bundle to install. A rotation runs in
rounds; each round is one value the management plane writes:

    certs/round               CertRound: this round's id and the trust bundle every VM installs
    certs/requests/<broker>   LeafRequest: an agent's public key for a round (or for an expiry)
    certs/signed/<broker>     SignedLeaf: the certificate the management plane issued for it
    certs/installed/<broker>  InstalledLeaf: what the VM's broker presents now
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planner.contracts.fields import (
    ContractError,
    choice,
    dump,
    integer,
    load_object,
    schema_version,
    text,
)
from planner.contracts.paths import ClusterPaths

CERTS_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CertificatePaths:
    cluster: str

    @property
    def root(self) -> str:
        return f"{ClusterPaths(self.cluster).root}/certs"

    @property
    def round(self) -> str:
        return f"{self.root}/round"

    @property
    def requests(self) -> str:
        return f"{self.root}/requests"

    @property
    def signed(self) -> str:
        return f"{self.root}/signed"

    @property
    def installed(self) -> str:
        return f"{self.root}/installed"

    def request(self, broker_id: int) -> str:
        return f"{self.requests}/{broker_id}"

    def signed_leaf(self, broker_id: int) -> str:
        return f"{self.signed}/{broker_id}"

    def installed_leaf(self, broker_id: int) -> str:
        return f"{self.installed}/{broker_id}"


class RequestReason(StrEnum):
    ROTATION = "rotation"  # the round the management plane asked for
    EXPIRY = "expiry"  # the agent's own renewal before its certificate expires


def _pem(value: Mapping[str, Any], key: str, what: str, marker: str) -> str:
    pem = text(value, key, what)
    if f"-----BEGIN {marker}-----" not in pem:
        raise ContractError(f"{what}.{key} must be a PEM {marker.lower()}")
    return pem


def _header(raw: bytes | str, what: str) -> dict[str, Any]:
    value = load_object(raw, what)
    schema_version(value, what, (CERTS_SCHEMA_VERSION,))
    return value


@dataclass(frozen=True)
class CertRound:
    """One round of a rotation: every VM renews its leaf and installs `trust_bundle_pem`."""

    round_id: str
    trust_bundle_pem: str
    requested_by: str  # the operation, for the journal

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": CERTS_SCHEMA_VERSION,
                "round_id": self.round_id,
                "trust_bundle_pem": self.trust_bundle_pem,
                "requested_by": self.requested_by,
            }
        )


def parse_cert_round(raw: bytes | str) -> CertRound:
    what = "cert_round"
    value = _header(raw, what)
    return CertRound(
        text(value, "round_id", what),
        _pem(value, "trust_bundle_pem", what, "CERTIFICATE"),
        text(value, "requested_by", what),
    )


@dataclass(frozen=True)
class LeafRequest:
    """A VM's request for a new leaf: its new public key and the names its certificate
    carries now (the management plane checks them against the VM it knows)."""

    round_id: str
    broker_id: int
    public_key_pem: str
    hosts: tuple[str, ...]
    reason: RequestReason

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": CERTS_SCHEMA_VERSION,
                "round_id": self.round_id,
                "broker_id": self.broker_id,
                "public_key_pem": self.public_key_pem,
                "hosts": list(self.hosts),
                "reason": self.reason.value,
            }
        )


def parse_leaf_request(raw: bytes | str) -> LeafRequest:
    what = "leaf_request"
    value = _header(raw, what)
    hosts = value.get("hosts")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise ContractError(f"{what}.hosts must be a non-empty list of host names or addresses")
    return LeafRequest(
        text(value, "round_id", what),
        integer(value, "broker_id", what, minimum=0),
        _pem(value, "public_key_pem", what, "PUBLIC KEY"),
        tuple(hosts),
        choice(value, "reason", what, RequestReason),
    )


@dataclass(frozen=True)
class SignedLeaf:
    """The management plane's answer to a request of `round_id`."""

    round_id: str
    certificate_pem: str
    trust_bundle_pem: str

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": CERTS_SCHEMA_VERSION,
                "round_id": self.round_id,
                "certificate_pem": self.certificate_pem,
                "trust_bundle_pem": self.trust_bundle_pem,
            }
        )


def parse_signed_leaf(raw: bytes | str) -> SignedLeaf:
    what = "signed_leaf"
    value = _header(raw, what)
    return SignedLeaf(
        text(value, "round_id", what),
        _pem(value, "certificate_pem", what, "CERTIFICATE"),
        _pem(value, "trust_bundle_pem", what, "CERTIFICATE"),
    )


@dataclass(frozen=True)
class InstalledLeaf:
    """What the VM's broker presents after the round's restart: the serial (hex) of its
    certificate and when that certificate expires."""

    round_id: str
    serial: str
    expires_at_ms: int

    def to_bytes(self) -> bytes:
        return dump(
            {
                "schema_version": CERTS_SCHEMA_VERSION,
                "round_id": self.round_id,
                "serial": self.serial,
                "expires_at_ms": self.expires_at_ms,
            }
        )


def parse_installed_leaf(raw: bytes | str) -> InstalledLeaf:
    what = "installed_leaf"
    value = _header(raw, what)
    serial = text(value, "serial", what)
    try:
        int(serial, 16)
    except ValueError:
        raise ContractError(f"{what}.serial must be a hexadecimal number, got {serial!r}") from None
    return InstalledLeaf(
        text(value, "round_id", what), serial, integer(value, "expires_at_ms", what, minimum=0)
    )
