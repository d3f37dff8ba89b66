"""What a port does with a client that brings no credentials: the TLS handshake as Python's
ssl module sees it, and a Kafka metadata request over TLS without a certificate or SASL.
Thin adapters: what the answers mean is `verdict.py`'s."""

from __future__ import annotations

import logging
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.retry import KazooRetry

from management_plane.security.verdict import AnonymousOutcome, TlsOutcome

# What a ZooKeeper server may tell anyone outside a session: its state, its configuration
# (paths, ports) and its metrics.
FOUR_LETTER_WORDS = ("srvr", "conf", "mntr")
# A refused session is what the probe looks for: kazoo's retries and warnings are noise.
_KAZOO_LOG = logging.getLogger("kaas.security.kazoo")
_KAZOO_LOG.setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class TlsSession:
    version: str  # "TLSv1.3"
    cipher: str  # "TLS_AES_256_GCM_SHA384"


def negotiate(
    host: str,
    port: int,
    ca_pem: str,
    server_name: str | None = None,
    timeout_s: float = 10.0,
    maximum_version: ssl.TLSVersion | None = None,
) -> TlsSession:
    """A TLS handshake that verifies the server against the CA `ca_pem` and presents no
    certificate: the version and cipher the server chose. ssl.SSLError on refusal."""
    context = ssl.create_default_context(cadata=ca_pem)
    if maximum_version is not None:
        context.maximum_version = maximum_version
    with (
        socket.create_connection((host, port), timeout=timeout_s) as raw,
        context.wrap_socket(raw, server_hostname=server_name or host) as tls,
    ):
        version, cipher = tls.version(), tls.cipher()
        if version is None or cipher is None:
            raise ssl.SSLError(f"no TLS session with {host}:{port}")
        return TlsSession(version, cipher[0])


def _alert(error: ssl.SSLError) -> bool:
    """Whether the server answered with a TLS alert: it speaks TLS and refused us."""
    reason = (getattr(error, "reason", None) or "").upper()
    return "ALERT" in reason or "CERTIFICATE_REQUIRED" in reason


def probe_tls(host: str, port: int, timeout_s: float = 5.0) -> TlsOutcome:
    """Offer TLS with no client certificate (and no check of the server's, which a scan
    does not need): not TLS at all, TLS that wants a certificate, or TLS that does not."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            try:
                tls = context.wrap_socket(raw, server_hostname=host)
            except ssl.SSLError as error:
                return (
                    TlsOutcome.CLIENT_CERTIFICATE_REQUIRED if _alert(error) else TlsOutcome.NOT_TLS
                )
            except OSError:  # closed or reset mid-handshake: the bytes were not its protocol
                return TlsOutcome.NOT_TLS
            with tls:
                # TLS 1.3 sends the refusal of a missing certificate after the handshake.
                tls.settimeout(min(timeout_s, 2.0))
                try:
                    tls.recv(1)
                except ssl.SSLError as error:
                    if _alert(error):
                        return TlsOutcome.CLIENT_CERTIFICATE_REQUIRED
                    return TlsOutcome.TLS_WITHOUT_CLIENT_CERTIFICATE
                except (TimeoutError, OSError):
                    pass
                return TlsOutcome.TLS_WITHOUT_CLIENT_CERTIFICATE
    except OSError:
        return TlsOutcome.UNREACHABLE


def probe_zookeeper_session(host: str, port: int, timeout_s: float = 8.0) -> AnonymousOutcome:
    """A ZooKeeper session in clear with no credentials, and its first request (the root's
    children): answered, or refused (the connection, the session or the request)."""
    client = KazooClient(
        f"{host}:{port}",
        timeout=timeout_s,
        connection_retry=KazooRetry(max_tries=0),
        command_retry=KazooRetry(max_tries=0),
        logger=_KAZOO_LOG,
    )
    try:
        client.start(timeout=timeout_s)
        client.get_children("/")
    except (KazooException, OSError):
        return AnonymousOutcome.REFUSED
    finally:
        client.stop()
        client.close()
    return AnonymousOutcome.ANSWERED


def four_letter_word_answered(reply: bytes) -> bool:
    """Whether a reply to a four-letter word is its answer: ZooKeeper says so in clear when a
    word is off its whitelist, which tells nothing."""
    return bool(reply) and b"is not executed because it is not in the whitelist" not in reply


def probe_four_letter_words(
    host: str, port: int, words: tuple[str, ...] = FOUR_LETTER_WORDS, timeout_s: float = 5.0
) -> tuple[str, ...]:
    """The four-letter words (ZooKeeper's commands outside any session) the port answers."""
    answered = []
    for word in words:
        try:
            with socket.create_connection((host, port), timeout=timeout_s) as raw:
                raw.sendall(word.encode())
                if four_letter_word_answered(raw.recv(128)):
                    answered.append(word)
        except OSError:
            continue
    return tuple(answered)


def probe_jolokia_anonymous(host: str, port: int, timeout_s: float = 8.0) -> AnonymousOutcome:
    """Jolokia's version request over HTTPS without a client certificate (and without a
    check of the server's): answered (2xx), or refused (an HTTP error or a dropped
    connection)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(
            f"https://{host}:{port}/jolokia/version", context=context, timeout=timeout_s
        ) as response:
            return (
                AnonymousOutcome.ANSWERED
                if 200 <= response.status < 300
                else (AnonymousOutcome.REFUSED)
            )
    except (urllib.error.URLError, OSError):  # HTTPError (403) is a URLError
        return AnonymousOutcome.REFUSED


def probe_kafka_anonymous(
    host: str, port: int, ca_file: str, tls: bool, timeout_s: float = 8.0
) -> AnonymousOutcome:
    """A metadata request from a client with no certificate and no SASL login, over TLS
    (verifying the server against the cluster CA) or in clear: answered, or refused."""
    config: dict[str, str | int | float | bool] = {
        "bootstrap.servers": f"{host}:{port}",
        "socket.timeout.ms": int(timeout_s * 1000),
        "log_level": 0,  # every refusal is expected here
    }
    if tls:
        config.update({"security.protocol": "SSL", "ssl.ca.location": ca_file})
    try:
        AdminClient(config).list_topics(timeout=timeout_s)
    except KafkaException:
        return AnonymousOutcome.REFUSED
    return AnonymousOutcome.ANSWERED
