"""Alert history in the service's database: one row per state change of an alert. Its own
table on the service's engine (SQLAlchemy), made at start if missing."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Column,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    insert,
    select,
)

from management_plane.monitoring.evaluate import Alert

metadata = MetaData()

alert_history = Table(
    "alert_history",
    metadata,
    Column("entry_id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("cluster", String(64), nullable=False),
    Column("rule", String(64), nullable=False),
    Column("subject", String(256), nullable=False),  # "topic:" and a 249-character topic
    Column("state", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("value", Float, nullable=False),
    Column("summary", String(256), nullable=False),
    Column("dedup_key", String(200), nullable=False),
    Index("alert_history_by_cluster", "cluster", "entry_id"),
)


def alert_json(alert: Alert) -> dict[str, Any]:
    return {
        "cluster": alert.key.cluster,
        "rule": alert.key.rule,
        "subject": alert.key.subject,
        "state": alert.state.value,
        "severity": alert.severity.value,
        "value": alert.value,
        "since": alert.since,
        "held_until": alert.held_until,
        "summary": alert.summary,
        "dedup_key": alert.key.dedup_key,
    }


class AlertHistory:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        metadata.create_all(engine)

    def record(self, changes: tuple[Alert, ...], at: float) -> None:
        if not changes:
            return
        with self.engine.begin() as connection:
            connection.execute(
                insert(alert_history),
                [
                    {
                        "at": at,
                        "cluster": a.key.cluster,
                        "rule": a.key.rule,
                        "subject": a.key.subject,
                        "state": a.state.value,
                        "severity": a.severity.value,
                        "value": a.value,
                        "summary": a.summary[:256],
                        "dedup_key": a.key.dedup_key,
                    }
                    for a in changes
                ],
            )

    def entries(self, cluster: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        query = select(alert_history).order_by(alert_history.c.entry_id.desc()).limit(limit)
        if cluster is not None:
            query = query.where(alert_history.c.cluster == cluster)
        with self.engine.connect() as connection:
            rows = connection.execute(query).mappings().all()
        return [dict(row) for row in reversed(rows)]
