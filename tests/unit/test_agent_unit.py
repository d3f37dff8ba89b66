"""The local agent unit (systemd's Restart=always on a local VM): a crashed agent is started
again and the reason is logged; a stopped unit stops its agent and does not restart it."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from management_plane.local.agent_unit import exit_reason
from management_plane.local.processes import (
    ProcessRecord,
    kill_process,
    send_signal,
    start_process,
    stop_process,
)

pytestmark = pytest.mark.unit

# Counts its starts in a file, then crashes (SIGSEGV) on the first start, runs on later ones.
CHILD = """
import os, signal, sys, time
path = sys.argv[1]
starts = int(open(path).read()) + 1 if os.path.exists(path) else 1
open(path, "w").write(str(starts))
if starts == 1:
    os.kill(os.getpid(), signal.SIGSEGV)
time.sleep(600)
"""


@pytest.mark.parametrize(
    ("returncode", "words"),
    [
        (0, "exited with status 0"),
        (3, "exited with status 3"),
        (-11, "killed by SIGSEGV"),
        (-9, "killed by SIGKILL"),
        (-200, "killed by signal 200"),
    ],
)
def test_exit_reasons(returncode: int, words: str) -> None:
    assert exit_reason(returncode) == words


def _unit(tmp_path: Path, restart_s: str = "0.2") -> ProcessRecord:
    command = [
        sys.executable,
        "-c",
        "import sys; from management_plane.local.agent_unit import run_unit;"
        f" sys.exit(run_unit(sys.argv[1:], restart_s={restart_s}))",
        sys.executable,
        "-c",
        CHILD,
        str(tmp_path / "starts"),
    ]
    return start_process(command, tmp_path / "agent.log", Path.cwd())


def _agent(record: ProcessRecord, timeout: float = 20) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = psutil.Process(record.pid).children()
        if children and children[0].status() != psutil.STATUS_ZOMBIE:
            return children[0]
        time.sleep(0.05)
    raise AssertionError("the unit started no agent")


def _wait_starts(path: Path, count: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if path.exists() and path.read_text() == str(count):
            return
        time.sleep(0.05)
    raise AssertionError(f"the agent was not started {count} times: {path.read_text()}")


def test_a_crashed_agent_is_started_again_and_the_crash_named(tmp_path: Path) -> None:
    record = _unit(tmp_path)
    try:
        _wait_starts(tmp_path / "starts", 2)
        log = (tmp_path / "agent.log").read_text()
        assert "the agent killed by SIGSEGV; starting it again in 0.2 s" in log
        agent = _agent(record)
        assert os.getpgid(agent.pid) == record.pid  # in the unit's group
    finally:
        kill_process(record)


def test_stopping_the_unit_stops_its_agent_for_good(tmp_path: Path) -> None:
    record = _unit(tmp_path)
    _wait_starts(tmp_path / "starts", 2)
    agent = _agent(record)
    stop_process(record, 10)
    agent.wait(10)
    time.sleep(0.5)
    assert (tmp_path / "starts").read_text() == "2"
    assert (tmp_path / "agent.log").read_text().count("starting it again") == 1  # the crash


def test_pausing_or_killing_the_unit_does_the_same_to_its_agent(tmp_path: Path) -> None:
    record = _unit(tmp_path)
    _wait_starts(tmp_path / "starts", 2)
    agent = _agent(record)
    try:
        assert send_signal(record, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while agent.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.status() == psutil.STATUS_STOPPED
        assert send_signal(record, signal.SIGCONT)
    finally:
        kill_process(record)
    agent.wait(10)
    assert not agent.is_running()


def test_the_agent_dies_with_a_unit_killed_alone(tmp_path: Path) -> None:
    record = _unit(tmp_path)
    _wait_starts(tmp_path / "starts", 2)
    agent = _agent(record)
    os.kill(record.pid, signal.SIGKILL)  # the unit only, not its group
    agent.wait(10)
    assert not agent.is_running()
