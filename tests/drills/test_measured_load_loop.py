"""The loop closed on a real cluster with agents: three partitions led by one broker made
hot by a producer, the agents' metrics scored by the balance job (`kaas analytics balance
--zookeeper`), the measured load written to `/kaas/<cluster>/load`, and the elected
planner's next plan spreads their leadership so the hottest broker's leader bytes in drop.

Every topic's leaders are even by count from the start: the planner evens each topic's
leaders without any measured load, so only traffic it cannot see by counts and sizes shows
what the measured load adds."""

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

HOT_TOPICS = ("loop-hot-a", "loop-hot-b", "loop-hot-c")
HOT = tuple((topic, 0) for topic in HOT_TOPICS)
"""The partitions the producer writes to, one per topic, each led by the first broker: the
load is even over three brokers only once two of them lead one each."""
COLD = "loop-cold"
PERMUTATIONS = ((0, 1, 2), (0, 2, 1), (1, 2, 0), (1, 0, 2), (2, 0, 1), (2, 1, 0))
ROTATIONS = ((0, 1, 2), (1, 2, 0), (2, 0, 1))
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


def produce_hot(connection: ClientConfig, stop: threading.Event) -> int:
    producer = Producer({**dict(connection), "acks": "1", "linger.ms": 20})
    value = b"x" * 4096
    sent = 0
    while not stop.is_set():
        for topic, partition in HOT:
            producer.produce(topic, value, partition=partition)
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
        first = brokers[0]
        # Each topic's leaders even over the three brokers (one and four each), replicas
        # even by count; partition 0 of each hot topic, the hot one, led by the first broker.
        hot = [[brokers[i] for i in rotation] for rotation in ROTATIONS]
        orders = [[brokers[i] for i in permutation] for permutation in PERMUTATIONS]
        cold = [orders[n % 6] for n in range(12)]
        admin = AdminClient(dict(connection))
        for future in admin.create_topics(
            [
                *(NewTopic(t, num_partitions=len(hot), replica_assignment=hot) for t in HOT_TOPICS),
                NewTopic(COLD, num_partitions=len(cold), replica_assignment=cold),
            ]
        ).values():
            future.result(timeout=60)
        wait_until(lambda: settled(zk, name), 240, "the planner to settle on the new topics")
        assert "traffic goals use sizes: no measured load" in planner_sentence(zk, name)
        # The broker that answers may not list the new topic's partitions yet.
        wait_until(
            lambda: all((t, n) in leaders(connection) for t in HOT_TOPICS for n in range(3)),
            60,
            "every partition of the hot topics in the metadata",
        )
        before = leaders(connection)
        hot_before = [before[key] for key in HOT]
        assert hot_before == [first] * len(HOT), (
            f"hot partitions' leaders {hot_before} before any measured load; leaders per broker "
            f"{ {b: list(before.values()).count(b) for b in brokers} }; "
            f"{planner_sentence(zk, name)}"
        )

        stop = threading.Event()
        sent: list[int] = []
        worker = threading.Thread(target=lambda: sent.append(produce_hot(connection, stop)))
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
        hot_in = sum(load.by_partition()[key].bytes_in_per_s for key in HOT)
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
        hot_leaders_after = [after[key] for key in HOT]
        assert len(set(hot_leaders_after)) == len(HOT), (
            f"hot partitions' leaders {hot_leaders_after}, leader bytes in before "
            f"{load_before}, after {load_after}; {planner_sentence(zk, name)}"
        )
        assert max(load_after.values()) < max(load_before.values())
        journal = harness.journal_entries(zk, name)
        stored = [e for e in journal if e.action == "plan_stored"]
        assert stored and "traffic goals use measured load" in stored[-1].result
    finally:
        zk.stop()
        zk.close()
