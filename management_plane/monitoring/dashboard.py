"""The dashboard's content (pure): what the page shows of one cluster, built from what the
service already knows (its VMs, the agents' member records, the plan's status, running
operations, alerts) and the latest value of each broker gauge in Graphite; and the charts,
the same panels as the Grafana export, over a time range chosen from a fixed list."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from management_plane.errors import ApiError
from management_plane.monitoring.alert_loop import graphite_segment
from management_plane.monitoring.grafana import PANELS, Panel
from planner.contracts.member import MemberRecord


class TimeRange(StrEnum):
    """The ranges a chart may cover (Graphite `from` values)."""

    MIN_15 = "-15min"
    HOUR_1 = "-1h"
    HOUR_6 = "-6h"
    DAY_1 = "-24h"
    DAY_7 = "-7d"


def parse_time_range(value: str) -> TimeRange:
    try:
        return TimeRange(value)
    except ValueError:
        choices = ", ".join(r.value for r in TimeRange)
        raise ApiError(
            400, "invalid_request", f"range must be one of {choices}, got {value!r}"
        ) from None


@dataclass(frozen=True)
class BrokerGauge:
    key: str  # the field in a broker's row
    metric: str  # the gauge under kaas.<c>.brokers.<id>.
    label: str


# The per-broker figures the table shows: the latest point of each gauge.
BROKER_GAUGES: tuple[BrokerGauge, ...] = (
    BrokerGauge("under_replicated", "under_replicated_partitions", "URP"),
    BrokerGauge("offline", "offline_partitions_count", "offline"),
    BrokerGauge("partitions", "partition_count", "partitions"),
    BrokerGauge("leaders", "leader_count", "leaders"),
    BrokerGauge("disk_free_percent", "host.log_dir_free_percent", "disk free %"),
    BrokerGauge("bytes_in_per_s", "bytes_in_per_s", "bytes in/s"),
    BrokerGauge("bytes_out_per_s", "bytes_out_per_s", "bytes out/s"),
    BrokerGauge("zk_avg_latency_ms", "zookeeper.avg_latency_ms", "ZK latency ms"),
    BrokerGauge("zk_outstanding", "zookeeper.outstanding_requests", "ZK outstanding"),
    BrokerGauge("heartbeat_latency_ms", "heartbeat.latency_ms", "heartbeat ms"),
    BrokerGauge("heartbeat_success", "heartbeat.success", "heartbeat ok"),
    BrokerGauge("heartbeat_availability", "heartbeat.availability", "heartbeat availability"),
)


def gauge_target(cluster: str, gauge: BrokerGauge) -> str:
    """One Graphite target for a gauge of every broker, each series named by its broker id."""
    return f"aliasByNode(kaas.{graphite_segment(cluster)}.brokers.*.{gauge.metric}, 3)"


@dataclass(frozen=True)
class BrokerVm:
    vm_id: str
    address: str
    broker_id: int | None
    vm_state: str


def broker_rows(
    vms: Sequence[BrokerVm],
    members: Mapping[int, MemberRecord],
    latest: Mapping[str, Mapping[str, float | None]],
) -> list[dict[str, Any]]:
    """One row per broker: the VM, what its agent says, and the latest gauges.
    `latest[gauge key][broker id as text]`. A member whose VM the service does not list
    (adopted after the fact) still gets a row; a VM without a member reads `no agent`."""
    rows: dict[int | str, dict[str, Any]] = {}
    for vm in vms:
        key: int | str = vm.broker_id if vm.broker_id is not None else vm.vm_id
        rows[key] = {
            "broker_id": vm.broker_id,
            "vm_id": vm.vm_id,
            "address": vm.address,
            "vm_state": vm.vm_state,
            "state": "no agent",
            "sentence": "",
        }
    for broker_id, record in members.items():
        row = rows.setdefault(
            broker_id,
            {"broker_id": broker_id, "vm_id": record.vm_id, "address": record.address},
        )
        row.update(
            broker_id=broker_id,
            vm_state=row.get("vm_state", "running"),
            state=record.state.value,
            sentence=record.sentence,
            registered=record.registered,
            role=record.role.value,
        )
    for row in rows.values():
        subject = str(row["broker_id"])
        for gauge in BROKER_GAUGES:
            row[gauge.key] = latest.get(gauge.key, {}).get(subject)
    return sorted(
        rows.values(), key=lambda r: (r["broker_id"] is None, r["broker_id"] or 0, r["vm_id"])
    )


def totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The cluster's under-replicated and offline partitions (None: no broker reported)."""
    result: dict[str, float | None] = {}
    for key in ("under_replicated", "offline"):
        values = [r[key] for r in rows if r.get(key) is not None]
        result[key] = float(sum(values)) if values else None
    return result


def chart_panel(index: int) -> Panel:
    if not 0 <= index < len(PANELS):
        raise ApiError(404, "not_found", f"no chart {index} (0 to {len(PANELS) - 1})")
    return PANELS[index]


def panel_targets(cluster: str, panel: Panel) -> list[str]:
    segment = graphite_segment(cluster)
    return [t.replace("{c}", segment) for t in panel.targets]


def chart_series(
    raw: Mapping[str, Sequence[tuple[float | None, float]]],
) -> list[dict[str, Any]]:
    """Graphite's series as the page draws them: name and [time, value] points, nulls
    dropped (a gap is a missing point, not a zero)."""
    return [
        {"name": name, "points": [[t, v] for v, t in points if v is not None]}
        for name, points in sorted(raw.items())
    ]
