"""`kaas dashboards export`: Grafana dashboard JSON (Grafana's JSON model) with the same
panels as KaaS's own view, over a Graphite data source. Pure, but for `main`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from management_plane.monitoring.alert_loop import graphite_segment

GRAFANA_SCHEMA_VERSION = 39
PANEL_WIDTH = 12
PANEL_HEIGHT = 8


@dataclass(frozen=True)
class Panel:
    title: str
    targets: tuple[str, ...]  # Graphite targets; `{c}` becomes the cluster's metric segment
    unit: str = "short"


PANELS: tuple[Panel, ...] = (
    Panel(
        "Under-replicated partitions",
        ("aliasByNode(kaas.{c}.brokers.*.under_replicated_partitions, 3)",),
    ),
    Panel(
        "Offline partitions, under min ISR, active controllers",
        (
            "alias(sumSeries(kaas.{c}.brokers.*.offline_partitions_count), 'offline')",
            "alias(sumSeries(kaas.{c}.brokers.*.under_min_isr_partition_count), 'under min ISR')",
            "alias(sumSeries(kaas.{c}.brokers.*.active_controller_count), 'controllers')",
        ),
    ),
    Panel("Partitions per broker", ("aliasByNode(kaas.{c}.brokers.*.partition_count, 3)",)),
    Panel("Leaders per broker", ("aliasByNode(kaas.{c}.brokers.*.leader_count, 3)",)),
    Panel("Bytes in per broker", ("aliasByNode(kaas.{c}.brokers.*.bytes_in_per_s, 3)",), "Bps"),
    Panel("Bytes out per broker", ("aliasByNode(kaas.{c}.brokers.*.bytes_out_per_s, 3)",), "Bps"),
    Panel("Messages in", ("aliasByNode(kaas.{c}.brokers.*.messages_in_per_s, 3)",)),
    Panel(
        "Log dir free",
        ("aliasByNode(kaas.{c}.brokers.*.host.log_dir_free_percent, 3)",),
        "percent",
    ),
    Panel(
        "Request time p99",
        (
            "aliasByNode(kaas.{c}.brokers.*.produce_total_time_ms_p99, 3, 4)",
            "aliasByNode(kaas.{c}.brokers.*.fetch_consumer_total_time_ms_p99, 3, 4)",
        ),
        "ms",
    ),
    Panel("CPU", ("aliasByNode(kaas.{c}.brokers.*.host.cpu_percent, 3)",), "percent"),
    # The synthetic heartbeat (kaas serve --heartbeat), per broker it went through.
    Panel("Heartbeat latency", ("aliasByNode(kaas.{c}.brokers.*.heartbeat.latency_ms, 3)",), "ms"),
    Panel(
        "Heartbeat availability",
        ("aliasByNode(kaas.{c}.brokers.*.heartbeat.availability, 3)",),
        "percentunit",
    ),
)


def dashboard(cluster: str, datasource_uid: str = "graphite") -> dict[str, Any]:
    """The dashboard of one cluster: two panels a row, 10 s refresh, the last hour."""
    segment = graphite_segment(cluster)
    datasource = {"type": "graphite", "uid": datasource_uid}
    panels = []
    for index, panel in enumerate(PANELS):
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": panel.title,
                "datasource": datasource,
                "gridPos": {
                    "h": PANEL_HEIGHT,
                    "w": PANEL_WIDTH,
                    "x": (index % 2) * PANEL_WIDTH,
                    "y": (index // 2) * PANEL_HEIGHT,
                },
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "targets": [
                    {"refId": chr(ord("A") + n), "target": target.replace("{c}", segment)}
                    for n, target in enumerate(panel.targets)
                ],
            }
        )
    return {
        "title": f"KaaS {cluster}",
        "uid": f"kaas-{segment}"[:40],
        "tags": ["kaas", "kafka"],
        "schemaVersion": GRAFANA_SCHEMA_VERSION,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "timezone": "utc",
        "editable": True,
        "panels": panels,
        "templating": {"list": []},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="kaas dashboards export",
        description="write a Grafana dashboard (JSON model) of a cluster over Graphite",
    )
    parser.add_argument("action", choices=("export",))
    parser.add_argument("--cluster", default="local", help="the cluster's name (default local)")
    parser.add_argument(
        "--datasource-uid", default="graphite", help="the Graphite data source's uid in Grafana"
    )
    parser.add_argument("--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    text = json.dumps(dashboard(args.cluster, args.datasource_uid), indent=2) + "\n"
    if args.output:
        args.output.write_text(text)
        print(f"{len(PANELS)} panels written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
