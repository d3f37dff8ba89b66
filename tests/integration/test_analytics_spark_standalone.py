"""The balance job on a real distributed engine: a Spark standalone cluster (a master and
two workers, each on its own loopback address) started with the pinned pyspark's own
launch script (`sbin/spark-daemon.sh`), and the job file submitted to it unchanged with
`spark-submit --master spark://...`, the Kafka connector jars from the image passed with
`--jars`, reading a metrics topic of the shared cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from confluent_kafka import Producer

from analytics.session import connector_jars, default_jars_dir
from analytics.sources import ensure_kafka_connector
from analytics.testing import metric_record
from management_plane.workload import create_topic
from tests.harness import SCRATCH_BASE, ClusterHandle

pytestmark = pytest.mark.integration

SPARK_HOME = Path(pyspark.__file__).parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
REPOSITORY = Path(__file__).resolve().parents[2]
BROKERS, SAMPLES = 3, 12
T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    master_ui: str

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=10) as response:
            value: dict[str, Any] = json.load(response)
        return value


def _daemon_env(root: Path, address: str) -> dict[str, str]:
    conf = root / "conf"
    conf.mkdir(parents=True, exist_ok=True)  # empty: nothing from a spark-defaults.conf elsewhere
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_CONF_DIR": str(conf),
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_PID_DIR": str(root / "pids"),
        "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_IDENT_STRING": f"kaas-test-{os.getpid()}",
        # The web UIs bind here instead of on every address.
        "SPARK_LOCAL_IP": address,
        "PYSPARK_PYTHON": sys.executable,
    }


def _daemon(root: Path, address: str, action: str, cls: str, instance: int, *args: str) -> str:
    done = subprocess.run(
        [str(SPARK_HOME / "sbin" / "spark-daemon.sh"), action, cls, str(instance), *args],
        env=_daemon_env(root, address),
        capture_output=True,
        text=True,
        timeout=180,
    )
    if done.returncode != 0 and action == "start":
        raise AssertionError(f"spark-daemon.sh start {cls} failed: {done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def _wait(check: Any, timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ValueError):
            pass  # not listening yet, or its UI still serves a page instead of the JSON
        time.sleep(1)
    tails = "".join(
        f"\n--- {log.name}\n" + log.read_text(errors="replace")[-3000:]
        for log in sorted(logs.glob("*.out"))
    )
    raise AssertionError(f"timed out waiting for {what}{tails}")


@pytest.fixture
def spark_standalone(tmp_path: Path) -> Iterator[StandaloneCluster]:
    """A master on SCRATCH.210 and two workers on .211 and .212 (one core, 768 MiB each);
    every daemon started is stopped, also when starting or the test fails."""
    root = tmp_path / "spark"
    master_address = f"{SCRATCH_BASE}.210"
    master = StandaloneCluster(f"spark://{master_address}:7077", f"http://{master_address}:8080")
    started: list[tuple[str, str, int]] = []
    try:
        _daemon(root, master_address, "start", MASTER_CLASS, 1, "--host", master_address)
        started.append((master_address, MASTER_CLASS, 1))
        _wait(lambda: master.state()["status"] == "ALIVE", 600, "the master", root / "logs")
        for instance, address in ((1, f"{SCRATCH_BASE}.211"), (2, f"{SCRATCH_BASE}.212")):
            _daemon(
                root,
                address,
                "start",
                WORKER_CLASS,
                instance,
                "--host",
                address,
                "--cores",
                "1",
                "--memory",
                "768m",
                master.master_url,
            )
            started.append((address, WORKER_CLASS, instance))
        _wait(
            lambda: sum(w["state"] == "ALIVE" for w in master.state()["workers"]) == 2,
            # A JVM each: minutes on a box shared by many test sessions.
            600,
            "two workers to register",
            root / "logs",
        )
        yield master
    finally:
        for address, cls, instance in reversed(started):
            _daemon(root, address, "stop", cls, instance)


def _produce_metrics(cluster: ClusterHandle, topic: str) -> None:
    producer = Producer(dict(cluster.client_config()))
    for step in range(SAMPLES):
        for broker in range(BROKERS):
            record = metric_record(
                broker,
                T0_MS + step * 10_000,
                cluster="standalone",
                rack=f"zone-{'abc'[broker]}",
                bytes_in_per_s=1000.0 * (broker + 1),
                partitions=[
                    {"topic": "orders", "partition": broker, "leader": True, "size_bytes": step}
                ],
                topics=[{"topic": "orders", "bytes_in_per_s": 1000.0 * (broker + 1)}],
            )
            producer.produce(topic, json.dumps(record).encode(), key=str(broker).encode())
    producer.produce(topic, b"not json", key=b"0")
    assert producer.flush(30) == 0


def test_the_balance_job_runs_unchanged_on_a_standalone_cluster(
    kafka_cluster: ClusterHandle, spark_standalone: StandaloneCluster, tmp_path: Path
) -> None:
    ensure_kafka_connector(default_jars_dir(), launched_by_spark_submit=False)
    topic = kafka_cluster.unique_topic("kaas-metrics")
    create_topic(kafka_cluster.client_config(), topic, partitions=3)
    _produce_metrics(kafka_cluster, topic)
    out = tmp_path / "out"
    jars = ",".join(str(jar) for jar in connector_jars(default_jars_dir()))
    submitted = subprocess.run(
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master",
            spark_standalone.master_url,
            "--jars",
            jars,
            "--executor-memory",
            "512m",
            "--total-executor-cores",
            "2",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.driver.host={SCRATCH_BASE}.210",
            str(REPOSITORY / "analytics" / "jobs" / "balance.py"),
            "--bootstrap-servers",
            kafka_cluster.bootstrap_servers,
            "--client-dir",
            str(kafka_cluster.admin_identity.directory),
            "--topic",
            topic,
            "--window",
            "1 minute",
            "--out",
            str(out),
            "--no-charts",
        ],
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-5000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"]["valid"] == BROKERS * SAMPLES
    assert summary["records"]["quarantined"] == 1
    assert summary["latest_window"]["brokers"] == BROKERS
    assert summary["brokers"]["leader_bytes_in_per_s"]["hot"] == ["2"]
    # It ran on the cluster: the master lists the finished application, and each worker
    # ran an executor of it (one folder per executor under the workers' work folder).
    finished = spark_standalone.state()["completedapps"]
    assert len(finished) == 1, finished
    executors = list((tmp_path / "spark" / "work").glob(f"{finished[0]['id']}/*"))
    assert len(executors) == 2, executors
