"""The certificate znodes as the management plane reads and writes them (a thin adapter;
planner/contracts/certificates.py says what each holds), and the capability of a provider
that keeps a cluster's CA."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

import structlog
from kazoo.exceptions import NoNodeError

from management_plane.service.cluster_io import ClusterIO
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


class ZooKeeperCertificates(ClusterIO):
    """One ZooKeeper session per call, as the controller's ClusterIO makes them."""

    def __init__(self, cluster: str, addresses: list[str], identity: IdentityFiles | None) -> None:
        super().__init__(cluster, addresses, identity)
        self.certificate_paths = CertificatePaths(cluster)

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
                raw, _ = zk.get(self.certificate_paths.round)
            except NoNodeError:
                return None
        return parse_cert_round(raw)

    def write_round(self, value: CertRound) -> None:
        self._write(self.certificate_paths.round, value.to_bytes())

    def requests(self) -> dict[int, LeafRequest]:
        return self._children(self.certificate_paths.requests, parse_leaf_request)

    def signed(self) -> dict[int, SignedLeaf]:
        return self._children(self.certificate_paths.signed, parse_signed_leaf)

    def write_signed(self, broker_id: int, value: SignedLeaf) -> None:
        self._write(self.certificate_paths.signed_leaf(broker_id), value.to_bytes())

    def installed(self) -> dict[int, InstalledLeaf]:
        return self._children(self.certificate_paths.installed, parse_installed_leaf)
