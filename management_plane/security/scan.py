"""`kaas security check`: every TCP port a local cluster's processes listen on, found from
the processes' own sockets (psutil), probed without credentials and judged per port."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psutil

from management_plane.local.state import ClusterState
from management_plane.local.tls import admin_identity
from management_plane.security.probes import (
    probe_four_letter_words,
    probe_jolokia_anonymous,
    probe_kafka_anonymous,
    probe_tls,
    probe_zookeeper_session,
)
from management_plane.security.verdict import (
    AnonymousOutcome,
    PortKind,
    PortVerdict,
    TlsOutcome,
    judge,
)


@dataclass(frozen=True)
class ListeningPort:
    vm: str
    process: str  # zookeeper, kafka, agent
    address: str  # where the probe connects: the VM's address for a wildcard bind
    port: int
    kind: PortKind


@dataclass(frozen=True)
class PortReport:
    port: ListeningPort
    tls: TlsOutcome
    anonymous: AnonymousOutcome
    verdict: PortVerdict


def _listening(pid: int) -> set[tuple[str, int]]:
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return set()
    return {
        (c.laddr.ip, c.laddr.port)
        for c in connections
        if c.status == psutil.CONN_LISTEN and c.laddr
    }


def listening_ports(
    state: ClusterState, sockets_of: Callable[[int], set[tuple[str, int]]] = _listening
) -> list[ListeningPort]:
    """Every port every recorded process of every VM listens on, in VM and port order."""
    found = []
    for vm in state.layout.vms:
        kafka_ports = {vm.ports.kafka_internal, vm.ports.kafka_tenant}
        # Whatever else ZooKeeper listens on is a client port (a converted cluster's plaintext
        # one until its servers restart): probed as one.
        quorum_ports = {vm.ports.zookeeper_peer, vm.ports.zookeeper_election}
        for process in state.kinds:
            record = state.record(vm.name, process)
            if record is None:
                continue
            for bound, port in sorted(sockets_of(record.pid), key=lambda s: s[1]):
                # An IPv4 address on a dual-stack socket reads ::ffff:a.b.c.d.
                address = bound.removeprefix("::ffff:")
                wildcard = address in ("0.0.0.0", "::", "")
                kind = PortKind.OTHER
                if process == "kafka" and port in kafka_ports:
                    kind = PortKind.KAFKA
                elif process == "zookeeper" and port not in quorum_ports:
                    kind = PortKind.ZOOKEEPER
                elif port == vm.ports.jolokia:
                    kind = PortKind.JOLOKIA
                found.append(
                    ListeningPort(vm.name, process, vm.address if wildcard else address, port, kind)
                )
    return found


def check_port(port: ListeningPort, ca_file: str) -> PortReport:
    tls = probe_tls(port.address, port.port)
    anonymous = AnonymousOutcome.NOT_TESTED
    if port.kind is PortKind.KAFKA and tls in (
        TlsOutcome.NOT_TLS,
        TlsOutcome.TLS_WITHOUT_CLIENT_CERTIFICATE,
    ):
        anonymous = probe_kafka_anonymous(
            port.address, port.port, ca_file, tls=tls is TlsOutcome.TLS_WITHOUT_CLIENT_CERTIFICATE
        )
    if port.kind is PortKind.JOLOKIA and tls is TlsOutcome.TLS_WITHOUT_CLIENT_CERTIFICATE:
        anonymous = probe_jolokia_anonymous(port.address, port.port)
    words: tuple[str, ...] = ()
    if port.kind is PortKind.ZOOKEEPER and tls is TlsOutcome.NOT_TLS:
        anonymous = probe_zookeeper_session(port.address, port.port)
        words = probe_four_letter_words(port.address, port.port)
    return PortReport(port, tls, anonymous, judge(port.kind, tls, anonymous, words))


def scan(state: ClusterState) -> list[PortReport]:
    """Every port probed at once: a refusal can take the probe's whole timeout."""
    ca_file = str(admin_identity(state.layout).trust_bundle)
    ports = listening_ports(state)
    with ThreadPoolExecutor(max_workers=max(1, len(ports))) as pool:
        return list(pool.map(lambda port: check_port(port, ca_file), ports))


def report_lines(reports: Iterable[PortReport]) -> list[str]:
    def yes_no(value: bool | None) -> str:
        return "?" if value is None else "yes" if value else "NO"

    lines = [f"{'VM':<6}{'process':<11}{'address:port':<22}{'TLS':<5}{'auth':<6}result"]
    for report in reports:
        p, v = report.port, report.verdict
        lines.append(
            f"{p.vm:<6}{p.process:<11}{f'{p.address}:{p.port}':<22}{yes_no(v.tls):<5}"
            f"{yes_no(v.authentication):<6}{'ok' if v.ok else 'OPEN'}: {v.reason}"
        )
    return lines
