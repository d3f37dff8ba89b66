"""The KRaft controller faults and the drills' KRaft view against fakes: which controller each
fault picks (Kafka's quorum leader, never a broker's "controller"), what it does to it, that a
killed controller is left to its agent, what settles it, the failover figures it reports; the
pure reads of the local view (the controllers' leader lines, the quorum's gap) and the
health check's controller roles."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from management_plane.drills.catalog import find_drill
from management_plane.drills.checker import check
from management_plane.drills.controller_faults import (
    NEW_LEADER_AFTER_FAULT,
    NEW_LEADER_AFTER_HEAL,
    ControllerKill,
    ControllerPause,
    controller_majority,
)
from management_plane.drills.errors import DrillError
from management_plane.drills.faults import (
    ReportsFigures,
    SettlesItself,
    controller_vm,
    follower_broker_vm,
)
from management_plane.drills.health import health_problems
from management_plane.drills.history import FaultWindow, History, ProducerInfo, SendRecord
from management_plane.drills.local_kraft import leader_transitions, quorum_gap
from management_plane.drills.report import build_report, render_html
from planner.contracts.kraft_quorum_state import QuorumReplica, QuorumRole
from tests.unit.test_drill_faults import FakeCluster, context, healthy_status

pytestmark = pytest.mark.unit

CONTROLLER_DRILLS = (
    "kraft-controller-kill",
    "kraft-controller-sigstop",
    "kraft-follower-controller-kill",
    "kraft-quorum-loss",
)


@pytest.mark.parametrize("name", CONTROLLER_DRILLS)
def test_controller_drills_are_refused_on_a_zookeeper_mode_cluster(name: str) -> None:
    (fault,) = find_drill(name).faults()
    cluster = FakeCluster(kraft=False)
    assert fault.preflight(context(cluster)) == (
        f"{name} needs a KRaft cluster; this one keeps its metadata in ZooKeeper"
    )
    assert fault.preflight(context(FakeCluster(kraft=True))) is None
    assert isinstance(fault, SettlesItself) and isinstance(fault, ReportsFigures)
    assert cluster.actions == []


def test_on_kraft_the_controller_is_the_quorum_leader_not_a_brokers_answer() -> None:
    cluster = FakeCluster(kraft=True, leader_controller="vm3", controller=0)
    assert controller_vm(context(cluster)) == ("vm3",)
    # The plain broker avoids the active controller's VM and partition 0's leader (vm2).
    assert follower_broker_vm(context(cluster)) == ("vm1",)
    cluster.leader_controller = None
    with pytest.raises(DrillError, match="the KRaft controller quorum has no leader now"):
        controller_vm(context(cluster))


def test_the_active_controller_killed_is_left_to_its_agent_and_settles_on_a_new_leader() -> None:
    cluster = FakeCluster(kraft=True, agents=True, quorum_answers=["no leader", None])
    (fault,) = find_drill("kraft-controller-kill").faults()
    assert isinstance(fault, ControllerKill)
    ctx = context(cluster)
    assert fault.inject(ctx) == "vm1's controller (the active one)"
    fault.hold(ctx)
    fault.heal(ctx)
    assert cluster.actions == [("vm1", "kill", "controller")]  # the agent starts it, not us
    assert fault.unsettled(ctx) == "waiting for vm1's controller to be started again by its agent"
    cluster.controller_pids["vm1"] = 2001  # its agent started it
    assert fault.unsettled(ctx) == "waiting for the controller quorum: no leader"
    assert fault.unsettled(ctx) == "waiting for the controllers' logs to show the new leader"
    assert fault.killed_s is not None
    cluster.elections = [("vm2", fault.killed_s - 50), ("vm3", fault.killed_s + 1.25)]
    cluster.leader_controller = "vm3"
    assert fault.unsettled(ctx) is None
    assert fault.settlement() == (
        "vm1's controller running again (pid 2001, started by its agent); vm3's controller "
        "elected leader 1.25s after the kill; every voter caught up"
    )
    assert fault.figures(ctx) == {NEW_LEADER_AFTER_FAULT: 1.25}
    fault.clean_up(ctx)
    assert cluster.actions == [("vm1", "kill", "controller")]


def test_without_agents_the_drill_starts_the_killed_controller_itself() -> None:
    cluster = FakeCluster(kraft=True, agents=False)
    (fault,) = find_drill("kraft-controller-kill").faults()
    ctx = context(cluster)
    fault.inject(ctx)
    fault.heal(ctx)
    assert cluster.actions == [("vm1", "kill", "controller"), ("vm1", "start", "controller")]


def test_a_follower_controller_killed_keeps_the_leader() -> None:
    cluster = FakeCluster(kraft=True, agents=True, leader_controller="vm2")
    (fault,) = find_drill("kraft-follower-controller-kill").faults()
    assert isinstance(fault, ControllerKill)
    ctx = context(cluster)
    assert fault.inject(ctx) == "vm1's controller (a follower)"
    cluster.controller_pids["vm1"] = 2001
    assert fault.unsettled(ctx) is None  # no election expected, none seen
    assert fault.settlement().endswith("the leader (vm2) kept; every voter caught up")
    assert fault.figures(ctx) == {NEW_LEADER_AFTER_FAULT: None}


def test_the_active_controller_paused_is_resumed_by_the_drill_and_reports_the_election() -> None:
    cluster = FakeCluster(kraft=True, agents=True)
    (fault,) = find_drill("kraft-controller-sigstop").faults()
    assert isinstance(fault, ControllerPause)
    ctx = context(cluster)
    assert fault.inject(ctx) == "vm1's controller paused"
    fault.hold(ctx)
    fault.heal(ctx)
    fault.heal(ctx)  # once
    assert cluster.actions == [("vm1", "pause", "controller"), ("vm1", "resume", "controller")]
    assert fault.paused_s is not None and fault.resumed_s is not None
    cluster.elections = [("vm2", fault.paused_s + 2.5)]
    assert fault.unsettled(ctx) is None
    figures = fault.figures(ctx)
    assert figures[NEW_LEADER_AFTER_FAULT] == 2.5
    assert figures[NEW_LEADER_AFTER_HEAL] == pytest.approx(
        fault.paused_s + 2.5 - fault.resumed_s, abs=1e-3
    )
    assert "vm2's controller elected leader 2.50s after the pause" in fault.settlement()


def test_the_quorum_loss_pauses_the_leader_and_enough_followers_to_leave_no_majority() -> None:
    cluster = FakeCluster(kraft=True, agents=True, leader_controller="vm2")
    (fault,) = find_drill("kraft-quorum-loss").faults()
    assert isinstance(fault, ControllerPause)
    ctx = context(cluster)
    assert fault.inject(ctx) == "vm2's controller, vm1's controller paused"
    fault.heal(ctx)
    assert cluster.actions == [
        ("vm2", "pause", "controller"),
        ("vm1", "pause", "controller"),
        ("vm2", "resume", "controller"),
        ("vm1", "resume", "controller"),
    ]
    assert fault.unsettled(ctx) is None
    assert fault.figures(ctx) == {NEW_LEADER_AFTER_FAULT: None, NEW_LEADER_AFTER_HEAL: None}


def test_a_quorum_of_five_loses_three() -> None:
    class Five(FakeCluster):
        def controller_vms(self) -> tuple[str, ...]:
            return ("vm1", "vm2", "vm3", "vm4", "vm5")

    assert controller_majority(context(Five(kraft=True, leader_controller="vm4"))) == (
        "vm4",
        "vm1",
        "vm2",
    )


def test_the_controller_bounce_on_kraft_bounces_the_active_controllers_process() -> None:
    cluster = FakeCluster(kraft=True, agents=True, quorum_answers=["1 of 3 controllers vote", None])
    (fault,) = find_drill("controller-hard-bounce").faults()
    ctx = context(cluster, bounces=2)
    assert fault.inject(ctx) == "2 x hard bounce of vm1 (controller)"
    fault.hold(ctx)
    fault.heal(ctx)
    # Its agent starts the controller again; the drill waits for the quorum, never a broker.
    assert cluster.actions == [("vm1", "kill", "controller")] * 2
    assert cluster.waited == []
    no_agents = FakeCluster(kraft=True)
    (clean,) = find_drill("controller-clean-bounce").faults()
    ctx = context(no_agents, bounces=1)
    clean.inject(ctx)
    clean.hold(ctx)
    assert no_agents.actions == [("vm1", "stop", "controller"), ("vm1", "start", "controller")]


def test_a_quorum_that_never_heals_fails_the_bounce_with_what_it_lacks() -> None:
    cluster = FakeCluster(kraft=True, quorum_answers=["controller(s) 3000 not caught up"])
    (fault,) = find_drill("controller-clean-bounce").faults()
    ctx = context(cluster, bounces=1)
    fault.inject(ctx)
    with pytest.raises(DrillError, match=r"not whole within .*3000 not caught up"):
        fault.hold(ctx)


def _replica(node: int, role: QuorumRole, caught_up_ms: int | None = 0) -> QuorumReplica:
    return QuorumReplica(node, "dir", 100, role, caught_up_ms)


@pytest.mark.parametrize(
    ("replicas", "gap"),
    [
        (
            (
                _replica(3000, QuorumRole.LEADER),
                _replica(3001, QuorumRole.FOLLOWER, 120),
                _replica(3002, QuorumRole.FOLLOWER, 4000),
                _replica(0, QuorumRole.OBSERVER, None),
            ),
            None,
        ),
        ((_replica(3000, QuorumRole.FOLLOWER), _replica(3001, QuorumRole.FOLLOWER)), "no leader"),
        (
            (
                _replica(3000, QuorumRole.LEADER),
                _replica(3001, QuorumRole.FOLLOWER),
                _replica(3002, QuorumRole.OBSERVER),
            ),
            "2 of 3 controllers vote",
        ),
        (
            (
                _replica(3000, QuorumRole.LEADER),
                _replica(3001, QuorumRole.FOLLOWER, 9000),
                _replica(3002, QuorumRole.FOLLOWER, None),
            ),
            "controller(s) 3001, 3002 not caught up",
        ),
    ],
)
def test_quorum_gap_names_what_keeps_the_quorum_from_whole(
    replicas: tuple[QuorumReplica, ...], gap: str | None
) -> None:
    assert quorum_gap(replicas, voters=3) == gap


def test_leader_transitions_are_read_from_the_controllers_log_lines() -> None:
    lines = [
        "[2026-11-24 18:01:02,300] INFO [RaftManager id=3001] Attempting durable transition to "
        "Leader(localVoterNode=VoterNode(voterKey=ReplicaKey(id=3001, directoryId=x)), epoch=7)",
        "[2026-11-24 18:01:02,345] INFO [RaftManager id=3001] Completed transition to "
        "Leader(localReplicaKey=ReplicaKey(id=3001, directoryId=<x>), epoch=7, "
        "epochStartOffset=120, highWatermark=Optional.empty) from Candidate(...) "
        "(org.apache.kafka.raft.QuorumState)",
        "[2026-11-24 18:01:01,000] INFO [RaftManager id=3001] Completed transition to "
        "CandidateState(localId=3001, epoch=7) (org.apache.kafka.raft.QuorumState)",
        "garbage",
    ]
    ((at, epoch),) = leader_transitions(lines)
    expected = time.mktime(time.strptime("2026-11-24 18:01:02", "%Y-%m-%d %H:%M:%S")) + 0.345
    assert at == pytest.approx(expected, abs=1e-6) and epoch == 7


def test_a_controller_outside_the_quorum_makes_the_cluster_unfit_for_a_drill() -> None:
    status: dict[str, Any] = healthy_status()
    for vm, role in zip(status["vms"], ("leader", "voter", "observer"), strict=True):
        vm["controller_role"] = role
    assert health_problems(status) == ["vm3's KRaft controller is observer in the quorum"]
    status["vms"][2]["controller_role"] = "voter"
    assert health_problems(status) == []


def test_the_report_carries_each_faults_own_figures() -> None:
    history = History.of(
        [
            ProducerInfo("p1", True),
            SendRecord("p1", "t", "k", 0, "k:0", 0, 0, 101.0, None),
            FaultWindow("f1", "kraft-controller-kill", "vm1's controller", 103.0, 105.0),
        ]
    )
    report = build_report(
        drill="kraft-controller-kill",
        cluster="c",
        topic="t",
        duration_s=2.0,
        rate_per_s=10.0,
        started_s=100.0,
        ended_s=110.0,
        verdict=check(history, isr_complete_s={"f1": 106.0}),
        latencies=[],
        journal=[],
        recovered=True,
        figures={"f1": {NEW_LEADER_AFTER_FAULT: 1.25}},
    )
    (fault,) = report["summary"]["faults"]
    assert fault["figures"] == {NEW_LEADER_AFTER_FAULT: 1.25}
    json.dumps(report)
    assert "new_leader_after_fault_s 1.25" in render_html(report)
