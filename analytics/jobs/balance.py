"""The balance job: how evenly the brokers carry the measured load, scored by the planner's
definition, compared with what the plan predicts.

    kaas analytics balance --bootstrap-servers HOST:PORT --out DIR [options]
    spark-submit --jars JARS analytics/jobs/balance.py --bootstrap-servers HOST:PORT --out DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # spark-submit runs this file as a script: make the repository's packages importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import argparse

from pyspark import StorageLevel
from pyspark.sql import SparkSession

from analytics import balance, layout
from analytics.balance_run import BalanceOptions, BalanceResult, now_iso, run_balance
from analytics.incremental import (
    DEFAULT_LATENESS,
    IncrementalOptions,
    RunCounts,
    latest_window_summary,
    run_incremental,
)
from analytics.jobs.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    INPUT_ERRORS,
    parse_utc_timestamp,
    run_with_session,
)
from analytics.metrics import ParsedMetrics, parse_metric_records
from analytics.session import SparkSettings, launched_by_spark_submit
from analytics.sources import (
    METRICS_TOPIC,
    SourceError,
    ensure_kafka_connector,
    read_json_lines,
    read_kafka_stream,
    read_kafka_topics,
    read_normalised_parquet,
)
from analytics.writeback import (
    StatsdScoreSender,
    ZooKeeperLoadWriter,
    ZooKeeperScoreWriter,
    parse_statsd_address,
    score_document,
)
from planner.pki.authority import Role
from planner.pki.client_settings import admin_client_in
from planner.pki.files import IdentityFiles


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kaas analytics balance",
        description="Score how evenly the brokers carry the load measured in the metrics topic.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--bootstrap-servers", help="read the metrics topic of this Kafka cluster")
    parser.add_argument(
        "--client-dir",
        type=Path,
        help="with --bootstrap-servers: folder of the admin identity for the internal listener "
        "(cluster.json's client files)",
    )
    source.add_argument("--json", type=Path, help="read raw metric records from JSON-lines file(s)")
    source.add_argument("--parquet", type=Path, help="read the flat tables an earlier run wrote")
    parser.add_argument(
        "--topic", default=METRICS_TOPIC, help="metrics topic (default %(default)s)"
    )
    parser.add_argument(
        "--cluster", help="only this cluster's records (needed when several are present)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument(
        "--window", default=balance.DEFAULT_WINDOW, help="window length (default %(default)s)"
    )
    parser.add_argument(
        "--hot-threshold",
        type=float,
        default=balance.DEFAULT_HOT_THRESHOLD,
        help="a broker is hot above this multiple of the mean (default %(default)s)",
    )
    parser.add_argument(
        "--layout",
        type=Path,
        help="the cluster's LAYOUT.json: compare with the plan, write measured load",
    )
    parser.add_argument("--plan", type=Path, help="a reassignment JSON: predict the load after it")
    parser.add_argument(
        "--layout-out",
        type=Path,
        help="where the measured LAYOUT.json goes (default OUT/LAYOUT.json)",
    )
    parser.add_argument(
        "--plan-applied-at", help="ISO time the plan was applied: splits the before/after chart"
    )
    parser.add_argument(
        "--zookeeper", help="write the latest score to /kaas/<cluster>/plan/score on this ensemble"
    )
    parser.add_argument(
        "--zookeeper-identity",
        type=Path,
        help="with --zookeeper: the folder of the admin certificate (ca.pem, admin.crt, "
        "admin.key; a local cluster's client/ folder) presented to ZooKeeper",
    )
    parser.add_argument("--statsd", help="send the latest score to this statsd HOST:PORT")
    parser.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    parser.add_argument(
        "--state",
        type=Path,
        help="incremental mode: keep a checkpoint and per-window results per cluster here and "
        "read only the records that arrived since the last run (needs --bootstrap-servers "
        "and --cluster)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="with --state: keep running, a micro-batch every --every, writing the score each time",
    )
    parser.add_argument(
        "--every",
        default="1 minute",
        help="--follow's processing-time trigger (default %(default)s)",
    )
    parser.add_argument(
        "--lateness",
        default=DEFAULT_LATENESS,
        help="with --state: how late a sample may arrive and still count (default %(default)s)",
    )
    return parser


def _options(args: argparse.Namespace) -> BalanceOptions:
    if args.zookeeper and args.zookeeper_identity is None:
        raise ValueError("--zookeeper needs --zookeeper-identity: ZooKeeper takes TLS clients only")
    if args.plan is not None and args.layout is None:
        raise ValueError(
            "--plan needs --layout: a reassignment only lists the partitions that move"
        )
    return BalanceOptions(
        window=args.window,
        hot_threshold=args.hot_threshold,
        cluster=args.cluster,
        plan_applied_at=parse_utc_timestamp(args.plan_applied_at) if args.plan_applied_at else None,
        layout_document=layout.load_json_file(args.layout, "layout") if args.layout else None,
        reassignment_document=layout.load_json_file(args.plan, "reassignment")
        if args.plan
        else None,
        layout_out=args.layout_out,
        write_normalised=args.parquet is None,
        charts=not args.no_charts,
    )


def _parsed(spark: SparkSession, args: argparse.Namespace) -> ParsedMetrics:
    if args.parquet is not None:
        return read_normalised_parquet(spark, args.parquet)
    if args.json is not None:
        raw = read_json_lines(spark, args.json)
    else:
        ensure_kafka_connector(SparkSettings.from_env().jars_dir, launched_by_spark_submit())
        # Kept once: parsing, quarantine and counts would otherwise each re-read the topic.
        if args.client_dir is None:
            raise SourceError(
                "--bootstrap-servers needs --client-dir (the internal listener is TLS)"
            )
        kafka = admin_client_in(args.client_dir, args.bootstrap_servers)
        raw = read_kafka_topics(spark, kafka, [args.topic]).persist(StorageLevel.MEMORY_AND_DISK)
    return parse_metric_records(raw)


def _write_back(args: argparse.Namespace, result: BalanceResult) -> None:
    summary = result.summary
    document = score_document(
        cluster=summary["cluster"],
        score=summary["score"]["latest"],
        window_start=summary["latest_window"]["start"],
        window_end=summary["latest_window"]["end"],
        brokers=summary["latest_window"]["brokers"],
        resources=summary["brokers"],
        computed_at=now_iso(),
    )
    if args.zookeeper:
        identity = IdentityFiles(args.zookeeper_identity, Role.ADMIN)
        path = ZooKeeperScoreWriter(args.zookeeper, identity).write(summary["cluster"], document)
        print(f"score written to ZooKeeper {path}")
        if result.measured_load is not None:
            load = result.measured_load
            path = ZooKeeperLoadWriter(args.zookeeper, identity).write(load)
            print(
                f"measured load of {len(load.partitions)} partitions "
                f"({load.window_start} .. {load.window_end}) written to ZooKeeper {path}"
            )
    if args.statsd:
        host, port = parse_statsd_address(args.statsd)
        sent = StatsdScoreSender(host, port).send(summary["cluster"], document)
        print(f"score sent to statsd {args.statsd} ({len(sent)} gauges)")


def report_lines(summary: dict[str, object]) -> list[str]:
    """The few lines a person reads after a run (make demo prints them)."""
    score = summary["score"]
    records = summary["records"]
    window = summary["latest_window"]
    assert isinstance(score, dict) and isinstance(records, dict) and isinstance(window, dict)
    latest = score["latest"]
    score_text = (
        f"{latest:.1f}/100"
        if latest is not None
        else f"unavailable ({score['unavailable_reason']})"
    )
    lines = [
        f"cluster {summary['cluster']}: balance score {score_text}, latest window "
        f"{window['start']} .. {window['end']}, {window['brokers']} brokers",
        f"records: {records['valid']} valid, {records['quarantined']} quarantined",
    ]
    brokers = summary["brokers"]
    assert isinstance(brokers, dict)
    for resource, stats in brokers.items():
        hot = ", ".join(stats["hot"]) or "none"
        lines.append(
            f"  {resource}: CV {stats['cv']:.3f}, max/mean {stats['max_over_mean']:.2f}, hot brokers: {hot}"
        )
    outputs = summary["outputs"]
    assert isinstance(outputs, dict)
    if "broker_load_chart" in outputs:
        lines.append(f"chart: {outputs['broker_load_chart']}")
    if "summary" in outputs:
        lines.append(f"summary: {outputs['summary']}")
    return lines


def _check_incremental(args: argparse.Namespace) -> None:
    if args.follow and args.state is None:
        raise ValueError("--follow needs --state (the folder of the incremental checkpoint)")
    if args.state is None:
        return
    if args.bootstrap_servers is None or args.cluster is None:
        raise ValueError("--state reads the metrics topic: give --bootstrap-servers and --cluster")
    if args.client_dir is None:
        raise ValueError("--state reads the metrics topic: give --client-dir (its listener is TLS)")
    balance.window_seconds(args.lateness)
    balance.window_seconds(args.every)


def _incremental(spark: SparkSession, args: argparse.Namespace) -> int:
    """The incremental mode: once over what arrived (Trigger.AvailableNow), or --follow."""
    options = IncrementalOptions(
        state_dir=args.state, cluster=args.cluster, window=args.window, lateness=args.lateness
    )
    ensure_kafka_connector(SparkSettings.from_env().jars_dir, launched_by_spark_submit())
    kafka = admin_client_in(args.client_dir, args.bootstrap_servers)
    stream = read_kafka_stream(spark, kafka, [args.topic])

    def report(counts: RunCounts) -> None:
        summary = latest_window_summary(spark, options, args.hot_threshold)
        print(
            f"cluster {args.cluster}: {counts.records_read or 'new'} records read, "
            f"{counts.valid} valid, {counts.quarantined} quarantined ({counts.late} late), "
            f"{len(counts.windows_updated)} windows updated"
        )
        if summary is None:
            return
        score = summary["score"]
        print(
            f"latest window {summary['window_start']} .. {summary['window_end']}: score "
            + (
                f"{score:.1f}/100"
                if score is not None
                else f"unavailable ({summary['unavailable_reason']})"
            )
        )
        if args.zookeeper:
            document = score_document(
                cluster=args.cluster,
                score=score,
                window_start=summary["window_start"],
                window_end=summary["window_end"],
                brokers=summary["brokers"],
                resources=summary["resources"],
                computed_at=now_iso(),
            )
            identity = IdentityFiles(args.zookeeper_identity, Role.ADMIN)
            path = ZooKeeperScoreWriter(args.zookeeper, identity).write(args.cluster, document)
            print(f"score written to ZooKeeper {path}")

    counts = run_incremental(
        spark,
        stream,
        options,
        processing_time=args.every if args.follow else None,
        on_batch=report if args.follow else None,
    )
    report(counts)
    return EXIT_OK


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_incremental(args)
        # Checked before Spark starts: a wrong path should not cost a JVM start.
        options = _options(args)
    except INPUT_ERRORS as error:
        print(f"kaas analytics balance: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def body(spark: SparkSession) -> int:
        if args.state is not None:
            return _incremental(spark, args)
        result = run_balance(spark, _parsed(spark, args), options, args.out)
        for line in report_lines(result.summary):
            print(line)
        _write_back(args, result)
        return EXIT_OK

    return run_with_session("balance", body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
