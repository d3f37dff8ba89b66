"""A drill as a management-plane operation: the request refused before anything is queued,
and the registered steps (`start_drill`, `wait_drill`, `finish`) run by the real engine
against a fake of the drill process, reading the drill's folder as the real one writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from management_plane.drills.operation import DrillAsk, check_drill_request
from management_plane.drills.process import (
    LOG_FILE,
    PROCESS_FILE,
    REPORT_FILE,
    DrillRequest,
    DrillState,
    drill_progress,
)
from management_plane.errors import RequestRefused, http_answer
from management_plane.local.processes import ProcessRecord
from management_plane.providers.base import VmRequest
from management_plane.service.controller import STEPS, Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    OperationKind,
    StepName,
    StepRef,
    expand_steps,
)
from management_plane.service.steps import Patience
from planner.contracts.spec import ClusterSpec
from tests.unit.fake_cluster import FakeCluster, FakeProvider

pytestmark = pytest.mark.unit


class FakeDrillProcesses:
    def __init__(self) -> None:
        self.started: list[list[str]] = []
        self.running = True

    def start(self, command: list[str], log_file: Path, cwd: Path) -> ProcessRecord:
        self.started.append(command)
        log_file.write_text("drill broker-sigkill: steady: acks flowing\n")
        return ProcessRecord(pid=4242, create_time=1.0)

    def alive(self, record: ProcessRecord) -> bool:
        return self.running and record.pid == 4242


class DrillWorld:
    def __init__(self, tmp_path: Path) -> None:
        self.db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
        self.cluster = FakeCluster()
        self.processes = FakeDrillProcesses()
        controller = Controller(self.db, FakeProvider(), self.cluster.connect, self.processes)
        self.engine = Engine(self.db, controller)
        spec = ClusterSpec(
            cluster="orders",
            kafka_version="3.8.1",
            broker_count=3,
            zones=("a", "b", "c"),
            zookeeper_participants=3,
        )
        self.db.add_cluster("orders", "fake", "small", json.dumps(spec.to_json()))
        self.db.update_cluster("orders", status="running")
        provider = FakeProvider()
        for broker_id, zone in enumerate(spec.zones):
            info = provider.create_vm(VmRequest("orders", zone, "small", "3.8.1"))
            self.db.upsert_vm(
                info.vm_id, "orders", zone, info.address, "small", "3.8.1", "running", broker_id
            )
        self.cluster.spec = spec
        self.request = DrillRequest(
            drill="broker-sigkill",
            home=tmp_path / "cluster",
            report_dir=tmp_path / "drills" / "one",
            duration_s=3.0,
            rate_per_s=100.0,
            bounces=2,
        )

    def queue(self) -> OperationRow:
        kind = OperationKind.RUN_DRILL
        return self.db.add_operation(
            "orders", kind, self.request.to_params(), expand_steps(kind), "test"
        )

    def run(self, op: OperationRow) -> OperationRow:
        self.engine.run_once()
        found = self.db.operation(op.op_id)
        assert found is not None
        return found

    def report(self, passed: bool) -> None:
        report = {
            "valid": passed,
            "recovered": True,
            "passed": passed,
            "summary": {
                "anomalies": {"lost": 0 if passed else 2, "unexpected": 0},
                "longest_stall_s": 4.2,
                "faults": [{"fault": "broker-sigkill", "recovery_s": 6.5}],
            },
        }
        (self.request.report_dir / REPORT_FILE).write_text(json.dumps(report))


@pytest.fixture
def world(tmp_path: Path) -> DrillWorld:
    return DrillWorld(tmp_path)


def test_the_drill_operation_is_start_wait_finish_each_registered() -> None:
    steps = expand_steps(OperationKind.RUN_DRILL)
    assert [s.name for s in steps] == [StepName.START_DRILL, StepName.WAIT_DRILL, StepName.FINISH]
    for ref in steps:
        STEPS.lookup(ref, OperationKind.RUN_DRILL)
    wait = STEPS.lookup(StepRef(StepName.WAIT_DRILL), OperationKind.RUN_DRILL)
    assert wait.patience is Patience.DRILL


def test_a_passing_drill_is_started_once_followed_and_finished(world: DrillWorld) -> None:
    op = world.run(world.queue())
    assert op.status == RUNNING and str(op.step) == "wait_drill"
    assert "steady: acks flowing" in op.message
    (command,) = world.processes.started
    assert command[command.index("drill") :] == [
        "drill",
        "--home",
        str(world.request.home),
        "run",
        "broker-sigkill",
        "--report",
        str(world.request.report_dir),
        "--rate",
        "100.0",
        "--bounces",
        "2",
        "--duration",
        "3.0",
    ]
    assert (world.request.report_dir / PROCESS_FILE).exists()
    op = world.run(op)
    assert op.status == RUNNING and len(world.processes.started) == 1
    world.report(passed=True)
    world.processes.running = False
    op = world.run(op)
    assert op.status == SUCCEEDED, op.message
    journal = world.db.operation_journal(op.op_id)
    (waited,) = [j for j in journal if j["step"] == "wait_drill" and j["outcome"] == "done"]
    assert "checker valid" in waited["message"] and "recovered in 6.5 s" in waited["message"]


def test_a_start_run_again_after_a_crash_finds_the_drill_it_started(
    world: DrillWorld,
) -> None:
    from management_plane.drills.process import start_drill

    first = start_drill(world.request, world.processes)
    again = start_drill(world.request, world.processes)
    assert first == again and len(world.processes.started) == 1


def test_an_invalid_verdict_fails_the_operation_naming_it(world: DrillWorld) -> None:
    op = world.run(world.queue())
    world.report(passed=False)
    world.processes.running = False
    op = world.run(op)
    assert op.status == FAILED and "checker INVALID" in op.message and "lost 2" in op.message


def test_a_drill_that_ends_without_a_report_fails_with_its_last_line(
    world: DrillWorld,
) -> None:
    op = world.run(world.queue())
    with (world.request.report_dir / LOG_FILE).open("a") as log:
        log.write("kaas: error: drill broker-sigkill refused: cluster not healthy: vm2 down\n")
    world.processes.running = False
    op = world.run(op)
    assert op.status == FAILED
    assert "ended without a report" in op.message and "vm2 down" in op.message


def test_a_report_being_written_is_not_read_as_finished(tmp_path: Path) -> None:
    (tmp_path / REPORT_FILE).write_text('{"passed": tr')
    assert drill_progress(tmp_path, alive=True).state is DrillState.RUNNING


@pytest.mark.parametrize(
    ("ask", "status", "words"),
    [
        (DrillAsk("no-such-drill"), 400, "unknown drill 'no-such-drill'"),
        (DrillAsk("broker-sigkill", duration_s=0), 400, "duration must be above 0"),
        (DrillAsk("broker-sigkill", rate_per_s=-1), 400, "rate must be above 0"),
        (DrillAsk("leader-hard-bounce", bounces=0), 400, "bounces must be 1 to 20"),
    ],
)
def test_bad_drill_requests_are_refused_with_a_4xx_naming_the_problem(
    tmp_path: Path, ask: DrillAsk, status: int, words: str
) -> None:
    with pytest.raises(RequestRefused) as refused:
        check_drill_request(ask, "orders", FakeProvider(), tmp_path / "report")
    answer = http_answer(refused.value)
    assert answer.status == status and words in answer.message
    assert not (tmp_path / "report").exists()


def test_a_provider_that_cannot_reach_the_processes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RequestRefused) as refused:
        check_drill_request(DrillAsk("broker-sigkill"), "orders", FakeProvider(), tmp_path)
    answer = http_answer(refused.value)
    assert answer.status == 409 and "cannot reach a cluster's processes" in answer.message


class DrillingProvider(FakeProvider):
    def __init__(self, home: Path) -> None:
        super().__init__()
        self.home = home

    def drill_home(self, cluster: str) -> Path:
        return self.home


def test_a_cluster_that_is_not_there_is_refused_before_anything_is_touched(
    tmp_path: Path,
) -> None:
    home = tmp_path / "nothing-here"
    with pytest.raises(RequestRefused) as refused:
        check_drill_request(
            DrillAsk("broker-sigkill"), "orders", DrillingProvider(home), tmp_path / "report"
        )
    answer = http_answer(refused.value)
    assert answer.status == 409 and "drill broker-sigkill refused" in answer.message
    assert not (tmp_path / "report").exists() and not home.exists()


def test_a_game_days_chosen_drills_reach_the_drill_process_and_survive_the_params(
    tmp_path: Path,
) -> None:
    request = DrillRequest(
        drill="game-day",
        home=tmp_path,
        report_dir=tmp_path / "r",
        duration_s=None,
        rate_per_s=50.0,
        bounces=1,
        game_day_drills=("full-disk", "agent-kill"),
    )
    assert request.command()[-2:] == ["--drills", "full-disk,agent-kill"]
    assert "--duration" not in request.command()
    assert DrillRequest.from_params(json.loads(json.dumps(request.to_params()))) == request


def test_a_bad_game_day_choice_is_a_400(tmp_path: Path) -> None:
    ask = DrillAsk("game-day", game_day_drills=("broker-sigkill", "nope"))
    with pytest.raises(RequestRefused) as refused:
        check_drill_request(ask, "orders", FakeProvider(), tmp_path / "report")
    answer = http_answer(refused.value)
    assert answer.status == 400 and "'nope' is not a single drill" in answer.message
