"""The cluster CA: what it issues, what it refuses, and that real TLS handshakes accept its
certificates and refuse another CA's."""

from __future__ import annotations

import datetime as dt
import pwd
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from planner.pki.authority import (
    PkiError,
    Role,
    create_authority,
    expires_at,
    issue,
    issued_by,
    load_certificate,
    needs_renewal,
    new_key_pem,
    public_key_pem,
    role_distinguished_name,
    sign,
)
from planner.pki.files import IdentityFiles, load_authority, write_authority, write_identity
from planner.pki.tls import client_context

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def authority():
    return create_authority("c1", NOW)


@pytest.fixture(scope="module")
def other_authority():
    return create_authority("c2", NOW)


def test_ca_is_a_ca_that_signs_leaves_only(authority) -> None:
    constraints = authority.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.value.ca is True
    assert constraints.value.path_length == 0
    assert authority.certificate.subject == authority.certificate.issuer


@pytest.mark.parametrize(
    ("role", "hosts", "dns", "ips"),
    [
        (Role.NODE, ("127.0.1.3", "vm3"), ["vm3"], ["127.0.1.3"]),
        (
            Role.NODE,
            ("10.0.0.7", "ip-10-0-0-7.ec2.internal", "::1"),
            ["ip-10-0-0-7.ec2.internal"],
            ["10.0.0.7", "::1"],
        ),
        (Role.ADMIN, ("localhost",), ["localhost"], []),
    ],
)
def test_leaf_names_role_and_addresses(authority, role, hosts, dns, ips) -> None:
    issued = issue(authority, role, hosts, NOW)
    certificate = load_certificate(issued.certificate_pem)
    assert certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == role.value
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == dns
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ips
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert issued_by(issued.certificate_pem, authority.certificate_pem)
    assert role_distinguished_name(role) == certificate.subject.rfc4514_string()


def test_leaf_of_another_ca_is_not_issued_by_this_one(authority, other_authority) -> None:
    foreign = issue(other_authority, Role.NODE, ("127.0.1.1",), NOW)
    assert not issued_by(foreign.certificate_pem, authority.certificate_pem)
    bundle = authority.certificate_pem + other_authority.certificate_pem
    assert issued_by(foreign.certificate_pem, bundle)


def test_leaf_never_outlives_its_ca() -> None:
    short_ca = create_authority("c3", NOW, days=10)
    issued = issue(short_ca, Role.NODE, ("127.0.0.1",), NOW, days=365)
    assert expires_at(issued.certificate_pem) == short_ca.certificate.not_valid_after_utc


@pytest.mark.parametrize(
    ("days_left", "window_days", "renew"),
    [(40, 30, False), (30, 30, True), (29, 30, True), (1, 0, False), (0, 0, True)],
)
def test_needs_renewal(authority, days_left, window_days, renew) -> None:
    issued = issue(authority, Role.NODE, ("127.0.0.1",), NOW, days=100)
    at = expires_at(issued.certificate_pem) - dt.timedelta(days=days_left)
    assert needs_renewal(issued.certificate_pem, at, dt.timedelta(days=window_days)) is renew


def test_signing_a_public_key_keeps_the_private_half_with_its_owner(authority) -> None:
    key = new_key_pem()
    certificate_pem = sign(authority, public_key_pem(key), Role.NODE, ("127.0.1.2",), NOW)
    assert load_certificate(certificate_pem).public_key().public_bytes(*_spki()) == public_key_pem(
        key
    )
    assert b"PRIVATE" not in certificate_pem


def _spki():
    from cryptography.hazmat.primitives import serialization

    return serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: create_authority("x", NOW, days=0), "at least one day"),
        (lambda a: sign(a, b"junk", Role.NODE, (), NOW), "not a PEM public key"),
        (lambda a: issue(a, Role.NODE, ("bad host",), NOW), "cannot go into a certificate"),
        (lambda a: issue(a, Role.NODE, ("127.0.0.1",), NOW, days=0), "at least one day"),
        (lambda a: load_certificate(b"-----BEGIN CERTIFICATE-----\nxx\n"), "not a PEM certificate"),
    ],
)
def test_bad_input_names_the_problem(authority, call, message) -> None:
    with pytest.raises(PkiError, match=message):
        call(authority)


def test_files_are_private_and_round_trip(tmp_path: Path, authority) -> None:
    write_authority(tmp_path / "ca", authority)
    assert load_authority(tmp_path / "ca") == authority
    files = IdentityFiles(tmp_path / "vm1" / "tls", Role.NODE)
    write_identity(
        files, issue(authority, Role.NODE, ("127.0.1.1",), NOW), authority.certificate_pem
    )
    assert files.exists()
    assert stat.S_IMODE(files.directory.stat().st_mode) == 0o700
    for path in (files.key, files.keystore, tmp_path / "ca" / "ca.key"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in files.keystore.read_bytes()
    assert b"CERTIFICATE" in files.keystore.read_bytes()
    with pytest.raises(PkiError, match="no certificate authority"):
        load_authority(tmp_path / "nowhere")


def test_an_identity_with_an_owner_is_handed_to_that_user_after_each_write(
    tmp_path: Path, authority
) -> None:
    """A root agent writes the keys of JVMs that run as their own user (the image's units):
    the folder and files become that user's, still 0700 and 0600."""
    nobody = pwd.getpwnam("nobody")
    files = IdentityFiles(tmp_path / "tls", Role.NODE, owner="nobody")
    for _ in range(2):  # a renewal replaces each file: handed over again
        issued = issue(authority, Role.NODE, ("127.0.1.1",), NOW)
        write_identity(files, issued, authority.certificate_pem)
        for path in (files.directory, files.key, files.keystore, files.certificate):
            assert (path.stat().st_uid, path.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
        assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
        assert stat.S_IMODE(files.directory.stat().st_mode) == 0o700
    unknown = IdentityFiles(tmp_path / "other", Role.NODE, owner="no-such-user-here")
    with pytest.raises(PkiError, match="no user 'no-such-user-here'"):
        write_identity(unknown, issued, authority.certificate_pem)


def _handshake(tmp_path: Path, server_files: IdentityFiles, client_files: IdentityFiles) -> str:
    """A real mutual-TLS handshake on loopback; returns the TLS version or the error."""
    server_context = ssl.create_default_context(
        ssl.Purpose.CLIENT_AUTH, cafile=server_files.trust_bundle
    )
    server_context.load_cert_chain(server_files.certificate, server_files.key)
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context(cafile=client_files.trust_bundle)
    client_context.load_cert_chain(client_files.certificate, client_files.key)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    errors: list[str] = []

    def serve() -> None:
        connection, _ = listener.accept()
        try:
            with server_context.wrap_socket(connection, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            client_context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"x")
            version = tls.version() or ""
    except (ssl.SSLError, OSError) as exc:
        version = f"refused: {exc}"
    thread.join(timeout=10)
    listener.close()
    return version if not errors else f"refused: {errors[0]}"


def test_real_mutual_tls_accepts_own_ca_refuses_another(
    tmp_path: Path, authority, other_authority
) -> None:
    # Real handshakes check validity against the clock, so these certificates start now.
    now = dt.datetime.now(dt.UTC)
    authority = create_authority("c1", now)
    other_authority = create_authority("c2", now)
    node = IdentityFiles(tmp_path / "node", Role.NODE)
    write_identity(
        node, issue(authority, Role.NODE, ("127.0.0.1",), now), authority.certificate_pem
    )
    admin = IdentityFiles(tmp_path / "admin", Role.ADMIN)
    write_identity(admin, issue(authority, Role.ADMIN, (), now), authority.certificate_pem)
    intruder = IdentityFiles(tmp_path / "intruder", Role.ADMIN)
    write_identity(intruder, issue(other_authority, Role.ADMIN, (), now), authority.certificate_pem)
    assert _handshake(tmp_path, node, admin).startswith("TLSv1.")
    assert _handshake(tmp_path, node, intruder).startswith("refused")


def test_every_ca_of_a_cluster_has_a_subject_of_its_own() -> None:
    # Two CAs of one cluster are trusted side by side during a CA rotation, and ZooKeeper's
    # PEM trust store keeps one certificate per subject.
    now = dt.datetime.now(dt.UTC)
    first, second = create_authority("c1", now), create_authority("c1", now)
    assert first.certificate.subject != second.certificate.subject
    # A cluster name of the longest allowed length still makes a CA.
    longest = create_authority("x" * 64, now)
    names = longest.certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert len(str(names[0].value)) == 64


def test_a_client_context_is_kept_until_its_files_are_rewritten(
    tmp_path: Path, authority, other_authority
) -> None:
    files = IdentityFiles(tmp_path / "agent", Role.NODE)
    write_identity(
        files, issue(authority, Role.NODE, ("127.0.1.1",), NOW), authority.certificate_pem
    )
    first = client_context(files)
    assert client_context(files) is first
    # A rotation rewrites the files: the next context presents and trusts the new ones.
    rotated = issue(other_authority, Role.NODE, ("127.0.1.1",), NOW)
    write_identity(files, rotated, other_authority.certificate_pem)
    second = client_context(files)
    assert second is not first
    presented = second.get_ca_certs()
    # Compared as numbers: Python prints the serial with a leading zero when its hex
    # length is odd, which `format` does not.
    assert [int(str(c["serialNumber"]), 16) for c in presented] == [
        other_authority.certificate.serial_number
    ]
    files.key.unlink()
    with pytest.raises(OSError):
        client_context(files)
