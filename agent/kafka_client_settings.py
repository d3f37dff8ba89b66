"""The one place the agent's kafka-python clients take their connection settings from: the
internal listener's (brokers, TLS, the identity's certificate, from
`planner.pki.client_settings`) plus the executor's client id and timeouts."""

from __future__ import annotations

from typing import Any

from planner.pki.client_settings import InternalClient


def kafka_python_admin_settings(kafka: InternalClient) -> dict[str, Any]:
    return {
        **kafka.kafka_python(),
        "client_id": "kaas-agent-executor",
        "request_timeout_ms": 15000,
        "bootstrap_timeout_ms": 15000,
    }
