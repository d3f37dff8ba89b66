"""What a new VM is handed at first boot to fetch its identity, and the exchange it makes.

A provider that cannot put a private key on the VM (EC2: user data is readable by anyone
allowed DescribeInstanceAttribute) hands the VM a boot ticket instead: a one-time,
expiring token, the management API's address and the CA that API's certificate is
checked against. None of it is a secret worth anything once the token is redeemed or
expired. The VM makes its key, sends the public half with the token to
`BOOT_IDENTITY_PATH`, and gets back its certificate and the cluster's trust bundle.

The management plane writes the ticket (into user data), the agent reads it: one
definition and one parser, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from planner.contracts.fields import ContractError, dump, load_object, schema_version, text

BOOT_TICKET_SCHEMA_VERSION = 1
BOOT_IDENTITY_PATH = "/v1/boot/identity"
PEM_CERTIFICATE_BEGIN = "-----BEGIN CERTIFICATE-----"
PEM_PRIVATE_MARKER = "PRIVATE KEY-----"


@dataclass(frozen=True)
class BootTicket:
    token: str
    """One-time, expiring; the service keeps only its hash."""
    api_url: str
    """https://HOST:PORT of the management API, as the VM reaches it."""
    api_ca_pem: str
    """The CA certificate(s) the API's server certificate is verified against."""

    def __post_init__(self) -> None:
        check_boot_ticket(self)

    @property
    def identity_url(self) -> str:
        return self.api_url.rstrip("/") + BOOT_IDENTITY_PATH

    def to_json(self) -> bytes:
        return dump(
            {
                "schema_version": BOOT_TICKET_SCHEMA_VERSION,
                "token": self.token,
                "api_url": self.api_url,
                "api_ca_pem": self.api_ca_pem,
            }
        )


def check_boot_ticket(ticket: BootTicket, what: str = "boot ticket") -> None:
    if not ticket.token or not ticket.token.isascii() or not ticket.token.isprintable():
        raise ContractError(f"{what}.token must be a non-empty printable ASCII string")
    parts = urlsplit(ticket.api_url)
    if parts.scheme != "https" or not parts.hostname:
        raise ContractError(
            f"{what}.api_url must be https://HOST:PORT (the API is TLS only), got {ticket.api_url!r}"
        )
    if PEM_CERTIFICATE_BEGIN not in ticket.api_ca_pem:
        raise ContractError(f"{what}.api_ca_pem holds no PEM certificate")
    if PEM_PRIVATE_MARKER in ticket.api_ca_pem:
        raise ContractError(f"{what}.api_ca_pem holds a private key: refused")


def parse_boot_ticket(raw: bytes | str, what: str = "boot ticket") -> BootTicket:
    value: Mapping[str, Any] = load_object(raw, what)
    schema_version(value, what, {BOOT_TICKET_SCHEMA_VERSION})
    return BootTicket(
        token=text(value, "token", what),
        api_url=text(value, "api_url", what),
        api_ca_pem=text(value, "api_ca_pem", what),
    )


@dataclass(frozen=True)
class BootIdentityAnswer:
    """What the API answers a redeemed ticket with."""

    certificate_pem: str
    trust_bundle_pem: str


def parse_boot_identity_answer(
    raw: bytes | str, what: str = "boot identity answer"
) -> BootIdentityAnswer:
    value = load_object(raw, what)
    answer = BootIdentityAnswer(
        certificate_pem=text(value, "certificate_pem", what),
        trust_bundle_pem=text(value, "trust_bundle_pem", what),
    )
    for key in ("certificate_pem", "trust_bundle_pem"):
        if PEM_CERTIFICATE_BEGIN not in getattr(answer, key):
            raise ContractError(f"{what}.{key} holds no PEM certificate")
    return answer
