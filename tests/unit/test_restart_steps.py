"""Table-driven tests of the pure start/restart step machine (agent.restart) and of the plan
executor's housekeeping (agent.plan_housekeeping)."""

from __future__ import annotations

import pytest

from agent.decide import BrokerLaunch
from agent.plan_decide import PlanAction
from agent.plan_housekeeping import (
    VERIFY_EVERY_S,
    CompleteBatch,
    ConfirmBatch,
    ExecutorMemory,
    KeepWaiting,
    ReelectController,
    VerifyPending,
    check_batch_step,
    lost_moves,
    note_batch_progress,
    note_refusal,
    plan_finished,
    smaller_prefix,
)
from agent.restart import (
    AcquireLock,
    AnswerRead,
    Begun,
    CheckAnswer,
    CheckIsr,
    CheckLaggingOnRunning,
    CheckSafety,
    Finish,
    IsrRead,
    LaggingRead,
    LaunchBroker,
    LaunchKind,
    LockBusy,
    LockTaken,
    LockUnavailable,
    Outcome,
    Phase,
    RestartState,
    RestartTimeouts,
    SafetyRead,
    Step,
    StepDone,
    StepFailed,
    StopBroker,
    WriteConfig,
    begin,
    step,
)
from planner.store import PlannedPartition, PlannedStep, Progress, StoredPlan

pytestmark = pytest.mark.unit

LAUNCH = BrokerLaunch("3.9.2", {"broker.id": "1"})
TIMEOUTS = RestartTimeouts(answer_s=180.0, isr_s=300.0, isr_stable_checks=2)


def run(kind: LaunchKind, outcomes: list[Outcome], launch: BrokerLaunch = LAUNCH) -> list[Step]:
    state = begin(kind, launch)
    steps = []
    for outcome in [Begun(), *outcomes]:
        state, next_step = step(state, outcome, TIMEOUTS)
        steps.append(next_step)
    return steps


UNTIL_STARTED: list[Outcome] = [
    LockTaken(0.0),
    SafetyRead(False, ()),
    StepDone(1.0),
    StepDone(2.0),
    StepDone(3.0),
]


def test_a_restart_of_a_live_broker_runs_every_step_in_order() -> None:
    steps = run(
        LaunchKind.RESTART,
        [
            LockTaken(0.0),
            SafetyRead(False, ()),
            StepDone(1.0),
            StepDone(2.0),
            StepDone(3.0),
            AnswerRead(True, 4.0),
            IsrRead(0, False, 5.0),
            IsrRead(0, False, 7.0),
        ],
    )
    assert steps == [
        AcquireLock(TIMEOUTS.lock_poll_s),
        CheckSafety(),
        StopBroker(TIMEOUTS.stop_s),
        WriteConfig({"broker.id": "1"}),
        LaunchBroker("3.9.2"),
        CheckAnswer(0.0),
        CheckIsr(0.0),
        CheckIsr(TIMEOUTS.isr_poll_s),
        Finish("done, ISR complete", release_lock=True),
    ]


def test_a_start_skips_the_safety_check_and_the_stop() -> None:
    steps = run(LaunchKind.START, [LockTaken(0.0)])
    assert steps[-1] == WriteConfig({"broker.id": "1"})


def test_a_restart_of_a_stopped_broker_does_not_stop_it() -> None:
    steps = run(LaunchKind.RESTART, [LockTaken(0.0), SafetyRead(True, ("t-0",))])
    assert steps[-1] == WriteConfig({"broker.id": "1"})


@pytest.mark.parametrize(
    ("outcomes", "finish"),
    [
        (
            [LockTaken(0.0), SafetyRead(False, ("t-0 (ISR [1, 2], min ISR 2)",))],
            Finish(
                "restart blocked: stopping would take t-0 (ISR [1, 2], min ISR 2) below min ISR",
                release_lock=True,
            ),
        ),
        (
            [LockUnavailable("connection lost")],
            Finish(
                "restart: restart lock unavailable (connection lost)",
                release_lock=False,
                journal=False,
            ),
        ),
        (
            [LockTaken(0.0), StepFailed("systemctl stop failed")],
            Finish("restart failed: systemctl stop failed", release_lock=True),
        ),
        (
            [*UNTIL_STARTED, *(AnswerRead(False, 3.0 + t) for t in (0.0, 100.0, 180.0))],
            Finish("restart: broker did not answer within 180s", release_lock=True),
        ),
        (
            [
                *UNTIL_STARTED,
                AnswerRead(True, 4.0),
                IsrRead(1, False, 5.0),
                IsrRead(None, False, 304.0),
            ],
            Finish("broker up, ISR still incomplete after 300s", release_lock=True),
        ),
    ],
)
def test_how_a_restart_ends(outcomes: list[Outcome], finish: Finish) -> None:
    assert run(LaunchKind.RESTART, outcomes)[-1] == finish


def test_a_busy_lock_is_polled_and_its_holder_named() -> None:
    state, _ = step(begin(LaunchKind.START, LAUNCH), Begun(), TIMEOUTS)
    state, next_step = step(state, LockBusy("broker 2"), TIMEOUTS)
    assert next_step == AcquireLock(TIMEOUTS.lock_poll_s)
    assert state.progress == "start: waiting for restart lock held by broker 2"
    assert not state.lock_held


def test_a_spec_that_does_not_render_starts_nothing() -> None:
    launch = BrokerLaunch("3.9.2", None, "broker_config: unknown key 'bogus'")
    steps = run(LaunchKind.START, [LockTaken(0.0)], launch)
    assert steps[-1] == Finish(
        "start failed: broker_config: unknown key 'bogus'", release_lock=True
    )


def isr_state(streak: int = 0) -> RestartState:
    return RestartState(
        LaunchKind.START,
        LAUNCH,
        Phase.AWAITING_ISR,
        "",
        deadline=300.0,
        isr_streak=streak,
        lock_held=True,
    )


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (IsrRead(0, False, 10.0), CheckIsr(TIMEOUTS.isr_poll_s)),
        (IsrRead(3, False, 10.0), CheckIsr(TIMEOUTS.isr_poll_s)),
        # A member's broker is down: count only replicas on running brokers.
        (IsrRead(3, True, 10.0), CheckLaggingOnRunning()),
        (IsrRead(0, True, 10.0), CheckIsr(TIMEOUTS.isr_poll_s)),
        (LaggingRead(0, 10.0), CheckIsr(TIMEOUTS.isr_poll_s)),
    ],
)
def test_isr_checks(outcome: Outcome, expected: Step) -> None:
    _, next_step = step(isr_state(), outcome, TIMEOUTS)
    assert next_step == expected


def test_the_isr_streak_starts_again_after_a_bad_reading() -> None:
    state, _ = step(isr_state(1), IsrRead(2, False, 10.0), TIMEOUTS)
    assert state.isr_streak == 0
    state, _ = step(isr_state(1), LaggingRead(None, 10.0), TIMEOUTS)
    assert state.isr_streak == 0
    _, done = step(isr_state(1), LaggingRead(0, 10.0), TIMEOUTS)
    assert done == Finish("done, ISR complete", release_lock=True)


def test_an_outcome_out_of_order_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="AnswerRead is unexpected in locking"):
        step(begin(LaunchKind.START, LAUNCH), AnswerRead(True, 0.0), TIMEOUTS)


# -- the plan executor's housekeeping ---------------------------------------------------------

PLAN = StoredPlan(
    "c",
    3,
    2,
    (
        PlannedPartition("t", 0, (0, 1), (2, 1), (PlannedStep(0, (2, 1)),)),
        PlannedPartition("t", 1, (0, 1), (1, 2), (PlannedStep(1, (1, 2)),)),
    ),
    0.0,
)


@pytest.mark.parametrize(("count", "prefix"), [(8, 4), (3, 1), (2, 1), (1, None)])
def test_a_plan_too_large_is_halved_until_one_batch(count: int, prefix: int | None) -> None:
    assert smaller_prefix(count) == prefix


def test_each_refusal_is_journaled_once() -> None:
    memory, new = note_refusal(ExecutorMemory(), "corrupt")
    assert new
    memory, new = note_refusal(memory, "corrupt")
    assert not new
    _, new = note_refusal(memory, "infeasible")
    assert new


def test_a_finished_plan_plans_again_at_once() -> None:
    memory = plan_finished(ExecutorMemory(last_planned_at=50.0, planned_for=(1, frozenset(), 0)))
    assert (memory.last_planned_at, memory.planned_for) == (0.0, None)


def test_batch_progress_counts_from_the_first_look_and_from_every_arrival() -> None:
    progress = Progress(3, 0, "executing", started_batch=0)
    moving = {("t", 0): (0, 1), ("t", 1): (0, 1)}
    memory, at = note_batch_progress(ExecutorMemory(), PLAN, progress, moving, 100.0)
    assert (at, memory.batch_pending) == (100.0, (0, 1))
    memory, at = note_batch_progress(memory, PLAN, progress, moving, 160.0)
    assert at == 100.0  # nothing arrived
    arrived = {("t", 0): (2, 1), ("t", 1): (0, 1)}
    memory, at = note_batch_progress(memory, PLAN, progress, arrived, 170.0)
    assert (at, memory.batch_pending) == (170.0, (0, 0))
    _, at = note_batch_progress(memory, PLAN, None, arrived, 180.0)
    assert at == 0.0


MOVES = (("t", 0, (2, 1)), ("t", 1, (1, 2)))


@pytest.mark.parametrize(
    ("action", "batch", "now", "expected"),
    [
        (PlanAction("check_batch", "", 0, ()), MOVES, 10.0, ConfirmBatch(MOVES)),
        (PlanAction("check_batch", "", 0, ()), (), 10.0, CompleteBatch(0, ())),
        (PlanAction("check_batch", "", 0, MOVES, stalled=True), MOVES, 10.0, ReelectController()),
        (PlanAction("check_batch", "", 0, MOVES), MOVES, VERIFY_EVERY_S, VerifyPending(MOVES)),
        (PlanAction("check_batch", "", 0, MOVES), MOVES, VERIFY_EVERY_S - 1, KeepWaiting()),
    ],
)
def test_check_batch_step(action: PlanAction, batch: tuple, now: float, expected: object) -> None:
    _, next_step = check_batch_step(ExecutorMemory(), action, batch, now)
    assert next_step == expected


def test_a_verify_is_remembered() -> None:
    action = PlanAction("check_batch", "", 0, MOVES)
    memory, _ = check_batch_step(ExecutorMemory(), action, MOVES, 40.0)
    assert memory.last_verify_at == 40.0
    _, again = check_batch_step(memory, action, MOVES, 50.0)
    assert again == KeepWaiting()


@pytest.mark.parametrize(
    ("in_progress", "lost"),
    [
        ((("t", 0), ("t", 1)), ()),
        ((("t", 1),), (MOVES[0],)),
        (None, MOVES),  # Kafka knows of no reassignment at all
    ],
)
def test_moves_kafka_does_not_run_are_lost(
    in_progress: tuple[tuple[str, int], ...] | None, lost: tuple
) -> None:
    assert lost_moves(MOVES, in_progress) == lost
