"""Benchmark of the balance job: records per second from Parquet and from Kafka on local[2],
against a plain pandas version of the same aggregation over the same Parquet.

    .venv/bin/python benchmarks/analytics_bench.py [--records 1000000,10000000]
        [--brokers 1000] [--bootstrap-servers HOST:PORT] [--work-dir DIR]

It generates metric records (one record = one broker's sample, `--brokers` brokers
sampled every 10 s, two partitions per record), writes them as the job's flat Parquet
tables and, with --bootstrap-servers, as schema-v1 JSON to a Kafka topic; then times the
whole balance job from each source (every output table, the score per window, the
charts), cold and then warm in the same session, Spark only reading the columns the job
uses (a floor under any job over these tables), and the pandas baseline. Peak memory is
the highest resident set size sampled during each phase: the Spark driver JVM plus this
process for Spark, this process for the peers. Targets: the whole job within 3 x the
read floor, cold and warm; at 10M at least as fast as pandas. Polars and DuckDB, over the
same Parquet, are printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import cast

import numpy as np
import psutil
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics import balance, metrics
from analytics.balance_run import BalanceOptions, run_balance
from analytics.metrics import ParsedMetrics, parse_metric_records
from analytics.session import SparkSettings, build_spark_session
from analytics.sources import read_kafka_topics, read_normalised_parquet
from benchmarks.analytics_peers import duckdb_balance, polars_balance
from planner.pki.client_settings import InternalClient, admin_client_in

T0_MS = 1_767_225_600_000
INTERVAL_S = 10
TOPICS = 20
PARTITIONS_PER_RECORD = 2
WINDOW = "5 minutes"
WINDOW_MS = 300_000


@dataclass
class Measurement:
    seconds: float
    peak_rss_bytes: int
    cpu_seconds: float = 0.0
    """CPU time this process and its children (the JVM) used in the span: on a shared
    machine the wall time depends on the other load, this much less."""
    phases: dict[str, float] = field(default_factory=dict)
    """The job's own split of its time (the summary's `phases_s`)."""


class PeakMemory:
    """Samples the resident memory of this process and its children (the JVM) every 50 ms."""

    def __init__(self, include_children: bool) -> None:
        self.include_children = include_children
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        process = psutil.Process()
        total = process.memory_info().rss
        if self.include_children:
            for child in process.children(recursive=True):
                with suppress(psutil.NoSuchProcess):
                    total += child.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(0.05)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def cpu_seconds(include_children: bool) -> float:
    """User + system CPU time of this process and (optionally) its live children."""
    process = psutil.Process()
    processes = [process, *(process.children(recursive=True) if include_children else [])]
    total = 0.0
    for each in processes:
        with suppress(psutil.NoSuchProcess):
            times = each.cpu_times()
            total += times.user + times.system
    return total


@contextmanager
def measured(include_children: bool) -> Iterator[Measurement]:
    measurement = Measurement(0.0, 0)
    with PeakMemory(include_children) as memory:
        cpu_before = cpu_seconds(include_children)
        started = time.perf_counter()
        yield measurement
        measurement.seconds = time.perf_counter() - started
        measurement.cpu_seconds = cpu_seconds(include_children) - cpu_before
    measurement.peak_rss_bytes = memory.peak


def generate_tables(spark: SparkSession, records: int, brokers: int, folder: Path) -> None:
    """The job's flat tables for `records` samples: one broker in ten carries three times
    the load, so the job has hot brokers to find."""
    ids = spark.range(records)
    broker = (F.col("id") % brokers).cast("int")
    step = F.col("id") / brokers
    weight = F.when(broker % 10 == 0, 3.0).otherwise(1.0)
    noise = 0.9 + 0.2 * F.rand(seed=7)
    values = {
        "bytes_in_per_s": 1e6 * weight * noise,
        "bytes_out_per_s": 2e6 * weight * noise,
        "replication_bytes_in_per_s": 2e6 * noise,
        "replication_bytes_out_per_s": 2e6 * noise,
        "leader_count": (100 * weight).cast("bigint"),
        "partition_count": F.lit(300).cast("bigint"),
        "log_size_bytes": (F.floor(step) * 1000 * weight + 1e9).cast("bigint"),
        "host_cpu_percent": 20.0 * weight * noise,
    }
    samples = ids.select(
        F.lit("bench").alias("cluster"),
        broker.alias("broker_id"),
        F.concat(F.lit("zone-"), (broker % 3).cast("string")).alias("rack"),
        F.timestamp_millis(F.lit(T0_MS) + F.floor(step).cast("bigint") * INTERVAL_S * 1000).alias(
            "timestamp"
        ),
        F.lit(float(INTERVAL_S)).alias("interval_s"),
        *[
            values.get(name, F.lit(0))
            .cast("double" if kind == metrics.NUMBER else "bigint")
            .alias(name)
            for name, kind in metrics.BROKER_FIELDS
        ],
        *[
            values.get(f"host_{name}", F.lit(0))
            .cast("double" if kind == metrics.NUMBER else "bigint")
            .alias(f"host_{name}")
            for name, kind in metrics.HOST_FIELDS
        ],
        F.lit(0).alias("read_errors"),
    )
    samples.write.mode("overwrite").parquet(str(folder / "broker_metrics"))
    identity = ["cluster", "broker_id", "rack", "timestamp"]
    written = spark.read.parquet(str(folder / "broker_metrics"))
    topic = F.concat(F.lit("t"), (F.col("broker_id") % TOPICS).cast("string"))
    written.select(
        *identity,
        topic.alias("topic"),
        F.col("bytes_in_per_s"),
        F.col("bytes_out_per_s"),
        (F.col("bytes_in_per_s") / 100).alias("messages_in_per_s"),
    ).write.mode("overwrite").parquet(str(folder / "topic_metrics"))
    written.select(
        *identity, F.explode(F.sequence(F.lit(0), F.lit(PARTITIONS_PER_RECORD - 1))).alias("j")
    ).select(
        *identity,
        topic.alias("topic"),
        (F.col("broker_id") * PARTITIONS_PER_RECORD + F.col("j")).cast("int").alias("partition"),
        (F.col("j") == 0).alias("leader"),
        (F.unix_millis("timestamp") - T0_MS + F.col("j")).cast("bigint").alias("size_bytes"),
        F.lit(None).cast("bigint").alias("log_end_offset"),
    ).write.mode("overwrite").parquet(str(folder / "partition_metrics"))


def pandas_balance(folder: Path, hot_threshold: float = balance.DEFAULT_HOT_THRESHOLD) -> int:
    """The same aggregation as the Spark job, in plain pandas: broker and zone load per
    window, per-resource spread, per-partition load. Returns the broker-window rows."""
    frame = pq.read_table(
        folder / "broker_metrics",
        columns=[
            "broker_id", "rack", "timestamp", "bytes_in_per_s", "bytes_out_per_s",
            "replication_bytes_in_per_s", "replication_bytes_out_per_s", "log_size_bytes",
            "host_log_dir_used_bytes", "partition_count", "leader_count", "host_cpu_percent",
        ],
    ).to_pandas()  # fmt: skip
    frame["window_start"] = frame["timestamp"].dt.floor("5min")
    frame["total_in"] = frame["bytes_in_per_s"] + frame["replication_bytes_in_per_s"].fillna(0.0)
    frame["total_out"] = frame["bytes_out_per_s"] + frame["replication_bytes_out_per_s"].fillna(0.0)
    frame["disk"] = frame["log_size_bytes"].fillna(frame["host_log_dir_used_bytes"])
    frame = frame.sort_values("timestamp", kind="stable")
    grouped = frame.groupby(["window_start", "broker_id"], sort=False)
    load = grouped.agg(
        rack=("rack", "last"),
        bytes_in_per_s=("total_in", "mean"),
        bytes_out_per_s=("total_out", "mean"),
        leader_bytes_in_per_s=("bytes_in_per_s", "mean"),
        disk_bytes=("disk", "last"),
        partitions=("partition_count", "last"),
        leaders=("leader_count", "last"),
        cpu_percent=("host_cpu_percent", "mean"),
    ).reset_index()
    del frame, grouped
    zones = load.groupby(["window_start", "rack"]).agg(
        **{r: (r, "mean" if r == balance.CPU else "sum") for r in balance.RESOURCES}
    )
    for table, entity in (
        (load.set_index(["window_start", "broker_id"]), "broker"),
        (zones, "zone"),
    ):
        long = table[list(balance.RESOURCES)].stack().rename("value").reset_index()
        long.columns = ["window_start", entity, "resource", "value"]
        stats = long.groupby(["window_start", "resource"])["value"].agg(
            ["mean", "std", "max", "sum", "count"]
        )
        stats["std"] = long.groupby(["window_start", "resource"])["value"].std(ddof=0)
        stats["cv"] = np.where(stats["mean"] > 0, stats["std"] / stats["mean"], 0.0)
        stats["max_over_mean"] = np.where(stats["mean"] > 0, stats["max"] / stats["mean"], 1.0)
        mean = long.groupby(["window_start", "resource"])["value"].transform("mean")
        stats["hot_count"] = (
            (long["value"] > hot_threshold * mean)
            .groupby([long["window_start"], long["resource"]])
            .sum()
        )

    partitions = pq.read_table(folder / "partition_metrics").to_pandas()
    topics = pq.read_table(folder / "topic_metrics").to_pandas()
    for table in (partitions, topics):
        table["window_start"] = table["timestamp"].dt.floor("5min")
    partitions = partitions.sort_values("timestamp", kind="stable")
    replica = (
        partitions.groupby(["window_start", "broker_id", "topic", "partition"], sort=False)
        .agg(leader=("leader", "last"), first=("size_bytes", "first"), last=("size_bytes", "last"))
        .reset_index()
    )
    replica["growth"] = (replica["last"] - replica["first"]).clip(lower=0).astype(float)
    rates = topics.groupby(["window_start", "broker_id", "topic"]).agg(
        topic_in=("bytes_in_per_s", "mean"), topic_out=("bytes_out_per_s", "mean")
    )
    led = replica[replica["leader"]].join(rates, on=["window_start", "broker_id", "topic"])
    keys = [led["window_start"], led["broker_id"], led["topic"]]
    total_growth = led.groupby(keys)["growth"].transform("sum")
    count = led.groupby(keys)["growth"].transform("count")
    share = np.where(
        total_growth > 0, led["growth"] / total_growth.where(total_growth > 0, 1), 1.0 / count
    )
    led["bytes_in_per_s"] = led["topic_in"].fillna(0.0) * share
    led["bytes_out_per_s"] = led["topic_out"].fillna(0.0) * share
    led.groupby(["window_start", "topic", "partition"]).agg(
        bytes_in_per_s=("bytes_in_per_s", "sum"), bytes_out_per_s=("bytes_out_per_s", "sum")
    )
    return len(load)


def produce_json_records(kafka: InternalClient, topic: str, records: int, brokers: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from analytics.testing import metric_record

    admin = AdminClient(kafka.librdkafka())
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])[topic].result(
        timeout=60
    )
    producer = Producer(
        {
            **kafka.librdkafka(),
            "linger.ms": 50,
            "compression.type": "lz4",
            "batch.size": 1 << 20,
        }
    )
    for index in range(records):
        broker, step = index % brokers, index // brokers
        record = metric_record(
            broker,
            T0_MS + step * INTERVAL_S * 1000,
            cluster="bench",
            rack=f"zone-{broker % 3}",
            bytes_in_per_s=1e6 * (3.0 if broker % 10 == 0 else 1.0),
            partitions=[
                {
                    "topic": f"t{broker % TOPICS}",
                    "partition": broker * 2 + j,
                    "leader": j == 0,
                    "size_bytes": step,
                }
                for j in range(PARTITIONS_PER_RECORD)
            ],
        )
        while True:
            try:
                producer.produce(topic, key=str(broker).encode(), value=json.dumps(record).encode())
                break
            except BufferError:
                producer.poll(0.1)
        if index % 10_000 == 0:
            producer.poll(0)
    producer.flush(600)


def parsed_from_kafka(spark: SparkSession, kafka: InternalClient, topic: str) -> ParsedMetrics:
    return parse_metric_records(read_kafka_topics(spark, kafka, [topic]))


def job_timings(event_log_dir: Path, since_ms: int, until_ms: int) -> list[str]:
    """Per Spark job (and its stages) started in [since_ms, until_ms], from the event log:
    where the job's time goes. The event log is what the Spark UI shows, as JSON lines."""
    jobs: dict[int, dict[str, object]] = {}
    stages: dict[int, tuple[str, int, int, int]] = {}
    # Spark 4 writes a folder of rolling files per application.
    for log in sorted(event_log_dir.rglob("events_*")):
        with log.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the line Spark is writing now
                kind = event.get("Event")
                if kind == "SparkListenerJobStart":
                    properties = event.get("Properties") or {}
                    jobs[event["Job ID"]] = {
                        "start": event["Submission Time"],
                        "site": properties.get("callSite.short", "?"),
                        "stages": [info["Stage ID"] for info in event["Stage Infos"]],
                    }
                elif kind == "SparkListenerJobEnd" and event["Job ID"] in jobs:
                    jobs[event["Job ID"]]["end"] = event["Completion Time"]
                elif kind == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    stages[info["Stage ID"]] = (
                        info["Stage Name"],
                        info["Number of Tasks"],
                        info.get("Submission Time", 0),
                        info.get("Completion Time", 0),
                    )
    lines = []
    busy = 0
    for job_id, job in sorted(jobs.items()):
        start = int(str(job["start"]))
        end = int(str(job.get("end", start)))
        if not since_ms <= start <= until_ms:
            continue
        busy += end - start
        lines.append(f"    job {job_id:3d} {end - start:6d} ms  {job['site']}")
        for stage_id in cast(list[int], job["stages"]):
            if stage_id in stages:
                name, tasks, submitted, completed = stages[stage_id]
                lines.append(
                    f"        stage {stage_id:3d} {completed - submitted:6d} ms  {tasks:3d} tasks  {name}"
                )
    lines.append(f"    in Spark jobs: {busy} ms of {until_ms - since_ms} ms")
    return lines


def timed_spark_job(
    spark: SparkSession, read: Callable[[], ParsedMetrics], out: Path, parsed_here: bool
) -> Measurement:
    """The whole balance job from a source: every table, score per window, charts.

    `parsed_here`: the source is raw records (Kafka), so the job also writes the
    quarantine and the flat tables, as it does in use.
    """
    with measured(include_children=True) as measurement:
        options = BalanceOptions(window=WINDOW, write_normalised=parsed_here)
        result = run_balance(spark, read(), options, out)
    measurement.phases = result.summary["phases_s"]
    return measurement


# The columns the balance job reads from each flat table.
FLOOR_COLUMNS = {
    "broker_metrics": (
        "cluster", "broker_id", "rack", "timestamp", "bytes_in_per_s", "bytes_out_per_s",
        "replication_bytes_in_per_s", "replication_bytes_out_per_s", "log_size_bytes",
        "host_log_dir_used_bytes", "partition_count", "leader_count", "host_cpu_percent",
    ),
    "topic_metrics": ("cluster", "broker_id", "timestamp", "topic", "bytes_in_per_s", "bytes_out_per_s"),
    "partition_metrics": (
        "cluster", "broker_id", "timestamp", "topic", "partition", "leader", "size_bytes",
    ),
}  # fmt: skip


def read_floor(spark: SparkSession, folder: Path) -> Measurement:
    """Only reading the columns the job uses, into Spark's no-op sink: a floor under any
    job over these tables on this session, since every job must at least read them."""
    with measured(include_children=True) as measurement:
        for table, columns in FLOOR_COLUMNS.items():
            frame = spark.read.parquet(str(folder / table)).select(*columns)
            frame.write.mode("overwrite").format("noop").save()
    return measurement


def cold_in_child(part: str, folder: Path, out: Path) -> Measurement:
    """`part` ("job" or "floor") timed once in a fresh process, so a fresh JVM: the cold
    figures of the job and of its floor are each paid in full, neither warming the other.
    The child's session start is excluded, as in the warm figures."""
    completed = subprocess.run(
        [sys.executable, __file__, "--cold-part", part, "--cold-folder", str(folder),
         "--cold-out", str(out)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    figures = json.loads(completed.stdout.strip().splitlines()[-1])
    return Measurement(**figures)


def run_cold_part(part: str, folder: Path, out: Path) -> int:
    spark = build_spark_session(SparkSettings(app_name=f"kaas-analytics-bench-cold-{part}"))
    try:
        if part == "floor":
            run = read_floor(spark, folder)
        else:
            run = timed_spark_job(
                spark, partial(read_normalised_parquet, spark, folder), out, parsed_here=False
            )
    finally:
        spark.stop()
    print(json.dumps(run.__dict__))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--records", default="1000000,10000000", help="comma-separated record counts"
    )
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--bootstrap-servers", help="a Kafka cluster for the Kafka-source part")
    parser.add_argument(
        "--client-dir",
        type=Path,
        default=Path(os.environ.get("KAAS_HOME", str(Path.home() / ".kaas" / "local"))) / "client",
        help="the admin identity for the cluster's internal listener (default: $KAAS_HOME/client)",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        help="where generated data goes (default: a temporary folder); kept, and reused by "
        "the next run, when given",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="write Spark's event log and print each Spark job and stage of the timed span",
    )
    # Internal: one cold measurement in a child process (see cold_in_child).
    parser.add_argument("--cold-part", choices=("job", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--cold-folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cold-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cold_part:
        return run_cold_part(args.cold_part, args.cold_folder, args.cold_out)
    counts = [int(text) for text in args.records.split(",") if text.strip()]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kaas-analytics-bench-"))
    work.mkdir(parents=True, exist_ok=True)

    event_log = work / "event-log"
    extra_conf: tuple[tuple[str, str], ...] = ()
    if args.profile:
        shutil.rmtree(event_log, ignore_errors=True)
        event_log.mkdir(parents=True)
        extra_conf = (
            ("spark.eventLog.enabled", "true"),
            ("spark.eventLog.dir", str(event_log)),
            ("spark.eventLog.compress", "false"),
        )
    spark = build_spark_session(
        SparkSettings(app_name="kaas-analytics-bench", extra_conf=extra_conf)
    )
    print(
        f"machine: {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; Spark local[2], driver 2g"
    )
    rows = []
    try:
        for records in counts:
            folder = work / f"records-{records}"
            started = time.perf_counter()
            generated = folder / "GENERATED"
            if args.work_dir is None or not generated.exists():
                generate_tables(spark, records, args.brokers, folder)
                generated.write_text(f"{records} {args.brokers}\n")
            print(f"\n{records:,} records ({args.brokers} brokers, {records // args.brokers} samples each): "
                  f"generated in {time.perf_counter() - started:.1f} s")  # fmt: skip
            load_before = os.getloadavg()[0]
            cold_floor = cold_in_child("floor", folder, work / "out-cold")
            spark_run = cold_in_child("job", folder, work / "out-cold")
            started_ms = int(time.time() * 1000)
            # This session's first run (profiled with --profile), then the timed warm one.
            timed_spark_job(
                spark,
                partial(read_normalised_parquet, spark, folder),
                work / "out-parquet",
                parsed_here=False,
            )
            ended_ms = int(time.time() * 1000)
            # The same job again in the now warm JVM (its generated code compiled and
            # JIT-optimised): what a long-lived driver would see, beside the batch job's
            # cold figure above.
            warm_run = timed_spark_job(
                spark,
                partial(read_normalised_parquet, spark, folder),
                work / "out-parquet",
                parsed_here=False,
            )
            floor_run = read_floor(spark, folder)
            peers: dict[str, Measurement] = {}
            agreed: dict[str, int] = {}
            for name, peer in (
                ("pandas", pandas_balance),
                ("Polars", polars_balance),
                ("DuckDB", duckdb_balance),
            ):
                with measured(include_children=False) as peers[name]:
                    agreed[name] = peer(folder)
            if len(set(agreed.values())) != 1:
                raise SystemExit(f"the peers disagree on the broker-window rows: {agreed}")
            print(
                f"  load average before: {load_before:.1f} (2 cores; other work on the machine slows every figure)"
            )
            print(
                f"  {'engine':<34} {'wall s':>7} {'records/s':>11} {'CPU s':>7} {'peak MiB':>9} {'x floor':>8}"
            )
            table = [
                ("Spark, whole job, cold", spark_run),
                ("Spark, reading the columns, cold", cold_floor),
                ("Spark, whole job, warm", warm_run),
                ("Spark, reading the columns, warm", floor_run),
                ("pandas (1 thread)", peers["pandas"]),
                ("Polars (all cores)", peers["Polars"]),
                ("DuckDB (all cores)", peers["DuckDB"]),
            ]
            for label, run in table:
                print(
                    f"  {label:<34} {run.seconds:7.1f} {records / run.seconds:11,.0f} "
                    f"{run.cpu_seconds:7.1f} {run.peak_rss_bytes / 2**20:9,.0f} "
                    f"{run.seconds / (cold_floor if 'cold' in label else floor_run).seconds:8.2f}"
                )
            for label, run in (("cold", spark_run), ("warm", warm_run)):
                print(
                    f"  Spark {label}, the job's phases (s): "
                    + ", ".join(f"{name} {seconds:.1f}" for name, seconds in run.phases.items())
                )
            for label, run in table[4:]:
                print(
                    f"  Spark cold / {label.split()[0]}: {run.seconds / spark_run.seconds:.2f}x the speed, "
                    f"warm {run.seconds / warm_run.seconds:.2f}x"
                )
            for label, run, floor in (
                ("cold", spark_run, cold_floor),
                ("warm", warm_run, floor_run),
            ):
                verdict = "met" if run.seconds <= 3 * floor.seconds else "NOT met"
                print(f"  Spark {label} within 3 x its read floor: {verdict} "
                      f"({run.seconds / floor.seconds:.2f} x wall, "
                      f"{run.cpu_seconds / max(floor.cpu_seconds, 1e-9):.2f} x CPU)")  # fmt: skip
            spark_rate = records / spark_run.seconds
            pandas_rate = records / peers["pandas"].seconds
            if args.profile:
                print("  Spark jobs of the timed run (from the event log):")
                print("\n".join(job_timings(event_log, started_ms, ended_ms)))
            rows.append((records, spark_rate, pandas_rate))

            if args.bootstrap_servers:
                topic = f"_kaas_metrics_bench_{records}_{int(time.time())}"
                started = time.perf_counter()
                kafka = admin_client_in(args.client_dir, args.bootstrap_servers)
                produce_json_records(kafka, topic, records, args.brokers)
                print(f"  produced to {topic} in {time.perf_counter() - started:.1f} s")
                kafka_run = timed_spark_job(
                    spark,
                    partial(parsed_from_kafka, spark, kafka, topic),
                    work / "out-kafka",
                    parsed_here=True,
                )
                print(f"  Spark from Kafka:   {kafka_run.seconds:7.1f} s  {records / kafka_run.seconds:12,.0f} records/s  "
                      f"peak {kafka_run.peak_rss_bytes / 2**20:,.0f} MiB")  # fmt: skip
            else:
                print(
                    "  Spark from Kafka:   skipped: no --bootstrap-servers given (needs a running cluster)"
                )
            if args.work_dir is None:
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        spark.stop()
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
