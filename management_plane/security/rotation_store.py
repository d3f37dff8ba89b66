"""The certificate znodes as the management plane reads and writes them (a thin adapter;
planner/contracts/certificates.py says what each holds), and the capability of a provider
that keeps a cluster's CA."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar, runtime_checkable

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from management_plane.service.cluster_io import (
    ClusterUnreachable,
    NoClientIdentity,
    zookeeper_hosts,
)
from planner.contracts.certificates import (
    CertificatePaths,
    CertRound,
    InstalledLeaf,
    LeafRequest,
    SignedLeaf,
    parse_cert_round,
    parse_installed_leaf,
    parse_leaf_request,
    parse_signed_leaf,
)
from planner.contracts.fields import ContractError
from planner.pki.authority import Authority, IssuedCertificate
from planner.pki.files import IdentityFiles
from planner.zookeeper_client import zookeeper_client

logging.getLogger("kazoo.client").setLevel(logging.ERROR)
log = structlog.get_logger("kaas.certificates")

T = TypeVar("T")


@runtime_checkable
class HoldsClusterAuthority(Protocol):
    """A provider that keeps each cluster's CA (and, during a CA rotation, the next one)
    and the management plane's own identity of the cluster."""

    def cluster_authority(self, cluster: str) -> Authority: ...

    def staged_authority(self, cluster: str) -> Authority | None:
        """The CA a CA rotation moves the cluster to, once staged."""
        ...

    def stage_authority(self, cluster: str, authority: Authority) -> None: ...

    def promote_authority(self, cluster: str) -> None:
        """The staged CA becomes the cluster's CA (the old one is forgotten)."""
        ...

    def install_admin_identity(
        self, cluster: str, issued: IssuedCertificate | None, trust_bundle_pem: bytes
    ) -> None:
        """Write the management plane's identity of the cluster: a new key and certificate
        when `issued` is given, and the trust bundle."""
        ...


class CertificateStore(Protocol):
    def read_round(self) -> CertRound | None: ...

    def write_round(self, value: CertRound) -> None: ...

    def requests(self) -> dict[int, LeafRequest]: ...

    def signed(self) -> dict[int, SignedLeaf]: ...

    def write_signed(self, broker_id: int, value: SignedLeaf) -> None: ...

    def installed(self) -> dict[int, InstalledLeaf]: ...


CertificateStoreFactory = Callable[[str, list[str], IdentityFiles | None], CertificateStore]


class ZooKeeperCertificates:
    """One ZooKeeper session per call, like the controller's ClusterIO."""

    def __init__(self, cluster: str, addresses: list[str], identity: IdentityFiles | None) -> None:
        if not addresses:
            raise ClusterUnreachable(f"cluster {cluster} has no running VM to reach")
        if identity is None:
            raise NoClientIdentity(
                f"cluster {cluster}: the provider holds no client certificate of its CA"
            )
        self.cluster = cluster
        self.identity = identity
        self.hosts = zookeeper_hosts(addresses)
        self.paths = CertificatePaths(cluster)

    @contextmanager
    def _zk(self) -> Iterator[KazooClient]:
        client = zookeeper_client(self.hosts, self.identity, timeout=10, connection_retry=None)
        try:
            client.start(timeout=15)
        except Exception as exc:
            client.close()
            raise ClusterUnreachable(f"ZooKeeper of {self.cluster} ({self.hosts}): {exc}") from None
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def _children(self, folder: str, parse: Callable[[bytes], T]) -> dict[int, T]:
        found: dict[int, T] = {}
        with self._zk() as zk:
            try:
                children = zk.get_children(folder)
            except NoNodeError:
                return found
            for child in children:
                if not child.isdigit():
                    continue
                try:
                    raw, _ = zk.get(f"{folder}/{child}")
                    found[int(child)] = parse(raw)
                except NoNodeError:
                    continue
                except ContractError as exc:
                    log.warning(
                        "certificate_value_unreadable", path=f"{folder}/{child}", error=str(exc)
                    )
        return found

    def _write(self, path: str, value: bytes) -> None:
        with self._zk() as zk:
            if zk.exists(path):
                zk.set(path, value)
            else:
                zk.create(path, value, makepath=True)

    def read_round(self) -> CertRound | None:
        with self._zk() as zk:
            try:
                raw, _ = zk.get(self.paths.round)
            except NoNodeError:
                return None
        return parse_cert_round(raw)

    def write_round(self, value: CertRound) -> None:
        self._write(self.paths.round, value.to_bytes())

    def requests(self) -> dict[int, LeafRequest]:
        return self._children(self.paths.requests, parse_leaf_request)

    def signed(self) -> dict[int, SignedLeaf]:
        return self._children(self.paths.signed, parse_signed_leaf)

    def write_signed(self, broker_id: int, value: SignedLeaf) -> None:
        self._write(self.paths.signed_leaf(broker_id), value.to_bytes())

    def installed(self) -> dict[int, InstalledLeaf]:
        return self._children(self.paths.installed, parse_installed_leaf)
