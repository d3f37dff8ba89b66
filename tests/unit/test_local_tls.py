"""The local provider's certificates: one CA per cluster, a node identity per VM that a
restart keeps, and an admin identity, all issued by that CA."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from management_plane.local.layout import plan_layout
from management_plane.local.tls import (
    authority_dir,
    cluster_authority,
    ensure_admin_identity,
    ensure_vm_identity,
)
from planner.pki.authority import Role, issued_by, load_certificate

pytestmark = pytest.mark.unit


def test_each_vm_gets_a_node_certificate_for_its_address_that_a_restart_keeps(
    tmp_path: Path,
) -> None:
    layout = plan_layout("c1", tmp_path, 2)
    first = ensure_vm_identity(layout, layout.vms[0])
    before = first.certificate.read_bytes()
    certificate = load_certificate(before)
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # Its own address, and the address local VMs connect from.
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == [
        "127.0.1.1",
        "127.0.0.1",
    ]
    assert names.get_values_for_type(x509.DNSName) == ["vm1"]
    ca = cluster_authority(layout)
    assert issued_by(before, ca.certificate_pem)
    assert first.trust_bundle.read_bytes() == ca.certificate_pem
    assert ensure_vm_identity(layout, layout.vms[0]).certificate.read_bytes() == before
    second = ensure_vm_identity(layout, layout.vms[1])
    assert second.certificate.read_bytes() != before
    assert (authority_dir(layout) / "ca.key").stat().st_mode & 0o077 == 0


def test_admin_identity_is_issued_by_the_same_ca(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 1)
    admin = ensure_admin_identity(layout)
    assert admin.role is Role.ADMIN
    assert issued_by(admin.certificate.read_bytes(), cluster_authority(layout).certificate_pem)
