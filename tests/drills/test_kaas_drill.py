"""`kaas drill` on a real 3-VM cluster with agents under load: every drill's checker verdict
valid and its recovery measured, the network rules gone also when a drill is interrupted
mid-fault, and the refusals made before anything is touched.

Short fault durations (seconds) by default; `make drills` sets KAAS_DRILL_FULL=1 for each
drill's own duration. None of these drills destroys the cluster, so they share one.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from management_plane.drills.catalog import DRILLS, find_drill
from management_plane.drills.errors import DrillRefused
from management_plane.drills.local_cluster import LocalFaultCluster
from management_plane.drills.local_plane import BackgroundPlane
from management_plane.drills.network import NftablesRules, drill_tables, isolation_script
from management_plane.drills.runner import DrillOptions, run_drill
from management_plane.local import probes
from management_plane.local.background_service import (
    running_service,
    start_background_service,
    stop_background_service,
)
from planner.contracts.journal import parse_journal_entry
from planner.contracts.paths import ClusterPaths
from planner.zookeeper_ensemble import parse_ensemble_config
from tests import harness
from tests.drills import agent_healing_checks, rolling_checks
from tests.drills.drill_runs import SHORT_S, run_and_check, wait_healthy
from tests.harness import ClusterHandle
from tests.mp_service import ServiceHandle, free_port, step_timings

pytestmark = pytest.mark.drill


@pytest.fixture(scope="module")
def drill_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    handle = harness.start_cluster(
        tmp_path_factory.mktemp("drill-cluster"),
        nodes=3,
        name="drills",
        address_base=harness.FRESH_CLUSTER_BASE,
        agents=True,
    )
    try:
        harness.wait_until(
            lambda: LocalFaultCluster(handle.home).under_replicated() == 0,
            120,
            "every ISR complete before the drills",
        )
        yield handle
    finally:
        harness.stop_cluster(handle)


# The drills that make a broker rebuild its data run in test_kaas_drill_volumes.py, on a
# cluster of their own: a slow rebuild there holds up no other drill.
VOLUME_DRILLS = ("destroyed-volume", "full-disk")
# The drills that fault the management plane need one beside the cluster, and the planner's
# drill checks more than the verdict: tests of their own.
PLANE_DRILLS = ("management-plane-kill", "lost-vm")
# The bounces and the game day (minutes of restarts) run in test_kaas_drill_bounces.py, on a
# cluster of their own, beside this file on the other worker.
BOUNCE_DRILLS = (
    "leader-clean-bounce",
    "leader-hard-bounce",
    "controller-clean-bounce",
    "controller-hard-bounce",
    "game-day",
)
OWN_TESTS = (*VOLUME_DRILLS, *PLANE_DRILLS, *BOUNCE_DRILLS, "planner-agent-kill")


@pytest.mark.parametrize(
    "name", [d.name for d in DRILLS if d.name not in OWN_TESTS and not d.kraft_only]
)
def test_drill_is_valid_and_reports_its_recovery(
    drill_cluster: ClusterHandle, name: str, tmp_path: Path
) -> None:
    run_and_check(drill_cluster, name, tmp_path)


@contextlib.contextmanager
def management_plane(home: Path, *options: str) -> Iterator[BackgroundPlane]:
    """The background `kaas serve` beside the cluster, as `kaas up` starts it, for the
    length of one drill (stopped after it, whatever the drill did to it)."""
    start_background_service(home, port=free_port(), extra_args=options)
    try:
        yield BackgroundPlane(home, LocalFaultCluster(home).name)
    finally:
        stop_background_service(home)


def test_planner_agent_killed_mid_reassignment_is_succeeded_by_another_that_finishes_the_plan(
    drill_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """The elected planner's agent SIGKILLed while its plan's moves copy: another agent is
    elected, finishes the same plan (not a new one) and clears every throttle; the budget
    and the drill's topic are put back; zero loss."""
    cluster = LocalFaultCluster(drill_cluster.home)
    budget = cluster.reassignment_budget()
    result = run_and_check(drill_cluster, "planner-agent-kill", tmp_path)
    (outcome,) = result.outcomes
    victim, _, rest = outcome.target.partition("'s agent (the elected planner; plan ")
    plan_id = int(rest.split(" ")[0])
    assert victim in cluster.vm_names() and " executing, " in rest, outcome.target
    assert outcome.settled is not None, vars(outcome)
    successor, _, done = outcome.settled.partition("'s agent, elected planner, ")
    assert successor in cluster.vm_names() and successor != victim, outcome.settled
    assert done == f"finished plan {plan_id}; every replication throttle cleared"
    assert cluster.throttles() == {}
    assert cluster.reassignment_budget() == budget
    topics = probes.admin_client(drill_cluster.admin).list_topics(timeout=10).topics
    assert not [t for t in topics if t.endswith("-moves")], sorted(topics)
    zk = drill_cluster.zookeeper()
    zk.start(timeout=15)
    try:
        entries = harness.journal_entries(zk, drill_cluster.layout.name)
    finally:
        zk.stop()
        zk.close()
    by_successor = [
        e
        for e in entries
        if e.at_ms >= result.started_s * 1000
        and e.vm_id == successor
        and e.action == "plan_done"
        and e.reason.startswith(f"plan {plan_id}:")
    ]
    assert by_successor, [(e.vm_id, e.action, e.reason) for e in entries[-20:]]


# A roll of every broker around the kill: `make drills` runs it. `make test` keeps the
# service SIGKILLed mid-operation and resuming from its journal under load
# (tests/drills/test_management_plane.py, mid-replacement) and this drill's injection and
# verdict against fakes (tests/unit/test_drill_plane_faults.py).
@pytest.mark.long_drill
def test_management_plane_killed_mid_operation_resumes_it_from_its_journal(
    drill_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """`kaas serve` SIGKILLed while its rolling config change waits for the agents, started
    again after the fault: the same operation goes on from the step it had reached (its
    first step is not run again) and succeeds; zero loss under the drill's load."""
    home = drill_cluster.home
    with management_plane(home) as plane:
        before = plane.broker_config().get("offsets.retention.minutes")
        first_pid = running_service(home).record.pid  # type: ignore[union-attr]
        result = run_and_check(drill_cluster, "management-plane-kill", tmp_path, plane)
        (outcome,) = result.outcomes
        assert f"kaas serve (pid {first_pid})" in outcome.target, outcome.target
        assert outcome.target.endswith("(change_config) at wait_applied"), outcome.target
        op_id = int(outcome.target.split("operation ")[1].split(" ")[0])
        assert outcome.settled == (
            f"operation {op_id} resumed at wait_applied after the restart and succeeded"
        )
        restarted = running_service(home)
        assert restarted is not None and restarted.record.pid != first_pid
        op = plane.operation(op_id)
        assert op.succeeded and op.done_steps == ("write_spec", "wait_applied", "finish"), op
        after = plane.broker_config().get("offsets.retention.minutes")
        assert after is not None and after != before
        assert any(
            line["text"].startswith("management-plane-kill: operation")
            for line in result.report["journal"]
        )


def _our_tables(pid: int) -> list[str]:
    return [name for name, owner in drill_tables(NftablesRules().listing()) if owner == pid]


def _our_cgroups(pid: int) -> list[Path]:
    root = NftablesRules().cgroup_root
    assert root is not None
    return sorted(root.glob(f"kaas_drill_{pid}_*"))


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("name", "signum"),
    [("network-partition", signal.SIGTERM), ("degraded-network", signal.SIGINT)],
)
def test_an_interrupted_network_drill_removes_its_rules(
    drill_cluster: ClusterHandle, name: str, signum: int, tmp_path: Path
) -> None:
    wait_healthy(drill_cluster.home)
    before = NftablesRules().listing()
    drill = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "management_plane.cli",
            "drill",
            "--home",
            str(drill_cluster.home),
            "run",
            name,
            "--duration",
            "120",
            "--rate",
            "50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A suite started in the background (`make test &`) inherits SIGINT ignored, and so
        # would the drill: it gets SIGINT's default back, as a drill run from a terminal has.
        preexec_fn=_default_sigint,
    )
    try:
        harness.wait_until(lambda: _our_tables(drill.pid) != [], 90, f"{name}'s rules")
        time.sleep(1.0)
        drill.send_signal(signum)
        output, _ = drill.communicate(timeout=240)
    finally:
        if drill.poll() is None:
            drill.kill()
            drill.wait()
    assert drill.returncode == 130, output
    assert "kaas: interrupted" in output
    assert _our_tables(drill.pid) == []
    assert _our_cgroups(drill.pid) == []
    assert NftablesRules().listing() == before


def test_a_killed_drills_rules_are_removed_by_the_next_drill(
    drill_cluster: ClusterHandle,
) -> None:
    """SIGKILL leaves the drill no chance to clean up: the next drill removes the tables of
    drills that are gone before it starts."""
    network = NftablesRules()
    stale = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    table = f"kaas_drill_{stale.pid}_1"
    assert network.cgroup_root is not None
    cgroup = network.cgroup_root / table
    try:
        cgroup.mkdir()
        subprocess.run(
            ["nft", "-f", "-"],
            input=isolation_script(
                table, "127.0.0.250", cgroup.relative_to("/sys/fs/cgroup").as_posix()
            ),
            text=True,
            check=True,
        )
    finally:
        stale.kill()
        stale.wait()
    try:
        assert table in network.listing()
        assert table in network.remove_stale()
        assert table not in network.listing()
        assert not cgroup.exists()
    finally:
        if table in network.listing() or cgroup.exists():
            network.remove(table)


def test_refusals_touch_nothing(drill_cluster: ClusterHandle) -> None:
    wait_healthy(drill_cluster.home)
    kafka = drill_cluster.admin

    def drill_topics() -> set[str]:
        topics = probes.admin_client(kafka).list_topics(timeout=10).topics
        return {t for t in topics if t.startswith("drill-")}

    topics_before = drill_topics()
    # An unknown drill and a cluster other than the one named are refused without a cluster
    # (tests/unit/test_drill_command.py); an unhealthy cluster needs a real one.
    drill_cluster.vm("pause", "vm3", "--only", "kafka")
    try:
        with pytest.raises(DrillRefused, match="cluster not healthy: vm3's kafka is paused"):
            run_drill(
                find_drill("broker-sigkill"),
                LocalFaultCluster(drill_cluster.home),
                DrillOptions(duration_s=1),
            )
    finally:
        drill_cluster.vm("resume", "vm3", "--only", "kafka")
    assert drill_topics() == topics_before


def test_a_drill_through_the_api_is_a_journaled_operation_and_bad_ones_are_refused(
    drill_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """`kaas drill run --api`: the management plane queues the drill as an operation, its
    steps start and follow the drill to its report; bad requests get a 4xx and queue
    nothing."""
    wait_healthy(drill_cluster.home)
    name = drill_cluster.layout.name
    service = ServiceHandle(
        tmp_path / "service",
        free_port(),
        harness.FRESH_CLUSTER_BASE,
        extra_args=("--adopt-local-cluster", str(drill_cluster.home)),
    )
    try:
        service.start()  # inside: a service too slow to answer is stopped all the same
        path = f"/v1/clusters/{name}/drills"
        for body, status, words in [
            ({"drill": "no-such-drill"}, 400, "unknown drill 'no-such-drill'"),
            ({"drill": "broker-sigkill", "duration_s": -1}, 400, "duration must be above 0"),
            ({"drill": "broker-sigkill", "rate": 5}, 422, "rate: Extra inputs"),
        ]:
            code, answer = service.call("POST", path, body)
            assert code == status, answer
            assert words in answer["message"], answer
        code, answer = service.call("POST", "/v1/clusters/nothere/drills", {"drill": "agent-kill"})
        assert code == 404, answer
        drill_cluster.vm("pause", "vm3", "--only", "kafka")
        try:
            code, answer = service.call("POST", path, {"drill": "broker-sigkill"})
        finally:
            drill_cluster.vm("resume", "vm3", "--only", "kafka")
        assert code == 409 and "cluster not healthy: vm3's kafka is paused" in answer["message"]
        code, operations = service.call("GET", f"/v1/operations?cluster={name}")
        assert code == 200 and operations == []  # nothing queued by a refusal

        wait_healthy(drill_cluster.home)
        run = drill_cluster.kaas(
            "drill",
            "run",
            "broker-sigstop",
            "--api",
            "--api-url",
            service.url,
            "--api-key-file",
            str(service.home / "admin-key"),
            "--api-ca",
            str(service.trust_bundle),
            "--duration",
            str(SHORT_S),
            "--rate",
            "100",
        )
        assert run.returncode == 0, run.stdout + run.stderr
        code, operations = service.call("GET", f"/v1/operations?cluster={name}")
        (op,) = operations
        op = service.operation(op["op_id"])
        assert op["kind"] == "run_drill" and op["status"] == "succeeded", op
        journal = [(j["step"], j["outcome"]) for j in op["journal"]]
        assert [s for s, outcome in journal if outcome == "done"] == [
            "start_drill",
            "wait_drill",
            "finish",
        ]
        report = json.loads((Path(op["params"]["report_dir"]) / "report.json").read_text())
        assert report["passed"] is True and report["drill"] == "broker-sigstop"
        print(f"\n{step_timings(op)}")
    finally:
        service.stop()


def test_read_only_change_rolls_brokers_one_at_a_time_controller_last(
    drill_cluster: ClusterHandle,
) -> None:
    wait_healthy(drill_cluster.home)
    rolling_checks.check_read_only_change_rolls_brokers_one_at_a_time_controller_last(drill_cluster)


def test_dynamic_change_reaches_every_broker_without_a_restart(
    drill_cluster: ClusterHandle,
) -> None:
    wait_healthy(drill_cluster.home)
    rolling_checks.check_dynamic_change_reaches_every_broker_without_a_restart(drill_cluster)


def test_agent_starts_a_stopped_broker_and_restarts_a_paused_one(
    drill_cluster: ClusterHandle,
) -> None:
    wait_healthy(drill_cluster.home)
    agent_healing_checks.check_agent_starts_a_stopped_broker_and_restarts_a_paused_one(
        drill_cluster
    )


def test_a_zookeeper_server_gone_past_the_threshold_is_removed_and_rejoins(
    drill_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """The agents' ensemble repair under the drill's load: a ZooKeeper follower killed for
    longer than the agents' threshold (20 s on local VMs) is removed by reconfig, and its VM's
    agent adds it back once it runs again; the checker's verdict stays valid."""
    wait_healthy(drill_cluster.home)
    since_ms = int(time.time() * 1000)
    result = run_drill(
        find_drill("zookeeper-follower-kill"),
        LocalFaultCluster(drill_cluster.home),
        DrillOptions(duration_s=30.0, rate_per_s=100.0),
        tmp_path / "report",
    )
    assert result.passed, json.dumps(result.report["summary"], indent=2)
    (outcome,) = result.outcomes
    victim = outcome.target.removesuffix("'s zookeeper")
    zk = drill_cluster.zookeeper()
    zk.start(timeout=15)
    try:

        def participants() -> int:
            return len(parse_ensemble_config(zk.get("/zookeeper/config")[0].decode()).participants)

        harness.wait_until(lambda: participants() == 3, 120, f"{victim}'s agent to add it back")
        paths = ClusterPaths(drill_cluster.layout.name)
        entries = [
            parse_journal_entry(zk.get(f"{paths.journal}/{c}")[0])
            for c in sorted(zk.get_children(paths.journal))
        ]
    finally:
        zk.stop()
        zk.close()
    reconfigs = [
        e
        for e in entries
        if e.at_ms >= since_ms and e.action == "zk_reconfig" and e.result == "done"
    ]
    assert any("removing it" in e.reason for e in reconfigs), reconfigs
    assert any("adding it as participant" in e.reason and e.vm_id == victim for e in reconfigs)
