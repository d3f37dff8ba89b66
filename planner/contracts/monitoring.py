"""Where a cluster's metrics go: the statsd daemon the agents send to and the Graphite render
API the management plane reads alert data from. Part of the spec (`spec.monitoring`), so an
agent's statsd target follows the spec, not a setting baked into the VM. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.contracts.fields import ContractError


@dataclass(frozen=True)
class MonitoringTargets:
    statsd_host: str
    statsd_port: int
    graphite_url: str  # the render API's base, e.g. http://127.0.1.253:8080

    def to_json(self) -> dict[str, Any]:
        return {
            "statsd": f"{self.statsd_host}:{self.statsd_port}",
            "graphite_url": self.graphite_url,
        }


def parse_host_port(text: str, what: str) -> tuple[str, int]:
    host, separator, port_text = text.rpartition(":")
    if not separator or not host or not port_text.isascii() or not port_text.isdigit():
        raise ContractError(f"{what} must be HOST:PORT, got {text!r}")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise ContractError(f"{what} port must be 1-65535, got {port}")
    return host, port


def parse_monitoring(value: Any, what: str = "spec.monitoring") -> MonitoringTargets:
    if not isinstance(value, dict):
        raise ContractError(f"{what} must be an object")
    unknown = set(value) - {"statsd", "graphite_url"}
    if unknown:
        raise ContractError(f"{what} has unknown keys: {', '.join(sorted(unknown))}")
    statsd = value.get("statsd")
    if not isinstance(statsd, str):
        raise ContractError(f"{what}.statsd must be a HOST:PORT string")
    host, port = parse_host_port(statsd, f"{what}.statsd")
    graphite_url = value.get("graphite_url")
    if not isinstance(graphite_url, str) or not graphite_url.startswith(("http://", "https://")):
        raise ContractError(f"{what}.graphite_url must be an http(s) URL, got {graphite_url!r}")
    return MonitoringTargets(host, port, graphite_url.rstrip("/"))
