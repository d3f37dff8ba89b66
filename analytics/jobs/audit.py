"""The audit job: did Kafka keep every message the producers had acknowledged, and how far
behind are the consumer groups?

    kaas analytics audit --bootstrap-servers HOST:PORT --ledger LEDGER.jsonl --out DIR
        [--state DIR --cluster NAME]   (incremental: count only what arrived since the last run)
        [--statsd HOST:PORT --cluster NAME]   (the completeness as statsd gauges)
    spark-submit --jars JARS analytics/jobs/audit.py --bootstrap-servers HOST:PORT --ledger ... --out DIR

Exit status: 0 when completeness is 100%, 3 when messages are missing (unless
--allow-incomplete), 2 on bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # spark-submit runs this file as a script: make the repository's packages importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse
import json
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from analytics import audit, kafka_offsets
from analytics.incremental_audit import audit_options, kept_counts, run_incremental_audit
from analytics.jobs.common import EXIT_OK, run_with_session
from analytics.session import SparkSettings, launched_by_spark_submit
from analytics.sources import (
    SourceError,
    ensure_kafka_connector,
    read_kafka_stream,
    read_kafka_topics,
    read_ledger,
)
from analytics.writeback import audit_gauges, parse_statsd_address, send_gauges
from planner.pki.authority import PkiError
from planner.pki.client_settings import InternalClient, admin_client_in

EXIT_INCOMPLETE = 3
SUMMARY_SCHEMA_VERSION = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kaas analytics audit",
        description="Compare the producers' ledger with what Kafka holds; report consumer lag.",
    )
    parser.add_argument("--bootstrap-servers", required=True, help="the Kafka cluster to audit")
    parser.add_argument(
        "--client-dir",
        type=Path,
        required=True,
        help="folder of the admin identity for the internal listener (cluster.json's client files)",
    )
    parser.add_argument(
        "--ledger", type=Path, required=True, help="the producers' ledger (JSON lines)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--topics", help="comma-separated topics (default: every topic in the ledger)"
    )
    parser.add_argument("--groups", help="comma-separated consumer groups (default: every group)")
    parser.add_argument(
        "--allow-incomplete", action="store_true", help="exit 0 even when messages are missing"
    )
    parser.add_argument(
        "--state",
        type=Path,
        help="incremental mode: keep a checkpoint and the counts per window here (under "
        "STATE/CLUSTER/audit) and read only the records that arrived since the last run "
        "(needs --cluster)",
    )
    parser.add_argument(
        "--statsd",
        help="send the completeness to this statsd HOST:PORT as kaas.<cluster>.audit.* gauges",
    )
    parser.add_argument(
        "--cluster",
        help="the audited cluster's name (whose counts --state keeps; in --statsd's gauges)",
    )
    return parser


def _split(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def completeness_tables(
    ledger: DataFrame, kafka_records: DataFrame, window_s: int
) -> tuple[DataFrame, DataFrame]:
    """Per-window completeness and its totals, from the ledger and the topics' records."""
    per_window = audit.completeness(
        audit.produced_counts(ledger), audit.kafka_counts(kafka_records, window_s)
    )
    return per_window, audit.completeness_totals(per_window)


@dataclass(frozen=True)
class IncrementalAudit:
    """--state: where the incremental counts live, and whose they are."""

    state_dir: Path
    cluster: str


@dataclass(frozen=True)
class AuditOptions:
    kafka: InternalClient
    ledger: Path
    out: Path
    topics: tuple[str, ...] = ()
    """Topics to audit; empty means every topic the ledger names."""
    groups: tuple[str, ...] = ()
    """Consumer groups whose lag to report; empty means every group."""
    allow_incomplete: bool = False
    incremental: IncrementalAudit | None = None
    """Count only what arrived since the last run, into the kept counts (None: read all)."""
    statsd: tuple[str, int] | None = None
    """Where the completeness gauges go (with `cluster`); None: nowhere."""
    cluster: str | None = None


@dataclass(frozen=True)
class AuditResult:
    summary: dict[str, Any]
    exit_code: int


def _lag_tables(
    spark: SparkSession, options: AuditOptions, topics: list[str]
) -> tuple[DataFrame, DataFrame]:
    servers = options.kafka
    groups = list(options.groups) or kafka_offsets.consumer_groups(servers)
    committed = kafka_offsets.committed_offsets(servers, groups, topics)
    assigned = kafka_offsets.assigned_partitions(servers, groups, topics)
    ranges = kafka_offsets.partition_offsets(servers, topics)
    committed_frame = spark.createDataFrame(
        [asdict(row) for row in committed],
        "group string, topic string, partition int, committed_offset bigint",
    )
    assigned_frame = spark.createDataFrame(
        [asdict(row) for row in assigned], "group string, topic string, partition int"
    )
    ranges_frame = spark.createDataFrame(
        [asdict(row) for row in ranges],
        "topic string, partition int, start_offset bigint, end_offset bigint",
    )
    lag = audit.consumer_lag(committed_frame, ranges_frame, assigned_frame)
    return lag, audit.lag_per_group(lag)


def run_audit(spark: SparkSession, options: AuditOptions) -> AuditResult:
    """Completeness and lag: Parquet tables and summary.json in `options.out`."""
    ensure_kafka_connector(SparkSettings.from_env().jars_dir, launched_by_spark_submit())
    ledger = read_ledger(spark, options.ledger).cache()
    window_s = audit.ledger_window_s(ledger)
    topics = list(options.topics) or sorted(
        row[0] for row in ledger.select("topic").distinct().collect()
    )
    if not topics:
        raise SourceError(f"ledger {options.ledger} names no topic")
    produced = audit.produced_counts(ledger.where(F.col("topic").isin(topics)))
    incremental: dict[str, Any] | None = None
    if options.incremental is None:
        records = read_kafka_topics(spark, options.kafka, topics).select(
            "topic", "partition", "offset", "timestamp"
        )
        counted = audit.completeness(produced, audit.kafka_counts(records, window_s))
    else:
        state = audit_options(options.incremental.state_dir, options.incremental.cluster, window_s)
        run = run_incremental_audit(spark, read_kafka_stream(spark, options.kafka, topics), state)
        incremental = {
            "state": str(state.cluster_dir),
            "records_read": run.records_read,
            "counted": run.valid,
            "quarantined": run.quarantined,
            "late": run.late,
            "windows_updated": len(run.windows_updated),
        }
        counted = audit.completeness(produced, kept_counts(spark, state))
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    # Written once and read back: the totals and the missing windows then come from the
    # small written table, not from another read of the topics through Kafka.
    counted.write.mode("overwrite").parquet(str(out / "completeness"))
    per_window = spark.read.schema(counted.schema).parquet(str(out / "completeness"))
    totals = audit.completeness_totals(per_window)
    lag, lag_groups = _lag_tables(spark, options, topics)
    lag.write.mode("overwrite").parquet(str(out / "lag"))
    total = totals.collect()[0].asDict()
    groups = [row.asDict() for row in lag_groups.collect()]
    summary: dict[str, Any] = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "job": "audit",
        "topics": topics,
        "ledger_window_s": window_s,
        "completeness": total,
        "windows_missing": [
            row.asDict()
            for row in per_window.where(F.col("missing") > 0)
            .orderBy("topic", "partition", "window_start_ms")
            .limit(20)
            .collect()
        ],
        "consumer_groups": groups,
        "incremental": incremental,
        "outputs": {"completeness": str(out / "completeness"), "lag": str(out / "lag")},
    }
    (out / "summary.json").write_text(
        json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n"
    )

    print(
        f"completeness {total['completeness_percent']}%: {total['in_kafka']} of {total['produced']} "
        f"acknowledged messages in Kafka, {total['missing']} missing, {total['extra']} unledgered "
        f"({', '.join(topics)})"
    )
    if incremental is not None:
        print(
            f"incremental: {incremental['records_read']} records read since the last run, "
            f"{incremental['quarantined']} quarantined, {incremental['late']} late "
            f"({incremental['windows_updated']} windows updated; state {incremental['state']})"
        )
    for group in groups:
        print(
            f"group {group['group']}: lag {group['total_lag']} (worst partition {group['max_partition_lag']}, "
            f"{group['partitions_without_commit']} partitions without a commit)"
        )
    print(f"summary: {out / 'summary.json'}")
    if options.statsd is not None and options.cluster is not None:
        gauges = audit_gauges(total)
        send_gauges(*options.statsd, options.cluster, gauges)
        print(f"completeness sent to statsd {options.statsd[0]}:{options.statsd[1]}")
    incomplete = total["missing"] > 0 and not options.allow_incomplete
    return AuditResult(summary=summary, exit_code=EXIT_INCOMPLETE if incomplete else EXIT_OK)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.state is not None and not args.cluster:
        print(
            "kaas analytics audit: error: --state needs --cluster (whose counts it keeps)",
            file=sys.stderr,
        )
        return 2
    statsd = None
    if args.statsd:
        if not args.cluster:
            print("kaas analytics audit: error: --statsd needs --cluster", file=sys.stderr)
            return 2
        try:
            statsd = parse_statsd_address(args.statsd)
        except ValueError as exc:
            print(f"kaas analytics audit: error: {exc}", file=sys.stderr)
            return 2
    if not args.ledger.exists():
        print(f"kaas analytics audit: error: ledger {args.ledger} does not exist", file=sys.stderr)
        return 2
    try:
        kafka = admin_client_in(args.client_dir, args.bootstrap_servers)
    except PkiError as exc:
        print(f"kaas analytics audit: error: {exc}", file=sys.stderr)
        return 2
    options = AuditOptions(
        kafka=kafka,
        ledger=args.ledger,
        out=args.out,
        topics=tuple(_split(args.topics)),
        groups=tuple(_split(args.groups)),
        allow_incomplete=args.allow_incomplete,
        incremental=IncrementalAudit(args.state, args.cluster) if args.state is not None else None,
        statsd=statsd,
        cluster=args.cluster,
    )
    return run_with_session("audit", lambda spark: run_audit(spark, options).exit_code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
