"""The faults the management plane must ride out or repair, against a fake plane and a fake
cluster: when the kill lands, what settles each fault and what counts as a failure (an
operation run again from its start, a failed replacement), the refusals, and how the runner
waits for KaaS's own repair."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from management_plane.drills.catalog import DRILLS, choose_drill, find_drill
from management_plane.drills.errors import DrillError
from management_plane.drills.faults import FaultContext, OperationView, SettlesItself
from management_plane.drills.local_plane import operation_view
from management_plane.drills.operation import DrillAsk, check_drill_request
from management_plane.drills.plane_faults import (
    ROLLED_CONFIG,
    LostVm,
    ManagementPlaneKill,
    toggled_config,
)
from management_plane.drills.runner import wait_recovered
from management_plane.errors import RequestRefused
from tests.unit.test_drill_faults import FakeDiskCluster

pytestmark = pytest.mark.unit


@dataclass
class FakePlane:
    """Operations advance one step each time they are read; `kill` and `restart` are
    recorded; `refuse` makes `problem` answer."""

    config: dict[str, str] = field(default_factory=dict)
    steps: list[str] = field(default_factory=lambda: ["write_spec", "wait_applied", "finish"])
    ops: dict[int, OperationView] = field(default_factory=dict)
    reads: int = 0
    events: list[str] = field(default_factory=list)
    refuse: str | None = None
    replay: bool = False  # the restarted plane runs the operation from its first step again
    fail: bool = False

    def problem(self) -> str | None:
        return self.refuse

    def broker_config(self) -> Mapping[str, str]:
        return self.config

    def change_config(self, config: Mapping[str, str | None]) -> int:
        self.events.append(f"change {dict(config)}")
        op_id = len(self.ops) + 1
        self.ops[op_id] = OperationView(op_id, "change_config", "running", self.steps[0], "")
        return op_id

    def operation(self, op_id: int) -> OperationView:
        op = self.ops[op_id]
        if "restart" not in self.events and "kill" in self.events:
            return op  # nothing moves while the plane is down
        if op.status == "running":
            done = (*op.done_steps, op.step or "")
            if self.replay and "restart" in self.events and op.done_steps.count("write_spec") < 2:
                done = (*done, "write_spec")
            left = [s for s in self.steps if s not in done]
            if self.fail and "restart" in self.events:
                op = OperationView(op_id, op.kind, "failed", op.step, "wait_applied timed out")
            elif left:
                op = OperationView(op_id, op.kind, "running", left[0], "", op.params, done)
            else:
                op = OperationView(op_id, op.kind, "succeeded", None, "done", op.params, done)
            self.ops[op_id] = op
        return op

    def operations(self) -> list[OperationView]:
        return list(self.ops.values())

    def kill(self) -> str:
        self.events.append("kill")
        return "kaas serve (pid 42)"

    def restart(self) -> None:
        self.events.append("restart")


def plane_context(cluster: FakeDiskCluster, plane: FakePlane | None) -> FaultContext:
    return FaultContext(
        cluster=cluster, topic="t", duration_s=5.0, sleep=lambda seconds: None, plane=plane
    )


def test_the_plane_faults_are_in_the_catalog_and_settle_themselves() -> None:
    names = {d.name for d in DRILLS}
    assert {"management-plane-kill", "lost-vm"} <= names
    for name in ("management-plane-kill", "lost-vm"):
        drill = find_drill(name)
        assert drill.faults_the_plane
        (fault,) = drill.faults()
        assert isinstance(fault, SettlesItself)
    assert not find_drill("broker-sigkill").faults_the_plane
    assert choose_drill("game-day", ("broker-sigkill", "lost-vm")).faults_the_plane


@pytest.mark.parametrize(
    ("config", "changed"),
    [
        ({}, "10081"),
        ({ROLLED_CONFIG: "10081"}, "10080"),
        ({ROLLED_CONFIG: "20000"}, "20001"),
        ({ROLLED_CONFIG: "not a number"}, "10081"),
    ],
)
def test_the_rolled_config_moves_by_one_minute_and_back(
    config: dict[str, str], changed: str
) -> None:
    assert toggled_config(config) == {ROLLED_CONFIG: changed}


def test_the_plane_is_killed_at_wait_applied_and_the_operation_resumes() -> None:
    plane = FakePlane()
    context = plane_context(FakeDiskCluster(agents=True), plane)
    fault = ManagementPlaneKill()
    assert fault.preflight(context) is None
    target = fault.inject(context)
    assert target == "kaas serve (pid 42), operation 1 (change_config) at wait_applied"
    assert plane.events == [f"change {{'{ROLLED_CONFIG}': '10081'}}", "kill"]
    assert fault.unsettled(context) == "operation 1 at wait_applied: "  # down: no progress
    fault.hold(context)
    fault.heal(context)
    fault.heal(context)  # started once
    assert plane.events.count("restart") == 1
    assert [fault.unsettled(context) for _ in range(3)] == ["operation 1 at finish: ", None, None]
    assert fault.settlement() == (
        "operation 1 resumed at wait_applied after the restart and succeeded"
    )


def test_an_operation_run_again_from_its_start_is_not_a_resume() -> None:
    plane = FakePlane(replay=True)
    context = plane_context(FakeDiskCluster(agents=True), plane)
    fault = ManagementPlaneKill()
    fault.inject(context)
    fault.heal(context)
    with pytest.raises(DrillError, match="ran write_spec again"):
        while fault.unsettled(context) is not None:
            pass


def test_a_failed_operation_after_the_restart_is_a_failure() -> None:
    plane = FakePlane(fail=True)
    context = plane_context(FakeDiskCluster(agents=True), plane)
    fault = ManagementPlaneKill()
    fault.inject(context)
    fault.heal(context)
    with pytest.raises(DrillError, match="failed after the restart: wait_applied timed out"):
        fault.unsettled(context)


def test_an_operation_that_ends_before_the_kill_step_fails_the_injection() -> None:
    plane = FakePlane(steps=["write_spec", "finish"])
    fault = ManagementPlaneKill()
    with pytest.raises(DrillError, match="succeeded before reaching wait_applied"):
        fault.inject(plane_context(FakeDiskCluster(agents=True), plane))
    assert "kill" not in plane.events


@pytest.mark.parametrize("fault", [ManagementPlaneKill(), LostVm()])
def test_plane_faults_are_refused_without_a_plane_or_agents(fault: Any) -> None:
    cluster = FakeDiskCluster(agents=True)
    assert "needs the cluster's management plane" in fault.preflight(plane_context(cluster, None))
    refusing = FakePlane(refuse="no management plane runs beside the cluster at /x")
    assert fault.preflight(plane_context(cluster, refusing)) == refusing.refuse
    no_agents = FakeDiskCluster(agents=False)
    assert "run kaas-agent" in fault.preflight(plane_context(no_agents, FakePlane()))
    assert cluster.actions == []


def lost_vm_replacement(op_id: int, status: str, step: str | None) -> OperationView:
    return OperationView(op_id, "replace_lost_vm", status, step, "", {"vm_id": "c/vm3"})


def test_a_lost_vm_is_killed_whole_its_volume_deleted_and_settled_by_its_replacement() -> None:
    cluster = FakeDiskCluster(agents=True)
    plane = FakePlane()
    plane.ops[1] = lost_vm_replacement(1, "succeeded", None)  # an older loss of the same VM
    context = plane_context(cluster, plane)
    fault = LostVm()
    assert fault.preflight(context) is None
    target = fault.inject(context)
    assert target.startswith("vm3 (every process killed; ")
    assert cluster.actions == [
        ("vm3", "kill", "agent"),
        ("vm3", "kill", "kafka"),
        ("vm3", "kill", "zookeeper"),
    ]
    assert cluster.disks == [("vm3", "destroy")]
    assert target == "vm3 (every process killed; /vms/vm3/data/kafka deleted)"
    fault.hold(context)
    fault.heal(context)
    assert len(cluster.actions) == 3  # nothing brings a lost VM back but its replacement
    assert fault.unsettled(context) == "waiting for the management plane to notice vm3 lost"
    plane.ops[2] = lost_vm_replacement(2, "running", "wait_replicated:0")
    assert fault.unsettled(context) == "operation 2 replacing vm3 at wait_replicated:0: "
    plane.ops[2] = lost_vm_replacement(2, "succeeded", None)
    assert fault.unsettled(context) is None
    assert fault.settlement() == "operation 2 (replace_lost_vm) replaced vm3 and succeeded"


def test_a_failed_replacement_fails_the_lost_vm_drill() -> None:
    plane = FakePlane()
    context = plane_context(FakeDiskCluster(agents=True), plane)
    fault = LostVm()
    fault.inject(context)
    plane.ops[1] = OperationView(
        1, "replace_lost_vm", "failed", None, "no zone", {"vm_id": "c/vm3"}
    )
    with pytest.raises(DrillError, match=r"replacement of vm3 \(operation 1\) failed: no zone"):
        fault.unsettled(context)


def test_recovery_waits_for_kaas_to_settle() -> None:
    now = [0.0]
    left = ["operation 1 at wait_applied", "operation 1 at finish", None]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    @dataclass
    class Healthy:
        def under_replicated(self) -> int | None:
            return 0

    cluster: Any = Healthy()
    recovered = wait_recovered(
        cluster,
        lambda since: True,
        10,
        clock=lambda: now[0],
        sleep=sleep,
        unsettled=lambda: left.pop(0) if len(left) > 1 else left[0],
    )
    assert recovered == 1.0


def test_the_api_refuses_a_drill_that_faults_the_plane_before_anything_is_queued(
    tmp_path: Any,
) -> None:
    for ask in (
        DrillAsk("lost-vm"),
        DrillAsk("game-day", game_day_drills=("management-plane-kill",)),
    ):
        with pytest.raises(RequestRefused, match="it faults the management plane itself"):
            check_drill_request(ask, "c", object(), tmp_path / "report")
    assert list(tmp_path.iterdir()) == []


def test_an_api_operation_reads_into_a_view() -> None:
    view = operation_view(
        {
            "op_id": 7,
            "kind": "change_config",
            "status": "running",
            "step": "wait_applied",
            "message": "2/3 agents",
            "params": {"spec_changes": {}},
            "journal": [
                {"step": "write_spec", "outcome": "started"},
                {"step": "write_spec", "outcome": "done"},
                {"step": "wait_applied", "outcome": "started"},
            ],
        }
    )
    assert view == OperationView(
        7,
        "change_config",
        "running",
        "wait_applied",
        "2/3 agents",
        {"spec_changes": {}},
        ("write_spec",),
    )
