"""A forking daemon's workers go with it: `stop_session` and `kill_session` end what is left
of a process's session, as a gunicorn worker is left holding the render API's port when its
master is killed alone."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from management_plane.local.layout import plan_layout
from management_plane.local.processes import (
    ProcessRecord,
    is_alive,
    kill_session,
    send_signal,
    session_members,
    start_process,
    stop_session,
)
from management_plane.local.state import ClusterState
from management_plane.local.vm_processes import stop_every_vm

pytestmark = pytest.mark.integration

# A master that starts a worker, as gunicorn does; the worker ignores its master's death.
FORKING = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "time.sleep(120)"
)


def _started(tmp_path: Path) -> tuple[ProcessRecord, list[psutil.Process]]:
    record = start_process([sys.executable, "-c", FORKING], tmp_path / "forking.log", tmp_path)
    deadline = time.monotonic() + 10
    while len(members := session_members(record)) < 2:
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.1)
    return record, members


def test_a_killed_masters_worker_is_ended_with_its_session(tmp_path: Path) -> None:
    record, members = _started(tmp_path)
    worker = next(p for p in members if p.pid != record.pid)
    send_signal(record, 9)  # the master alone, as a harness's SIGKILL did
    time.sleep(0.5)
    assert not is_alive(record) and worker.is_running()
    kill_session(record)
    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    assert session_members(record) == []


def test_stop_session_ends_master_and_worker(tmp_path: Path) -> None:
    record, members = _started(tmp_path)
    stop_session(record, 5)
    assert session_members(record) == []
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in members)


# A stand-in for a JVM whose shutdown would take long: it ignores SIGTERM.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"


def test_a_purge_kills_every_vms_processes_without_waiting_for_their_shutdown(
    tmp_path: Path,
) -> None:
    layout = plan_layout("purged", tmp_path, 2, "127.0.99")
    state = ClusterState(layout=layout, kafka_version="3.9.2")
    started = []
    for vm in layout.vms:
        for kind in ("zookeeper", "kafka"):
            record = start_process(
                [sys.executable, "-c", STUBBORN], tmp_path / f"{vm.name}-{kind}.log", tmp_path
            )
            state.set_record(vm.name, kind, record)
            started.append(record)
    time.sleep(0.5)  # the handler is in place
    begun = time.monotonic()
    stop_every_vm(state, discard=True)
    took = time.monotonic() - begun
    assert not any(is_alive(r) for r in started)
    assert all(
        state.record(vm.name, k) is None for vm in layout.vms for k in ("zookeeper", "kafka")
    )
    # A graceful stop would have waited ZooKeeper's 30 s timeout for each ignored SIGTERM.
    assert took < 10, f"the purge took {took:.1f}s"
