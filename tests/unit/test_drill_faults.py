"""The drills' faults against a fake cluster: what each does to which VM when injected,
what heal undoes (and that heal twice does nothing more), the catalog, and the refusals made
before anything is touched."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from management_plane.drills.catalog import DRILLS, GAME_DAY_DRILLS, find_drill
from management_plane.drills.errors import DrillError, DrillRefused
from management_plane.drills.faults import (
    BounceFault,
    FaultCluster,
    FaultContext,
    NetworkPartition,
    ProcessAction,
    ProcessKind,
    leader_vm,
)
from management_plane.drills.health import health_problems
from management_plane.drills.runner import DrillOptions, refusals, wait_recovered

pytestmark = pytest.mark.unit


@dataclass
class FakeCluster:
    """Three VMs: broker 0 on vm1 (controller), 1 on vm2 (leads partition 0), 2 on vm3;
    ZooKeeper leader on vm2."""

    agents: bool = False
    leader: int = 1
    controller: int = 0
    modes: dict[str, str] = field(
        default_factory=lambda: {"vm1": "follower", "vm2": "leader", "vm3": "follower"}
    )
    actions: list[tuple[str, str, str]] = field(default_factory=list)
    waited: list[str] = field(default_factory=list)
    # KRaft: a controller on each VM, vm1's the quorum's leader; quorum_whole's answers in
    # turn (the last one kept); the leaderships the controllers' logs show.
    kraft: bool = False
    leader_controller: str | None = "vm1"
    quorum_answers: list[str | None] = field(default_factory=lambda: [None])
    controller_pids: dict[str, int | None] = field(
        default_factory=lambda: {"vm1": 1001, "vm2": 1002, "vm3": 1003}
    )
    elections: list[tuple[str, float]] = field(default_factory=list)

    def vm_names(self) -> tuple[str, ...]:
        return ("vm1", "vm2", "vm3")

    def vm_address(self, vm: str) -> str:
        return f"127.0.9.{vm[-1]}"

    def vm_pids(self, vm: str) -> tuple[int, ...]:
        return (int(vm[-1]) * 100, int(vm[-1]) * 100 + 1)

    def runs_agents(self) -> bool:
        return self.agents

    def broker_vm(self, broker_id: int) -> str:
        return f"vm{broker_id + 1}"

    def partition_leader(self, topic: str, partition: int) -> int:
        return self.leader

    def controller_id(self) -> int:
        return self.controller

    def zookeeper_modes(self) -> Mapping[str, str]:
        return self.modes

    def act(self, vm: str, action: ProcessAction, kind: ProcessKind) -> str:
        self.actions.append((vm, action.value, kind.value))
        if kind is ProcessKind.CONTROLLER and action is ProcessAction.KILL:
            self.controller_pids[vm] = None
        return f"{vm}: {action.value}"

    def wait_broker_serving(self, vm: str, timeout_s: float) -> None:
        self.waited.append(vm)

    def runs_kraft(self) -> bool:
        return self.kraft

    def controller_vms(self) -> tuple[str, ...]:
        return self.vm_names() if self.kraft else ()

    def quorum_leader(self) -> str | None:
        return self.leader_controller if self.kraft else None

    def quorum_whole(self) -> str | None:
        return (
            self.quorum_answers.pop(0) if len(self.quorum_answers) > 1 else self.quorum_answers[0]
        )

    def controller_pid(self, vm: str) -> int | None:
        return self.controller_pids.get(vm)

    def leader_elected_since(self, since_s: float) -> tuple[str, float] | None:
        later = [e for e in self.elections if e[1] > since_s]
        return min(later, key=lambda e: e[1]) if later else None


@dataclass
class FakeNetwork:
    refuse: str | None = None
    rules: dict[str, str] = field(default_factory=dict)

    def problem(self) -> str | None:
        return self.refuse

    def isolate(self, address: str, pids: Iterable[int]) -> str:
        handle = f"t{len(self.rules) + 1}"
        self.rules[handle] = f"{address} {sorted(pids)}"
        return handle

    def degrade(self, address: str, pids: Iterable[int], loss_percent: int) -> str:
        handle = f"t{len(self.rules) + 1}"
        self.rules[handle] = f"{address} {sorted(pids)} {loss_percent}%"
        return handle

    def remove(self, handle: str) -> None:
        self.rules.pop(handle, None)


def context(
    cluster: FakeCluster, network: FakeNetwork | None = None, bounces: int = 3
) -> FaultContext:
    return FaultContext(
        cluster=cluster,
        topic="t",
        duration_s=6.0,
        bounces=bounces,
        network=network,
        sleep=lambda seconds: None,
    )


def run(name: str, cluster: FakeCluster, network: FakeNetwork | None = None) -> str:
    (fault,) = find_drill(name).faults()
    ctx = context(cluster, network)
    assert fault.preflight(ctx) is None
    target = fault.inject(ctx)
    fault.hold(ctx)
    fault.heal(ctx)
    fault.heal(ctx)  # a second heal (the interrupted drill's cleanup) does nothing more
    return target


@pytest.mark.parametrize(
    ("drill", "target", "actions"),
    [
        (
            "broker-sigkill",
            "vm2's kafka",
            [("vm2", "kill", "kafka"), ("vm2", "start", "kafka")],
        ),
        (
            "broker-sigstop",
            "vm3's kafka",
            [("vm3", "pause", "kafka"), ("vm3", "resume", "kafka")],
        ),
        (
            "zookeeper-follower-kill",
            "vm1's zookeeper",
            [("vm1", "kill", "zookeeper"), ("vm1", "start", "zookeeper")],
        ),
        (
            "zookeeper-leader-kill",
            "vm2's zookeeper",
            [("vm2", "kill", "zookeeper"), ("vm2", "start", "zookeeper")],
        ),
        (
            "zookeeper-quorum-loss",
            "vm2's zookeeper, vm1's zookeeper",
            [
                ("vm2", "kill", "zookeeper"),
                ("vm1", "kill", "zookeeper"),
                ("vm2", "start", "zookeeper"),
                ("vm1", "start", "zookeeper"),
            ],
        ),
    ],
)
def test_process_faults_act_on_the_chosen_vm_and_heal_once(
    drill: str, target: str, actions: list[tuple[str, str, str]]
) -> None:
    cluster = FakeCluster()
    assert run(drill, cluster) == target
    assert cluster.actions == actions


def test_agent_kill_needs_agents_and_restarts_the_agent() -> None:
    (fault,) = find_drill("agent-kill").faults()
    assert fault.preflight(context(FakeCluster(agents=False))) == (
        "agent-kill needs a cluster whose VMs run kaas-agent; this one runs none"
    )
    cluster = FakeCluster(agents=True)
    assert run("agent-kill", cluster) == "vm3's agent"
    assert cluster.actions == [("vm3", "kill", "agent"), ("vm3", "start", "agent")]


@pytest.mark.parametrize(
    ("drill", "down", "first"),
    [
        ("leader-clean-bounce", "stop", "vm2"),
        ("leader-hard-bounce", "kill", "vm2"),
        ("controller-clean-bounce", "stop", "vm1"),
        ("controller-hard-bounce", "kill", "vm1"),
    ],
)
def test_bounces_take_the_target_down_and_up_n_times(drill: str, down: str, first: str) -> None:
    cluster = FakeCluster()
    target = run(drill, cluster)
    assert target == f"3 x {'hard' if down == 'kill' else 'clean'} bounce of {first}"
    assert cluster.actions == [(first, down, "kafka"), (first, "start", "kafka")] * 3
    assert cluster.waited == [first] * 3


def test_a_bounce_chooses_its_target_anew_each_time() -> None:
    cluster = FakeCluster()
    fault = BounceFault("leader-hard-bounce", "", True, leader_vm)
    ctx = context(cluster, bounces=2)
    fault.inject(ctx)
    cluster.leader = 2  # leadership moved to broker 2 (vm3) while vm2 was down
    fault.hold(ctx)
    assert [a for a in cluster.actions if a[1] == "kill"] == [
        ("vm2", "kill", "kafka"),
        ("vm3", "kill", "kafka"),
    ]
    assert fault.targets == ["vm2", "vm3"]


def test_bounce_refuses_zero_bounces() -> None:
    fault = BounceFault("leader-hard-bounce", "", True, leader_vm)
    assert fault.preflight(context(FakeCluster(), bounces=0)) == (
        "leader-hard-bounce needs at least one bounce; got 0"
    )


def test_network_partition_isolates_a_plain_broker_and_heal_removes_the_rules() -> None:
    cluster = FakeCluster()
    network = FakeNetwork()
    partition = NetworkPartition()
    ctx = context(cluster, network)
    assert partition.inject(ctx) == "vm3 (127.0.9.3)"
    assert network.rules == {"t1": "127.0.9.3 [300, 301]"}
    partition.heal(ctx)
    partition.heal(ctx)
    assert network.rules == {}
    assert cluster.actions == []


def test_degraded_network_loses_packets_of_a_plain_broker_until_healed() -> None:
    cluster = FakeCluster()
    network = FakeNetwork()
    (fault,) = find_drill("degraded-network").faults()
    ctx = context(cluster, network)
    assert fault.preflight(ctx) is None
    assert fault.inject(ctx) == "vm3 (127.0.9.3): 20% loss"
    assert network.rules == {"t1": "127.0.9.3 [300, 301] 20%"}
    fault.heal(ctx)
    fault.heal(ctx)
    assert network.rules == {}


def test_network_partition_refused_without_rule_permission() -> None:
    partition = NetworkPartition()
    no_permission = FakeNetwork(refuse="network rules cannot be set here: Operation not permitted")
    assert partition.preflight(context(FakeCluster(), no_permission)) == (
        "network rules cannot be set here: Operation not permitted"
    )
    assert partition.preflight(context(FakeCluster(), None)) == (
        "network-partition needs network rules, and this drill has none"
    )


def test_a_zookeeper_fault_without_its_target_says_what_the_ensemble_has() -> None:
    cluster = FakeCluster(modes={"vm1": "follower", "vm2": "down", "vm3": "follower"})
    (fault,) = find_drill("zookeeper-leader-kill").faults()
    with pytest.raises(DrillError, match="the ensemble has 0 ZooKeeper leader"):
        fault.inject(context(cluster))
    assert cluster.actions == []


def test_catalog_names_are_unique_and_game_day_runs_its_set_in_order() -> None:
    names = [drill.name for drill in DRILLS]
    assert len(names) == len(set(names))
    assert [fault.name for fault in find_drill("game-day").faults()] == list(GAME_DAY_DRILLS)
    # Every run gets fresh fault objects: one run's targets never leak into the next.
    assert find_drill("broker-sigkill").faults()[0] is not find_drill("broker-sigkill").faults()[0]


def test_unknown_drill_is_refused_with_the_list() -> None:
    with pytest.raises(DrillRefused, match=r"unknown drill 'brokr-sigkill'.*broker-sigkill"):
        find_drill("brokr-sigkill")


def healthy_status() -> dict[str, Any]:
    return {
        "problems": [],
        "vms": [
            {
                "name": f"vm{i}",
                "processes": {"zookeeper": {"state": "running"}, "kafka": {"state": "running"}},
                "zookeeper_mode": "follower",
                "broker_registered": True,
                "under_replicated_partitions": 0,
            }
            for i in (1, 2, 3)
        ],
    }


def test_a_healthy_cluster_has_no_problem() -> None:
    assert health_problems(healthy_status()) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda s: s["vms"][1]["processes"]["kafka"].update(state="paused"),
            "vm2's kafka is paused",
        ),
        (
            lambda s: s["vms"][2].update(zookeeper_mode="not serving"),
            "vm3's ZooKeeper server is not serving",
        ),
        (lambda s: s["vms"][0].update(broker_registered=False), "vm1's broker is not registered"),
        (
            lambda s: s["vms"][0].update(under_replicated_partitions=4),
            "vm1's broker leads 4 under-replicated partition(s)",
        ),
        (
            lambda s: s["problems"].append("Kafka metadata unavailable: x"),
            "Kafka metadata unavailable: x",
        ),
        (lambda s: s.update(vms=[]), "the cluster has no VM"),
    ],
)
def test_health_problems_name_what_is_wrong(change: Any, problem: str) -> None:
    status = healthy_status()
    change(status)
    assert health_problems(status) == [problem]


def test_refusals_gather_every_reason_before_anything_is_touched() -> None:
    cluster = FakeCluster(agents=False)
    drill = find_drill("agent-kill")
    faults = drill.faults()
    status = healthy_status()
    status["vms"][2]["broker_registered"] = False
    problems = refusals(
        drill, faults, DrillOptions(duration_s=0, rate_per_s=5.0), status, context(cluster)
    )
    assert problems == [
        "duration must be above 0 and at most 3600 s; got 0",
        "cluster not healthy: vm3's broker is not registered",
        "agent-kill needs a cluster whose VMs run kaas-agent; this one runs none",
    ]
    assert cluster.actions == []


@dataclass
class RecoveringCluster:
    """Under-replicated partitions per check, then 0."""

    answers: list[int | None]

    def under_replicated(self) -> int | None:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_recovery_waits_for_complete_isrs_and_writes_on_every_partition() -> None:
    now = [100.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    cluster: Any = RecoveringCluster([None, 3, 0])
    serving_from = 102.0
    recovered = wait_recovered(
        cluster, lambda since: now[0] >= serving_from, 60, clock=lambda: now[0], sleep=sleep
    )
    assert recovered == 102.0


def test_recovery_gives_up_at_the_timeout() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    cluster: Any = RecoveringCluster([2])
    assert wait_recovered(cluster, lambda since: True, 5, clock=lambda: now[0], sleep=sleep) is None


def test_the_fake_is_a_fault_cluster() -> None:
    assert isinstance(FakeCluster(), FaultCluster)


# -- the disk faults ----------------------------------------------------------------------


@dataclass
class FakeDiskCluster(FakeCluster):
    """FakeCluster with broker disks: a broker 'stops' when its volume is destroyed or full."""

    pids: dict[str, int | None] = field(
        default_factory=lambda: {"vm1": 100, "vm2": 200, "vm3": 300}
    )
    disks: list[tuple[str, str]] = field(default_factory=list)

    def broker_pid(self, vm: str) -> int | None:
        return self.pids[vm]

    def destroy_broker_data(self, vm: str) -> str:
        self.disks.append((vm, "destroy"))
        self.pids[vm] = None  # the broker notices and stops
        return f"/vms/{vm}/data/kafka deleted"

    def limit_log_dir(self, vm: str, headroom_bytes: int) -> int:
        self.disks.append((vm, f"limit {headroom_bytes}"))
        return headroom_bytes + (1 << 20)

    def fill_log_dir(self, vm: str) -> int:
        self.disks.append((vm, "fill"))
        self.pids[vm] = None  # its next write fails, the log directory goes offline: it stops
        return 32 << 20

    def restore_log_dir(self, vm: str) -> bool:
        self.disks.append((vm, "restore"))
        return True


def test_a_destroyed_volume_deletes_a_plain_brokers_data_and_heal_starts_it() -> None:
    cluster = FakeDiskCluster()
    target = run("destroyed-volume", cluster)
    assert target == "vm3's broker volume (/vms/vm3/data/kafka deleted)"
    assert cluster.disks == [("vm3", "destroy")]
    assert cluster.actions == [("vm3", "start", "kafka")]  # no agent: the heal starts it
    assert cluster.waited == ["vm3"]


def test_a_destroyed_volume_with_agents_leaves_the_restart_to_the_agent() -> None:
    cluster = FakeDiskCluster(agents=True)
    run("destroyed-volume", cluster)
    assert cluster.actions == [] and cluster.waited == ["vm3"]


@pytest.mark.parametrize(
    ("drill", "after"),
    [("destroyed-volume", "volume was deleted"), ("full-disk", "log directory filled")],
)
def test_a_disk_fault_whose_broker_never_stops_fails_the_drill(drill: str, after: str) -> None:
    cluster = FakeDiskCluster()
    (fault,) = find_drill(drill).faults()
    ctx = context(cluster)
    fault.inject(ctx)
    cluster.pids["vm3"] = 300  # still the same broker
    fault.notice_timeout_s = 0.0  # type: ignore[attr-defined]
    with pytest.raises(DrillError, match=rf"vm3's broker still runs .* after its {after}"):
        fault.hold(ctx)


@pytest.mark.parametrize(
    ("agents", "stops", "starts"),
    [
        (False, [("vm3", "stop", "kafka")], [("vm3", "start", "kafka")]),
        (
            True,
            [("vm3", "stop", "agent"), ("vm3", "stop", "kafka")],
            [("vm3", "start", "agent")],
        ),
    ],
)
def test_a_full_disk_moves_the_log_dir_fills_it_and_heal_moves_it_back(
    agents: bool, stops: list[tuple[str, str, str]], starts: list[tuple[str, str, str]]
) -> None:
    cluster = FakeDiskCluster(agents=agents)
    target = run("full-disk", cluster)
    assert target == "vm3's log directory (33 MiB filesystem, 32 MiB ballast)"
    assert cluster.disks == [("vm3", f"limit {32 << 20}"), ("vm3", "fill"), ("vm3", "restore")]
    assert cluster.actions == stops + starts + stops + starts
    assert cluster.waited == ["vm3", "vm3"]


def test_a_full_disk_is_held_until_the_broker_on_it_stopped() -> None:
    """A loaded host starts the broker on the small filesystem slowly: healed after the
    duration alone, it would be healed before it ever hit the full disk."""
    cluster = FakeDiskCluster(agents=True)
    (fault,) = find_drill("full-disk").faults()
    naps: list[float] = []

    def stops_on_the_third_nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            cluster.pids["vm3"] = 301  # stopped; the agent started it again, to fail again

    ctx = replace(context(cluster), sleep=stops_on_the_third_nap)
    fault.inject(ctx)
    cluster.pids["vm3"] = 300  # still the broker the drill started on the full disk
    fault.hold(ctx)
    assert naps == [ctx.duration_s, 0.5, 0.5]


@pytest.mark.parametrize("name", ["destroyed-volume", "full-disk"])
def test_disk_faults_refuse_a_cluster_whose_disks_they_cannot_reach(name: str) -> None:
    (fault,) = find_drill(name).faults()
    problem = fault.preflight(context(FakeCluster()))
    assert problem is not None and "broker disks" in problem


def test_a_game_day_runs_the_chosen_drills_faults_in_that_order() -> None:
    from management_plane.drills.catalog import choose_drill

    drill = choose_drill("game-day", ("full-disk", "broker-sigstop", "destroyed-volume"))
    assert [f.name for f in drill.faults()] == ["full-disk", "broker-sigstop", "destroyed-volume"]
    assert drill.summary.startswith("in turn: full-disk, broker-sigstop, destroyed-volume")
    assert choose_drill("game-day", None).name == "game-day"


@pytest.mark.parametrize(
    ("name", "chosen", "words"),
    [
        ("game-day", ("broker-sigkill", "no-such"), "'no-such' is not a single drill"),
        ("game-day", ("game-day",), "'game-day' is not a single drill"),
        ("game-day", ("agent-kill", "agent-kill"), "agent-kill named more than once"),
        ("game-day", (), "it needs at least one drill"),
        ("broker-sigkill", ("agent-kill",), "only game-day takes a list of drills"),
    ],
)
def test_a_bad_game_day_choice_is_refused_naming_it(
    name: str, chosen: tuple[str, ...], words: str
) -> None:
    from management_plane.drills.catalog import choose_drill

    with pytest.raises(DrillRefused, match=words):
        choose_drill(name, chosen)
