"""A drill the management plane runs: `kaas drill run` as a process of its own, started and
followed by the operation's steps (`operation.py`) through its folder. A process of its own
because a drill must heal its faults and write its report even when the service stops in the
middle of it; the service, started again, finds the drill by its folder and follows it on.

The folder holds `process.json` (the drill's pid and start time, written as soon as it is
started, so a step run again after a crash never starts a second drill), `drill.log` (its
progress lines) and, at the end, `report.json` and `report.html`.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from management_plane.drills.errors import DrillError
from management_plane.local.processes import ProcessRecord, is_alive, start_process

PROCESS_FILE = "process.json"
LOG_FILE = "drill.log"
REPORT_FILE = "report.json"


@dataclass(frozen=True)
class DrillRequest:
    """One drill as an operation asks for it (kept in the operation's params)."""

    drill: str
    home: Path  # the cluster's folder, as `kaas drill run --home` takes it
    report_dir: Path
    duration_s: float | None
    rate_per_s: float
    bounces: int
    game_day_drills: tuple[str, ...] | None = None  # game-day's chosen drills

    def command(self) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "management_plane.cli",
            "drill",
            "--home",
            str(self.home),
            "run",
            self.drill,
            "--report",
            str(self.report_dir),
            "--rate",
            str(self.rate_per_s),
            "--bounces",
            str(self.bounces),
        ]
        if self.duration_s is not None:
            command += ["--duration", str(self.duration_s)]
        if self.game_day_drills is not None:
            command += ["--drills", ",".join(self.game_day_drills)]
        return command

    def to_params(self) -> dict[str, Any]:
        return {
            "drill": self.drill,
            "home": str(self.home),
            "report_dir": str(self.report_dir),
            "duration_s": self.duration_s,
            "rate_per_s": self.rate_per_s,
            "bounces": self.bounces,
            "game_day_drills": None if self.game_day_drills is None else list(self.game_day_drills),
        }

    @staticmethod
    def from_params(params: dict[str, Any]) -> DrillRequest:
        try:
            duration = params["duration_s"]
            chosen = params.get("game_day_drills")
            return DrillRequest(
                drill=str(params["drill"]),
                home=Path(str(params["home"])),
                report_dir=Path(str(params["report_dir"])),
                duration_s=None if duration is None else float(duration),
                rate_per_s=float(params["rate_per_s"]),
                bounces=int(params["bounces"]),
                game_day_drills=None if chosen is None else tuple(str(n) for n in chosen),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DrillError(f"the operation's drill parameters are unreadable: {exc!r}") from None


class DrillProcesses(Protocol):
    """Starting and watching drill processes (`LocalDrillProcesses`; a fake in unit tests)."""

    def start(self, command: list[str], log_file: Path, cwd: Path) -> ProcessRecord: ...

    def alive(self, record: ProcessRecord) -> bool: ...


class LocalDrillProcesses:
    def start(self, command: list[str], log_file: Path, cwd: Path) -> ProcessRecord:
        return start_process(command, log_file, cwd)

    def alive(self, record: ProcessRecord) -> bool:
        return is_alive(record)


def started_process(report_dir: Path) -> ProcessRecord | None:
    """The drill process started for this folder, if one was."""
    try:
        return ProcessRecord.from_json(json.loads((report_dir / PROCESS_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def start_drill(request: DrillRequest, processes: DrillProcesses) -> ProcessRecord:
    """Start the drill unless its folder says it was started already (a step run again)."""
    found = started_process(request.report_dir)
    if found is not None:
        return found
    request.report_dir.mkdir(parents=True, exist_ok=True)
    record = processes.start(request.command(), request.report_dir / LOG_FILE, request.home)
    temporary = request.report_dir / f"{PROCESS_FILE}.tmp"
    temporary.write_text(json.dumps(record.to_json()))
    os.replace(temporary, request.report_dir / PROCESS_FILE)
    return record


class DrillState(StrEnum):
    RUNNING = "running"
    PASSED = "passed"
    FAILED = "failed"  # it ended with a report: the verdict is invalid or it did not recover
    ENDED_WITHOUT_REPORT = "ended_without_report"  # refused, or stopped before its report


@dataclass(frozen=True)
class DrillProgress:
    state: DrillState
    message: str


def last_line(log_file: Path) -> str:
    try:
        lines = [line.strip() for line in log_file.read_text(errors="replace").splitlines()]
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line), "")


def report_summary(report: dict[str, Any]) -> str:
    """One line of a drill's report: its verdict, anomalies, stall and recoveries."""
    summary = report.get("summary", {})
    anomalies = ", ".join(f"{k} {v}" for k, v in summary.get("anomalies", {}).items())
    recoveries = ", ".join(
        f"{fault.get('fault')} recovered in {fault.get('recovery_s')} s"
        for fault in summary.get("faults", [])
    )
    return (
        f"checker {'valid' if report.get('valid') else 'INVALID'} ({anomalies}); "
        f"recovered: {'yes' if report.get('recovered') else 'NO'}; longest produce stall "
        f"{summary.get('longest_stall_s')} s; {recoveries}"
    )


def drill_progress(report_dir: Path, alive: bool) -> DrillProgress:
    """Where a started drill stands, read from its folder."""
    report_file = report_dir / REPORT_FILE
    if report_file.exists():
        try:
            report = json.loads(report_file.read_text())
        except ValueError:
            report = None
        if isinstance(report, dict):
            state = DrillState.PASSED if report.get("passed") else DrillState.FAILED
            return DrillProgress(
                state, f"drill {state.value}: {report_summary(report)}; report in {report_dir}"
            )
    line = last_line(report_dir / LOG_FILE)
    if alive:
        return DrillProgress(DrillState.RUNNING, line or "drill starting")
    return DrillProgress(
        DrillState.ENDED_WITHOUT_REPORT,
        f"the drill ended without a report: {line or 'no output'} (log {report_dir / LOG_FILE})",
    )
