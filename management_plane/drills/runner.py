"""Run one drill: refuse before touching anything (an unknown drill is refused by the
catalog; an unhealthy cluster, a fault that cannot run here, here), start the recording
workload, wait for a steady state, then for each fault inject, hold, heal and wait until
every ISR is complete again; stop the workload, read everything back, check the history and
write the report. Faults still injected are healed also when the drill is interrupted
(SIGINT, SIGTERM) or fails.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import structlog
from confluent_kafka.admin import AdminClient

from management_plane.drills.catalog import Drill
from management_plane.drills.checker import Verdict, check
from management_plane.drills.errors import DrillError, DrillRefused
from management_plane.drills.faults import (
    Fault,
    FaultCluster,
    FaultContext,
    ManagementPlane,
    NetworkRules,
    ReportsFigures,
    SettlesItself,
)
from management_plane.drills.health import JournalLine, health_problems
from management_plane.drills.history import FaultWindow, History
from management_plane.drills.history_file import write_history
from management_plane.drills.recorder import AckLatency, RecordingWorkload
from management_plane.drills.report import build_report, write_report
from management_plane.workload import create_topic
from planner.client_logs import client_logger
from planner.pki.client_settings import ClientConfig, InternalClient

log = structlog.get_logger(__name__)


class DrillCluster(FaultCluster, Protocol):
    @property
    def name(self) -> str: ...

    @property
    def kafka(self) -> InternalClient:
        """KaaS's client of the cluster's internal listener."""
        ...

    def status(self) -> Mapping[str, Any]: ...

    def under_replicated(self) -> int | None: ...

    def journal_since(self, since_s: float) -> list[JournalLine]: ...


@dataclass(frozen=True)
class DrillOptions:
    duration_s: float | None = None  # of each fault; None: the drill's default
    rate_per_s: float = 200.0
    bounces: int = 3
    partitions: int = 6
    steady_s: float = 3.0  # acks flowing this long before the first fault
    recovery_timeout_s: float = 240.0
    settle_s: float = 2.0  # load kept after the last recovery

    def problems(self) -> list[str]:
        problems = []
        if self.duration_s is not None and not 0 < self.duration_s <= 3600:
            problems.append(f"duration must be above 0 and at most 3600 s; got {self.duration_s}")
        if not 0 < self.rate_per_s <= 20_000:
            problems.append(f"rate must be above 0 and at most 20000 msg/s; got {self.rate_per_s}")
        if not 1 <= self.bounces <= 20:
            problems.append(f"bounces must be 1 to 20; got {self.bounces}")
        return problems


@dataclass
class FaultOutcome:
    fault_id: str
    fault: str
    target: str
    started_s: float
    healed_s: float | None = None
    isr_complete_s: float | None = None
    settled: str | None = None  # what KaaS did, for the faults KaaS repairs itself
    settled_s: float | None = None
    figures: dict[str, float | None] = field(default_factory=dict)  # the fault's own


@dataclass
class DrillResult:
    drill: str
    cluster: str
    topic: str
    started_s: float
    ended_s: float
    outcomes: list[FaultOutcome]
    verdict: Verdict
    latencies: list[AckLatency] = field(repr=False)
    journal: list[JournalLine] = field(repr=False)
    report: dict[str, Any] = field(repr=False)
    report_dir: Path | None = None

    @property
    def recovered(self) -> bool:
        return all(o.isr_complete_s is not None for o in self.outcomes)

    @property
    def passed(self) -> bool:
        return self.verdict.valid and self.recovered


def refusals(
    drill: Drill,
    faults: tuple[Fault, ...],
    options: DrillOptions,
    status: Mapping[str, Any],
    context: FaultContext,
) -> list[str]:
    """Every reason not to start, each in words; nothing here changes the cluster."""
    problems = list(options.problems())
    problems += [f"cluster not healthy: {p}" for p in health_problems(status)]
    for fault in faults:
        problem = fault.preflight(context)
        if problem is not None:
            problems.append(problem)
    return problems


def refusal_message(drill: Drill, problems: list[str]) -> str:
    return f"drill {drill.name} refused: " + "; ".join(problems)


def preflight(
    drill: Drill,
    cluster: DrillCluster,
    options: DrillOptions,
    network: NetworkRules | None,
    plane: ManagementPlane | None = None,
) -> list[str]:
    """`refusals` of a drill not started yet (the API's check before it queues one)."""
    duration = options.duration_s if options.duration_s is not None else drill.duration_s
    context = FaultContext(
        cluster=cluster,
        topic=f"drill-{drill.name}",
        duration_s=duration,
        bounces=options.bounces,
        network=network,
        plane=plane,
    )
    return refusals(drill, drill.faults(), options, cluster.status(), context)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as SIGINT does, so the drill heals before exiting."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def wait_recovered(
    cluster: DrillCluster,
    serving: Callable[[float], bool],
    timeout_s: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    unsettled: Callable[[], str | None] = lambda: None,
) -> float | None:
    """When every broker was back, every partition's ISR complete, `serving(since)` true
    (every partition the workload writes acknowledged a write lately) and KaaS's own repair
    done (`unsettled`: what it has still to do), or None at the timeout. The acks matter:
    right after a broker is killed its ZooKeeper session still lives, so the metadata shows
    every ISR complete until the controller notices."""
    deadline = clock() + timeout_s
    while clock() < deadline:
        checked = clock()
        if unsettled() is None and cluster.under_replicated() == 0 and serving(checked - 3.0):
            return clock()
        sleep(0.5)
    return None


def run_drill(
    drill: Drill,
    cluster: DrillCluster,
    options: DrillOptions,
    report_dir: Path | None = None,
    network: NetworkRules | None = None,
    on_progress: Callable[[str], None] = lambda line: None,
    plane: ManagementPlane | None = None,
) -> DrillResult:
    topic = f"drill-{drill.name}-{uuid.uuid4().hex[:6]}"
    faults = drill.faults()
    duration = options.duration_s if options.duration_s is not None else drill.duration_s
    context = FaultContext(
        cluster=cluster,
        topic=topic,
        duration_s=duration,
        bounces=options.bounces,
        network=network,
        plane=plane,
    )
    problems = refusals(drill, faults, options, cluster.status(), context)
    if problems:
        raise DrillRefused(refusal_message(drill, problems))

    started = time.time()
    connection = cluster.kafka.librdkafka()
    create_topic(connection, topic, options.partitions)
    workload = RecordingWorkload(connection, topic, options.rate_per_s)
    outcomes: list[FaultOutcome] = []
    injected: list[Fault] = []
    with _terminate_as_interrupt():
        workload.start()
        try:
            _wait_steady(workload, options.steady_s)
            # The partitions the workload's keys land on: each must take writes again.
            written = workload.partitions_acked_since(0.0)
            on_progress(f"steady: acks flowing on {topic}")
            for number, fault in enumerate(faults, start=1):
                outcome = FaultOutcome(f"f{number}", fault.name, "", time.time())
                outcomes.append(outcome)
                injected.append(fault)
                outcome.target = fault.inject(context)
                on_progress(f"{fault.name}: injected into {outcome.target}")
                fault.hold(context)
                fault.heal(context)
                injected.remove(fault)
                outcome.healed_s = time.time()
                on_progress(f"{fault.name}: healed; waiting for every ISR")
                timeout_s = options.recovery_timeout_s
                if isinstance(fault, SettlesItself):
                    timeout_s = max(timeout_s, fault.settle_timeout_s)
                try:
                    outcome.isr_complete_s = wait_recovered(
                        cluster,
                        lambda since: workload.partitions_acked_since(since) >= written,
                        timeout_s,
                        unsettled=_settle_watch(fault, context, outcome, on_progress),
                    )
                except DrillError as exc:  # KaaS failed at its own repair
                    on_progress(f"{fault.name}: not recovered: {exc}")
                    break
                finally:
                    if isinstance(fault, SettlesItself):
                        fault.clean_up(context)
                    if isinstance(fault, ReportsFigures):
                        outcome.figures = dict(fault.figures(context))
                if outcome.isr_complete_s is None:
                    on_progress(f"{fault.name}: not recovered in {timeout_s:.0f}s")
                    break
                on_progress(
                    f"{fault.name}: recovered in {outcome.isr_complete_s - outcome.healed_s:.1f}s"
                )
            time.sleep(options.settle_s)
        finally:
            _heal_all(injected, context, network)
            workload.stop()
            _delete_topic(connection, topic)
    ended = time.time()
    history = History.of(
        [
            *workload.history_records(),
            *(
                FaultWindow(o.fault_id, o.fault, o.target, o.started_s, o.healed_s)
                for o in outcomes
            ),
        ]
    )
    verdict = check(
        history,
        isr_complete_s={o.fault_id: o.isr_complete_s for o in outcomes if o.isr_complete_s},
    )
    journal = sorted(
        [
            *cluster.journal_since(started),
            *(
                JournalLine(o.settled_s, f"{o.fault}: {o.settled}")
                for o in outcomes
                if o.settled is not None and o.settled_s is not None
            ),
        ],
        key=lambda line: line.time_s,
    )
    result = DrillResult(
        drill=drill.name,
        cluster=cluster.name,
        topic=topic,
        started_s=started,
        ended_s=ended,
        outcomes=outcomes,
        verdict=verdict,
        latencies=workload.latencies(),
        journal=journal,
        report={},
    )
    result.report = build_report(
        drill=drill.name,
        cluster=cluster.name,
        topic=topic,
        duration_s=duration,
        rate_per_s=options.rate_per_s,
        started_s=started,
        ended_s=ended,
        verdict=verdict,
        latencies=result.latencies,
        journal=journal,
        recovered=result.recovered,
        figures={o.fault_id: o.figures for o in outcomes if o.figures},
    )
    if report_dir is not None:
        write_history(report_dir / "history.jsonl", history)
        write_report(report_dir, result.report)
        result.report_dir = report_dir
    return result


def _delete_topic(connection: ClientConfig, topic: str) -> None:
    """The drill's topic goes once read back (the history keeps what it held), so drills
    leave the cluster as they found it."""
    admin = AdminClient(dict(connection), logger=client_logger)
    try:
        admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    except Exception as exc:  # the verdict matters more than the cleanup
        log.warning("drill_topic_not_deleted", topic=topic, error=str(exc))


def _wait_steady(workload: RecordingWorkload, steady_s: float) -> None:
    """Acks have flowed for `steady_s` seconds without a gap of a second."""
    deadline = time.monotonic() + 60
    flowing_since: float | None = None
    while time.monotonic() < deadline:
        now = time.time()
        if workload.acks_since(now - 1.0) > 0:
            flowing_since = flowing_since or now
            if now - flowing_since >= steady_s:
                return
        else:
            flowing_since = None
        time.sleep(0.2)
    raise DrillError("the workload never reached a steady state (no acks for 60 s)")


def _settle_watch(
    fault: Fault,
    context: FaultContext,
    outcome: FaultOutcome,
    on_progress: Callable[[str], None],
) -> Callable[[], str | None]:
    """What KaaS has still to do after `fault` (nothing for a fault the drill heals); once
    it is done, what KaaS did goes into the outcome and the progress lines."""
    if not isinstance(fault, SettlesItself):
        return lambda: None
    last: list[str | None] = [None]

    def unsettled() -> str | None:
        if outcome.settled is not None:
            return None
        left = fault.unsettled(context)
        if left is None:
            outcome.settled, outcome.settled_s = fault.settlement(), time.time()
            on_progress(f"{fault.name}: {outcome.settled}")
        elif left != last[0]:
            on_progress(f"{fault.name}: {left}")
        last[0] = left
        return left

    return unsettled


def _heal_all(injected: list[Fault], context: FaultContext, network: NetworkRules | None) -> None:
    for fault in reversed(injected):
        try:
            fault.heal(context)
            if isinstance(fault, SettlesItself):
                fault.clean_up(context)
        except Exception as exc:  # heal the rest, whatever one heal did
            log.error("heal_failed", fault=fault.name, error=str(exc))
    remove_all = getattr(network, "remove_all", None)
    if remove_all is not None:
        remove_all()
