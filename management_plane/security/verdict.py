"""What a scanned port's answers mean (pure): whether it requires TLS and authentication,
and whether it passes the check. A port passes only when both hold; a port whose
authentication this check cannot test fails, saying so, rather than passing unproven."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class TlsOutcome(StrEnum):
    NOT_TLS = "not_tls"  # the handshake got no TLS answer: the port speaks something else
    CLIENT_CERTIFICATE_REQUIRED = "client_certificate_required"
    TLS_WITHOUT_CLIENT_CERTIFICATE = "tls_without_client_certificate"
    UNREACHABLE = "unreachable"  # listening a moment ago, refused the connection now


class AnonymousOutcome(StrEnum):
    ANSWERED = "answered"  # a request without credentials got its answer
    REFUSED = "refused"
    NOT_TESTED = "not_tested"  # no probe of this port's protocol


class PortKind(StrEnum):
    KAFKA = "kafka"  # a broker listener: a metadata request tests anonymous access
    OTHER = "other"  # ZooKeeper, Jolokia, anything else: only the TLS handshake is tested


@dataclass(frozen=True)
class PortVerdict:
    tls: bool | None  # None: unknown (unreachable)
    authentication: bool | None  # None: not tested
    ok: bool
    reason: str


def judge(kind: PortKind, tls: TlsOutcome, anonymous: AnonymousOutcome) -> PortVerdict:
    """`anonymous`: what a Kafka request with no credentials got, over TLS when the port
    speaks it, else in clear (NOT_TESTED for other kinds)."""
    if tls is TlsOutcome.UNREACHABLE:
        return PortVerdict(None, None, False, "refused the probe's connection: not checked")
    if tls is TlsOutcome.NOT_TLS:
        if anonymous is AnonymousOutcome.ANSWERED:
            return PortVerdict(False, False, False, "plaintext: answered a request in clear")
        return PortVerdict(False, None, False, "plaintext: no TLS handshake")
    if tls is TlsOutcome.CLIENT_CERTIFICATE_REQUIRED:
        return PortVerdict(True, True, True, "mutual TLS: a client certificate is required")
    # TLS without a client certificate: authentication must come after the handshake.
    if anonymous is AnonymousOutcome.REFUSED:
        return PortVerdict(True, True, True, "TLS; a request without credentials is refused")
    if anonymous is AnonymousOutcome.ANSWERED:
        return PortVerdict(True, False, False, "TLS, but a request without credentials is answered")
    return PortVerdict(
        True, None, False, "TLS without a client certificate; authentication not verified"
    )
