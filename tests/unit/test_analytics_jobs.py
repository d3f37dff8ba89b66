"""The balance job end to end on a small JSON input; the CLI's bad-input exits; write-back."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from analytics import cli
from analytics.balance_run import BalanceInputError, BalanceOptions, run_balance
from analytics.jobs import balance as balance_job
from analytics.metrics import parse_metric_records
from analytics.sources import read_json_lines, read_normalised_parquet
from analytics.testing import metric_record, spark_session_fixture  # noqa: F401
from analytics.writeback import (
    StatsdScoreSender,
    audit_gauges,
    parse_statsd_address,
    score_document,
    score_znode_path,
    send_gauges,
)

pytestmark = pytest.mark.unit

T0_MS = 1_767_225_600_000
INTERVAL_MS = 10_000
BROKERS = 4
RACKS = ("zone-a", "zone-b")


def write_metrics(
    path: Path, samples: int = 60, malformed: tuple[str, ...] = ("garbage", "[1]")
) -> Path:
    """Four brokers, ten minutes of samples; broker 0 takes three times the produce traffic
    in the first five minutes, then all brokers are even."""
    lines = []
    for step in range(samples):
        for broker in range(BROKERS):
            hot = 3.0 if broker == 0 and step < samples // 2 else 1.0
            led = [p for p in range(8) if p % BROKERS == broker]
            record = metric_record(
                broker,
                T0_MS + step * INTERVAL_MS,
                cluster="demo",
                rack=RACKS[broker % 2],
                bytes_in_per_s=1000.0 * hot,
                leader_count=len(led),
                partition_count=4,
                log_size_bytes=1000 * (step + 1),
                topics=[
                    {"topic": "orders", "bytes_in_per_s": 1000.0 * hot, "bytes_out_per_s": 500.0}
                ],
                partitions=[
                    {
                        "topic": "orders",
                        "partition": p,
                        "leader": True,
                        "size_bytes": 100 * step + p,
                    }
                    for p in led
                ],
            )
            lines.append(json.dumps(record))
    lines.extend(malformed)
    path.write_text("\n".join(lines) + "\n")
    return path


def layout_document() -> dict[str, Any]:
    return {
        "brokers": [{"id": b, "rack": RACKS[b % 2]} for b in range(BROKERS)],
        "partitions": [
            {"topic": "orders", "partition": p, "replicas": [p % BROKERS, (p + 1) % BROKERS]}
            for p in range(8)
        ],
    }


@pytest.fixture(scope="module")
def balance_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("balance")
    parsed = parse_metric_records(read_json_lines(spark, write_metrics(folder / "metrics.jsonl")))
    options = BalanceOptions(layout_document=layout_document())
    result = run_balance(spark, parsed, options, folder / "out")
    return folder / "out", result.summary


def test_balance_job_counts_valid_and_quarantined_records(
    balance_run: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = balance_run
    assert summary["records"]["valid"] == 60 * BROKERS
    assert summary["records"]["quarantined"] == 2
    assert summary["records"]["quarantine_reasons"] == {
        "value is not valid JSON": 1,
        "value is not a JSON object": 1,
    }


def test_balance_job_reports_the_latest_window_spread(
    balance_run: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = balance_run
    assert summary["cluster"] == "demo"
    assert summary["windows"] == 2
    assert summary["latest_window"] == {
        "start": "2026-01-01T00:05:00+00:00",
        "end": "2026-01-01T00:10:00+00:00",
        "brokers": BROKERS,
    }
    # After the first five minutes every broker produces the same: even.
    assert summary["brokers"]["leader_bytes_in_per_s"]["cv"] == 0.0
    assert summary["brokers"]["leader_bytes_in_per_s"]["hot"] == []
    assert summary["zones"]["leaders"]["max_over_mean"] == 1.0


def test_balance_job_writes_tables_charts_and_measured_layout(
    balance_run: tuple[Path, dict[str, Any]],
) -> None:
    out, summary = balance_run
    for table in (
        "broker_load",
        "zone_load",
        "broker_balance",
        "zone_balance",
        "partition_load",
        "quarantine",
    ):
        assert (out / table / "_SUCCESS").exists(), table
    assert json.loads((out / "summary.json").read_text())["records"] == summary["records"]
    for chart in ("broker_load.png", "balance_over_time.png", "score_over_time.png"):
        assert (out / "charts" / chart).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    measured = json.loads((out / "LAYOUT.json").read_text())
    rates = {p["partition"]: p["bytes_in_per_s"] for p in measured["partitions"]}
    # Broker 0 leads partitions 0 and 4, growing alike: each gets half of its mean rate
    # (3000 for five minutes, then 1000): (1500 + 500) / 2.
    assert rates[0] == pytest.approx(1000.0)
    assert rates[1] == pytest.approx(500.0)
    assert summary["layout"]["partitions_measured"] == 8
    # Predicted leaders are two per broker and so are the measured ones.
    assert summary["plan_comparison"]["leaders"]["total_variation_distance"] == pytest.approx(0.0)


def test_balance_job_reads_back_its_own_parquet_tables(
    spark: SparkSession, balance_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, first = balance_run
    again = run_balance(
        spark,
        read_normalised_parquet(spark, out),
        BalanceOptions(write_normalised=False, charts=False),
        tmp_path,
    ).summary
    assert again["records"] == {
        "valid": first["records"]["valid"],
        "scored": first["records"]["valid"],
        "quarantined": 0,
        "quarantine_reasons": {},
    }
    assert again["brokers"] == first["brokers"]


def test_balance_job_refuses_an_unknown_cluster(
    spark: SparkSession, balance_run: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    out, _ = balance_run
    with pytest.raises(
        BalanceInputError, match=r"no valid records of cluster other \(clusters seen: demo\)"
    ):
        run_balance(
            spark, read_normalised_parquet(spark, out), BalanceOptions(cluster="other"), tmp_path
        )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["balance", "--json", "m.jsonl", "--out", "o", "--plan", "p.json"],
            "--plan needs --layout",
        ),
        (
            ["balance", "--json", "m.jsonl", "--out", "o", "--layout", "absent.json"],
            "layout absent.json does not exist",
        ),
        (
            [
                "balance",
                "--json",
                "m.jsonl",
                "--out",
                "o",
                "--plan-applied-at",
                "2026-01-01T00:00:00",
            ],
            "needs a zone",
        ),
        (
            [
                "audit",
                "--bootstrap-servers",
                "x:9092",
                "--client-dir",
                "c",
                "--ledger",
                "absent.jsonl",
                "--out",
                "o",
            ],
            "does not exist",
        ),
        (
            [
                "audit",
                "--bootstrap-servers",
                "x:9092",
                "--client-dir",
                "c",
                "--ledger",
                "l.jsonl",
                "--out",
                "o",
                "--state",
                "s",
            ],
            "--state needs --cluster",
        ),
        (
            [
                "audit",
                "--bootstrap-servers",
                "x:9092",
                "--client-dir",
                "c",
                "--ledger",
                "l",
                "--out",
                "o",
                "--statsd",
                "x:1",
            ],
            "--statsd needs --cluster",
        ),
        (
            [
                "audit",
                "--bootstrap-servers",
                "x:9092",
                "--client-dir",
                "c",
                "--ledger",
                "l",
                "--out",
                "o",
                "--statsd",
                "x",
                "--cluster",
                "c",
            ],
            "is not HOST:PORT",
        ),
        (["balance", "--json", "m.jsonl", "--out", "o", "--follow"], "--follow needs --state"),
        (
            ["balance", "--json", "m.jsonl", "--out", "o", "--state", "s"],
            "--state reads the metrics topic: give --bootstrap-servers and --cluster",
        ),
        (
            [
                "balance",
                "--bootstrap-servers",
                "x:9092",
                "--cluster",
                "c",
                "--out",
                "o",
                "--state",
                "s",
            ],
            "give --client-dir (its listener is TLS)",
        ),
        (
            [
                "balance",
                "--bootstrap-servers",
                "x:9092",
                "--client-dir",
                "c",
                "--cluster",
                "c",
                "--out",
                "o",
                "--state",
                "s",
                "--lateness",
                "soon",
            ],
            "window 'soon' is not a length",
        ),
    ],
)
def test_cli_refuses_bad_input_before_starting_spark(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_cli_lists_jobs_and_refuses_unknown_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    assert "balance" in capsys.readouterr().out
    assert cli.main(["nope"]) == 2
    assert "unknown job 'nope'" in capsys.readouterr().err


def test_score_is_the_planners_and_in_range(
    balance_run: tuple[Path, dict[str, Any]],
) -> None:
    _, summary = balance_run
    score = summary["score"]
    assert score["unavailable_reason"] is None
    assert 0.0 <= score["latest"] <= 100.0


def test_report_lines_name_score_and_chart(balance_run: tuple[Path, dict[str, Any]]) -> None:
    _, summary = balance_run
    lines = balance_job.report_lines(summary)
    assert lines[0].startswith("cluster demo: balance score ")
    assert any(line.startswith("chart: ") and line.endswith("broker_load.png") for line in lines)


def test_score_is_sent_to_statsd_as_gauges() -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(5)
    port = listener.getsockname()[1]
    document = score_document(
        "demo",
        87.5,
        "2026-01-01T00:05:00+00:00",
        "2026-01-01T00:10:00+00:00",
        3,
        {"bytes_in_per_s": {"cv": 0.1, "max_over_mean": 1.2, "hot_count": 0, "hot": []}},
        "2026-01-01T00:11:00+00:00",
    )
    try:
        sent = StatsdScoreSender("127.0.0.1", port).send("demo", document)
        received = {listener.recv(512).decode() for _ in sent}
    finally:
        listener.close()
    assert received == {
        "kaas.demo.plan.measured_score:87.5|g",
        "kaas.demo.balance.bytes_in_per_s.cv:0.1|g",
        "kaas.demo.balance.bytes_in_per_s.max_over_mean:1.2|g",
        "kaas.demo.balance.bytes_in_per_s.hot_count:0.0|g",
    }
    assert document["schema_version"] == 1


def test_audit_completeness_is_sent_to_statsd_as_gauges() -> None:
    totals = {"produced": 1000, "in_kafka": 998, "missing": 2, "extra": 0,
              "completeness_percent": 99.8}  # fmt: skip
    gauges = audit_gauges(totals)
    assert gauges == [
        ("audit.completeness_percent", 99.8),
        ("audit.produced", 1000.0),
        ("audit.received", 998.0),
        ("audit.missing", 2.0),
    ]
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(5)
    try:
        send_gauges("127.0.0.1", listener.getsockname()[1], "demo", gauges)
        received = listener.recv(512).decode().splitlines()
    finally:
        listener.close()
    assert received == [
        "kaas.demo.audit.completeness_percent:99.8|g",
        "kaas.demo.audit.produced:1000.0|g",
        "kaas.demo.audit.received:998.0|g",
        "kaas.demo.audit.missing:2.0|g",
    ]


def test_score_znode_path_and_statsd_address() -> None:
    assert score_znode_path("demo") == "/kaas/demo/plan/score"
    with pytest.raises(ValueError, match="invalid"):
        score_znode_path("a/b")
    assert parse_statsd_address("localhost:8125") == ("localhost", 8125)
    with pytest.raises(ValueError, match="is not HOST:PORT"):
        parse_statsd_address("localhost")
