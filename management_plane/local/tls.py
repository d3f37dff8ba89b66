"""The local provider's certificates: one CA per cluster kept in the cluster's private
`secrets/ca` folder, a node identity issued into each VM's `tls/` folder when the VM is made
(its address and name as alternative names), and the operator's admin identity in `client/`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from management_plane.local.layout import ClusterLayout, VmLayout
from planner.pki.authority import Authority, IssuedCertificate, Role, create_authority, issue
from planner.pki.client_settings import InternalClient, write_client_properties
from planner.pki.files import (
    CA_CERTIFICATE,
    CA_KEY,
    IdentityFiles,
    has_authority,
    load_authority,
    write_authority,
    write_identity,
)
from planner.private_files import write_private


def authority_dir_in(cluster_home: Path) -> Path:
    return cluster_home / "secrets" / "ca"


def authority_dir(layout: ClusterLayout) -> Path:
    return authority_dir_in(layout.home)


def cluster_authority(layout: ClusterLayout) -> Authority:
    """The cluster's CA, made on first use and kept: it outlives every VM."""
    directory = authority_dir(layout)
    if not has_authority(directory):
        write_authority(directory, create_authority(layout.name, dt.datetime.now(dt.UTC)))
    return load_authority(directory)


def vm_identity(vm: VmLayout) -> IdentityFiles:
    return IdentityFiles(vm.directory / "tls", Role.NODE)


def admin_identity_in(cluster_home: Path) -> IdentityFiles:
    return IdentityFiles(cluster_home / "client", Role.ADMIN)


def admin_identity(layout: ClusterLayout) -> IdentityFiles:
    return admin_identity_in(layout.home)


def _ensure(files: IdentityFiles, layout: ClusterLayout, hosts: tuple[str, ...]) -> IdentityFiles:
    if not files.exists():  # a restarted VM keeps the certificate it has
        authority = cluster_authority(layout)
        issued = issue(authority, files.role, hosts, dt.datetime.now(dt.UTC))
        write_identity(files, issued, authority.certificate_pem)
    return files


# A local VM's outgoing connections leave from 127.0.0.1, not from its own address, and the
# ZooKeeper quorum checks a connecting server's source address against its certificate.
LOCAL_SOURCE_ADDRESS = "127.0.0.1"


def ensure_vm_identity(layout: ClusterLayout, vm: VmLayout) -> IdentityFiles:
    return _ensure(vm_identity(vm), layout, (vm.address, vm.name, LOCAL_SOURCE_ADDRESS))


def ensure_admin_identity(layout: ClusterLayout) -> IdentityFiles:
    return _ensure(admin_identity(layout), layout, ())


def admin_client(layout: ClusterLayout) -> InternalClient:
    """The operator's (and `kaas up`'s own) client of the cluster's internal listener."""
    return InternalClient(layout.bootstrap_servers, admin_identity(layout), layout.transport)


def write_admin_client_files(layout: ClusterLayout) -> None:
    """The admin identity, and its settings for Kafka's tools (--command-config FILE) and
    for librdkafka clients, with every VM of the cluster as bootstrap servers."""
    ensure_admin_identity(layout)
    write_client_properties(admin_client(layout))


# -- rotation: the CA a CA rotation moves the cluster to, kept beside the current one -------


def staged_authority_dir(cluster_home: Path) -> Path:
    return cluster_home / "secrets" / "ca-next"


def staged_authority(cluster_home: Path) -> Authority | None:
    directory = staged_authority_dir(cluster_home)
    return load_authority(directory) if has_authority(directory) else None


def stage_authority(cluster_home: Path, authority: Authority) -> None:
    write_authority(staged_authority_dir(cluster_home), authority)


def promote_authority(cluster_home: Path) -> None:
    """The staged CA replaces the cluster's (its files renamed over the old ones)."""
    staged = staged_authority_dir(cluster_home)
    current = authority_dir_in(cluster_home)
    for name in (CA_CERTIFICATE, CA_KEY):
        (staged / name).replace(current / name)
    staged.rmdir()


def install_admin_identity(
    cluster_home: Path, issued: IssuedCertificate | None, trust_bundle_pem: bytes
) -> None:
    files = admin_identity_in(cluster_home)
    if issued is not None:
        write_identity(files, issued, trust_bundle_pem)
    else:
        write_private(files.trust_bundle, trust_bundle_pem.decode())
