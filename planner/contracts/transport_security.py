"""How a cluster's channels are secured, as the spec asks: TLS everywhere (every cluster made
today), the plaintext listeners of a cluster made before TLS (kept to test and rehearse the
conversion), or one of the conversion's phases between them. Pure.

The conversion is rolling and loses nothing because no phase removes what a client of the
phase before still uses:

1. `both_listeners`: the TLS listeners beside the plain ones, ZooKeeper's client port
   accepting TLS and plaintext (port unification) and its quorum TLS and plaintext; every
   client still on the plain side.
2. `tls_clients`: inter-broker traffic, the brokers' ZooKeeper client, the agents and the
   service on TLS; the quorum talks TLS; Kafka's znodes get ACLs. The plain listeners still
   serve tenants that have not moved.
3. `tls`: the plain listeners and ZooKeeper's plaintext side gone: a cluster as new ones are.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from planner.contracts.fields import ContractError


class TransportSecurityError(ContractError):
    """A transport security value or conversion request that must not be acted on."""


class TransportSecurity(StrEnum):
    PLAINTEXT_LEGACY = "plaintext_legacy"
    BOTH_LISTENERS = "both_listeners"
    TLS_CLIENTS = "tls_clients"
    TLS = "tls"

    @property
    def plain_listeners(self) -> bool:
        """Kafka's PLAINTEXT internal and SASL_PLAINTEXT tenant listeners are open."""
        return self is not TransportSecurity.TLS

    @property
    def tls_listeners(self) -> bool:
        """Kafka's mutual-TLS internal and SASL_SSL tenant listeners are open."""
        return self is not TransportSecurity.PLAINTEXT_LEGACY

    @property
    def clients_use_tls(self) -> bool:
        """Brokers between themselves, their ZooKeeper client, the agents and the service
        talk TLS (and ZooKeeper's quorum too); Kafka's znodes carry ACLs."""
        return self in (TransportSecurity.TLS_CLIENTS, TransportSecurity.TLS)

    @property
    def zookeeper_plain_port(self) -> bool:
        """ZooKeeper's client port accepts a plaintext session."""
        return self is not TransportSecurity.TLS

    @property
    def zookeeper_tls(self) -> bool:
        """ZooKeeper's client port and quorum accept TLS."""
        return self is not TransportSecurity.PLAINTEXT_LEGACY

    @property
    def converting(self) -> bool:
        return self in CONVERSION_PHASES[:-1]


# The phases a conversion writes into the spec, in order; a conversion's steps carry the
# index as their batch.
CONVERSION_PHASES: Final = (
    TransportSecurity.BOTH_LISTENERS,
    TransportSecurity.TLS_CLIENTS,
    TransportSecurity.TLS,
)
DEFAULT_TRANSPORT: Final = TransportSecurity.TLS


def parse_transport(value: object, where: str = "spec.transport_security") -> TransportSecurity:
    if not isinstance(value, str):
        raise TransportSecurityError(f"{where} must be a string, got {type(value).__name__}")
    try:
        return TransportSecurity(value)
    except ValueError:
        raise TransportSecurityError(
            f"{where} must be one of {', '.join(t.value for t in TransportSecurity)}, got {value!r}"
        ) from None


def conversion_refusal(current: TransportSecurity) -> str:
    """Why a cluster with `current` cannot start a conversion to TLS ('' if it can). A
    conversion stopped in a phase resumes there: it is refused only once secure."""
    if current is TransportSecurity.TLS:
        return "the cluster already runs TLS on every channel: there is nothing to convert"
    return ""


def conversion_start(current: TransportSecurity) -> int:
    """The index into CONVERSION_PHASES a conversion goes on from: the phase the spec holds
    is written again (idempotent), so a conversion stopped anywhere resumes there."""
    if current is TransportSecurity.PLAINTEXT_LEGACY:
        return 0
    if current is TransportSecurity.TLS:
        raise TransportSecurityError(conversion_refusal(current))
    return CONVERSION_PHASES.index(current)
