"""The agent heals its broker, checked on a cluster with agents that other drills share
(tests/drills/test_kaas_drill.py runs it on its cluster) through the drills' own process
faults: a stopped broker is started, a paused (SIGSTOP) broker is restarted through the
ZooKeeper restart lock, and the agent keeps the broker id its claim names."""

from __future__ import annotations

import json
import time
from pathlib import Path

from management_plane.drills.faults import (
    FaultContext,
    ProcessAction,
    ProcessFault,
    ProcessKind,
)
from management_plane.drills.local_cluster import LocalFaultCluster
from planner.contracts.claim import parse_claim
from planner.contracts.member import MemberState, parse_member
from planner.contracts.paths import ClusterPaths
from tests import harness
from tests.harness import ClusterHandle, wait_until


def _pid(vm_dir: Path) -> int | None:
    try:
        return int(json.loads((vm_dir / "kafka.pid").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _vm2(context: FaultContext) -> tuple[str, ...]:
    return ("vm2",)


def check_agent_starts_a_stopped_broker_and_restarts_a_paused_one(cluster: ClusterHandle) -> None:
    faults = LocalFaultCluster(cluster.home)
    context = FaultContext(cluster=faults, topic="", duration_s=0.0)
    name = cluster.layout.name
    paths = ClusterPaths(name)
    since_ms = int(time.time() * 1000)
    zk = cluster.zookeeper()
    zk.start(timeout=15)
    stopped = ProcessFault(
        "broker-stop", "vm2's broker stopped", ProcessKind.KAFKA, ProcessAction.STOP, _vm2
    )
    paused = ProcessFault(
        "broker-pause", "vm2's broker paused", ProcessKind.KAFKA, ProcessAction.PAUSE, _vm2
    )
    try:
        harness.wait_for_healthy_agents(zk, name)
        vm = cluster.layout.vm("vm2")
        # Agents claim ids in any order: the one vm2's agent holds.
        (broker_id,) = [b for b, m in harness.member_records(zk, name).items() if m.vm_id == "vm2"]
        member = paths.member(broker_id)
        first_pid = _pid(vm.directory)
        target = stopped.inject(context)
        assert stopped.victims == (vm.name,)

        def state() -> MemberState | None:
            if zk.exists(member) is None:
                return None
            return parse_member(zk.get(member)[0]).state

        def start_finished() -> bool:
            return any(
                e.vm_id == vm.name
                and e.action == "start"
                and e.result != "started"
                and e.at_ms >= since_ms
                for e in harness.journal_entries(zk, name)
            )

        # The start's journal entry as well: the member record read here may still be the
        # one from before the stop when the new pid appears, and a broker paused while its
        # start waits for an answer is left to that wait (up to 180 s), not restarted.
        wait_until(
            lambda: (
                _pid(vm.directory) not in (None, first_pid)
                and state() == MemberState.HEALTHY
                and start_finished()
            ),
            180,
            f"{vm.name}'s agent to start its stopped broker ({target}) and report healthy",
        )
        stopped.victims = ()  # the agent healed it: the drill's heal would start nothing
        claim = parse_claim(broker_id, zk.get(paths.broker_id_claim(broker_id))[0])
        assert claim.vm_id == vm.name

        restarted_pid = _pid(vm.directory)
        paused.inject(context)
        assert paused.victims == (vm.name,)
        wait_until(
            lambda: _pid(vm.directory) not in (None, restarted_pid),
            180,
            f"{vm.name}'s agent to restart its paused broker",
        )
        paused.victims = ()  # the paused process is gone: nothing to resume
        wait_until(
            lambda: state() == MemberState.HEALTHY, 180, "the restarted broker to be healthy"
        )
        entries = [
            e
            for e in harness.journal_entries(zk, name)
            if e.at_ms >= since_ms and e.vm_id == vm.name
        ]
        kinds = [(e.action, e.result) for e in entries]
        assert ("start", "done, ISR complete") in kinds, kinds
        assert ("restart", "done, ISR complete") in kinds, kinds
        assert any(
            "paused" in e.reason or "not answering" in e.reason
            for e in entries
            if e.action == "restart"
        )
    finally:
        paused.heal(context)  # a broker left paused by a failed check is resumed
        stopped.heal(context)
        zk.stop()
        zk.close()
