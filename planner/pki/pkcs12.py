"""An identity as PKCS#12 stores, for the one reader that cannot take PEM: the Jetty server
behind Kafka Connect's REST API (MirrorMaker 2's internal REST), which loads its stores
through Java's KeyStore API, where "PEM" is no store type.

Both stores share one random password, kept in a 0600 file beside them; whoever may read
the password file may read the key file anyway. The trust store is written in the form Java
accepts for trusted certificates without a key (cryptography's Java trust store writer).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import pkcs12

from planner.pki.authority import PkiError
from planner.pki.files import IdentityFiles
from planner.private_files import private_dir, write_private

KEYSTORE = "keystore.p12"
TRUSTSTORE = "truststore.p12"
PASSWORD_FILE = "stores.password"


@dataclass(frozen=True)
class Pkcs12Stores:
    keystore: Path
    truststore: Path
    password: str = field(repr=False)  # never in a log line


def write_pkcs12_stores(identity: IdentityFiles, directory: Path) -> Pkcs12Stores:
    """PKCS#12 copies of `identity` in `directory` (created 0700), all files 0600. A password
    already kept there is reused, so rewriting the stores after a renewal changes no
    setting that names the password."""
    if not identity.exists():
        raise PkiError(f"no identity in {identity.directory} to convert to PKCS#12")
    private_dir(directory)
    password_path = directory / PASSWORD_FILE
    if password_path.exists():
        password = password_path.read_text().strip()
    else:
        password = secrets.token_urlsafe(24)
        write_private(password_path, password + "\n")
    key = serialization.load_pem_private_key(identity.key.read_bytes(), password=None)
    chain = x509.load_pem_x509_certificates(identity.certificate.read_bytes())
    cas = x509.load_pem_x509_certificates(identity.trust_bundle.read_bytes())
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise PkiError(f"{identity.key} holds a key type PKCS#12 cannot carry")
    encryption = serialization.BestAvailableEncryption(password.encode())
    keystore = pkcs12.serialize_key_and_certificates(
        b"identity", key, chain[0], chain[1:] or None, encryption
    )
    truststore = pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca, f"ca-{n}".encode()) for n, ca in enumerate(cas)], encryption
    )
    write_private(directory / KEYSTORE, keystore)
    write_private(directory / TRUSTSTORE, truststore)
    return Pkcs12Stores(directory / KEYSTORE, directory / TRUSTSTORE, password)
