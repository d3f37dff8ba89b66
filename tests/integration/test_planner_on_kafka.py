"""A generated plan goes through Kafka's own kafka-reassign-partitions (--execute, then
--verify until done) on the shared real cluster, and the result is what was planned."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from management_plane.local.image import load_image
from management_plane.workload import durable_producer, produce_keyed
from tests.harness import ClusterHandle, kaas_cli

pytestmark = pytest.mark.integration

TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def reassign_tool(cluster: ClusterHandle, *args: str) -> str:
    command = ["java", "-Xmx256m", "-cp", f"{load_image().kafka_libs()}/*", TOOL]
    done = subprocess.run(
        [
            *command,
            *("--bootstrap-server", cluster.bootstrap_servers),
            *("--command-config", str(cluster.admin_properties)),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_kafka_executes_and_verifies_a_generated_plan(
    kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    bootstrap = kafka_cluster.bootstrap_servers
    topic = kafka_cluster.unique_topic("planned")
    # Skewed on purpose: every replica on brokers 0 and 1, broker 0 leading all.
    admin = AdminClient(kafka_cluster.client_config())
    skewed = [[0, 1] for _ in range(6)]
    admin.create_topics([NewTopic(topic, num_partitions=len(skewed), replica_assignment=skewed)])[
        topic
    ].result(60)
    assert (
        produce_keyed(durable_producer(kafka_cluster.client_config()), topic, 3000, 30).errors == []
    )

    exported = kaas_cli(
        "plan",
        "export",
        *("--bootstrap-server", bootstrap.split(",")[0]),
        *("--client-dir", str(kafka_cluster.admin.identity.directory)),
        *("--node-identity", str(kafka_cluster.node_identity.directory)),
    )
    assert exported.returncode == 0, exported.stderr
    layout = json.loads(exported.stdout)
    layout["partitions"] = [p for p in layout["partitions"] if p["topic"] == topic]
    layout_file = tmp_path / "LAYOUT.json"
    layout_file.write_text(json.dumps(layout))

    generated = kaas_cli("plan", "generate", "--layout", str(layout_file))
    assert generated.returncode == 0, generated.stderr
    plan_file = tmp_path / "reassignment.json"
    plan_file.write_text(generated.stdout)
    planned = {p["partition"]: p["replicas"] for p in json.loads(generated.stdout)["partitions"]}
    assert planned, "a skewed topic must get a plan"

    out = reassign_tool(
        kafka_cluster,
        "--reassignment-json-file",
        str(plan_file),
        "--execute",
        "--throttle",
        "50000000",
    )
    assert "Successfully started partition reassignment" in out
    deadline = time.monotonic() + 120
    while True:
        out = reassign_tool(kafka_cluster, "--reassignment-json-file", str(plan_file), "--verify")
        if "still in progress" not in out:
            break
        assert time.monotonic() < deadline, out
        time.sleep(1)
    assert out.count("is completed") == len(planned), out

    current = {
        p.id: list(p.replicas)
        for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    }
    for partition, replicas in planned.items():
        assert current[partition] == replicas
    replicas_per_broker = {b: sum(b in r for r in current.values()) for b in (0, 1, 2)}
    leaders_per_broker = {b: sum(r[0] == b for r in current.values()) for b in (0, 1, 2)}
    assert replicas_per_broker == {0: 4, 1: 4, 2: 4}, current
    assert leaders_per_broker == {0: 2, 1: 2, 2: 2}, current

    # Planned again from the cluster as it is now: nothing left to do.
    again = kaas_cli(
        "plan",
        "export",
        *("--bootstrap-server", bootstrap.split(",")[0]),
        *("--client-dir", str(kafka_cluster.admin.identity.directory)),
        *("--node-identity", str(kafka_cluster.node_identity.directory)),
    )
    layout = json.loads(again.stdout)
    layout["partitions"] = [p for p in layout["partitions"] if p["topic"] == topic]
    layout_file.write_text(json.dumps(layout))
    replanned = kaas_cli("plan", "generate", "--layout", str(layout_file))
    assert json.loads(replanned.stdout)["partitions"] == []
