"""A cluster certificate authority and the certificates it issues (pure: bytes in, bytes out).

Every key is RSA 2048 in unencrypted PKCS#8 PEM, the one form that Kafka's and ZooKeeper's
PEM key stores, librdkafka and Python's ssl module all read. Identities are roles, not
machines: every VM of a cluster presents CN=kaas-node, so a replaced VM needs no ACL or
super-user change; what tells VMs apart is the certificate's addresses.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from enum import StrEnum

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from planner.errors import PlannerError

KEY_BITS = 2048
ORGANIZATION = "KaaS"
DEFAULT_CA_DAYS = 5 * 365
DEFAULT_LEAF_DAYS = 365
# Issued a little in the past so that a peer whose clock runs slightly behind accepts it.
CLOCK_SKEW = dt.timedelta(minutes=5)


class PkiError(PlannerError):
    """A key, certificate or request that cannot be used, named with the reason."""


class Role(StrEnum):
    """Whom a certificate identifies; the common name of its subject."""

    NODE = "kaas-node"  # a VM's brokers, controllers, ZooKeeper server and agent
    ADMIN = "kaas-admin"  # the management plane, the CLI and Kafka's tools run by an operator
    MIRROR = "kaas-mirror"  # MirrorMaker reading a source cluster: no super user, ACLs only


def role_distinguished_name(role: Role) -> str:
    """The subject as Java prints it (RFC 2253, most specific first): ZooKeeper's x509 ACL
    ids and Kafka's principal mapping rules match this string."""
    return f"CN={role.value},O={ORGANIZATION}"


@dataclass(frozen=True)
class Authority:
    """A CA's key and certificate, PEM."""

    key_pem: bytes
    certificate_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return load_certificate(self.certificate_pem)


@dataclass(frozen=True)
class IssuedCertificate:
    key_pem: bytes
    certificate_pem: bytes


def new_key_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=KEY_BITS)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_key(key_pem: bytes) -> rsa.RSAPrivateKey:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise PkiError(f"not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise PkiError(f"expected an RSA private key, got {type(key).__name__}")
    return key


def load_certificate(certificate_pem: bytes) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(certificate_pem)
    except ValueError as exc:
        raise PkiError(f"not a PEM certificate: {exc}") from None


def load_certificates(bundle_pem: bytes) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (a trust file may hold an old and a new CA)."""
    try:
        certificates = x509.load_pem_x509_certificates(bundle_pem)
    except ValueError as exc:
        raise PkiError(f"not a PEM certificate bundle: {exc}") from None
    return certificates


def create_authority(cluster: str, now: dt.datetime, days: int = DEFAULT_CA_DAYS) -> Authority:
    """A self-signed CA for one cluster, allowed to sign leaves only (path length 0)."""
    if days < 1:
        raise PkiError(f"a CA must be valid for at least one day, got {days}")
    key_pem = new_key_pem()
    key = _load_key(key_pem)
    # Each CA of a cluster gets a subject of its own: ZooKeeper's PEM trust store keys its
    # entries by subject, so during a CA rotation two CAs of one name would leave it trusting
    # only the last one read. The common name is at most 64 characters.
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(
                NameOID.ORGANIZATIONAL_UNIT_NAME,
                f"made {now:%Y-%m-%dT%H:%M:%SZ} {secrets.token_hex(4)}",
            ),
            x509.NameAttribute(NameOID.COMMON_NAME, f"KaaS cluster CA {cluster}"[:64]),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(key_pem, certificate.public_bytes(serialization.Encoding.PEM))


def _alternative_names(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not host or any(c.isspace() for c in host):
                raise PkiError(f"host name {host!r} cannot go into a certificate") from None
            names.append(x509.DNSName(host))
    return names


def sign(
    authority: Authority,
    public_key_pem: bytes,
    role: Role,
    hosts: tuple[str, ...],
    now: dt.datetime,
    days: int = DEFAULT_LEAF_DAYS,
) -> bytes:
    """A leaf certificate for `role` at `hosts` (IP addresses and DNS names), usable both as a
    TLS server and as a TLS client, signed by `authority`; PEM."""
    if days < 1:
        raise PkiError(f"a certificate must be valid for at least one day, got {days}")
    ca_key = _load_key(authority.key_pem)
    ca_certificate = authority.certificate
    try:
        public_key = serialization.load_pem_public_key(public_key_pem)
    except ValueError as exc:
        raise PkiError(f"not a PEM public key: {exc}") from None
    if not isinstance(public_key, rsa.RSAPublicKey):
        raise PkiError(f"expected an RSA public key, got {type(public_key).__name__}")
    not_after = min(now + dt.timedelta(days=days), ca_certificate.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                    x509.NameAttribute(NameOID.COMMON_NAME, role.value),
                ]
            )
        )
        .issuer_name(ca_certificate.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(_alternative_names(hosts)), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def public_key_pem(key_pem: bytes) -> bytes:
    return (
        _load_key(key_pem)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def issue(
    authority: Authority,
    role: Role,
    hosts: tuple[str, ...],
    now: dt.datetime,
    days: int = DEFAULT_LEAF_DAYS,
) -> IssuedCertificate:
    """A new key and its certificate, for the local provider and the operator's tools; a VM
    that renews its own certificate keeps its key and sends only the public half to `sign`."""
    key_pem = new_key_pem()
    return IssuedCertificate(
        key_pem, sign(authority, public_key_pem(key_pem), role, hosts, now, days)
    )


def expires_at(certificate_pem: bytes) -> dt.datetime:
    return load_certificate(certificate_pem).not_valid_after_utc


def needs_renewal(certificate_pem: bytes, now: dt.datetime, window: dt.timedelta) -> bool:
    """Whether a certificate expires within `window` of `now` (renewed before, never after)."""
    return expires_at(certificate_pem) - now <= window


def issued_by(certificate_pem: bytes, trust_bundle_pem: bytes) -> bool:
    """Whether one of the bundle's CAs signed the certificate (checks the signature)."""
    certificate = load_certificate(certificate_pem)
    for ca in load_certificates(trust_bundle_pem):
        if ca.subject != certificate.issuer:
            continue
        try:
            certificate.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False
