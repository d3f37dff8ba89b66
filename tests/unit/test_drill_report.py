"""The drill report and the network rules' text: pure functions, table-tested."""

from __future__ import annotations

import json

import pytest

from management_plane.drills.checker import check
from management_plane.drills.errors import DrillError
from management_plane.drills.health import JournalLine
from management_plane.drills.history import FaultWindow, History, ProducerInfo, SendRecord
from management_plane.drills.network import (
    drill_tables,
    isolation_script,
    loss_script,
    stale_tables,
    table_name,
)
from management_plane.drills.recorder import AckLatency
from management_plane.drills.report import build_report, p99, render_html, timeline

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("values", "expected"),
    [([5.0], 5.0), ([float(i) for i in range(1, 101)], 99.0), ([1.0, 2.0, 3.0], 3.0)],
)
def test_p99_is_the_nearest_rank(values: list[float], expected: float) -> None:
    assert p99(values) == expected


def test_timeline_buckets_acks_errors_and_p99_per_second() -> None:
    latencies = [
        AckLatency(10.2, 0.010, True),
        AckLatency(10.9, 0.030, True),
        AckLatency(11.5, 0.5, False),
        AckLatency(12.1, 2.0, True),
    ]
    assert timeline(latencies, started_s=10.0, ended_s=12.5) == [
        {"second": 0, "acks": 2, "errors": 0, "p99_ms": 30.0},
        {"second": 1, "acks": 0, "errors": 1, "p99_ms": None},
        {"second": 2, "acks": 1, "errors": 0, "p99_ms": 2000.0},
    ]


def _verdict_and_history() -> tuple[History, list[AckLatency]]:
    records: list[object] = [ProducerInfo("p1", True)]
    latencies = []
    for i, t in enumerate((1.0, 2.0, 9.0)):
        records.append(SendRecord("p1", "t", "k", i, f"k:{i}", 0, i, 100 + t, None))
        latencies.append(AckLatency(100 + t, 0.01, True))
    records.append(FaultWindow("f1", "broker-sigkill", "vm2's kafka", 103.0, 105.0))
    return History.of(records), latencies  # type: ignore[arg-type]


def test_report_has_the_figures_the_drill_promises() -> None:
    history, latencies = _verdict_and_history()
    verdict = check(history, isr_complete_s={"f1": 108.0})
    report = build_report(
        drill="broker-sigkill",
        cluster="c",
        topic="t",
        duration_s=2.0,
        rate_per_s=10.0,
        started_s=100.0,
        ended_s=110.0,
        verdict=verdict,
        latencies=latencies,
        journal=[JournalLine(104.0, "broker 1: start (gone): started")],
        recovered=True,
    )
    # Nothing was read, so the three acknowledged values are lost: invalid, and it says so.
    assert report["valid"] is False and report["passed"] is False
    assert report["summary"]["anomalies"]["lost"] == 3
    assert report["summary"]["longest_stall_s"] == 7.0
    assert report["summary"]["faults"] == [
        {
            "fault_id": "f1",
            "fault": "broker-sigkill",
            "target": "vm2's kafka",
            "started_at_s": 3.0,
            "healed_at_s": 5.0,
            "first_ack_after_fault_s": 6.0,
            "recovery_s": 3.0,
            "figures": {},
        }
    ]
    assert report["journal"] == [{"at_s": 4.0, "text": "broker 1: start (gone): started"}]
    assert len(report["timeline"]) == 10
    json.dumps(report)  # plain JSON all the way down

    page = render_html(report)
    assert "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )  # offline: no script, no outside resource
    assert "FAILED" in page and "broker 1: start (gone): started" in page
    assert page.count("<svg") == 3
    assert "vm2&#x27;s kafka" in page  # escaped


def test_isolation_rules_drop_both_directions_but_the_vms_own_traffic() -> None:
    script = isolation_script(
        "kaas_drill_7_1", "127.0.5.2", "unified/kaas_drill_7_1", client_ports=[40001, 40000]
    )
    lines = [line.strip() for line in script.splitlines()]
    assert lines[0] == "table inet kaas_drill_7_1 {"
    assert "elements = { 40000, 40001 }" in lines
    mark = "0x6b616173"
    # What the VM's processes send leaves from 127.0.0.1: their connections are marked, by
    # cgroup for sockets made during the fault, by local port for those made before.
    vm_socket = 'socket cgroupv2 level 1 "unified/kaas_drill_7_1"'
    assert f"{vm_socket} ip saddr != 127.0.5.2 ct mark set {mark}" in lines
    assert f"ip saddr != 127.0.5.2 tcp sport @vm_client_ports ct mark set {mark}" in lines
    # ... and cut off from every other address, both ways.
    assert f"ct mark {mark} ip saddr != 127.0.5.2 ip daddr != 127.0.5.2 drop" in lines
    assert "ip saddr != 127.0.5.2 ip daddr != 127.0.5.2 tcp dport @vm_client_ports drop" in lines
    # The VM's old client connections to its own servers stay.
    assert "ip saddr 127.0.5.2 tcp dport @vm_client_ports accept" in lines
    assert "ip daddr 127.0.5.2 tcp sport @vm_client_ports accept" in lines
    # Everyone else's connections to or from the VM's address: dropped both ways.
    assert f"ct mark != {mark} ip daddr 127.0.5.2 ip saddr != 127.0.5.2 drop" in lines
    assert f"ct mark != {mark} ip saddr 127.0.5.2 ip daddr != 127.0.5.2 drop" in lines
    assert script.count(" drop") == 5


def test_isolation_rules_without_old_connections_have_an_empty_port_set() -> None:
    script = isolation_script("kaas_drill_7_1", "127.0.5.2", "kaas_drill_7_1")
    assert "elements" not in script and "set vm_client_ports {" in script


def test_loss_rules_drop_a_share_of_both_directions() -> None:
    script = loss_script("kaas_drill_7_2", "127.0.5.2", "kaas_drill_7_2", 20)
    assert "ip daddr 127.0.5.2 ip saddr != 127.0.5.2 numgen random mod 100 < 20 drop" in script
    assert "ip daddr != 127.0.5.2 numgen random mod 100 < 20 drop" in script
    assert script.count("numgen random mod 100 < 20 drop") == 5
    with pytest.raises(DrillError, match="loss must be 1 to 99 percent; got 100"):
        loss_script("kaas_drill_7_2", "127.0.5.2", "kaas_drill_7_2", 100)


@pytest.mark.parametrize(
    ("address", "table", "message"),
    [
        ("10.0.0.1", "kaas_drill_1_1", "only loopback addresses"),
        ("::1", "kaas_drill_1_1", "only loopback addresses"),
        ("127.0.0.2", "kaas drill; flush ruleset", "lowercase letters"),
    ],
)
def test_isolation_rules_refuse_other_addresses_and_odd_names(
    address: str, table: str, message: str
) -> None:
    with pytest.raises(DrillError, match=message):
        isolation_script(table, address, "kaas_drill_1_1")


def test_drill_tables_are_found_by_name_and_stale_ones_by_pid() -> None:
    listing = "\n".join(
        [
            "table inet filter",
            f"table inet {table_name(100, 1)}",
            f"table inet {table_name(200, 3)}",
            "table ip kaas_drill_300_1",  # not our family: not ours
        ]
    )
    assert drill_tables(listing) == [("kaas_drill_100_1", 100), ("kaas_drill_200_3", 200)]
    assert stale_tables(listing, alive={100}) == ["kaas_drill_200_3"]
