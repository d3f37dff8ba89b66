"""The alert routes of the HTTP API (admin key). No `from __future__ import annotations`:
FastAPI reads the handlers' annotations."""

from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from pydantic import BaseModel

from management_plane.errors import ApiError
from management_plane.monitoring.alert_loop import AlertLoop


class AlertOut(BaseModel):
    cluster: str
    rule: str
    subject: str
    state: str
    severity: str
    value: float
    since: float
    held_until: float | None
    summary: str
    dedup_key: str


class AlertHistoryOut(BaseModel):
    entry_id: int
    at: float
    cluster: str
    rule: str
    subject: str
    state: str
    severity: str
    value: float
    summary: str
    dedup_key: str


def add_alert_routes(
    app: FastAPI, alerts: AlertLoop | None, admin: Any, errors: dict[int | str, Any]
) -> None:
    Admin = Annotated[Any, Depends(admin)]

    def loop() -> AlertLoop:
        if alerts is None:
            raise ApiError(503, "alerts_off", "this service evaluates no alerts")
        return alerts

    @app.get("/v1/alerts", responses=errors)
    def list_alerts(
        _who: Admin, cluster: Annotated[str | None, Query(max_length=64)] = None
    ) -> list[AlertOut]:
        """Alerts pending, held (KaaS's own operation) or firing now."""
        return [AlertOut(**a) for a in loop().active(cluster)]

    @app.get("/v1/alerts/history", responses=errors)
    def alert_history(
        _who: Admin,
        cluster: Annotated[str | None, Query(max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> list[AlertHistoryOut]:
        """Every alert state change, oldest first."""
        return [AlertHistoryOut(**e) for e in loop().history.entries(cluster, limit)]
