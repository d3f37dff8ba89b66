"""kaas security check: the verdict per port (pure, as a table) and the ports found from
the processes' sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from management_plane.local.layout import plan_layout
from management_plane.local.processes import ProcessRecord
from management_plane.local.state import ClusterState
from management_plane.security.probes import four_letter_word_answered
from management_plane.security.scan import listening_ports
from management_plane.security.verdict import AnonymousOutcome, PortKind, TlsOutcome, judge

pytestmark = pytest.mark.unit

KAFKA, ZOOKEEPER, OTHER = PortKind.KAFKA, PortKind.ZOOKEEPER, PortKind.OTHER
T, A = TlsOutcome, AnonymousOutcome


@pytest.mark.parametrize(
    ("kind", "tls", "anonymous", "verdict"),
    [
        (KAFKA, T.CLIENT_CERTIFICATE_REQUIRED, A.NOT_TESTED, (True, True, True)),
        (OTHER, T.CLIENT_CERTIFICATE_REQUIRED, A.NOT_TESTED, (True, True, True)),
        (KAFKA, T.TLS_WITHOUT_CLIENT_CERTIFICATE, A.REFUSED, (True, True, True)),
        (KAFKA, T.TLS_WITHOUT_CLIENT_CERTIFICATE, A.ANSWERED, (True, False, False)),
        (OTHER, T.TLS_WITHOUT_CLIENT_CERTIFICATE, A.NOT_TESTED, (True, None, False)),
        (KAFKA, T.NOT_TLS, A.ANSWERED, (False, False, False)),
        (KAFKA, T.NOT_TLS, A.REFUSED, (False, None, False)),
        (OTHER, T.NOT_TLS, A.NOT_TESTED, (False, None, False)),
        (KAFKA, T.UNREACHABLE, A.NOT_TESTED, (None, None, False)),
        (ZOOKEEPER, T.CLIENT_CERTIFICATE_REQUIRED, A.NOT_TESTED, (True, True, True)),
        (ZOOKEEPER, T.NOT_TLS, A.ANSWERED, (False, False, False)),
        (ZOOKEEPER, T.NOT_TLS, A.NOT_TESTED, (False, None, False)),
        (ZOOKEEPER, T.UNREACHABLE, A.NOT_TESTED, (None, None, False)),
        (PortKind.JOLOKIA, T.TLS_WITHOUT_CLIENT_CERTIFICATE, A.REFUSED, (True, True, True)),
        (PortKind.JOLOKIA, T.TLS_WITHOUT_CLIENT_CERTIFICATE, A.ANSWERED, (True, False, False)),
        (PortKind.JOLOKIA, T.NOT_TLS, A.NOT_TESTED, (False, None, False)),
    ],
)
def test_a_port_passes_only_with_tls_and_authentication(
    kind: PortKind,
    tls: TlsOutcome,
    anonymous: AnonymousOutcome,
    verdict: tuple[bool | None, bool | None, bool],
) -> None:
    judged = judge(kind, tls, anonymous)
    assert (judged.tls, judged.authentication, judged.ok) == verdict
    assert judged.reason


@pytest.mark.parametrize(
    ("anonymous", "words", "verdict", "reason"),
    [
        (A.REFUSED, (), (False, True, True), "serving nothing without a certificate"),
        (A.REFUSED, ("srvr", "conf"), (False, False, False), "srvr, conf are answered in clear"),
        (A.ANSWERED, (), (False, False, False), "a session without credentials reads"),
    ],
)
def test_a_plaintext_zookeeper_port_passes_only_serving_nothing(
    anonymous: AnonymousOutcome,
    words: tuple[str, ...],
    verdict: tuple[bool | None, bool | None, bool],
    reason: str,
) -> None:
    judged = judge(ZOOKEEPER, T.NOT_TLS, anonymous, words)
    assert (judged.tls, judged.authentication, judged.ok) == verdict
    assert reason in judged.reason


def test_ports_come_from_each_recorded_process_and_name_their_kind(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 2, "127.0.9")
    state = ClusterState(layout=layout, kafka_version="3.9.2")
    for index, vm in enumerate(layout.vms):
        state.set_record(vm.name, "zookeeper", ProcessRecord(100 + index, 1.0))
        state.set_record(vm.name, "kafka", ProcessRecord(200 + index, 1.0))
    sockets = {
        100: {("127.0.9.1", 2181), ("127.0.9.1", 2182), ("0.0.0.0", 3888)},
        200: {("::ffff:127.0.9.1", 9094), ("127.0.9.1", 9092), ("127.0.9.1", 8778)},
        101: set(),
        201: {("::", 9092)},
    }
    found = listening_ports(state, lambda pid: sockets[pid])
    assert [(p.vm, p.process, p.address, p.port, p.kind) for p in found] == [
        ("vm1", "zookeeper", "127.0.9.1", 2181, ZOOKEEPER),
        ("vm1", "zookeeper", "127.0.9.1", 2182, ZOOKEEPER),
        ("vm1", "zookeeper", "127.0.9.1", 3888, OTHER),
        ("vm1", "kafka", "127.0.9.1", 8778, PortKind.JOLOKIA),
        ("vm1", "kafka", "127.0.9.1", 9092, KAFKA),
        ("vm1", "kafka", "127.0.9.1", 9094, KAFKA),
        ("vm2", "kafka", "127.0.9.2", 9092, KAFKA),
    ]


@pytest.mark.parametrize(
    ("reply", "answered"),
    [
        (b"Zookeeper version: 3.8.4\nMode: follower\n", True),
        (b"mntr is not executed because it is not in the whitelist.", False),
        (b"", False),
    ],
)
def test_a_four_letter_word_off_the_whitelist_is_not_an_answer(
    reply: bytes, answered: bool
) -> None:
    assert four_letter_word_answered(reply) is answered
