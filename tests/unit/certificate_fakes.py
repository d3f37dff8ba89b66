"""Fakes for certificate rotation: the certificate znodes in one dict that both the
management plane's store and the agents' exchange read, a provider keeping a CA in memory,
and VMs whose agents run the real CertificateKeeper over real identity files."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from agent.cert_keeper import CertificateKeeper
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
from planner.pki.authority import (
    Authority,
    IssuedCertificate,
    Role,
    create_authority,
    issue,
)
from planner.pki.files import IdentityFiles, write_identity
from planner.pki.rotation import serial_hex
from tests.unit.fake_cluster import FakeProvider

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


class CertificateZnodes:
    """/kaas/<cluster>/certs as a dict of path -> bytes."""

    def __init__(self, cluster: str = "orders") -> None:
        self.paths = CertificatePaths(cluster)
        self.nodes: dict[str, bytes] = {}

    def _children(self, folder: str) -> dict[int, bytes]:
        prefix = folder + "/"
        return {
            int(path[len(prefix) :]): value
            for path, value in self.nodes.items()
            if path.startswith(prefix)
        }

    # -- the management plane's CertificateStore ---------------------------------------

    def read_round(self) -> CertRound | None:
        raw = self.nodes.get(self.paths.round)
        return None if raw is None else parse_cert_round(raw)

    def write_round(self, value: CertRound) -> None:
        self.nodes[self.paths.round] = value.to_bytes()

    def requests(self) -> dict[int, LeafRequest]:
        return {b: parse_leaf_request(v) for b, v in self._children(self.paths.requests).items()}

    def signed(self) -> dict[int, SignedLeaf]:
        return {b: parse_signed_leaf(v) for b, v in self._children(self.paths.signed).items()}

    def write_signed(self, broker_id: int, value: SignedLeaf) -> None:
        self.nodes[self.paths.signed_leaf(broker_id)] = value.to_bytes()

    def installed(self) -> dict[int, InstalledLeaf]:
        return {b: parse_installed_leaf(v) for b, v in self._children(self.paths.installed).items()}

    # -- the agents' CertificateExchange -----------------------------------------------

    def read_request(self, broker_id: int) -> bytes | None:
        return self.nodes.get(self.paths.request(broker_id))

    def read_signed(self, broker_id: int) -> bytes | None:
        return self.nodes.get(self.paths.signed_leaf(broker_id))

    def read_installed(self, broker_id: int) -> bytes | None:
        return self.nodes.get(self.paths.installed_leaf(broker_id))

    def write_request(self, broker_id: int, value: bytes) -> None:
        self.nodes[self.paths.request(broker_id)] = value

    def write_installed(self, broker_id: int, value: bytes) -> None:
        self.nodes[self.paths.installed_leaf(broker_id)] = value

    def raw_round(self) -> bytes | None:
        return self.nodes.get(self.paths.round)


class ExchangeView:
    """The agents' side of CertificateZnodes (its read_round returns raw bytes)."""

    def __init__(self, znodes: CertificateZnodes) -> None:
        self.z = znodes

    def read_round(self) -> bytes | None:
        return self.z.raw_round()

    def read_request(self, broker_id: int) -> bytes | None:
        return self.z.read_request(broker_id)

    def read_signed(self, broker_id: int) -> bytes | None:
        return self.z.read_signed(broker_id)

    def read_installed(self, broker_id: int) -> bytes | None:
        return self.z.read_installed(broker_id)

    def write_request(self, broker_id: int, value: bytes) -> None:
        self.z.write_request(broker_id, value)

    def write_installed(self, broker_id: int, value: bytes) -> None:
        self.z.write_installed(broker_id, value)


class AuthorityProvider(FakeProvider):
    """A provider keeping the cluster's CA (and a staged one) and its admin identity."""

    def __init__(self, home: Path) -> None:
        super().__init__()
        self.home = home
        self.authority = create_authority("orders", NOW)
        self.staged: Authority | None = None
        self.admin = IdentityFiles(home / "client", Role.ADMIN)
        write_identity(
            self.admin, issue(self.authority, Role.ADMIN, (), NOW), self.authority.certificate_pem
        )

    def client_identity(self, cluster: str) -> IdentityFiles | None:
        return self.admin

    def cluster_authority(self, cluster: str) -> Authority:
        return self.authority

    def staged_authority(self, cluster: str) -> Authority | None:
        return self.staged

    def stage_authority(self, cluster: str, authority: Authority) -> None:
        self.staged = authority

    def promote_authority(self, cluster: str) -> None:
        assert self.staged is not None
        self.authority, self.staged = self.staged, None

    def install_admin_identity(
        self, cluster: str, issued: IssuedCertificate | None, trust_bundle_pem: bytes
    ) -> None:
        if issued is not None:
            write_identity(self.admin, issued, trust_bundle_pem)
        else:
            self.admin.trust_bundle.write_bytes(trust_bundle_pem)


@dataclass
class FakeVm:
    """One VM's identity files, its agent's keeper and what its broker presents."""

    broker_id: int
    identity: IdentityFiles
    keeper: CertificateKeeper
    presenting: str
    restarts: int = 0
    journal: list[tuple[str, str, str]] = field(default_factory=list)

    def cycle(self) -> None:
        """One agent cycle; a restart it asks for happens at once (the broker then presents
        its installed certificate)."""
        if self.keeper.tend(self.broker_id) is not None:
            self.restarts += 1
            self.presenting = serial_hex(self.identity.certificate.read_bytes())


def fake_vm(
    directory: Path,
    broker_id: int,
    address: str,
    authority: Authority,
    exchange: ExchangeView,
    now: dt.datetime = NOW,
    days: int = 365,
    window: dt.timedelta = dt.timedelta(days=30),
) -> FakeVm:
    identity = IdentityFiles(directory, Role.NODE)
    issued = issue(authority, Role.NODE, (address, "127.0.0.1"), now - dt.timedelta(days=1), days)
    write_identity(identity, issued, authority.certificate_pem)
    vm = FakeVm(broker_id, identity, None, serial_hex(issued.certificate_pem))  # type: ignore[arg-type]
    vm.keeper = CertificateKeeper(
        identity,
        exchange,
        lambda: vm.presenting,
        window,
        lambda: now,
        lambda action, reason, result: vm.journal.append((action, reason, result)),
    )
    return vm
