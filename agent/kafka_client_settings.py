"""The one place the agent's kafka-python clients take their connection settings from
(bootstrap, timeouts, and the listener's security when the cluster has one)."""

from __future__ import annotations

from typing import Any


def kafka_python_admin_settings(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap.split(","),
        "client_id": "kaas-agent-executor",
        "request_timeout_ms": 15000,
        "bootstrap_timeout_ms": 15000,
    }
