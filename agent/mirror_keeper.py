"""The shell of MirrorMaker supervision: one look per tick (the flows and live agents in
ZooKeeper, the VM's credentials, the process), the pure `decide_mirror`, one action.

Runs on its own thread beside the agent's cycle (`start_mirror_keeper`), so a MirrorMaker
start never delays the broker's cycle and a broker restart never holds the flows up. With
ZooKeeper unreadable it leaves the process as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog
from kazoo.exceptions import KazooException

from agent.errors import AgentError
from agent.mirror_decide import (
    MirrorActionKind,
    MirrorDecision,
    MirrorMemory,
    MirrorObservation,
    decide_mirror,
    reports_lag,
    select_flows,
)
from agent.mirror_lag_monitor import MirrorLagMonitor
from agent.ports import (
    MirrorCredentials,
    MirrorFlowSource,
    MirrorProcessControl,
    StoreUnavailable,
)
from planner.contracts.journal import JournalAction
from planner.contracts.mirror_flow import MirrorFlow, parse_mirror_flows
from planner.contracts.vm_config.mirror import MirrorEndpoint, render_mirror_maker_properties
from planner.contracts.vm_config.properties import server_properties_text
from planner.errors import PlannerError

log = structlog.get_logger("kaas.agent.mirror")

STOP_TIMEOUT_S = 30.0

Journal = Callable[[str, str, str], None]


class MirrorKeeper:
    def __init__(
        self,
        cluster: str,
        flows: MirrorFlowSource,
        process: MirrorProcessControl,
        credentials: MirrorCredentials,
        rest_address: str,
        rest_port: int,
        clock: Callable[[], float],
        journal: Journal,
        lag: MirrorLagMonitor | None = None,
    ) -> None:
        """`lag`: measures the lag of the flows this VM reports (None: no measurement)."""
        self.cluster = cluster
        self.flows = flows
        self.process = process
        self.credentials = credentials
        self.rest_address = rest_address
        self.rest_port = rest_port
        self.clock = clock
        self.journal = journal
        self.memory = MirrorMemory()
        self.sentence = ""
        self._reported_unreadable: set[tuple[str, str]] = set()
        self.lag = lag
        # Set by the keeper's thread, read by the metrics thread: replaced whole, never changed.
        self._reporting: tuple[int, tuple[tuple[MirrorFlow, MirrorEndpoint], ...]] = (-1, ())

    def tick(self, broker_id: int | None, kafka_version: str | None) -> str:
        """One look and at most one action; the sentence for the member record ('' when no
        flow concerns this VM)."""
        if broker_id is None or kafka_version is None:
            return self._say("")  # no broker id or spec yet
        try:
            readings = parse_mirror_flows(self.flows.read_flows())
            live = self.flows.live_broker_ids()
        except (StoreUnavailable, KazooException) as exc:
            self._reporting = (broker_id, ())
            return self._say(f"MirrorMaker: flows unreadable ({exc}), left as it is")
        for name, reason in readings.unreadable.items():
            if (name, reason) not in self._reported_unreadable:
                self._reported_unreadable.add((name, reason))
                log.warning("mirror_flow_unreadable", flow=name, reason=reason)
        selection = select_flows(readings.flows, broker_id, live, self.credentials.sources_held())
        self._reporting = (
            broker_id,
            tuple(
                (f, self.credentials.source(f))
                for f in selection.flows
                if reports_lag(f, broker_id, live)
            ),
        )
        properties = None
        if selection.flows:
            try:
                properties = render_mirror_maker_properties(
                    target_cluster=self.cluster,
                    target=self.credentials.target(),
                    flows=selection.flows,
                    sources={f.name: self.credentials.source(f) for f in selection.flows},
                    rest_address=self.rest_address,
                    rest_port=self.rest_port,
                    rest_stores=self.credentials.rest_stores(),
                )
            except (PlannerError, AgentError, OSError) as exc:
                return self._say(f"MirrorMaker: cannot render its properties ({exc})")
        running = self.process.running()
        decision = decide_mirror(
            MirrorObservation(
                desired=None if properties is None else server_properties_text(properties),
                flows=tuple(f.name for f in selection.flows),
                running=running,
                running_properties=self.process.started_properties() if running else None,
                now=self.clock(),
            ),
            self.memory,
        )
        self.memory = decision.memory
        outcome = self._execute(decision, properties, kafka_version)
        skipped = "; ".join(f"flow {n}: {why}" for n, why in selection.skipped.items())
        return self._say("; ".join(part for part in (outcome, skipped) if part))

    def lag_gauges(self) -> tuple[list[tuple[str, float]], list[str]]:
        """The statsd gauges of the flows this VM reports the lag of (the metrics thread
        asks every interval), and what could not be measured."""
        broker_id, flows = self._reporting
        if self.lag is None or not flows:
            return [], []
        return self.lag.measure(broker_id, flows)

    def _execute(
        self, decision: MirrorDecision, properties: dict[str, str] | None, kafka_version: str
    ) -> str:
        kind = decision.kind
        if kind in (MirrorActionKind.NOTHING, MirrorActionKind.WAIT):
            return decision.reason
        log.info(decision.reason, action=str(kind))
        try:
            if kind in (MirrorActionKind.STOP, MirrorActionKind.RESTART):
                self.process.stop(STOP_TIMEOUT_S)
            if kind in (MirrorActionKind.START, MirrorActionKind.RESTART):
                assert properties is not None
                self.process.start(properties, kafka_version)
        except (OSError, PlannerError, AgentError, RuntimeError) as exc:
            # Counted as an exit at the next look: the backoff applies.
            self.journal(JournalAction.MIRROR_MAKER, decision.reason, f"failed: {exc}")
            return f"{decision.reason}: failed ({exc})"
        self.journal(JournalAction.MIRROR_MAKER, decision.reason, "done")
        return decision.reason

    def _say(self, sentence: str) -> str:
        if sentence != self.sentence and sentence:
            log.info("mirror_maker", sentence=sentence)
        self.sentence = sentence
        return sentence


def start_mirror_keeper(
    keeper: MirrorKeeper,
    broker_id: Callable[[], int | None],
    kafka_version: Callable[[], str | None],
    interval_s: float,
    stop: threading.Event,
) -> threading.Thread:
    def loop() -> None:
        while not stop.is_set():
            try:
                keeper.tick(broker_id(), kafka_version())
            except Exception as exc:  # never let one bad look end the keeper
                log.error("mirror_keeper_failed", error=str(exc))
            stop.wait(interval_s)

    thread = threading.Thread(target=loop, name="agent-mirror", daemon=True)
    thread.start()
    return thread
