"""Benchmark of the incremental balance job's cost against the length of its history: the
time of one run (Trigger.AvailableNow) after 1 hour of new records, on top of 1, 7 and 30
days of history already processed into the same state.

    .venv/bin/python benchmarks/analytics_incremental_bench.py [--days 1,7,30]
        [--brokers 3] [--interval-s 60] [--partitions 12] [--work-dir DIR]

Records are schema-v1 metric records as the agents write them (`--brokers` brokers, one
sample per broker every `--interval-s` seconds, each naming `--partitions` partitions
and 3 topics), one JSON-lines file per hour, read with Spark's file source: the same
query, trigger and micro-batch work as over the metrics topic, without a Kafka cluster
on the shared machine. The history is processed by the job itself, in micro-batches of
up to a week (untimed); then one new hour is dropped in and the run that reads it is
timed, `--new-hours` times at each history length. Target: flat, i.e. a run
after 30 days of history costs what one after 1 day does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.incremental import IncrementalOptions, RunCounts, run_incremental
from analytics.session import SparkSettings, build_spark_session
from analytics.testing import metric_record
from benchmarks.analytics_bench import cpu_seconds

T0_MS = 1_767_225_600_000
HOUR_MS = 3_600_000
TOPICS = 3


@dataclass(frozen=True)
class Rate:
    brokers: int
    interval_s: int
    partitions: int

    @property
    def records_per_hour(self) -> int:
        return self.brokers * 3600 // self.interval_s


@dataclass
class TimedRun:
    history_hours: int
    seconds: float
    cpu_seconds: float
    counts: RunCounts
    load: float


def hour_lines(hour: int, rate: Rate) -> list[str]:
    """One hour of samples of every broker; broker 0 carries three times the traffic."""
    lines = []
    for step in range(3600 // rate.interval_s):
        timestamp_ms = T0_MS + hour * HOUR_MS + step * rate.interval_s * 1000
        for broker in range(rate.brokers):
            weight = 3.0 if broker == 0 else 1.0
            record = metric_record(
                broker,
                timestamp_ms,
                cluster="bench",
                rack=f"zone-{broker % 3}",
                bytes_in_per_s=1e6 * weight,
                log_size_bytes=hour * 1_000_000 + step,
                topics=[
                    {"topic": f"t{topic}", "bytes_in_per_s": 3e5 * weight, "bytes_out_per_s": 6e5}
                    for topic in range(TOPICS)
                ],
                partitions=[
                    {
                        "topic": f"t{index % TOPICS}",
                        "partition": index,
                        "leader": index % rate.brokers == broker,
                        "size_bytes": hour * 100_000 + step * 10 + index,
                    }
                    for index in range(rate.partitions)
                ],
            )
            lines.append(json.dumps(record, separators=(",", ":")))
    return lines


def drop_hour(incoming: Path, hour: int, rate: Rate) -> None:
    # Written aside and renamed in, so the file source never sees half a file.
    temporary = incoming.parent / f".hour-{hour:05d}.jsonl"
    temporary.write_text("\n".join(hour_lines(hour, rate)) + "\n")
    temporary.rename(incoming / f"hour-{hour:05d}.jsonl")


def run_once(
    spark: SparkSession, incoming: Path, options: IncrementalOptions, hours_per_batch: int
) -> RunCounts:
    # The history goes in as micro-batches of `hours_per_batch` hourly files (the
    # untimed set-up); a new hour is one file, so one batch.
    stream = spark.readStream.option("maxFilesPerTrigger", hours_per_batch).text(str(incoming))
    return run_incremental(spark, stream, options)


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--days", default="1,7,30", help="history lengths, comma-separated")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--interval-s", type=int, default=60, help="seconds between samples")
    parser.add_argument("--partitions", type=int, default=12, help="partitions per record")
    parser.add_argument("--new-hours", type=int, default=3, help="timed runs per history length")
    parser.add_argument("--work-dir", type=Path, help="default: a temporary folder, removed")
    args = parser.parse_args(argv)
    days = sorted(int(text) for text in args.days.split(",") if text.strip())
    rate = Rate(args.brokers, args.interval_s, args.partitions)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kaas-analytics-incremental-bench-"))
    shutil.rmtree(work / "incoming", ignore_errors=True)
    shutil.rmtree(work / "state", ignore_errors=True)
    incoming = work / "incoming"
    incoming.mkdir(parents=True)
    options = IncrementalOptions(state_dir=work / "state", cluster="bench")
    spark = build_spark_session(SparkSettings(app_name="kaas-analytics-incremental-bench"))
    print(
        f"machine: {psutil.cpu_count()} cores; Spark local[2]; rate: {rate.brokers} brokers, a "
        f"sample every {rate.interval_s} s each ({rate.records_per_hour:,} records/hour, "
        f"{rate.partitions} partitions per record); windows of {options.window}"
    )
    timed: list[TimedRun] = []
    hour = 0
    try:
        for day in days:
            started = time.perf_counter()
            while hour < day * 24:
                drop_hour(incoming, hour, rate)
                hour += 1
            dropped = time.perf_counter() - started
            history = run_once(spark, incoming, options, 24 * 7)
            print(
                f"history up to {day} days: {history.records_read:,} records in {history.batches} "
                f"micro-batches, {time.perf_counter() - started - dropped:.1f} s "
                f"(+{dropped:.1f} s writing the files)"
            )
            for _ in range(args.new_hours):
                drop_hour(incoming, hour, rate)
                hour += 1
                load = os.getloadavg()[0]
                cpu_before = cpu_seconds(include_children=True)
                started = time.perf_counter()
                counts = run_once(spark, incoming, options, 1)
                timed.append(
                    TimedRun(
                        history_hours=hour - 1,
                        seconds=time.perf_counter() - started,
                        cpu_seconds=cpu_seconds(include_children=True) - cpu_before,
                        counts=counts,
                        load=load,
                    )
                )
        state = options.cluster_dir
        print(
            f"\nstate after {hour} hours: {folder_bytes(state) / 2**20:,.1f} MiB, "
            f"{sum(1 for _ in (state / 'windows' / 'broker_load').glob('_bucket=*'))} hours of "
            "windows kept"
        )
        print(
            f"{'history':>10} {'records':>9} {'read':>6} {'windows':>8} {'wall s':>7} "
            f"{'CPU s':>6} {'wall x first':>12} {'CPU x first':>11} {'load':>5}"
        )
        for run in timed:
            print(
                f"{run.history_hours / 24:9.2f}d {run.history_hours * rate.records_per_hour:9,} "
                f"{run.counts.records_read:6,} {len(run.counts.windows_updated):8} "
                f"{run.seconds:7.2f} {run.cpu_seconds:6.1f} "
                f"{run.seconds / timed[0].seconds:12.2f} "
                f"{run.cpu_seconds / timed[0].cpu_seconds:11.2f} {run.load:5.1f}"
            )
        # CPU time is the work a run does; the wall time on a shared machine also
        # measures everyone else's load (printed beside each run).
        for measure in ("cpu_seconds", "seconds"):
            per_length: dict[int, float] = {}
            for run in timed:
                length = round(run.history_hours / 24)
                value = getattr(run, measure)
                per_length[length] = min(per_length.get(length, value), value)
            first, last = per_length[min(per_length)], per_length[max(per_length)]
            verdict = "flat" if last <= 1.5 * first else "NOT flat"
            print(
                f"best run's {'CPU' if measure == 'cpu_seconds' else 'wall'} time after "
                f"{max(per_length)} days / after {min(per_length)} day(s): {last / first:.2f}x "
                f"({verdict}: within 1.5x)"
            )
    finally:
        spark.stop()
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
