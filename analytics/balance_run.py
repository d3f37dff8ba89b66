"""The balance job's body: transforms wired together, outputs written, summary built.

The transforms live in analytics.balance; `run_balance` chains them and does the I/O:
it writes each Parquet table and goes on from the written copy, scores each window with
the planner's definition, draws the charts, writes LAYOUT.json with the measured
per-partition load, and returns the summary that the job prints and writes as JSON.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from analytics import balance, charts, layout, plan_compare, window_tables
from analytics.errors import AnalyticsError
from analytics.metrics import ParsedMetrics, flattened
from analytics.planner_score import score_windows
from analytics.writeback import measured_load_of
from planner.contracts.measured_load import MeasuredLoad

SUMMARY_SCHEMA_VERSION = 1


class BalanceInputError(AnalyticsError, ValueError):
    """Input the balance job cannot score (no records, several clusters...)."""


@dataclass(frozen=True)
class BalanceOptions:
    window: str = balance.DEFAULT_WINDOW
    hot_threshold: float = balance.DEFAULT_HOT_THRESHOLD
    cluster: str | None = None
    plan_applied_at: datetime | None = None
    layout_document: Any = None
    """The current LAYOUT.json, already read: enables the plan comparison and the
    LAYOUT.json write-back of measured per-partition load."""
    reassignment_document: Any = None
    """A Kafka reassignment JSON: the plan's prediction is the layout after it."""
    layout_out: Path | None = None
    """Where the measured LAYOUT.json goes (default: OUT/LAYOUT.json)."""
    load_span_s: int = 3600
    """The span the measured load per partition for the planner averages (ending at the
    latest window's end)."""
    write_normalised: bool = True
    """Write the parsed flat tables (off when they were the input)."""
    charts: bool = True


@dataclass
class BalanceResult:
    summary: dict[str, Any]
    outputs: dict[str, str] = field(default_factory=dict)
    measured_load: MeasuredLoad | None = None
    """Per-partition load for /kaas/<cluster>/load (None without partition metrics)."""


def _choose_cluster(broker_load: pd.DataFrame, wanted: str | None) -> tuple[str, int, int]:
    """The cluster to score, how many of its records were aggregated, and how many valid
    records there were in all.

    Decided on the (small) per-window broker load, so the metric tables are not scanned
    once more only to learn which clusters they hold.
    """
    samples = {
        str(cluster): int(records)
        for cluster, records in broker_load.groupby("cluster")["samples"].sum().items()
    }
    if wanted is None:
        if not samples:
            raise BalanceInputError("no valid metric records to score (see the quarantine counts)")
        if len(samples) > 1:
            raise BalanceInputError(
                f"records of several clusters ({', '.join(sorted(samples))}): pass --cluster"
            )
        (only,) = samples
        return only, samples[only], samples[only]
    if wanted not in samples:
        known = ", ".join(sorted(samples)) or "none"
        raise BalanceInputError(f"no valid records of cluster {wanted} (clusters seen: {known})")
    return wanted, samples[wanted], sum(samples.values())


def _write(frame: DataFrame, path: Path, outputs: dict[str, str], name: str) -> None:
    frame.write.mode("overwrite").parquet(str(path))
    outputs[name] = str(path)


def _resource_stats(rows: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {
        row["resource"]: {
            "mean": float(row["mean"]),
            "cv": round(float(row["cv"]), 6),
            "max_over_mean": round(float(row["max_over_mean"]), 6),
            "hot_count": int(row["hot_count"]),
            "hot": list(row["hot"]),
        }
        for _, row in rows.sort_values("resource").iterrows()
    }


def _scores_per_window(broker_load: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Score every window with the planner's definition (on the driver: one row per broker)."""
    rows = []
    latest_parts: dict[str, Any] = {}
    reason = None
    for (window_start, window_end), outcome in score_windows(
        broker_load, ("window_start", "window_end")
    ):
        rows.append(
            {"window_start": window_start, "window_end": window_end, "score": outcome.score}
        )
        latest_parts, reason = outcome.parts, outcome.unavailable_reason
    frame = pd.DataFrame(rows, columns=["window_start", "window_end", "score"])
    return frame, {"parts": latest_parts, "unavailable_reason": reason}


def run_balance(
    spark: SparkSession, parsed: ParsedMetrics, options: BalanceOptions, out_dir: Path
) -> BalanceResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs: dict[str, str] = {}
    clock = PhaseClock()

    def stage(frame: DataFrame, name: str) -> DataFrame:
        """Write a table and continue from the written copy, so that no later output
        recomputes it from the (large, or remote) source."""
        _write(frame, out_dir / name, outputs, name)
        # With the schema given, reading back starts no Spark job to infer it from footers.
        return spark.read.schema(frame.schema).parquet(outputs[name])

    quarantined = 0
    reasons: dict[str, int] = {}
    if options.write_normalised:
        # Parsed here: quarantine and flat tables are written once, and read back.
        quarantine = stage(parsed.quarantine, "quarantine")
        quarantined, reasons = _quarantine_counts(outputs["quarantine"])
        if parsed.valid_records is not None:
            # The JSON is parsed once more only here; the flat tables come from this copy.
            parsed = flattened(stage(parsed.valid_records, "valid_records"), quarantine)
        flat = _in_parallel(
            {
                name: partial(stage, getattr(parsed, name), name)
                for name in ("broker_metrics", "topic_metrics", "partition_metrics")
            }
        )
        parsed = ParsedMetrics(**flat, quarantine=quarantine)
    # Each large table is scanned once, into a small per-window table that comes to the
    # driver as Arrow; everything else is derived from those there (analytics.window_tables),
    # where a Spark job's fixed costs would be most of the time. The three scans are
    # independent Spark jobs, run side by side so that one job's planning and last task
    # overlap another's work.
    window = options.window
    clock.lap("parse_and_write_flat_tables")
    scanned = _in_parallel(
        {
            "broker_load": partial(
                _arrow_of, balance.broker_window_load(parsed.broker_metrics, window)
            ),
            "replica_window": partial(
                _arrow_of, balance.replica_window_state(parsed.partition_metrics, window)
            ),
            "topic_window": partial(
                _arrow_of, balance.topic_window_rates(parsed.topic_metrics, window)
            ),
        }
    )
    clock.lap("spark_scans")
    for name, table in scanned.items():
        outputs[name] = str(write_arrow_table(table, out_dir / name))
    clock.lap("write_window_tables")
    all_broker_load_pd = _arrow_to_pandas(scanned["broker_load"])
    cluster, scored_records, valid_records = _choose_cluster(all_broker_load_pd, options.cluster)

    def of_cluster(name: str) -> pd.DataFrame:
        table = scanned[name]
        return _arrow_to_pandas(table.filter(pc.equal(table["cluster"], cluster)))

    broker_load_pd = of_cluster("broker_load")

    def written(frame: pd.DataFrame, schema: pa.Schema, name: str) -> pd.DataFrame:
        outputs[name] = str(
            write_arrow_table(window_tables.to_arrow(frame, schema), out_dir / name)
        )
        return frame

    zone_load_pd = written(
        window_tables.zone_window_load(broker_load_pd), window_tables.ZONE_LOAD_SCHEMA, "zone_load"
    )
    zone_balance_pd = written(
        window_tables.resource_balance(zone_load_pd, "zone", options.hot_threshold),
        window_tables.BALANCE_SCHEMA,
        "zone_balance",
    )
    broker_balance_pd = written(
        window_tables.resource_balance(broker_load_pd, "broker_id", options.hot_threshold),
        window_tables.BALANCE_SCHEMA,
        "broker_balance",
    )
    partition_load = written(
        window_tables.partition_load(of_cluster("replica_window"), of_cluster("topic_window")),
        window_tables.PARTITION_LOAD_SCHEMA,
        "partition_load",
    )
    clock.lap("driver_tables")
    scores, score_detail = _scores_per_window(broker_load_pd)
    outputs["scores"] = str(_write_scores(scores, out_dir / "scores"))
    clock.lap("scores")
    records = {
        "valid": valid_records,
        "scored": scored_records,
        "quarantined": quarantined,
        "quarantine_reasons": reasons,
    }

    latest_start = broker_load_pd["window_start"].max()
    latest = broker_load_pd[broker_load_pd["window_start"] == latest_start]
    latest_score = scores[scores["window_start"] == latest_start]["score"]
    summary: dict[str, Any] = {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "job": "balance",
        "cluster": cluster,
        "window": options.window,
        "hot_threshold": options.hot_threshold,
        "records": records,
        "windows": int(broker_load_pd["window_start"].nunique()),
        "first_window_start": _iso(broker_load_pd["window_start"].min()),
        "latest_window": {
            "start": _iso(latest_start),
            "end": _iso(latest["window_end"].max()),
            "brokers": len(latest),
        },
        "score": {
            "latest": None
            if latest_score.empty or pd.isna(latest_score.iloc[0])
            else float(latest_score.iloc[0]),
            "definition": "planner.score, applied to the measured per-broker load",
            **score_detail,
        },
        "brokers": _resource_stats(
            broker_balance_pd[broker_balance_pd["window_start"] == latest_start]
        ),
        "zones": _resource_stats(zone_balance_pd[zone_balance_pd["window_start"] == latest_start]),
        "plan_comparison": None,
        "layout": None,
    }
    if options.layout_document is not None:
        planned = options.layout_document
        if options.reassignment_document is not None:
            planned = layout.apply_reassignment(planned, options.reassignment_document)
        latest_load = spark.createDataFrame(
            pa.Table.from_pandas(latest.reset_index(drop=True), preserve_index=False)
        )
        summary["plan_comparison"] = _compare_with_plan(
            spark, latest_load, planned, out_dir, outputs
        )
        summary["layout"] = _write_measured_layout(
            window_tables.partition_measured_load(partition_load),
            options.layout_document,
            options.layout_out or out_dir / "LAYOUT.json",
        )
        outputs["layout"] = summary["layout"]["path"]
    clock.lap("summary_and_layout")
    if options.charts:
        before_after = window_tables.split_before_after(broker_load_pd, options.plan_applied_at)
        comparison = window_tables.comparison_labels(broker_load_pd, options.plan_applied_at)
        outputs["broker_load_chart"] = str(
            charts.broker_load_chart(
                before_after, comparison, cluster, out_dir / "charts" / "broker_load.png"
            )
        )
        outputs["score_over_time_chart"] = str(
            charts.score_over_time_chart(
                scores, window, cluster, out_dir / "charts" / "score_over_time.png"
            )
        )
        outputs["balance_over_time_chart"] = str(
            charts.balance_over_time_chart(
                broker_balance_pd, scores, cluster, out_dir / "charts" / "balance_over_time.png"
            )
        )
    clock.lap("charts")
    summary["outputs"] = outputs
    summary["phases_s"] = clock.phases
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    outputs["summary"] = str(summary_path)
    measured = (
        measured_load_of(partition_load, cluster, options.load_span_s, now_iso())
        if not partition_load.empty
        else None
    )
    return BalanceResult(summary=summary, outputs=outputs, measured_load=measured)


class PhaseClock:
    """Seconds spent in each phase of the job, in order (the summary's `phases_s`): where
    a run's time goes beyond reading its input."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = round(self.phases.get(phase, 0.0) + now - self._last, 3)
        self._last = now


def _in_parallel(work: dict[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run independent Spark actions from threads (Spark runs their jobs side by side);
    the first failure is raised."""
    with ThreadPoolExecutor(max_workers=len(work), thread_name_prefix="balance") as pool:
        futures = {name: pool.submit(action) for name, action in work.items()}
        return {name: future.result() for name, future in futures.items()}


def _quarantine_counts(path: str) -> tuple[int, dict[str, int]]:
    """Refused records and their count per reason, from the written quarantine (small:
    read with pyarrow, no Spark job). A record with two reasons counts under each."""
    reasons = pq.read_table(path, columns=["reasons"]).column("reasons").to_pylist()
    per_reason = Counter(reason for listed in reasons for reason in listed or ())
    ordered = sorted(per_reason.items(), key=lambda item: (-item[1], item[0]))
    return len(reasons), dict(ordered)


_SCORES_SCHEMA = pa.schema(
    [
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("score", pa.float64()),
    ]
)


def _write_scores(scores: pd.DataFrame, path: Path) -> Path:
    """The per-window scores (computed on the driver) as a Parquet folder like Spark's,
    written by pyarrow: a Spark job only to write a few hundred rows would cost more."""
    frame = scores.copy()
    for column in ("window_start", "window_end"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return write_arrow_table(
        pa.Table.from_pandas(frame, schema=_SCORES_SCHEMA, preserve_index=False), path
    )


def _to_pandas(frame: DataFrame) -> pd.DataFrame:
    return cast(pd.DataFrame, frame.toPandas())


def _arrow_of(frame: DataFrame) -> pa.Table:
    return frame.toArrow()


def _arrow_to_pandas(table: pa.Table) -> pd.DataFrame:
    return cast(pd.DataFrame, table.to_pandas())


def write_arrow_table(table: pa.Table, path: Path) -> Path:
    """A small table as a Parquet folder like Spark's (one file and `_SUCCESS`), written by
    pyarrow: for a few hundred thousand rows already on the driver, a Spark write job
    (planning, tasks, the commit protocol) costs more than the writing."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    pq.write_table(table, path / "part-00000.parquet")
    (path / "_SUCCESS").touch()
    return path


def _iso(value: Any) -> str | None:
    if value is None or pd.isna(value):
        return None
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize(UTC)
    return str(stamp.isoformat())


def _compare_with_plan(
    spark: SparkSession,
    latest_broker_load: DataFrame,
    layout_document: Any,
    out_dir: Path,
    outputs: dict[str, str],
) -> dict[str, Any]:
    predicted = spark.createDataFrame(
        layout.predicted_broker_load(layout_document),
        "broker_id int, rack string, "
        + ", ".join(f"{resource} double" for resource in layout.PREDICTED_RESOURCES),
    )
    comparison = plan_compare.compare_with_plan(latest_broker_load, predicted).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        outputs["plan_comparison"] = str(
            write_arrow_table(comparison.toArrow(), out_dir / "plan_comparison")
        )
        distances = plan_compare.plan_distance(comparison).collect()
    finally:
        comparison.unpersist()
    return {
        row["resource"]: {
            "total_variation_distance": round(float(row["total_variation_distance"]), 6),
            "largest_gap_broker_id": row["largest_gap_broker_id"],
            "largest_gap": round(float(row["largest_gap"]), 6),
        }
        for row in distances
    }


def _write_measured_layout(
    partition_measured: pd.DataFrame, layout_document: Any, path: Path
) -> dict[str, Any]:
    measured = [
        layout.MeasuredPartitionLoad(
            topic=str(row["topic"]),
            partition=int(row["partition"]),
            size_bytes=None if pd.isna(row["size_bytes"]) else int(row["size_bytes"]),
            bytes_in_per_s=float(row[balance.BYTES_IN] or 0.0),
            bytes_out_per_s=float(row[balance.BYTES_OUT] or 0.0),
        )
        for row in partition_measured.to_dict("records")
    ]
    updated, measured_count, unmeasured_count = layout.with_measured_load(layout_document, measured)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(updated, indent=2) + "\n")
    return {
        "path": str(path),
        "partitions_measured": measured_count,
        "partitions_unmeasured": unmeasured_count,
    }


def now_iso() -> str:
    return datetime.now(UTC).isoformat()
