"""The start and restart procedure as a pure step machine: the state and the last step's
outcome in, the next state and one typed step out. No I/O; the shell (agent/restart_runner.py)
runs each step and feeds its outcome back.

Order: the cluster-wide restart lock; for a restart of a live broker, the safety check (no
partition may drop below its min ISR) and Kafka's controlled shutdown; the config written;
the broker started; wait until it answers; then keep the lock until every ISR is complete
on `isr_stable_checks` checks in a row, so the next broker does not stop while this one's
replicas still catch up. Every wait has its deadline in the settings.

A start of a broker whose process is gone takes no lock: it stops nothing, so it cannot take
a partition below its min ISR, and a restart elsewhere meanwhile is still held back by that
restart's own safety check while this broker's replicas catch up. Under the lock, a cold
start of every VM at once started the brokers one after another, each waiting for the last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum, StrEnum

from agent.decide import BrokerLaunch


class LaunchKind(StrEnum):
    START = "start"
    RESTART = "restart"


class Phase(Enum):
    LOCKING = "locking"
    CHECKING = "checking"
    STOPPING = "stopping"
    CONFIGURING = "configuring"
    STARTING = "starting"
    AWAITING_ANSWER = "awaiting_answer"
    AWAITING_ISR = "awaiting_isr"
    FINISHED = "finished"


@dataclass(frozen=True)
class RestartTimeouts:
    """The procedure's waits; AgentSettings holds them with their documented defaults."""

    lock_poll_s: float = 5.0
    stop_s: float = 120.0
    answer_s: float = 180.0
    answer_poll_s: float = 1.0
    isr_s: float = 300.0
    isr_poll_s: float = 2.0
    isr_stable_checks: int = 3


@dataclass(frozen=True)
class RestartState:
    kind: LaunchKind
    launch: BrokerLaunch
    phase: Phase
    progress: str
    deadline: float = 0.0
    """When the current wait gives up (monotonic seconds)."""
    isr_streak: int = 0
    lock_held: bool = False


# -- outcomes of the last step (fed back by the shell) --------------------------------------


@dataclass(frozen=True)
class Begun:
    pass


@dataclass(frozen=True)
class LockTaken:
    now: float


@dataclass(frozen=True)
class LockBusy:
    holder: str | None


@dataclass(frozen=True)
class LockUnavailable:
    error: str


@dataclass(frozen=True)
class SafetyRead:
    process_stopped: bool
    blockers: tuple[str, ...]
    """Partitions that stopping the broker would take below min ISR, for the sentence."""


@dataclass(frozen=True)
class StepDone:
    """A stop, a config write or a start finished."""

    now: float


START_BACKOFF_FIRST_S = 10.0
START_BACKOFF_MAX_S = 300.0


def start_backoff_s(exits: int) -> float:
    """How long a broker that exited while starting `exits` times in a row waits before its
    next start: doubling from 10 s to 5 minutes, so a broker that cannot start (a full or
    failed log directory) is not started again every cycle."""
    if exits <= 0:
        return 0.0
    return min(START_BACKOFF_MAX_S, START_BACKOFF_FIRST_S * 2 ** (exits - 1))


@dataclass(frozen=True)
class AnswerRead:
    answers: bool
    now: float
    exited: bool = False
    """The started process is gone: it will not answer, however long the wait."""


@dataclass(frozen=True)
class IsrRead:
    under_replicated: int | None
    """Sum over the registered members' brokers; None: a read failed."""
    member_down: bool
    """A member's broker is not registered (a cold start: every VM booting at once)."""
    now: float


@dataclass(frozen=True)
class LaggingRead:
    lagging_on_running: int | None
    """Partitions with a replica on a running broker that is not in the ISR; None: unread."""
    now: float


@dataclass(frozen=True)
class StepFailed:
    error: str


Outcome = (
    Begun
    | LockTaken
    | LockBusy
    | LockUnavailable
    | SafetyRead
    | StepDone
    | AnswerRead
    | IsrRead
    | LaggingRead
    | StepFailed
)


# -- steps (run by the shell) ---------------------------------------------------------------


@dataclass(frozen=True)
class AcquireLock:
    timeout_s: float


@dataclass(frozen=True)
class CheckSafety:
    pass


@dataclass(frozen=True)
class StopBroker:
    timeout_s: float


@dataclass(frozen=True)
class WriteConfig:
    server_properties: Mapping[str, str]


@dataclass(frozen=True)
class LaunchBroker:
    kafka_version: str


@dataclass(frozen=True)
class CheckAnswer:
    after_s: float
    """Wait this long first (0: check at once)."""


@dataclass(frozen=True)
class CheckIsr:
    after_s: float


@dataclass(frozen=True)
class CheckLaggingOnRunning:
    pass


@dataclass(frozen=True)
class Finish:
    result: str
    """For the journal (and the progress line)."""
    release_lock: bool
    journal: bool = True
    exited_while_starting: bool = False
    """The broker process exited before it answered: the next start waits (start_backoff_s)."""


Step = (
    AcquireLock
    | CheckSafety
    | StopBroker
    | WriteConfig
    | LaunchBroker
    | CheckAnswer
    | CheckIsr
    | CheckLaggingOnRunning
    | Finish
)


def begin(kind: LaunchKind, launch: BrokerLaunch) -> RestartState:
    return RestartState(kind, launch, Phase.LOCKING, f"{kind}: waiting to begin")


def _steps(kind: LaunchKind) -> int:
    return 3 if kind is LaunchKind.RESTART else 2


def _finish(
    state: RestartState,
    result: str,
    progress: str | None = None,
    exited_while_starting: bool = False,
) -> tuple[RestartState, Step]:
    line = progress if progress is not None else result
    done = replace(state, phase=Phase.FINISHED, progress=line)
    finish = Finish(
        result, release_lock=state.lock_held, exited_while_starting=exited_while_starting
    )
    return done, finish


def _start(state: RestartState) -> tuple[RestartState, Step]:
    """Write the config, then start: the broker reads server.properties once, at start."""
    kind = state.kind
    if state.launch.server_properties is None:
        error = state.launch.config_error or "the spec did not render"
        return _finish(state, f"{kind} failed: {error}")
    return replace(state, phase=Phase.CONFIGURING), WriteConfig(state.launch.server_properties)


def step(
    state: RestartState, outcome: Outcome, timeouts: RestartTimeouts
) -> tuple[RestartState, Step]:
    """The next state and step after `outcome` of the last step."""
    kind, total = state.kind, _steps(state.kind)
    if isinstance(outcome, StepFailed):
        # A failed step is reported; the agent's next cycle decides again.
        return _finish(state, f"{kind} failed: {outcome.error}")
    match state.phase, outcome:
        case Phase.LOCKING, Begun():
            if kind is LaunchKind.START:
                return _start(state)
            return state, AcquireLock(timeouts.lock_poll_s)
        case Phase.LOCKING, LockBusy(holder):
            waiting = f"{kind}: waiting for restart lock held by {holder or 'nobody'}"
            return replace(state, progress=waiting), AcquireLock(timeouts.lock_poll_s)
        case Phase.LOCKING, LockUnavailable(error):
            # Never held: nothing to release, and no journal without ZooKeeper.
            done = replace(
                state,
                phase=Phase.FINISHED,
                progress=f"{kind}: restart lock unavailable ({error})",
            )
            return done, Finish(done.progress, release_lock=False, journal=False)
        case Phase.LOCKING, LockTaken():
            held = replace(state, lock_held=True)
            if kind is LaunchKind.RESTART:
                return replace(held, phase=Phase.CHECKING), CheckSafety()
            return _start(held)
        case Phase.CHECKING, SafetyRead(process_stopped, blockers):
            if process_stopped:
                return _start(state)
            if blockers:
                detail = ", ".join(blockers[:3])
                line = f"restart blocked: stopping would take {detail} below min ISR"
                return _finish(state, line)
            stopping = replace(
                state,
                phase=Phase.STOPPING,
                progress=f"restart 1/{total}: stopping broker (controlled shutdown)",
            )
            return stopping, StopBroker(timeouts.stop_s)
        case Phase.STOPPING, StepDone():
            return _start(state)
        case Phase.CONFIGURING, StepDone():
            number = 2 if kind is LaunchKind.RESTART else 1
            starting = replace(
                state, phase=Phase.STARTING, progress=f"{kind} {number}/{total}: starting broker"
            )
            return starting, LaunchBroker(state.launch.kafka_version)
        case Phase.STARTING, StepDone(now):
            answering = replace(
                state, phase=Phase.AWAITING_ANSWER, deadline=now + timeouts.answer_s
            )
            return answering, CheckAnswer(0.0)
        case Phase.AWAITING_ANSWER, AnswerRead(answers, now, exited):
            if answers:
                isr = replace(
                    state,
                    phase=Phase.AWAITING_ISR,
                    deadline=now + timeouts.isr_s,
                    isr_streak=0,
                    progress=f"{kind} {total}/{total}: waiting until every ISR is complete",
                )
                return isr, CheckIsr(0.0)
            if exited:
                # A broker that stops while starting (a failed log directory, a bad config)
                # is looked at again by the next cycle, not waited for until the timeout.
                return _finish(
                    state,
                    f"{kind}: broker process exited before it answered",
                    exited_while_starting=True,
                )
            if now >= state.deadline:
                return _finish(
                    state, f"{kind}: broker did not answer within {timeouts.answer_s:.0f}s"
                )
            return state, CheckAnswer(timeouts.answer_poll_s)
        case Phase.AWAITING_ISR, IsrRead(under_replicated, member_down, now):
            if under_replicated is not None and under_replicated > 0 and member_down:
                # A member's broker is down (a cold start): only replicas that can catch up
                # count, or the first broker up would wait for the others, which wait for
                # its lock.
                return state, CheckLaggingOnRunning()
            return _count_isr(state, under_replicated, now, timeouts)
        case Phase.AWAITING_ISR, LaggingRead(lagging, now):
            return _count_isr(state, lagging, now, timeouts)
    raise ValueError(
        f"restart procedure: {type(outcome).__name__} is unexpected in {state.phase.value}"
    )


def _count_isr(
    state: RestartState, outstanding: int | None, now: float, timeouts: RestartTimeouts
) -> tuple[RestartState, Step]:
    total = _steps(state.kind)
    streak = state.isr_streak + 1 if outstanding == 0 else 0
    if streak >= timeouts.isr_stable_checks:
        result = "done, ISR complete"
        return _finish(state, result, f"{state.kind} {total}/{total} {result}")
    if now >= state.deadline:
        result = f"broker up, ISR still incomplete after {timeouts.isr_s:.0f}s"
        return _finish(state, result, f"{state.kind} {total}/{total} {result}")
    return replace(state, isr_streak=streak), CheckIsr(timeouts.isr_poll_s)
