"""The management plane's HTTPS certificate (management_plane/service/tls.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from management_plane.service.tls import (
    CA_DIR,
    api_client_context,
    ensure_service_tls,
    service_identity,
)
from planner.pki.authority import issued_by, load_certificate

pytestmark = pytest.mark.unit


def _names(path: Path) -> set[str]:
    extension = load_certificate(path.read_bytes()).extensions
    names = extension.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n) for n in names.get_values_for_type(x509.IPAddress)} | set(
        names.get_values_for_type(x509.DNSName)
    )


def test_the_service_certificate_names_its_host_and_is_kept_private(tmp_path: Path) -> None:
    identity = ensure_service_tls(tmp_path, "10.1.2.3")
    assert _names(identity.certificate) == {"127.0.0.1", "localhost", "10.1.2.3"}
    ca = (tmp_path / CA_DIR / "ca.crt").read_bytes()
    assert issued_by(identity.certificate.read_bytes(), ca)
    assert identity.trust_bundle.read_bytes() == ca
    for secret in (tmp_path / CA_DIR / "ca.key", identity.key):
        assert secret.stat().st_mode & 0o077 == 0, secret
    assert (tmp_path / CA_DIR).stat().st_mode & 0o077 == 0


def test_a_restart_keeps_the_certificate_and_a_new_host_gets_a_new_one(tmp_path: Path) -> None:
    first = ensure_service_tls(tmp_path, "127.0.0.1").certificate.read_bytes()
    assert ensure_service_tls(tmp_path, "localhost").certificate.read_bytes() == first
    moved = ensure_service_tls(tmp_path, "10.9.9.9").certificate.read_bytes()
    assert moved != first and "10.9.9.9" in _names(service_identity(tmp_path).certificate)
    # The CA stays: clients that trust it keep working.
    assert issued_by(moved, (tmp_path / CA_DIR / "ca.crt").read_bytes())


def test_every_interface_is_served_under_the_loopback_names(tmp_path: Path) -> None:
    identity = ensure_service_tls(tmp_path, "0.0.0.0")
    assert _names(identity.certificate) == {"127.0.0.1", "localhost"}
    context = api_client_context(identity.trust_bundle)
    assert context.check_hostname and context.verify_mode.name == "CERT_REQUIRED"
