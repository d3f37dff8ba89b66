"""The management plane beside a `kaas up` cluster (its background `kaas serve`, under the
cluster's folder) as the drills' port (`faults.ManagementPlane`): the API for operations,
the process record for the kill and the recorded command line for the restart."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from management_plane.drills.errors import DrillError
from management_plane.drills.faults import OperationView
from management_plane.errors import KaasError
from management_plane.local.background_service import (
    BackgroundService,
    restart_background_service,
    running_service,
)
from management_plane.local.processes import kill_process
from management_plane.service.client import ApiClient


def operation_view(op: Mapping[str, Any]) -> OperationView:
    """An operation as the API returns it (`OperationOut`)."""
    return OperationView(
        op_id=int(op["op_id"]),
        kind=str(op["kind"]),
        status=str(op["status"]),
        step=None if op.get("step") is None else str(op["step"]),
        message=str(op.get("message", "")),
        params=dict(op.get("params") or {}),
        done_steps=tuple(
            str(entry["step"]) for entry in op.get("journal", []) if entry["outcome"] == "done"
        ),
    )


class BackgroundPlane:
    def __init__(self, cluster_home: Path, cluster: str) -> None:
        self.cluster_home = cluster_home
        self.cluster = cluster

    def _service(self) -> BackgroundService:
        service = running_service(self.cluster_home)
        if service is None:
            raise DrillError(self._none_running())
        return service

    def _none_running(self) -> str:
        return f"no management plane runs beside the cluster at {self.cluster_home}"

    def _client(self) -> ApiClient:
        service = self._service()
        key = service.admin_key_file.read_text().strip()
        return ApiClient(service.url, key, service.trust_bundle)

    def problem(self) -> str | None:
        if running_service(self.cluster_home) is None:
            return self._none_running() + " (`kaas up` starts it for a cluster with agents)"
        try:
            self._client().call("GET", f"/v1/clusters/{self.cluster}")
        except (KaasError, OSError) as exc:
            return f"the management plane does not serve cluster {self.cluster}: {exc}"
        return None

    def broker_config(self) -> Mapping[str, str]:
        cluster = self._client().call("GET", f"/v1/clusters/{self.cluster}")
        return {str(k): str(v) for k, v in cluster["spec"]["broker_config"].items()}

    def change_config(self, config: Mapping[str, str | None]) -> int:
        op = self._client().call(
            "PATCH", f"/v1/clusters/{self.cluster}/config", {"broker_config": dict(config)}
        )
        return int(op["op_id"])

    def operation(self, op_id: int) -> OperationView:
        return operation_view(self._client().call("GET", f"/v1/operations/{op_id}"))

    def operations(self) -> list[OperationView]:
        listed = self._client().call("GET", f"/v1/operations?cluster={self.cluster}")
        return [operation_view(op) for op in listed]

    def kill(self) -> str:
        service = self._service()
        kill_process(service.record)
        return f"kaas serve (pid {service.record.pid})"

    def restart(self) -> None:
        restart_background_service(self.cluster_home)
