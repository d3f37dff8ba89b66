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
    # A ZooKeeper client port: in clear, a session's first request and the four-letter words
    # test what it serves without a certificate.
    ZOOKEEPER = "zookeeper"
    # Jolokia's HTTPS: it completes the handshake without a certificate and refuses the
    # request, so an HTTP request without one tests it.
    JOLOKIA = "jolokia"
    OTHER = "other"  # quorum ports, Jolokia, anything else: only the TLS handshake is tested


@dataclass(frozen=True)
class PortVerdict:
    tls: bool | None  # None: unknown (unreachable)
    authentication: bool | None  # None: not tested
    ok: bool
    reason: str


def _zookeeper_in_clear(anonymous: AnonymousOutcome, words: tuple[str, ...]) -> PortVerdict:
    """ZooKeeper's reconfig needs a plaintext client port in every server line; whether it
    is open depends on what it serves without a certificate."""
    if anonymous is AnonymousOutcome.ANSWERED:
        return PortVerdict(False, False, False, "plaintext: a session without credentials reads")
    if anonymous is not AnonymousOutcome.REFUSED:
        return PortVerdict(False, None, False, "plaintext: what it serves was not tested")
    if words:
        return PortVerdict(
            False,
            False,
            False,
            "plaintext: no session without a certificate, but the four-letter words "
            f"{', '.join(words)} are answered in clear",
        )
    return PortVerdict(
        False,
        True,
        True,
        "plaintext, serving nothing without a certificate: no session, no four-letter word",
    )


def judge(
    kind: PortKind,
    tls: TlsOutcome,
    anonymous: AnonymousOutcome,
    answered_words: tuple[str, ...] = (),
) -> PortVerdict:
    """`anonymous`: what a Kafka request (a ZooKeeper session's first request) with no
    credentials got, over TLS when the port speaks it, else in clear (NOT_TESTED for other
    kinds). `answered_words`: the four-letter words a ZooKeeper port answered in clear."""
    if tls is TlsOutcome.UNREACHABLE:
        return PortVerdict(None, None, False, "refused the probe's connection: not checked")
    if tls is TlsOutcome.NOT_TLS and kind is PortKind.ZOOKEEPER:
        return _zookeeper_in_clear(anonymous, answered_words)
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
