"""The loop closed on a real cluster with agents: one topic made hot by a producer, the
agents' metrics scored by the balance job (`kaas analytics balance --zookeeper`), the
measured load written to `/kaas/<cluster>/load`, and the elected planner's next plan
spreads the hot topic's leadership so the hottest broker's leader bytes in drop."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from planner.contracts.measured_load import MeasuredLoad, parse_measured_load
from planner.contracts.member import MemberRole
from planner.contracts.paths import ClusterPaths
from planner.pki.client_settings import ClientConfig
from tests import harness
from tests.harness import ClusterHandle, wait_for_healthy_agents, wait_until

pytestmark = pytest.mark.drill

HOT = "loop-hot"
COLD = "loop-cold"
PRODUCE_S = 45.0
"""Long enough for the agents (a sample every 10 s locally) to see the hot topic's rate."""


def leaders(connection: ClientConfig) -> dict[tuple[str, int], int]:
    metadata = AdminClient(dict(connection)).list_topics(timeout=30)
    return {
        (name, number): partition.leader
        for name, topic in metadata.topics.items()
        for number, partition in topic.partitions.items()
    }


def leader_bytes_in(
    load: MeasuredLoad, led_by: dict[tuple[str, int], int], brokers: list[int]
) -> dict[int, float]:
    """Each broker's leader bytes in per second: the measured rate of the partitions it leads."""
    per_broker: dict[int, float] = defaultdict(float, {b: 0.0 for b in brokers})
    for key, item in load.by_partition().items():
        if key in led_by:
            per_broker[led_by[key]] += item.bytes_in_per_s
    return dict(per_broker)


def planner_sentence(zk: KazooClient, cluster: str) -> str:
    records = harness.member_records(zk, cluster).values()
    found = [m.sentence for m in records if m.role == MemberRole.PLANNER]
    return found[0] if found else ""


def settled(zk: KazooClient, cluster: str) -> bool:
    return "placement balanced" in planner_sentence(zk, cluster)


def produce_hot(connection: ClientConfig, stop: threading.Event, partitions: int) -> int:
    producer = Producer({**dict(connection), "acks": "1", "linger.ms": 20})
    value = b"x" * 4096
    sent = 0
    while not stop.is_set():
        for partition in range(partitions):
            producer.produce(HOT, value, partition=partition)
            sent += 1
        producer.poll(0)
        if sent % 300 == 0:
            producer.flush(10)
            time.sleep(0.05)
    producer.flush(30)
    return sent


def test_the_planner_spreads_a_hot_topic_the_balance_job_measured(
    fresh_cluster_with_agents: ClusterHandle, tmp_path: Path
) -> None:
    cluster = fresh_cluster_with_agents
    name = cluster.layout.name
    connection = cluster.client_config()
    zk = cluster.zookeeper()
    zk.start(timeout=15)
    try:
        wait_for_healthy_agents(zk, name)
        # The planner evens every topic's leaders with the totals: the cluster's own topics
        # placed first, so that the totals are even with the six-each topics below and the
        # hot topic stays led by one broker until the load is measured.
        wait_until(lambda: settled(zk, name), 240, "the planner to settle before the topics")
        brokers = sorted(harness.member_records(zk, name))
        first, second, third = brokers[:3]
        # Leaders even by count (six each) and replicas even by count and size, but every
        # partition of the hot topic is led by the first broker.
        hot = [[first, second, third] if n % 2 else [first, third, second] for n in range(6)]
        orders = [
            [second, third, first],
            [second, first, third],
            [third, first, second],
            [third, second, first],
        ]
        cold = [orders[n % 4] for n in range(12)]
        admin = AdminClient(dict(connection))
        for future in admin.create_topics(
            [
                NewTopic(HOT, num_partitions=len(hot), replica_assignment=hot),
                NewTopic(COLD, num_partitions=len(cold), replica_assignment=cold),
            ]
        ).values():
            future.result(timeout=60)
        wait_until(lambda: settled(zk, name), 240, "the planner to settle on the new topics")
        assert "traffic goals use sizes: no measured load" in planner_sentence(zk, name)
        # The broker that answers may not list the new topic's partitions yet.
        wait_until(
            lambda: all((HOT, n) in leaders(connection) for n in range(6)),
            60,
            "every partition of the hot topic in the metadata",
        )
        before = leaders(connection)
        hot_before = [before[(HOT, n)] for n in range(6)]
        assert sum(b == first for b in hot_before) >= 4, (
            f"hot leaders {hot_before} before any measured load; leaders per broker "
            f"{ {b: list(before.values()).count(b) for b in brokers} }; "
            f"{planner_sentence(zk, name)}"
        )

        stop = threading.Event()
        sent: list[int] = []
        worker = threading.Thread(target=lambda: sent.append(produce_hot(connection, stop, 6)))
        worker.start()
        try:
            time.sleep(PRODUCE_S)
        finally:
            stop.set()
            worker.join(60)
        assert sent and sent[0] > 0

        out = tmp_path / "balance"
        job = subprocess.run(
            [
                sys.executable,
                "-m",
                "analytics.cli",
                "balance",
                "--bootstrap-servers",
                cluster.bootstrap_servers,
                "--client-dir",
                str(cluster.admin_identity.directory),
                "--cluster",
                name,
                "--window",
                "1 minute",
                "--out",
                str(out),
                "--no-charts",
                "--zookeeper",
                cluster.zookeeper_hosts,
                "--zookeeper-identity",
                str(cluster.admin_identity.directory),
            ],
            capture_output=True,
            text=True,
            # Seconds on a quiet machine; a box shared by many test sessions needs far more.
            timeout=1800,
        )
        assert job.returncode == 0, job.stdout + job.stderr
        assert "measured load of" in job.stdout, job.stdout
        load = parse_measured_load(zk.get(ClusterPaths(name).measured_load)[0])
        hot_in = sum(load.by_partition()[(HOT, n)].bytes_in_per_s for n in range(6))
        assert hot_in > 0, load

        wait_until(
            lambda: (
                "traffic goals use measured load" in planner_sentence(zk, name)
                and settled(zk, name)
            ),
            240,
            "the planner to plan with the measured load and finish",
        )
        after = leaders(connection)
        load_before = leader_bytes_in(load, before, brokers)
        load_after = leader_bytes_in(load, after, brokers)
        print(
            "\nleader bytes in per broker (B/s, measured load over the leaders)\n"
            + "\n".join(
                f"  broker {b}: before {load_before[b]:12,.0f}   after {load_after[b]:12,.0f}"
                for b in brokers
            )
        )
        hot_leaders_after = {after[(HOT, n)] for n in range(6)}
        assert len(hot_leaders_after) == 3, (
            f"hot leaders {[after[(HOT, n)] for n in range(6)]}, leader bytes in before "
            f"{load_before}, after {load_after}; {planner_sentence(zk, name)}"
        )
        assert max(load_after.values()) < max(load_before.values())
        journal = harness.journal_entries(zk, name)
        stored = [e for e in journal if e.action == "plan_stored"]
        assert stored and "traffic goals use measured load" in stored[-1].result
    finally:
        zk.stop()
        zk.close()
