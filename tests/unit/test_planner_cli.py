"""`kaas plan generate|score` on files: Kafka's reassignment JSON out, summary on stderr,
clear errors and exit codes for bad or infeasible input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from planner.cli import EXIT_BAD_INPUT, EXIT_INFEASIBLE, main, parse_budget, parse_size

pytestmark = pytest.mark.unit


def layout(tmp_path: Path, **changes: Any) -> Path:
    brokers = [{"id": i, "rack": f"zone-{'abc'[i % 3]}"} for i in range(6)]
    partitions = [
        {
            "topic": "t",
            "partition": n,
            "replicas": [n % 3, (n + 1) % 3, (n + 2) % 3],
            "size_bytes": 100,
        }
        for n in range(12)
    ]
    document = {"brokers": brokers, "partitions": partitions, **changes}
    path = tmp_path / "LAYOUT.json"
    path.write_text(json.dumps(document))
    return path


def test_generate_writes_kafkas_format_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary_file = tmp_path / "summary.json"
    code = main(
        ["generate", "--layout", str(layout(tmp_path)), "--json-summary", str(summary_file)]
    )
    out, err = capsys.readouterr()
    assert code == 0
    document = json.loads(out)
    assert document["version"] == 1
    # Brokers 3..5 are empty: half of the 36 replicas move to them, each partition once.
    summary = json.loads(summary_file.read_text())
    assert summary["replicas_moved"] == 18
    assert summary["bytes_moved"] == 1800
    assert len({(p["topic"], p["partition"]) for p in document["partitions"]}) == len(
        document["partitions"]
    )
    assert summary["score_after"]["total"] > summary["score_before"]["total"]
    assert "replicas moved 18" in err and "score" in err


def test_generate_then_score_the_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = layout(tmp_path)
    assert main(["generate", "--layout", str(path), "--drain", "0"]) == 0
    plan = tmp_path / "reassignment.json"
    plan.write_text(capsys.readouterr().out)
    assert all(0 not in p["replicas"] for p in json.loads(plan.read_text())["partitions"])
    assert main(["score", "--layout", str(path), "--plan", str(plan), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # Broker 0 is still active in the layout scored, so only the placement counts: the
    # drained broker now holds nothing, and the hard goals all hold.
    assert report["hard_goal_violations"] == []
    assert 0 <= report["total"] <= 100


def test_budget_cuts_the_plan_into_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batches_file = tmp_path / "batches.json"
    code = main(
        [
            "generate",
            "--layout",
            str(layout(tmp_path)),
            "--budget",
            "partitions-per-broker=2",
            "--batches",
            str(batches_file),
        ]
    )
    final = json.loads(capsys.readouterr().out)["partitions"]
    assert code == 0
    batches = json.loads(batches_file.read_text())
    # 18 replicas arrive on brokers 3..5, at most 2 partitions per broker per batch.
    assert len(batches) >= 18 // (3 * 2)
    last = {}
    for batch in batches:
        for entry in batch["partitions"]:
            last[(entry["topic"], entry["partition"])] = entry["replicas"]
    assert last == {(e["topic"], e["partition"]): e["replicas"] for e in final}


@pytest.mark.parametrize(
    ("argv_tail", "message"),
    [
        (["--drain", "9"], "broker 9 is not in the layout"),
        (["--drain", "x"], "'x' is not a broker id"),
        (["--budget", "partitions=3"], "KEY=VALUE"),
        (["--budget", "bytes-in-flight=lots"], "not a size"),
        (["--max-disk-share", "1.5"], "max_disk_share"),
    ],
)
def test_bad_flags_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv_tail: list[str], message: str
) -> None:
    assert main(["generate", "--layout", str(layout(tmp_path)), *argv_tail]) == EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def test_malformed_layout_exits_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        '{"brokers": [{"id": 1, "rack": "a"}], "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 5]}]}'
    )
    assert main(["generate", "--layout", str(path)]) == EXIT_BAD_INPUT
    assert "partitions[0] (t-0): replica 5" in capsys.readouterr().err


def test_infeasible_layout_exits_non_zero_with_a_recommendation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = layout(tmp_path)
    assert main(["generate", "--layout", str(path), "--drain", "2,5"]) == EXIT_INFEASIBLE
    err = capsys.readouterr().err
    assert "infeasible" in err and "add 1 broker in zone-c" in err


def test_size_and_budget_parsing() -> None:
    assert parse_size("10GiB") == 10 * 1024**3
    assert parse_size("500MB") == 500 * 1000**2
    assert parse_size("42") == 42
    budget = parse_budget("partitions-per-broker=5,bytes-in-flight=1GiB,leadership-changes=7")
    assert (
        budget.max_partitions_per_broker,
        budget.max_bytes_in_flight,
        budget.max_leadership_changes,
    ) == (
        5,
        1024**3,
        7,
    )


def test_the_kaas_command_dispatches_to_the_planner(tmp_path: Path) -> None:
    kaas = Path(sys.executable).parent / "kaas"
    result = subprocess.run(
        [str(kaas), "plan", "generate", "--layout", str(layout(tmp_path)), "--seed", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["partitions"]
