"""Write the latest measured score back: into ZooKeeper next to the plan, and to statsd.

Small adapters around kazoo and statsd. What to write is decided by the balance job
(`score_document`, pure); these classes only deliver it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from analytics.errors import AnalyticsError
from planner.contracts.measured_load import (
    MAX_ENCODED_BYTES,
    MeasuredLoad,
    PartitionLoad,
    parse_measured_load,
)
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


def audit_gauges(totals: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The audit's completeness as gauges under kaas.<cluster>.audit: the percentage (100
    when nothing was produced) and the counts it comes from (received = in Kafka)."""
    names = {
        "completeness_percent": "completeness_percent",
        "produced": "produced",
        "in_kafka": "received",
        "missing": "missing",
    }
    return [
        (f"audit.{gauge}", float(totals[key]))
        for key, gauge in names.items()
        if totals.get(key) is not None
    ]


def send_gauges(host: str, port: int, cluster: str, gauges: list[tuple[str, float]]) -> None:
    """Gauges (names under kaas.<cluster>) in one statsd pipeline."""
    from statsd import StatsClient

    client = StatsClient(host, port, prefix=f"kaas.{cluster}")
    with client.pipeline() as pipe:
        for name, value in gauges:
            pipe.gauge(name, value)


def parse_statsd_address(address: str) -> tuple[str, int]:
    """HOST:PORT of a statsd server."""
    host, separator, port = address.rpartition(":")
    if not separator or not host or not port.isdigit():
        raise ValueError(f"statsd address {address!r} is not HOST:PORT")
    return host, int(port)


class LoadTooLargeError(AnalyticsError, ValueError):
    """The measured load does not fit one znode."""


def measured_load_of(
    partition_load: Any, cluster: str, span_s: int, computed_at: str
) -> MeasuredLoad:
    """The contract's MeasuredLoad from the per-window partition load (pandas, one row per
    window and partition): the mean rates over the windows that end within `span_s` of the
    latest window's end. The span is what the value documents (window_start..window_end)."""
    import pandas as pd

    frame = partition_load.copy()
    frame["window_start"] = pd.to_datetime(frame["window_start"], utc=True)
    frame["window_end"] = pd.to_datetime(frame["window_end"], utc=True)
    end = frame["window_end"].max()
    recent = frame[frame["window_start"] >= end - pd.Timedelta(seconds=span_s)]
    start = recent["window_start"].min()
    means = recent.groupby(["topic", "partition"])[["bytes_in_per_s", "bytes_out_per_s"]].mean()
    return MeasuredLoad(
        cluster=cluster,
        window_start=start.isoformat(),
        window_end=end.isoformat(),
        window_s=int((end - start).total_seconds()),
        computed_at=computed_at,
        partitions=tuple(
            PartitionLoad(
                str(topic), int(partition), float(row.bytes_in_per_s), float(row.bytes_out_per_s)
            )
            for (topic, partition), row in means.iterrows()
        ),
    )


class ZooKeeperLoadWriter:
    """Sets `/kaas/<cluster>/load` in one transaction that checks the version it read, so
    two jobs writing at once cannot interleave: the second one's transaction fails."""

    def __init__(self, hosts: str, identity: IdentityFiles) -> None:
        self.hosts = hosts
        self.identity = identity

    def write(self, load: MeasuredLoad) -> str:
        from planner.zookeeper_client import zookeeper_client

        path = ClusterPaths(load.cluster).measured_load
        data = json.dumps(load.to_json(), sort_keys=True, separators=(",", ":")).encode()
        if len(data) > MAX_ENCODED_BYTES:
            raise LoadTooLargeError(
                f"measured load of {len(load.partitions)} partitions is {len(data)} bytes, "
                f"above the {MAX_ENCODED_BYTES} a znode takes"
            )
        parse_measured_load(data)  # a value no reader could parse is never written
        client = zookeeper_client(self.hosts, self.identity, timeout=ZK_TIMEOUT_S)
        client.start(timeout=ZK_TIMEOUT_S)
        try:
            client.ensure_path(ClusterPaths(load.cluster).root)
            stat = client.exists(path)
            transaction = client.transaction()
            if stat is None:
                transaction.create(path, data)
            else:
                transaction.set_data(path, data, version=stat.version)
            results = transaction.commit()
            failed = [result for result in results if isinstance(result, Exception)]
            if failed:
                raise failed[0]
        finally:
            client.stop()
            client.close()
        return path
