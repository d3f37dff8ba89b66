"""The restart of a VM's ZooKeeper server onto its renewed certificate: the quorum gate
(pure, a table), the restart's steps under the restart lock (fakes for the lock, the
process and what it presents), and the local process control on real processes standing in
for QuorumPeerMain (found by its zoo.cfg, restarted with its command line, recorded where
`kaas down` looks)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agent.zk_server_restart import (
    ZOOKEEPER_MAIN,
    ZOOKEEPER_PID_FILE,
    LocalZookeeper,
    ZookeeperLooks,
    ZookeeperRestartSettings,
    ZookeeperServerError,
    restart_refusal,
    restart_zookeeper_server,
)
from management_plane.local.layout import plan_layout
from management_plane.local.processes import ProcessRecord
from management_plane.local.state import AGENT_ZOOKEEPER_PID_FILE, ClusterState
from tests.unit.agent_fakes import FakeClock, FakeRestartLock, FakeZooKeeper

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("serving", "refused"),
    [
        ({1: True, 2: True, 3: True}, None),
        ({1: False, 2: True, 3: True}, None),  # itself down: a restart cannot hurt
        ({1: True, 2: False, 3: True}, "server(s) 2 not serving"),
        ({1: True, 2: False, 3: False}, "server(s) 2, 3 not serving"),
        ({1: True, 2: True, 3: True, 4: True, 5: False}, "server(s) 5 not serving"),
        # An observer (not among the participants) votes in no quorum: it may restart.
        ({2: True, 3: False, 4: True}, None),
    ],
)
def test_a_restart_never_takes_a_second_server_down(
    serving: dict[int, bool], refused: str | None
) -> None:
    reason = restart_refusal(1, serving)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


class FakeServer:
    def __init__(self, clock: FakeClock, looks: dict[str, object]) -> None:
        self.clock = clock
        self.looks = looks
        self.calls: list[str] = []
        self.answers = True

    def restart(self, stop_timeout: float) -> None:
        self.calls.append("restart")
        self.looks["presented"] = None
        if self.answers:
            # The server answers with the installed certificate a few seconds later.
            self.clock.on_sleep.append(self._answer)

    def _answer(self, seconds: float) -> None:
        if self.clock.slept >= 3:
            self.looks["presented"] = "new"


def _restart(
    serving: dict[int, bool], answers: bool = True
) -> tuple[str, FakeServer, FakeZooKeeper, list[str]]:
    clock = FakeClock()
    zk = FakeZooKeeper(clock)
    looks: dict[str, object] = {"presented": "old"}
    server = FakeServer(clock, looks)
    server.answers = answers
    progress: list[str] = []
    result = restart_zookeeper_server(
        ZookeeperRestartSettings(1, serve_timeout_s=30),
        FakeRestartLock(zk, "zookeeper server 1"),
        server,
        ZookeeperLooks(
            serving=lambda: serving,
            presented_serial=lambda: looks["presented"],  # type: ignore[return-value,arg-type]
            installed_serial=lambda: "new",
        ),
        clock,
        progress.append,
    )
    return result, server, zk, progress


def test_the_restart_holds_the_lock_until_the_new_certificate_is_served() -> None:
    result, server, zk, progress = _restart({1: True, 2: True, 3: True})
    assert result == "done, serving with certificate new"
    assert server.calls == ["restart"]
    assert zk.lock_acquisitions == zk.lock_releases == ["zookeeper server 1"]
    assert any("2/2" in line for line in progress)


def test_an_observer_restarts_whatever_the_participants_do() -> None:
    result, server, zk, _ = _restart({2: True, 3: False, 4: True})
    assert result == "done, serving with certificate new"
    assert server.calls == ["restart"] and zk.lock_releases == ["zookeeper server 1"]


def test_with_another_server_down_nothing_is_restarted_and_the_lock_is_freed() -> None:
    result, server, zk, _ = _restart({1: True, 2: False, 3: True})
    assert result.startswith("not restarted: ZooKeeper server(s) 2 not serving")
    assert server.calls == []
    assert zk.lock_releases == ["zookeeper server 1"]


def test_a_server_that_does_not_come_back_is_reported_and_the_lock_freed() -> None:
    result, _server, zk, _ = _restart({1: True, 2: True, 3: True}, answers=False)
    assert result == "restarted, not serving certificate new after 30 s"
    assert zk.lock_releases == ["zookeeper server 1"]


STAND_IN = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(120)"


def _stand_in(zoo_cfg: Path) -> subprocess.Popen[bytes]:
    # argv as QuorumPeerMain's: the main class, then the zoo.cfg last.
    process = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, ZOOKEEPER_MAIN, str(zoo_cfg)], start_new_session=True
    )
    # Popen returns once the exec began; /proc shows the new arguments a moment later on a
    # loaded machine, and the server is found by them.
    deadline = time.monotonic() + 10
    while not psutil.Process(process.pid).cmdline() and time.monotonic() < deadline:
        time.sleep(0.05)
    return process


def test_a_local_server_is_restarted_with_its_command_line_and_recorded(tmp_path: Path) -> None:
    zoo_cfg = tmp_path / "vm1" / "zoo.cfg"
    other = _stand_in(tmp_path / "vm2" / "zoo.cfg")  # another VM's server: left alone
    mine = _stand_in(zoo_cfg)
    server = LocalZookeeper(zoo_cfg, tmp_path / "vm1", tmp_path / "vm1" / "logs" / "zookeeper.log")
    restarted: psutil.Process | None = None
    try:
        server.restart(10)
        assert mine.wait(5) == 0  # stopped by SIGTERM, not killed
        assert other.poll() is None
        record = json.loads((tmp_path / "vm1" / ZOOKEEPER_PID_FILE).read_text())
        restarted = psutil.Process(record["pid"])
        # /proc shows a just-exec'd process's arguments a moment later on a loaded machine.
        for _ in range(50):
            if restarted.cmdline():
                break
            time.sleep(0.1)
        assert restarted.cmdline()[-2:] == [ZOOKEEPER_MAIN, str(zoo_cfg)], restarted.status()
        assert abs(restarted.create_time() - record["create_time"]) < 0.05
    finally:
        for process in (other, mine):
            process.kill()
            process.wait()
        if restarted is not None:
            restarted.kill()
            restarted.wait(5)
    with pytest.raises(ZookeeperServerError, match="no ZooKeeper server runs"):
        server.restart(1)


def test_kaas_down_finds_the_server_the_agent_restarted_while_it_lives(tmp_path: Path) -> None:
    layout = plan_layout("zkpid", tmp_path / "home", 3)
    state = ClusterState(layout, "3.9.2", agents=True)
    vm = layout.vms[0]
    started = ProcessRecord(pid=1, create_time=0.0)
    state.set_record(vm.name, "zookeeper", started)
    assert state.record(vm.name, "zookeeper") == started
    vm.directory.mkdir(parents=True)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        own = ProcessRecord(pid=live.pid, create_time=psutil.Process(live.pid).create_time())
        (vm.directory / AGENT_ZOOKEEPER_PID_FILE).write_text(json.dumps(own.to_json()))
        assert state.record(vm.name, "zookeeper") == own
    finally:
        live.kill()
        live.wait()
    assert state.record(vm.name, "zookeeper") == started  # gone: `kaas up`'s record again
