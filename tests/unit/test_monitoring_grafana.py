"""`kaas dashboards export`: Grafana's JSON model over Graphite, whose every target names
gauges the agents really send."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.metrics.gauges import statsd_gauges
from management_plane.cli import main as kaas_main
from management_plane.monitoring.grafana import PANELS, dashboard
from management_plane.monitoring.heartbeat import BrokerFigures, heartbeat_gauges

pytestmark = pytest.mark.unit

RECORD = {
    "cluster": "prod.eu",
    "broker_id": 2,
    "broker": {
        name: 1.0
        for name in (
            "under_replicated_partitions",
            "offline_partitions_count",
            "under_min_isr_partition_count",
            "active_controller_count",
            "partition_count",
            "leader_count",
            "bytes_in_per_s",
            "bytes_out_per_s",
            "messages_in_per_s",
            "produce_total_time_ms_p99",
            "fetch_consumer_total_time_ms_p99",
        )
    },
    "host": {"log_dir_free_percent": 50.0, "cpu_percent": 3.0},
    "topics": [],
    "errors": [],
}


def _series_patterns(target: str) -> list[str]:
    return re.findall(r"kaas\.[A-Za-z0-9_.*-]+", target)


def test_every_panel_target_matches_a_gauge_the_agents_send() -> None:
    figures = {2: BrokerFigures(accepted=3, success=1.0, availability=1.0, latency_ms=12.0)}
    sent = {f"kaas.{name}" for name, _ in statsd_gauges(RECORD)}
    # and the heartbeat's, which kaas serve sends beside them
    sent |= {f"kaas.{name}" for name, _ in heartbeat_gauges("prod_eu", figures)}
    model = dashboard("prod.eu", "ds1")
    assert len(model["panels"]) == len(PANELS)
    for panel in model["panels"]:
        assert panel["datasource"] == {"type": "graphite", "uid": "ds1"}
        for target in panel["targets"]:
            for pattern in _series_patterns(target["target"]):
                regex = re.compile(pattern.replace(".", r"\.").replace("*", "[^.]+") + "$")
                assert any(regex.match(name) for name in sent), (panel["title"], pattern)


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = dashboard("c")["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = set()
    for p in panels:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in panels)


def test_export_command_writes_the_json_model(tmp_path: Path) -> None:
    out = tmp_path / "kaas.json"
    assert kaas_main(["dashboards", "export", "--cluster", "orders", "--output", str(out)]) == 0
    model = json.loads(out.read_text())
    assert model["uid"] == "kaas-orders" and model["refresh"] == "10s"
    assert "kaas.orders.brokers.*.under_replicated_partitions" in json.dumps(model)
