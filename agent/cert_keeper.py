"""The shell of certificate renewal: reads what agent/cert_renewal.py decides from, runs the
step it returns. The staged key is written 0600 on the VM and only its public half leaves.

`tend` runs once per agent cycle before the snapshot; it never stops the broker itself: a
restart it needs is returned as a reason, and the agent's own decision runs it as a
controlled restart under the cluster's restart lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from agent.cert_renewal import (
    CertStep,
    CertStepKind,
    CertView,
    LocalLeaf,
    decide_certificate,
)
from agent.ports import StoreUnavailable
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
from planner.pki.authority import (
    IssuedCertificate,
    PkiError,
    expires_at,
    new_key_pem,
    public_key_pem,
)
from planner.pki.files import IdentityFiles, write_identity
from planner.pki.rotation import (
    certificate_hosts,
    certificate_public_key_pem,
    serial_hex,
    serial_of_der,
)
from planner.pki.tls import client_context
from planner.private_files import write_private

log = structlog.get_logger("kaas.agent.certificates")

T = TypeVar("T")

Journal = Callable[[str, str, str], None]


class CertificateExchange(Protocol):
    """This VM's certificate znodes (kazoo in production, a dict in unit tests); every read
    returns the raw value or None."""

    def read_round(self) -> bytes | None: ...

    def read_request(self, broker_id: int) -> bytes | None: ...

    def read_signed(self, broker_id: int) -> bytes | None: ...

    def read_installed(self, broker_id: int) -> bytes | None: ...

    def write_request(self, broker_id: int, value: bytes) -> None: ...

    def write_installed(self, broker_id: int, value: bytes) -> None: ...


class KazooCertificateExchange:
    def __init__(self, client: KazooClient, cluster: str) -> None:
        self.client = client
        self.paths = CertificatePaths(cluster)

    def _read(self, path: str) -> bytes | None:
        try:
            raw, _ = self.client.get(path)
        except NoNodeError:
            return None
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return bytes(raw)

    def _write(self, path: str, value: bytes) -> None:
        try:
            if self.client.exists(path):
                self.client.set(path, value)
            else:
                self.client.create(path, value, makepath=True)
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc

    def read_round(self) -> bytes | None:
        return self._read(self.paths.round)

    def read_request(self, broker_id: int) -> bytes | None:
        return self._read(self.paths.request(broker_id))

    def read_signed(self, broker_id: int) -> bytes | None:
        return self._read(self.paths.signed_leaf(broker_id))

    def read_installed(self, broker_id: int) -> bytes | None:
        return self._read(self.paths.installed_leaf(broker_id))

    def write_request(self, broker_id: int, value: bytes) -> None:
        self._write(self.paths.request(broker_id), value)

    def write_installed(self, broker_id: int, value: bytes) -> None:
        self._write(self.paths.installed_leaf(broker_id), value)


def presented_serial(address: str, port: int, identity: IdentityFiles) -> str | None:
    """The serial of the certificate a TLS listener presents (None: it does not answer)."""
    try:
        context = client_context(identity)
        with (
            socket.create_connection((address, port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=address) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    return serial_of_der(der) if der else None


def _parsed(raw: bytes | None, parse: Callable[[bytes], T], what: str) -> T | None:
    if raw is None:
        return None
    try:
        return parse(raw)
    except ContractError as exc:
        log.warning("certificate_value_unreadable", what=what, error=str(exc))
        return None


class PresentedLooks:
    """The serial each listener presents, looked at again only when the last look did not find
    the certificate on disk, or after `recheck_s`."""

    def __init__(self, recheck_s: float, monotonic: Callable[[], float]) -> None:
        self.recheck_s = recheck_s
        self.monotonic = monotonic
        self.matched_at: dict[str, tuple[str, float]] = {}  # listener -> (serial, when)

    def look(self, listener: str, probe: Callable[[], str | None], on_disk: str) -> str | None:
        now = self.monotonic()
        matched = self.matched_at.get(listener)
        if matched is not None and matched[0] == on_disk and 0 <= now - matched[1] < self.recheck_s:
            return on_disk
        presented = probe()
        if presented == on_disk:
            self.matched_at[listener] = (on_disk, now)
        else:
            self.matched_at.pop(listener, None)
        return presented


class CertificateKeeper:
    def __init__(
        self,
        identity: IdentityFiles,
        exchange: CertificateExchange,
        presented: Callable[[], str | None],
        window: dt.timedelta,
        now: Callable[[], dt.datetime],
        journal: Journal,
        zookeeper_presented: Callable[[], str | None] = lambda: None,
        presented_recheck_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`presented`: what the broker's internal listener presents; `zookeeper_presented`:
        what the VM's ZooKeeper server presents (None: it runs none, or it does not answer).
        Each look is a TLS handshake; one that found the certificate on disk is not repeated
        for `presented_recheck_s` while that certificate stays (a process presents what it
        read from the file, so only a new file can make it present another)."""
        self.identity = identity
        self.exchange = exchange
        self.presented_looks = PresentedLooks(presented_recheck_s, monotonic)
        self.presented = lambda serial: self.presented_looks.look("broker", presented, serial)
        self.zookeeper_presented = lambda serial: self.presented_looks.look(
            "zookeeper", zookeeper_presented, serial
        )
        self.window = window
        self.now = now
        self.journal = journal
        self.last_reason = ""

    @property
    def staged_key(self) -> Path:
        return self.identity.directory / f"{self.identity.key.name}.next"

    def _staged_public(self) -> str | None:
        try:
            return public_key_pem(self.staged_key.read_bytes()).decode()
        except (OSError, PkiError):
            return None

    def view(self, broker_id: int) -> CertView:
        certificate = self.identity.certificate.read_bytes()
        serial = serial_hex(certificate)
        request = _parsed(self.exchange.read_request(broker_id), parse_leaf_request, "request")
        signed = _parsed(self.exchange.read_signed(broker_id), parse_signed_leaf, "signed")
        staged = self._staged_public()
        signed_serial = None
        signed_key = None
        if signed is not None:
            try:
                signed_serial = serial_hex(signed.certificate_pem)
                signed_key = certificate_public_key_pem(signed.certificate_pem.encode()).decode()
            except PkiError as exc:
                log.warning("signed_certificate_unreadable", error=str(exc))
                signed = None
        return CertView(
            broker_id=broker_id,
            now=self.now(),
            window=self.window,
            leaf=LocalLeaf(
                serial,
                expires_at(certificate),
                self.presented(serial),
                self.zookeeper_presented(serial),
            ),
            round=_parsed(self.exchange.read_round(), parse_cert_round, "round"),
            request=request,
            signed=signed,
            signed_serial=signed_serial,
            signed_matches_staged=staged is not None and staged == signed_key,
            staged_matches_request=(
                staged is not None and request is not None and staged == request.public_key_pem
            ),
            installed=_parsed(
                self.exchange.read_installed(broker_id), parse_installed_leaf, "installed"
            ),
        )

    def tend(self, broker_id: int) -> CertStep | None:
        """One look and at most one step; returns the restart it needs (the broker's or the
        ZooKeeper server's), if it does."""
        view = self.view(broker_id)
        step = decide_certificate(view)
        if step.reason != self.last_reason:
            log.info(step.reason, step=str(step.kind))
            self.last_reason = step.reason
        if step.kind in (CertStepKind.RESTART, CertStepKind.RESTART_ZOOKEEPER):
            return step
        self._run(step, view)
        return None

    def _run(self, step: CertStep, view: CertView) -> None:
        match step.kind:
            case CertStepKind.REQUEST:
                key = new_key_pem()
                write_private(self.staged_key, key.decode())
                hosts = certificate_hosts(self.identity.certificate.read_bytes())
                request = LeafRequest(
                    step.round_id,
                    view.broker_id,
                    public_key_pem(key).decode(),
                    hosts,
                    step.request_reason,
                )
                self.exchange.write_request(view.broker_id, request.to_bytes())
                self.journal("certificate", step.reason, "requested")
            case CertStepKind.INSTALL:
                signed = view.signed
                assert signed is not None
                key = self.staged_key.read_bytes()
                write_identity(
                    self.identity,
                    IssuedCertificate(key, signed.certificate_pem.encode()),
                    signed.trust_bundle_pem.encode(),
                )
                with contextlib.suppress(FileNotFoundError):
                    self.staged_key.unlink()
                self.journal("certificate", step.reason, "installed")
            case CertStepKind.REPORT:
                installed = InstalledLeaf(
                    step.round_id,
                    view.leaf.serial,
                    int(view.leaf.expires_at.timestamp() * 1000),
                )
                self.exchange.write_installed(view.broker_id, installed.to_bytes())
                self.journal("certificate", step.reason, "presented")
            case CertStepKind.NOTHING | CertStepKind.RESTART | CertStepKind.RESTART_ZOOKEEPER:
                pass


__all__ = [
    "CertRound",
    "CertificateExchange",
    "CertificateKeeper",
    "InstalledLeaf",
    "KazooCertificateExchange",
    "SignedLeaf",
    "presented_serial",
]
