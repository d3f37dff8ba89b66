"""The management plane's HTTPS certificate: a CA of the service's own, kept in the service
home (its key 0600, like every secret there), and the server certificate it issues for the
addresses the service listens on. The CLI and the service client verify the API against that
CA's certificate (`ca.pem` in the service's `tls/` folder), never against the system's.
"""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from cryptography import x509

from planner.pki.authority import Role, create_authority, issue, load_certificate
from planner.pki.files import (
    IdentityFiles,
    has_authority,
    load_authority,
    write_authority,
    write_identity,
)

CA_DIR = "ca"
TLS_DIR = "tls"
LOCAL_NAMES = ("127.0.0.1", "localhost")


def service_identity(home: Path) -> IdentityFiles:
    """The API's server certificate and key, and the trust bundle clients verify it with."""
    return IdentityFiles(home / TLS_DIR, Role.ADMIN)


def api_trust_bundle(home: Path) -> Path:
    return service_identity(home).trust_bundle


def _names(certificate_pem: bytes) -> set[str]:
    names = (
        load_certificate(certificate_pem)
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    return {str(n) for n in names.get_values_for_type(x509.IPAddress)} | set(
        names.get_values_for_type(x509.DNSName)
    )


def ensure_service_tls(home: Path, host: str) -> IdentityFiles:
    """The service's CA (made once) and a server certificate naming `host` and the loopback
    names; a certificate that does not name `host` (the service moved) is issued anew."""
    hosts = tuple(dict.fromkeys((*LOCAL_NAMES, host)))
    if host in ("0.0.0.0", "::"):  # every interface: clients use a name, not this address
        hosts = LOCAL_NAMES
    ca_dir = home / CA_DIR
    now = dt.datetime.now(dt.UTC)
    if not has_authority(ca_dir):
        write_authority(ca_dir, create_authority("management plane", now))
    identity = service_identity(home)
    if identity.exists() and set(hosts) <= _names(identity.certificate.read_bytes()):
        return identity
    authority = load_authority(ca_dir)
    write_identity(identity, issue(authority, Role.ADMIN, hosts, now), authority.certificate_pem)
    return identity


def api_client_context(trust_bundle: Path) -> ssl.SSLContext:
    """What a client of the API verifies the service with: the service's CA only."""
    context = ssl.create_default_context(cafile=str(trust_bundle))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
