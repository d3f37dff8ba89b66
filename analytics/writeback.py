"""Write the latest measured score back: into ZooKeeper next to the plan, and to statsd.

Small adapters around kazoo and statsd. What to write is decided by the balance job
(`score_document`, pure); these classes only deliver it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from planner.contracts.paths import ClusterPaths
from planner.contracts.plan_records import PlanScore, parse_plan_score
from planner.pki.files import IdentityFiles

ZK_TIMEOUT_S = 15.0


def score_znode_path(cluster: str) -> str:
    """`/kaas/<cluster>/plan/score`, beside the plan's meta and topics.

    Taken from planner.contracts.paths, where every KaaS znode path is named once; a bad
    cluster name raises ValueError there.
    """
    return ClusterPaths(cluster).plan_score


def score_document(
    cluster: str,
    score: float | None,
    window_start: str,
    window_end: str,
    brokers: int,
    resources: Mapping[str, Mapping[str, Any]],
    computed_at: str,
) -> dict[str, Any]:
    """The JSON value of the score znode (the contract's PlanScore)."""
    return PlanScore(
        cluster,
        score,
        window_start,
        window_end,
        brokers,
        {name: dict(values) for name, values in resources.items()},
        computed_at,
    ).to_json()


class ZooKeeperScoreWriter:
    """Sets the score znode, creating it (and its parents) the first time."""

    def __init__(self, hosts: str, identity: IdentityFiles) -> None:
        self.hosts = hosts
        self.identity = identity

    def write(self, cluster: str, document: Mapping[str, Any]) -> str:
        from kazoo.exceptions import NoNodeError

        from planner.zookeeper_client import zookeeper_client

        path = score_znode_path(cluster)
        data = json.dumps(document, sort_keys=True).encode()
        parse_plan_score(data)  # a value no reader could parse is never written
        client = zookeeper_client(self.hosts, self.identity, timeout=ZK_TIMEOUT_S)
        client.start(timeout=ZK_TIMEOUT_S)
        try:
            try:
                client.set(path, data)
            except NoNodeError:
                client.create(path, data, makepath=True)
        finally:
            client.stop()
            client.close()
        return path


class StatsdScoreSender:
    """Sends the score and the per-resource spread as statsd gauges under kaas.<cluster>."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port

    def send(self, cluster: str, document: Mapping[str, Any]) -> list[str]:
        from statsd import StatsClient

        client = StatsClient(self.host, self.port, prefix=f"kaas.{cluster}")
        sent = []
        if document.get("score") is not None:
            client.gauge("plan.measured_score", float(document["score"]))
            sent.append("plan.measured_score")
        for resource, values in document.get("resources", {}).items():
            for stat in ("cv", "max_over_mean", "hot_count"):
                if values.get(stat) is not None:
                    name = f"balance.{resource}.{stat}"
                    client.gauge(name, float(values[stat]))
                    sent.append(name)
        return sent


def parse_statsd_address(address: str) -> tuple[str, int]:
    """HOST:PORT of a statsd server."""
    host, separator, port = address.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ValueError(f"statsd address {address!r} is not HOST:PORT")
    return host, int(port)
