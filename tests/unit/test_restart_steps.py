"""Table-driven tests of the pure start/restart step machine (agent.restart) and of the plan
executor's housekeeping (agent.plan_housekeeping)."""

from __future__ import annotations

import pytest

from agent.decide import BrokerLaunch
from agent.pipeline import PipelineDecision, ThrottleSet
from agent.plan_housekeeping import (
    ExecutorMemory,
    for_plan,
    note_look,
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
    start_backoff_s,
    step,
)

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


def test_a_start_takes_no_lock_and_skips_the_safety_check_and_the_stop() -> None:
    steps = run(
        LaunchKind.START,
        [StepDone(1.0), StepDone(2.0), AnswerRead(True, 3.0), IsrRead(0, False, 4.0)],
    )
    assert steps == [
        WriteConfig({"broker.id": "1"}),
        LaunchBroker("3.9.2"),
        CheckAnswer(0.0),
        CheckIsr(0.0),
        CheckIsr(TIMEOUTS.isr_poll_s),
    ]
    state = begin(LaunchKind.START, LAUNCH)
    for outcome in (Begun(), StepDone(1.0), StepDone(2.0), AnswerRead(True, 3.0)):
        state, _ = step(state, outcome, TIMEOUTS)
    for now in (4.0, 6.0):
        state, last = step(state, IsrRead(0, False, now), TIMEOUTS)
    assert last == Finish("done, ISR complete", release_lock=False)


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
            [*UNTIL_STARTED, AnswerRead(False, 3.0), AnswerRead(False, 4.0, exited=True)],
            Finish(
                "restart: broker process exited before it answered",
                release_lock=True,
                exited_while_starting=True,
            ),
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
    state, _ = step(begin(LaunchKind.RESTART, LAUNCH), Begun(), TIMEOUTS)
    state, next_step = step(state, LockBusy("broker 2"), TIMEOUTS)
    assert next_step == AcquireLock(TIMEOUTS.lock_poll_s)
    assert state.progress == "restart: waiting for restart lock held by broker 2"
    assert not state.lock_held


def test_a_spec_that_does_not_render_starts_nothing() -> None:
    launch = BrokerLaunch("3.9.2", None, "broker_config: unknown key 'bogus'")
    assert run(LaunchKind.START, [], launch)[-1] == Finish(
        "start failed: broker_config: unknown key 'bogus'", release_lock=False
    )
    steps = run(LaunchKind.RESTART, [LockTaken(0.0), SafetyRead(True, ())], launch)
    assert steps[-1] == Finish(
        "restart failed: broker_config: unknown key 'bogus'", release_lock=True
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
        step(begin(LaunchKind.RESTART, LAUNCH), AnswerRead(True, 0.0), TIMEOUTS)


# -- the plan executor's housekeeping ---------------------------------------------------------


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


def _decision(
    steps_done: int, bytes_done: int, moving: int = 1, total: int = 1000
) -> PipelineDecision:
    return PipelineDecision(
        start=(),
        throttles=ThrottleSet(),
        concurrency=4,
        finished=(),
        foreign=None,
        done=False,
        steps_total=10,
        steps_done=steps_done,
        bytes_total=total,
        bytes_done=bytes_done,
        moving=tuple(("t", n) for n in range(moving)),
    )


def test_a_stall_counts_from_the_first_look_and_from_every_finished_step() -> None:
    look = note_look(ExecutorMemory(), _decision(0, 0), 100.0, stall_s=60)
    assert (look.memory.last_progress_at, look.stalled) == (100.0, False)
    look = note_look(look.memory, _decision(0, 0), 161.0, stall_s=60)
    assert look.stalled
    look = note_look(look.memory, _decision(1, 100), 170.0, stall_s=60)
    assert (look.memory.last_progress_at, look.stalled) == (170.0, False)
    # Nothing moving is no stall, however long.
    assert not note_look(look.memory, _decision(1, 100, moving=0), 999.0, stall_s=60).stalled


def test_rate_and_time_left_over_the_window() -> None:
    look = note_look(ExecutorMemory(), _decision(0, 0), 0.0, stall_s=60)
    assert (look.movement.rate_bytes_per_s, look.movement.eta_s) == (0.0, None)
    look = note_look(look.memory, _decision(1, 200), 10.0, stall_s=60)
    assert look.movement.rate_bytes_per_s == 20.0
    assert look.movement.eta_s == 40.0
    assert look.movement.bytes_to_move == 800
    # Samples older than the window drop out: the rate follows the recent pace.
    look = note_look(look.memory, _decision(2, 300), 65.0, stall_s=60)
    assert look.movement.rate_bytes_per_s == pytest.approx(100 / 55)
    done = note_look(look.memory, _decision(10, 1000, moving=0), 70.0, stall_s=60)
    assert done.movement.eta_s == 0.0


def test_another_plan_starts_the_memory_afresh_but_keeps_the_throttles() -> None:
    throttles = ThrottleSet(brokers=frozenset({1}))
    memory = ExecutorMemory(
        plan_id=3, concurrency=2, elected=frozenset({("t", 0)}), throttles=throttles
    )
    assert for_plan(memory, 3) is memory
    fresh = for_plan(memory, 4)
    assert (fresh.plan_id, fresh.concurrency, fresh.elected) == (4, 0, frozenset())
    assert fresh.throttles == throttles


@pytest.mark.parametrize(
    ("exits", "wait_s"),
    [(0, 0.0), (1, 10.0), (2, 20.0), (3, 40.0), (5, 160.0), (6, 300.0), (40, 300.0)],
)
def test_a_broker_that_exits_while_starting_waits_longer_each_time(
    exits: int, wait_s: float
) -> None:
    assert start_backoff_s(exits) == wait_s
