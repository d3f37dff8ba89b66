"""Where a cluster's keys and certificates live on disk, and writing them (keys 0600).

One folder per holder: the cluster's CA folder (the management plane's, never on a VM), a
VM's `tls/` folder, and the operator's client folder. Each identity is written three ways
because its readers differ: the key and the certificate apart (Python's ssl, librdkafka) and
both in one file (the PEM key stores of Kafka and ZooKeeper).
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from planner.pki.authority import Authority, IssuedCertificate, PkiError, Role
from planner.private_files import private_dir, write_private

CA_KEY = "ca.key"
CA_CERTIFICATE = "ca.crt"
TRUST_BUNDLE = "ca.pem"


@dataclass(frozen=True)
class IdentityFiles:
    """The files of one identity (`role`) in `directory`, beside the trust bundle."""

    directory: Path
    role: Role
    owner: str | None = None
    """The user the files are handed to after each write (a VM whose Kafka and ZooKeeper run
    as their own user under a root agent); None: the writer's."""

    @property
    def _stem(self) -> str:
        return "node" if self.role is Role.NODE else "admin"

    @property
    def trust_bundle(self) -> Path:
        """The CA certificates this holder trusts (the old and the new during a CA rotation)."""
        return self.directory / TRUST_BUNDLE

    @property
    def key(self) -> Path:
        return self.directory / f"{self._stem}.key"

    @property
    def certificate(self) -> Path:
        return self.directory / f"{self._stem}.crt"

    @property
    def keystore(self) -> Path:
        """Key and certificate in one PEM file, for the JVMs' PEM key stores."""
        return self.directory / f"{self._stem}.pem"

    def stamp(self) -> tuple[tuple[int, int] | None, ...]:
        """What changes when the identity is written again (modification time and size of the
        key, certificate and trust bundle; None for a missing file): a client made from the
        files before holds the old ones, since TLS libraries read them once."""
        stamps: list[tuple[int, int] | None] = []
        for path in (self.key, self.certificate, self.trust_bundle):
            try:
                info = path.stat()
            except FileNotFoundError:
                stamps.append(None)
            else:
                stamps.append((info.st_mtime_ns, info.st_size))
        return tuple(stamps)

    def exists(self) -> bool:
        return all(
            p.exists() for p in (self.trust_bundle, self.key, self.certificate, self.keystore)
        )


def write_identity(
    files: IdentityFiles, issued: IssuedCertificate, trust_bundle_pem: bytes
) -> None:
    """Write an identity: the key files 0600 first, then the public ones; each atomically."""
    private_dir(files.directory)
    key = issued.key_pem.decode()
    certificate = issued.certificate_pem.decode()
    write_private(files.key, key)
    write_private(files.keystore, key + certificate)
    write_private(files.certificate, certificate)
    write_private(files.trust_bundle, trust_bundle_pem.decode())
    if files.owner is not None:
        hand_over(files)


def hand_over(files: IdentityFiles) -> None:
    """Make the folder and its files the owner's (still 0700/0600: only they and root read
    them). A write replaces a file by a rename, so this follows every write."""
    assert files.owner is not None
    try:
        user = pwd.getpwnam(files.owner)
    except KeyError:
        raise PkiError(
            f"{files.directory}: no user {files.owner!r} to hand the identity to"
        ) from None
    for path in (files.directory, files.key, files.keystore, files.certificate, files.trust_bundle):
        os.chown(path, user.pw_uid, user.pw_gid)


def write_authority(directory: Path, authority: Authority) -> None:
    private_dir(directory)
    write_private(directory / CA_KEY, authority.key_pem.decode())
    write_private(directory / CA_CERTIFICATE, authority.certificate_pem.decode())


def load_authority(directory: Path) -> Authority:
    try:
        return Authority(
            (directory / CA_KEY).read_bytes(), (directory / CA_CERTIFICATE).read_bytes()
        )
    except FileNotFoundError as exc:
        raise PkiError(
            f"no certificate authority in {directory}: {exc.filename} is missing"
        ) from None


def has_authority(directory: Path) -> bool:
    return (directory / CA_KEY).exists() and (directory / CA_CERTIFICATE).exists()
