"""The agent heals its broker on a fresh cluster: a stopped broker is started, a paused
(SIGSTOP) broker is restarted, both through the ZooKeeper restart lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from management_plane.local.image import image_dir_from_env
from management_plane.local.tls import vm_identity
from planner.contracts.claim import parse_claim
from planner.contracts.journal import parse_journal_entry
from planner.contracts.member import MemberState, parse_member
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec
from tests.harness import ClusterHandle, wait_until

pytestmark = pytest.mark.drill


def _pid(vm_dir: Path) -> int | None:
    try:
        return int(json.loads((vm_dir / "kafka.pid").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def test_agent_starts_a_stopped_broker_and_restarts_a_paused_one(
    fresh_cluster: ClusterHandle, tmp_path: Path
) -> None:
    vm = fresh_cluster.layout.vm("vm2")
    paths = ClusterPaths(fresh_cluster.layout.name)
    zk = fresh_cluster.zookeeper()
    zk.start(timeout=15)
    spec = ClusterSpec(
        cluster="fresh", kafka_version="3.9.2", broker_count=3, zones=("zone-a", "zone-b", "zone-c")
    )
    zk.create(paths.spec, spec.encode(), makepath=True)

    fresh_cluster.vm("stop", "vm2", "--only", "kafka")
    settings = {
        "cluster": "fresh",
        "zookeeper_hosts": fresh_cluster.zookeeper_hosts,
        "vm_id": "vm2",
        "address": vm.address,
        "zone": vm.zone,
        "data_dir": str(vm.kafka_data_dir),
        "config_dir": str(vm.config_dir),
        "logs_dir": str(vm.logs_dir),
        "state_dir": str(vm.directory),
        "image_root": str(image_dir_from_env()),
        "tls_dir": str(vm_identity(vm).directory),
        "loop_interval_s": 1,
        "broker_unresponsive_s": 6,
        "isr_check_interval_s": 1,
    }
    config = tmp_path / "agent.json"
    config.write_text(json.dumps(settings))
    log = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(
        [sys.executable, "-m", "agent.main", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        member = paths.member(vm.broker_id)

        def state() -> MemberState | None:
            if zk.exists(member) is None:
                return None
            return parse_member(zk.get(member)[0]).state

        # The volume's meta.properties says broker 1: the agent claims that id and starts the broker.
        wait_until(
            lambda: state() == MemberState.HEALTHY,
            180,
            "the agent to start the stopped broker and report healthy",
        )
        first_pid = _pid(vm.directory)
        assert first_pid is not None
        claim = parse_claim(1, zk.get(paths.broker_id_claim(1))[0])
        assert claim.vm_id == "vm2"

        os.kill(first_pid, signal.SIGSTOP)
        wait_until(
            lambda: _pid(vm.directory) not in (None, first_pid),
            120,
            "the agent to restart the paused broker",
        )
        wait_until(
            lambda: state() == MemberState.HEALTHY, 180, "the restarted broker to be healthy"
        )

        entries = [
            parse_journal_entry(zk.get(f"{paths.journal}/{c}")[0])
            for c in sorted(zk.get_children(paths.journal))
        ]
        kinds = [(e.action, e.result) for e in entries]
        assert ("start", "done, ISR complete") in kinds
        assert ("restart", "done, ISR complete") in kinds
        assert any(
            "paused" in e.reason or "not answering" in e.reason
            for e in entries
            if e.action == "restart"
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)
        log.close()
        pid = _pid(vm.directory)
        if pid is not None:  # the broker the agent started is not in the cluster file: stop it here
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        zk.stop()
        zk.close()
        print((tmp_path / "agent.log").read_text()[-5000:])
