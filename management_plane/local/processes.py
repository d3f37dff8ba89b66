"""Start and signal a local VM's JVMs by process id, never by name.

A process is known by (pid, start time): a pid the kernel has since given to another
process is not ours and is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    create_time: float

    def to_json(self) -> dict[str, float | int]:
        return {"pid": self.pid, "create_time": self.create_time}

    @staticmethod
    def from_json(value: dict[str, float | int]) -> ProcessRecord:
        return ProcessRecord(pid=int(value["pid"]), create_time=float(value["create_time"]))


def start_process(command: list[str], log_file: Path, cwd: Path) -> ProcessRecord:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        # A session of its own: the JVM outlives the `kaas` command and no terminal signal reaches it.
        child = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            start_new_session=True,
        )
    return ProcessRecord(pid=child.pid, create_time=psutil.Process(child.pid).create_time())


def _reap(pid: int) -> None:
    # Processes started by this Python process are its children: collect their exit status
    # so that they do not linger as zombies.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _process(record: ProcessRecord) -> psutil.Process | None:
    _reap(record.pid)
    try:
        process = psutil.Process(record.pid)
        if abs(process.create_time() - record.create_time) > 0.05:
            return None  # the pid now belongs to someone else
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except psutil.Error:
        return None


def is_alive(record: ProcessRecord | None) -> bool:
    return record is not None and _process(record) is not None


def is_paused(record: ProcessRecord | None) -> bool:
    process = _process(record) if record is not None else None
    try:
        return process is not None and process.status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def send_signal(record: ProcessRecord | None, signum: int) -> bool:
    """Signal the process if it is still ours and alive; returns whether it was. A process
    that leads its own group (start_process gives each one) is signalled with its group, as
    systemd signals a unit's control group: a paused or killed agent unit pauses or kills
    the agent it runs."""
    process = _process(record) if record is not None else None
    if process is None:
        return False
    try:
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
    except (OSError, psutil.Error):
        return False
    return True


def wait_gone(record: ProcessRecord | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(record):
            return True
        time.sleep(0.1)
    return not is_alive(record)


def stop_process(record: ProcessRecord | None, timeout: float) -> None:
    """SIGTERM, and SIGKILL if it has not exited within `timeout` seconds."""
    if record is None:
        return
    send_signal(record, signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
    if send_signal(record, signal.SIGTERM) and not wait_gone(record, timeout):
        send_signal(record, signal.SIGKILL)
        wait_gone(record, 10)


def kill_process(record: ProcessRecord | None) -> None:
    if record is not None and send_signal(record, signal.SIGKILL):
        wait_gone(record, 10)


def session_members(record: ProcessRecord) -> list[psutil.Process]:
    """The processes still in the session `record`'s process leads (start_process gives each
    its own), itself included while it lives: a forking daemon's workers (gunicorn's) stay
    behind, holding its port, when only their master is killed. Only processes started no
    earlier than the record's count: a pid reused since is someone else's."""
    members = []
    for process in psutil.process_iter(["create_time"]):
        try:
            if (
                os.getsid(process.pid) == record.pid
                and process.info["create_time"] >= record.create_time - 0.05
            ):
                members.append(process)
        except (OSError, psutil.Error):
            continue
    return members


def stop_session(record: ProcessRecord | None, timeout: float) -> None:
    """stop_process, then SIGKILL whatever of its session is left."""
    if record is None:
        return
    stop_process(record, timeout)
    kill_session(record)


def kill_session(record: ProcessRecord) -> None:
    """SIGKILL the record's process and every process left in its session."""
    left = session_members(record)
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=10)
    _reap(record.pid)


def resident_bytes(record: ProcessRecord | None) -> int | None:
    """The resident memory of the record's process group (an agent unit and its agent; a
    JVM alone)."""
    process = _process(record) if record is not None else None
    if process is None:
        return None
    total = 0
    for member in psutil.process_iter():
        try:
            if member.pid == process.pid or os.getpgid(member.pid) == process.pid:
                total += member.memory_info().rss
        except (OSError, psutil.Error):
            continue
    return total
