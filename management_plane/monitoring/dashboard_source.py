"""Gathering one cluster's dashboard document: the service's database (VMs, operations), the
cluster's ZooKeeper (spec, member records, the plan's status), the alert loop and Graphite.
A part that does not answer is named in `problems`; the rest of the page still shows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from management_plane.errors import KaasError
from management_plane.monitoring.dashboard import (
    BROKER_GAUGES,
    BrokerVm,
    TimeRange,
    broker_rows,
    chart_panel,
    chart_series,
    gauge_target,
    panel_targets,
    totals,
)
from management_plane.monitoring.grafana import PANELS
from management_plane.monitoring.graphite import GraphiteReader
from management_plane.service.cluster_io import ClusterIO
from management_plane.service.operations import progress
from management_plane.service.runner import state_of
from planner.contracts.member import MemberRecord
from planner.contracts.spec import ClusterSpec
from planner.errors import PlannerError

if TYPE_CHECKING:
    from management_plane.service.service import Service

LATEST_WINDOW = "-2min"


class DashboardSource:
    def __init__(self, service: Service) -> None:
        self.service = service

    def cluster_names(self) -> list[str]:
        return [c["name"] for c in self.service.db.list_clusters() if c["status"] != "deleted"]

    def _io(self, name: str, vms: list[dict[str, Any]]) -> ClusterIO:
        addresses = [v["address"] for v in vms if v["state"] == "running"]
        return ClusterIO(name, addresses, self.service.client_identity(name))

    def _graphite(self, name: str, spec: ClusterSpec | None) -> GraphiteReader:
        if spec is None or spec.monitoring is None:
            raise KaasError(f"the spec of {name} names no Graphite render API")
        return GraphiteReader(spec.monitoring.graphite_url)

    def document(self, name: str) -> dict[str, Any]:
        view = self.service.cluster_view(name)  # 404 for a cluster the service does not know
        problems: list[str] = []
        spec: ClusterSpec | None = None
        members: dict[int, MemberRecord] = {}
        plan: dict[str, Any] | None = None
        try:
            io = self._io(name, view["vms"])
            spec = io.read_spec()
            members = io.members().records
            plan = io.plan_status().to_json()
        except (KaasError, PlannerError) as exc:
            problems.append(f"ZooKeeper: {exc}")
        latest: dict[str, dict[str, float | None]] = {}
        try:
            graphite = self._graphite(name, spec)
            for gauge in BROKER_GAUGES:
                latest[gauge.key] = graphite.latest(gauge_target(name, gauge), LATEST_WINDOW)
        except KaasError as exc:
            problems.append(f"Graphite: {exc}")
        vms = [BrokerVm(v["vm_id"], v["address"], v["broker_id"], v["state"]) for v in view["vms"]]
        rows = broker_rows(vms, members, latest)
        alerts = self.service.alerts.active(name) if self.service.alerts is not None else []
        return {
            "cluster": name,
            "status": view["status"],
            "at": time.time(),
            "brokers": rows,
            "totals": totals(rows),
            "columns": [{"key": g.key, "label": g.label} for g in BROKER_GAUGES],
            "plan": plan,
            "operations": self._running_operations(name),
            "alerts": alerts,
            "firing": sum(1 for a in alerts if a["state"] == "firing"),
            "charts": [
                {"index": i, "title": p.title, "unit": p.unit} for i, p in enumerate(PANELS)
            ],
            "problems": problems,
        }

    def _running_operations(self, name: str) -> list[dict[str, Any]]:
        result = []
        for op in self.service.db.list_operations(name, 50):
            if not op.unfinished:
                continue
            done, total = progress(state_of(op))
            result.append(
                {
                    "op_id": op.op_id,
                    "kind": op.kind.value,
                    "status": op.status.value,
                    "step": None if op.step is None else str(op.step),
                    "steps_done": done,
                    "steps_total": total,
                    "message": op.message,
                }
            )
        return result

    def chart(self, name: str, index: int, time_range: TimeRange) -> dict[str, Any]:
        panel = chart_panel(index)
        view = self.service.cluster_view(name)
        spec = self._io(name, view["vms"]).read_spec()
        graphite = self._graphite(name, spec)
        raw: dict[str, list[tuple[float | None, float]]] = {}
        for target in panel_targets(name, panel):
            raw.update(graphite.timed_series(target, time_range.value))
        return {
            "title": panel.title,
            "unit": panel.unit,
            "range": time_range.value,
            "series": chart_series(raw),
        }
