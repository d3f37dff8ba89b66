"""The shell of the start and restart procedure: runs each step agent/restart.py returns
and feeds its outcome back, until the procedure finishes. The decisions are restart.py's."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import structlog

from agent.broker_config.rendering import jolokia_files
from agent.decide import BrokerLaunch
from agent.ports import (
    STOPPED,
    AgentZooKeeper,
    BrokerAdmin,
    BrokerSupervisor,
    Clock,
    RestartLock,
    StoreUnavailable,
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
from agent.safety import lagging_on_running_brokers, restart_blockers
from agent.settings import AgentSettings
from planner.contracts.member import MemberRecord
from planner.contracts.vm_config import parse_server_properties, server_properties_text

log = structlog.get_logger("kaas.agent")

Journal = Callable[[str, str, str], None]
"""(action, reason, result) -> one journal entry."""


def restart_timeouts(settings: AgentSettings) -> RestartTimeouts:
    return RestartTimeouts(
        lock_poll_s=settings.restart_lock_poll_s,
        stop_s=settings.broker_stop_timeout_s,
        answer_s=settings.broker_start_timeout_s,
        isr_s=settings.isr_complete_timeout_s,
        isr_poll_s=settings.isr_check_interval_s,
        isr_stable_checks=settings.isr_stable_checks,
    )


def read_properties(path: Path) -> dict[str, str]:
    try:
        return parse_server_properties(path.read_text())
    except OSError:
        return {}


def write_properties(path: Path, properties: Mapping[str, str]) -> None:
    write_text(path, server_properties_text(dict(properties)))


def write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.rename(path)


class RestartRunner:
    def __init__(
        self,
        settings: AgentSettings,
        zookeeper: AgentZooKeeper,
        admin: BrokerAdmin,
        supervisor: BrokerSupervisor,
        clock: Clock,
        members: Callable[[], Mapping[int, MemberRecord]],
        journal: Journal,
    ) -> None:
        self.settings = settings
        self.zookeeper = zookeeper
        self.admin = admin
        self.supervisor = supervisor
        self.clock = clock
        self.members = members
        self.journal = journal
        self.timeouts = restart_timeouts(settings)
        self.server_properties = settings.config_dir / "server.properties"
        self.exits_while_starting = 0
        """Starts in a row whose broker exited before it answered (0 once one answers)."""
        self.last_exit_at = 0.0

    def start_wait_s(self, now: float) -> float:
        """Seconds before the broker may be started again (0: now)."""
        wait = start_backoff_s(self.exits_while_starting)
        return max(0.0, self.last_exit_at + wait - now) if wait else 0.0

    def run(
        self,
        broker_id: int,
        kind: LaunchKind,
        launch: BrokerLaunch,
        reason: str,
        report: Callable[[str], None],
    ) -> RestartState:
        """The whole procedure; `report` gets every new progress line. Returns the end state."""
        lock = self.zookeeper.restart_lock(f"broker {broker_id}")
        state = begin(kind, launch)
        report(state.progress)
        outcome: Outcome = Begun()
        while True:
            state, next_step = step(state, outcome, self.timeouts)
            report(state.progress)
            if isinstance(next_step, Finish):
                if next_step.exited_while_starting:
                    self.exits_while_starting += 1
                    self.last_exit_at = self.clock.monotonic()
                self._finish(next_step, lock, kind, reason, broker_id)
                return state
            outcome = self._run(next_step, lock, broker_id)
            if isinstance(outcome, AnswerRead) and outcome.answers:
                self.exits_while_starting = 0

    def _finish(
        self, finish: Finish, lock: RestartLock, kind: LaunchKind, reason: str, broker_id: int
    ) -> None:
        if finish.journal:
            self.journal(kind, reason, finish.result)
        if finish.release_lock:
            try:
                lock.release()
            except StoreUnavailable as exc:
                # The lock node is ephemeral: it goes with the session.
                log.warning("restart_lock_release_failed", error=str(exc))
        log.info("long_action_done", action=str(kind), result=finish.result, broker_id=broker_id)

    def _run(self, next_step: Step, lock: RestartLock, broker_id: int) -> Outcome:
        try:
            return self._outcome(next_step, lock, broker_id)
        except Exception as exc:  # a failed step ends the procedure, reported and journaled
            return StepFailed(str(exc))

    def _outcome(self, next_step: Step, lock: RestartLock, broker_id: int) -> Outcome:
        clock = self.clock
        match next_step:
            case AcquireLock(timeout_s):
                try:
                    if lock.acquire(timeout_s):
                        return LockTaken(clock.monotonic())
                    holders = lock.holders()
                except StoreUnavailable as exc:
                    return LockUnavailable(str(exc))
                return LockBusy(holders[0] if holders else None)
            case CheckSafety():
                if self.supervisor.state() == STOPPED:
                    return SafetyRead(True, ())
                return SafetyRead(False, tuple(self._blockers(broker_id)))
            case StopBroker(timeout_s):
                self.supervisor.stop(timeout=timeout_s)
                return StepDone(clock.monotonic())
            case WriteConfig(properties):
                write_properties(self.server_properties, properties)
                for name, text in jolokia_files(self.settings).items():
                    write_text(self.settings.config_dir / name, text)
                return StepDone(clock.monotonic())
            case LaunchBroker(kafka_version):
                self.supervisor.start(kafka_version)
                return StepDone(clock.monotonic())
            case CheckAnswer(after_s):
                if after_s > 0:
                    clock.sleep(after_s)
                # The broker's own state too: another broker's metadata may still list it
                # while the new process is starting (an ISR shrinks only after a lag time).
                answers = self.admin.metadata_answers(broker_id, 3.0) and self.admin.serving(
                    self.settings.jolokia_url
                )
                exited = not answers and self.supervisor.state() == STOPPED
                return AnswerRead(answers, clock.monotonic(), exited)
            case CheckIsr(after_s):
                if after_s > 0:
                    clock.sleep(after_s)
                return self._read_isr()
            case CheckLaggingOnRunning():
                try:
                    registered = self.zookeeper.registered_brokers()
                    lagging = len(
                        lagging_on_running_brokers(self.admin.partition_states(), registered)
                    )
                except Exception:  # unreadable now: the streak starts again
                    return LaggingRead(None, clock.monotonic())
                return LaggingRead(lagging, clock.monotonic())
            case Finish():
                raise ValueError("Finish is handled by run()")

    def _blockers(self, broker_id: int) -> list[str]:
        partitions = self.admin.partition_states()
        mine = {p.topic for p in partitions if broker_id in p.isr}
        overrides = self.admin.topic_min_isr(mine)
        default = int(read_properties(self.server_properties).get("min.insync.replicas", "1"))
        return restart_blockers(partitions, broker_id, overrides, default)

    def _read_isr(self) -> IsrRead:
        """Under-replicated partitions on every registered member's broker (Jolokia)."""
        try:
            # Brokers that are down have no ISR to complete: read the registered ones.
            registered = self.zookeeper.registered_brokers()
            members = self.members()
            urls = [m.jolokia_url for broker_id, m in members.items() if broker_id in registered]
            urls = urls or [self.settings.jolokia_url]
            total = sum(self.admin.under_replicated(url) for url in urls)
            member_down = bool(set(members) - registered)
        except Exception:  # unreadable now: the streak starts again
            return IsrRead(None, False, self.clock.monotonic())
        return IsrRead(total, member_down, self.clock.monotonic())
