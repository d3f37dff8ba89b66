"""The agent's loop: one snapshot, a pure `decide`, at most one action, one sentence,
written to the member znode. Long actions (start, restart) run off the loop under the
cluster-wide restart lock (agent/restart.py decides their steps); the cycles in between
report their progress.

Everything the agent talks to comes through the ports of agent/ports.py, injected:
`build_agent` wires the real adapters, unit tests wire fakes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from agent.broker_config import desired_server_properties, diff_broker_config
from agent.cert_renewal import CertStep, CertStepKind
from agent.controller_view import controller_view
from agent.cycle_actions import ActionPorts, ActionRunner, LongAction, Spawn, spawn_thread
from agent.decide import (
    RUNNING,
    STOPPED,
    ActionKind,
    BrokerView,
    ConfigChanges,
    DoNothing,
    Snapshot,
    awaits_restart,
    decide,
)
from agent.identity import volume_id
from agent.kraft_keeper import QuorumKeeper, metadata_directory_id, start_quorum_keeper
from agent.kraft_migration import (
    clean_kafka_znodes,
    format_cluster_id,
    is_stray,
    wants_controller,
)
from agent.kraft_quorum import ControllerIdentity
from agent.kraft_quorum_tool import ControllerQuorum
from agent.log_stream.shipper import LogShipper, followed_logs, start_log_shipper
from agent.logging_files import LoggingFiles
from agent.member_state import member_state
from agent.metrics.agent_stats import AgentStats
from agent.metrics_loop import start_metrics_loop
from agent.mirror_keeper import MirrorKeeper, start_mirror_keeper
from agent.plan_executor import PlanExecutor, start_plan_executor
from agent.ports import (
    AdminUnavailable,
    AgentZooKeeper,
    BrokerAdmin,
    BrokerSupervisor,
    CertificateTender,
    Clock,
    ClusterAdmin,
    ControllerStorage,
    EnsembleMembership,
    KafkaZnodes,
    PlannerSeat,
    PlanStorePort,
    ReassignmentAdmin,
    StoreUnavailable,
)
from agent.restart_runner import RestartRunner
from agent.settings import AgentSettings
from planner.contracts.journal import JournalAction, JournalEntry
from planner.contracts.kafka_state import volume_broker_id
from planner.contracts.member import MemberRecord, MemberRole, MemberState, parse_members
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec, SpecError, parse_spec
from planner.contracts.vm_config import BrokerConfigError
from planner.contracts.vm_config.kraft import controller_node_id
from planner.errors import PlannerError

# A member in one of these runs a broker that is not back yet (stopped, started, answering
# or registering): the controllers' roll waits for it as for a broker awaiting a restart.
UNSETTLED_STATES = frozenset(
    {MemberState.STARTING, MemberState.RESTARTING, MemberState.UNRESPONSIVE, MemberState.JOINING}
)

AGENT_VERSION = "0.1.0"
log = structlog.get_logger("kaas.agent")


@dataclass(frozen=True)
class CycleMemory:
    """What one cycle leaves for the next; each snapshot returns the next one."""

    last_good_spec: ClusterSpec | None = None
    unresponsive_since: float | None = None
    """Monotonic time since which every read of a live broker has failed (None: it answers)."""


@dataclass(frozen=True)
class AgentPorts:
    zookeeper: AgentZooKeeper
    admin: BrokerAdmin
    supervisor: BrokerSupervisor
    ensemble: EnsembleMembership
    planner_seat: PlannerSeat
    plan_store: PlanStorePort
    cluster_admin: Callable[[str], ClusterAdmin]
    """bootstrap list -> the whole cluster's admin, for the elected planner."""
    reassignments: Callable[[str], ReassignmentAdmin]
    """bootstrap list -> Kafka's reassignment API, for the elected planner."""
    clock: Clock
    spawn: Spawn = field(default=spawn_thread)
    controller: BrokerSupervisor | None = None
    """This VM's KRaft controller process; None: the VM runs none (or the cluster is in
    ZooKeeper mode)."""
    quorum: ControllerQuorum | None = None
    """A KRaft cluster's controller quorum (describe, add, remove, unregister); None in
    ZooKeeper mode."""
    certificates: CertificateTender | None = None
    """The VM's certificate renewal; None: the agent leaves its certificate alone."""
    mirror: MirrorKeeper | None = None
    """The VM's MirrorMaker process, run on its own thread; None: no flow runs here."""
    zookeeper_restart: Callable[[Callable[[str], None]], str] | None = None
    """Restart this VM's ZooKeeper server onto its renewed certificate (given a progress
    callback; returns the journal's result); None: the VM runs no ZooKeeper server."""
    kafka_znodes: KafkaZnodes | None = None
    """Kafka's znodes a ZooKeeper-mode cluster's migration deletes; None on KRaft."""
    controller_storage: ControllerStorage | None = None
    """A ZooKeeper-mode VM's controller metadata dir, which a migration formats (and a
    rollback discards); None: the agent formats none (a KRaft cluster's are formatted)."""


class Agent:
    def __init__(self, settings: AgentSettings, ports: AgentPorts) -> None:
        self.settings = settings
        self.paths = ClusterPaths(settings.cluster)
        self.ports = ports
        self.zk = ports.zookeeper
        self.admin = ports.admin
        self.supervisor = ports.supervisor
        self.clock = ports.clock
        self.planner_role = ports.planner_seat
        self.ensemble = ports.ensemble
        self.wake = threading.Event()
        # The VM's certificate and trust bundle as this process's clients loaded them.
        self.identity_stamp = settings.identity.stamp()
        self.reload_requested = False
        self.broker_id: int = -1
        self.memory = CycleMemory()
        self.last_sentence = ""
        self.metrics_problem: str | None = None
        self.stats = AgentStats()  # the agent's own figures, sent by the metrics loop
        self.certificate_restart: str | None = None
        self.logging_files = LoggingFiles(settings)
        self.plan_executor = PlanExecutor(
            settings,
            ports.zookeeper,
            ports.plan_store,
            self._read_spec,
            lambda: ports.cluster_admin(self.cluster_bootstrap()),
            lambda: ports.reassignments(self.cluster_bootstrap()),
            self.journal,
            ports.clock,
        )
        self.quorum_keeper = (
            QuorumKeeper(
                ports.quorum,
                self._controller_identity,
                lambda: self.memory.last_good_spec,
                lambda: self.planner_role.is_planner,
                ports.zookeeper.registered_brokers,
                ports.zookeeper.claimed_broker_ids,
                self.journal,
                ports.clock.monotonic,
                settings.controller_gone_s,
                settings.controller_caught_up_ms,
                static_only=not settings.kraft,
            )
            if ports.quorum is not None
            else None
        )
        self.restarts = RestartRunner(
            settings,
            ports.zookeeper,
            ports.admin,
            ports.supervisor,
            ports.clock,
            self.members,
            self.journal,
        )
        self.actions = ActionRunner(
            settings,
            ActionPorts(
                ports.zookeeper,
                ports.admin,
                ports.ensemble,
                ports.clock,
                ports.spawn,
                ports.controller,
                ports.controller_storage,
            ),
            self.restarts,
            self.quorum_keeper,
            self.journal,
            self.wake,
        )

    @property
    def long_action(self) -> LongAction | None:
        """The start or restart running off the loop (None: none)."""
        return self.actions.long_action

    @long_action.setter
    def long_action(self, value: LongAction | None) -> None:
        self.actions.long_action = value

    # -- ZooKeeper ------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        # The member znode is ephemeral: after a new session it must be made again.
        self.zk.on_connected(self.wake.set)
        self.zk.connect(timeout)
        volume = volume_id(self.settings.data_dir)
        self.broker_id = self.zk.claim_broker_id(
            self.settings.vm_id, volume, self._id_limit(), self._preferred_broker_id()
        )
        self.zk.watch_spec(self.wake.set)
        log.info(
            "agent_started", broker_id=self.broker_id, vm_id=self.settings.vm_id, volume_id=volume
        )

    def _controller_identity(self) -> ControllerIdentity | None:
        """This VM's controller as the quorum knows it, once its metadata dir is formatted."""
        if not self.settings.runs_controller or self.settings.controller_data_dir is None:
            return None
        directory = metadata_directory_id(self.settings.controller_data_dir)
        if directory is None or self.broker_id < 0:
            return None
        return ControllerIdentity(controller_node_id(self.broker_id), directory)

    def _preferred_broker_id(self) -> int | None:
        """The id Kafka recorded on the volume; on an empty volume, the one the settings ask
        for (a replacement of a lost VM keeps the lost broker's id)."""
        recorded = volume_broker_id(self.settings.data_dir)
        return recorded if recorded is not None else self.settings.preferred_broker_id

    def _id_limit(self) -> int:
        spec, _ = self._read_spec()
        count = spec.broker_count if spec else 3
        return count + self.settings.spare_broker_ids

    def _read_spec(self) -> tuple[ClusterSpec | None, str | None]:
        raw = self.zk.read_spec()
        if raw is None:
            return None, f"no spec at {self.paths.spec}"
        try:
            spec = parse_spec(raw)
        except SpecError as exc:
            return None, str(exc)
        if spec.cluster != self.settings.cluster:
            return (
                None,
                f"spec.cluster is {spec.cluster!r}, this agent serves {self.settings.cluster!r}",
            )
        return spec, None

    def journal(self, action: str, reason: str, result: str) -> None:
        entry = JournalEntry(
            broker_id=self.broker_id,
            vm_id=self.settings.vm_id,
            action=JournalAction(action),
            reason=reason,
            result=result,
            at_ms=int(self.clock.time() * 1000),
        )
        try:
            self.zk.append_journal(entry.to_bytes())
        except StoreUnavailable as exc:
            log.warning("journal_write_failed", error=str(exc))

    def _write_member(
        self,
        sentence: str,
        state: MemberState,
        registered: bool,
        pending_restart: bool,
        controller_pending_restart: bool = False,
    ) -> None:
        spec = self.memory.last_good_spec
        planner = self.planner_role.is_planner
        record = MemberRecord(
            broker_id=self.broker_id,
            vm_id=self.settings.vm_id,
            address=self.settings.address,
            jolokia_url=self.settings.jolokia_url,
            agent_version=AGENT_VERSION,
            state=state,
            sentence=sentence,
            registered=registered,
            spec_generation=spec.generation if spec else -1,
            pending_restart=pending_restart,
            role=MemberRole.PLANNER if planner else MemberRole.MEMBER,
            updated_at_ms=int(self.clock.time() * 1000),
            plan=self.plan_executor.status if planner else None,
            controller_pending_restart=controller_pending_restart,
        )
        self.zk.write_member(self.broker_id, record.to_bytes())

    def cluster_bootstrap(self) -> str:
        """Every live member's broker, this one first: the planner reads the whole cluster
        even while its own broker restarts."""
        port = self.settings.kafka_port
        others = sorted(
            f"{m.address}:{port}" for b, m in self.members().items() if b != self.broker_id
        )
        return ",".join([self.settings.bootstrap, *others])

    def members(self) -> dict[int, MemberRecord]:
        """The member records this agent can read; another agent's unreadable record (an
        agent of a newer schema during an upgrade) is left out and logged."""
        readings = parse_members({str(b): raw for b, raw in self.zk.read_members().items()})
        for broker_id, reason in readings.unreadable.items():
            log.warning("member_unreadable", broker_id=broker_id, reason=reason)
        return readings.records

    # -- snapshot -------------------------------------------------------------------------

    def _config_changes(self, spec: ClusterSpec, responsive: bool) -> ConfigChanges:
        """The rendered config, and what differs from what the running broker uses."""
        try:
            desired = desired_server_properties(self.settings, self.broker_id, spec)
        except BrokerConfigError as exc:
            return ConfigChanges(error=str(exc))
        if not responsive:
            return ConfigChanges(rendered=desired)
        try:
            running = self.admin.running_config(self.broker_id)
        except AdminUnavailable as exc:
            log.warning("running_config_unreadable", error=str(exc))
            return ConfigChanges(rendered=desired)
        return ConfigChanges(
            rendered=desired, diff=diff_broker_config(desired, running), running_known=True
        )

    def snapshot(self) -> tuple[Snapshot, CycleMemory]:
        """One read of ZooKeeper, the broker and its config, and the memory this cycle
        leaves for the next (the caller keeps it: reading changes nothing)."""
        if not self.zk.connected:
            return self._unreachable(), self.memory
        try:
            return self._read_snapshot(self.clock.monotonic())
        except StoreUnavailable as exc:
            log.warning("zookeeper_read_failed", error=str(exc))
            return self._unreachable(), self.memory

    def _unreachable(self) -> Snapshot:
        return Snapshot(
            broker_id=self.broker_id, zk_connected=False, spec=self.memory.last_good_spec
        )

    def _read_snapshot(self, now: float) -> tuple[Snapshot, CycleMemory]:
        spec, spec_error = self._read_spec()
        good = spec if spec is not None else self.memory.last_good_spec
        process = self.supervisor.state()
        responsive = process == RUNNING and self.admin.metadata_answers(self.broker_id, 3.0)
        since = self.memory.unresponsive_since
        if process == STOPPED or responsive:
            since = None
        elif since is None:
            since = now
        registered = self.broker_id in self.zk.registered_brokers()
        controller_id = self.zk.controller_id()
        changes = ConfigChanges()
        if good is not None:
            changes = self._config_changes(good, responsive)
        # Brokers that need a restart, or have not yet looked at the current spec: the
        # controller waits for both before restarting itself.
        generation = good.generation if good else -1
        members = self.members()
        awaiting = frozenset(
            b for b, m in members.items() if m.pending_restart or m.spec_generation < generation
        )
        unsettled = frozenset(b for b, m in members.items() if m.state in UNSETTLED_STATES)
        zookeeper_change = self.ensemble.change(good, now)
        controller_process = self.ports.controller.state() if self.ports.controller else None
        wanted = wants_controller(self.settings.runs_controller, self.broker_id, good)
        controller = controller_process if wanted else None
        storage = self.ports.controller_storage
        format_id = (
            format_cluster_id(self.settings.kraft, self.broker_id, good, storage.formatted())
            if storage is not None and controller is not None
            else None
        )
        view = controller_view(self.settings, self.broker_id, good, controller, self.quorum_keeper)
        long_action = self.long_action
        running = long_action is not None and (
            long_action.running is None or long_action.running.is_alive()
        )
        snap = Snapshot(
            broker_id=self.broker_id,
            zk_connected=True,
            spec=good,
            spec_error=spec_error,  # None whenever the spec read is valid
            broker=BrokerView(
                process, registered, responsive, 0.0 if since is None else now - since
            ),
            config=changes,
            long_action=long_action.progress if long_action is not None and running else None,
            start_wait_s=self.restarts.start_wait_s(now),
            controller_id=controller_id,
            brokers_awaiting_restart=awaiting,
            brokers_unsettled=unsettled,
            unresponsive_threshold_s=self.settings.broker_unresponsive_s,
            zookeeper_change=zookeeper_change,
            controller=controller,
            controller_restarting=running
            and long_action is not None
            and long_action.name == str(ActionKind.RESTART_CONTROLLER),
            controllers_awaiting_restart=frozenset(
                b for b, m in self.members().items() if m.controller_pending_restart
            ),
            **view,
            certificate_restart=self.certificate_restart,
            controller_format_cluster_id=format_id,
            stray_controller=is_stray(wanted, controller_process),
        )
        return snap, CycleMemory(good, since)

    def _clean_kafka_znodes(self, snap: Snapshot) -> None:
        znodes, spec = self.ports.kafka_znodes, snap.spec
        if znodes is not None and spec is not None and spec.migration is not None:
            elected = self.planner_role.is_planner
            clean_kafka_znodes(
                znodes, self.settings.kraft, spec, elected, self.members, self.journal
            )

    # -- certificates ---------------------------------------------------------------------

    def _restart_zookeeper(self, reason: str) -> None:
        restart = self.ports.zookeeper_restart
        if restart is None:
            return
        action = str(JournalAction.RESTART_ZOOKEEPER)
        long_action = LongAction(action, "ZooKeeper server restart: waiting to begin")

        def report(progress: str) -> None:
            long_action.progress = progress

        def work() -> None:
            self.journal(action, reason, restart(report))
            self.wake.set()

        self.journal(action, reason, "started")
        self.long_action = long_action
        long_action.running = self.ports.spawn(action, work)

    def _tend_certificates(self) -> CertStep | None:
        """Renew the VM's certificate when a rotation or its expiry asks; never while a
        start or restart runs (the broker's listener is down or about to be)."""
        tender = self.ports.certificates
        if tender is None or not self.zk.connected or self.long_action is not None:
            return None
        try:
            return tender.tend(self.broker_id)
        except (StoreUnavailable, OSError, PlannerError) as exc:
            log.warning("certificate_check_failed", error=str(exc))
            return None

    # -- the loop -------------------------------------------------------------------------

    def run_cycle(self) -> str:
        started = self.clock.monotonic()
        running = self.long_action.running if self.long_action is not None else None
        if running is not None and not running.is_alive():
            self.long_action = None
        needed = self._tend_certificates()
        restarts_broker = needed is not None and needed.kind is CertStepKind.RESTART
        self.certificate_restart = needed.reason if needed is not None and restarts_broker else None
        if needed is not None and needed.kind is CertStepKind.RESTART_ZOOKEEPER:
            self._restart_zookeeper(needed.reason)  # the snapshot then sees it running
        snap, self.memory = self.snapshot()
        if self.memory.last_good_spec is not None:
            self.logging_files.follow(self.memory.last_good_spec.log_limits)
        action = decide(snap)
        if not isinstance(action, DoNothing):
            self.journal(action.kind, action.reason, "started")
        self.actions.execute(action, self.broker_id, self.memory.last_good_spec)
        self._clean_kafka_znodes(snap)
        sentence = action.reason
        if self.metrics_problem:
            sentence += f"; {self.metrics_problem}"
        if self.planner_role.is_planner and self.plan_executor.sentence:
            sentence += f"; {self.plan_executor.sentence}"
        if self.quorum_keeper is not None and self.quorum_keeper.sentence:
            sentence += f"; {self.quorum_keeper.sentence}"
        if self.ports.mirror is not None and self.ports.mirror.sentence:
            sentence += f"; {self.ports.mirror.sentence}"
        if self.logging_files.problem:
            sentence += f"; {self.logging_files.problem}"
        if self.zk.connected:
            long_kind = self.long_action.name if self.long_action is not None else None
            try:
                self._write_member(
                    sentence,
                    member_state(snap, action, long_kind),
                    registered=snap.broker.registered,
                    pending_restart=awaits_restart(snap),
                    controller_pending_restart=bool(snap.controller_changed),
                )
            except StoreUnavailable as exc:
                log.warning("member_write_failed", error=str(exc))
        if sentence != self.last_sentence or not isinstance(action, DoNothing):
            log.info(sentence, action=str(action.kind))
        self.last_sentence = sentence
        planner = self.planner_role.is_planner
        self.stats.record_plan(planner, self.plan_executor.status if planner else None)
        self.stats.record_cycle(self.clock.monotonic() - started, action.kind)
        return sentence

    def run_forever(
        self, stop: threading.Event, on_cycle: Callable[[str], None] = lambda s: None
    ) -> None:
        self.start_metrics(stop)
        self.planner_role.start(stop)
        start_plan_executor(self.plan_executor, lambda: self.planner_role.is_planner, stop)
        if self.quorum_keeper is not None:
            start_quorum_keeper(
                self.quorum_keeper,
                self.settings.quorum_check_interval_s,
                stop,
                self.settings.quorum_steady_check_interval_s,
            )
        if self.ports.mirror is not None:
            start_mirror_keeper(
                self.ports.mirror,
                lambda: self.broker_id,
                self._kafka_version,
                self.settings.loop_interval_s,
                stop,
            )
        while not stop.is_set():
            try:
                sentence = self.run_cycle()
            except Exception as exc:  # never let one bad cycle end the agent
                problem = str(exc) or type(exc).__name__
                sentence = f"broker {self.broker_id}: cycle failed: {problem}"
                log.error("cycle_failed", error=problem)
            on_cycle(sentence)
            if self.identity_changed():
                # Kafka and TLS clients read their certificate files once: a new identity
                # (a rotation round, a renewal) reaches them only through new clients, so
                # the agent starts again (main re-executes it) with everything made anew.
                log.info(
                    f"broker {self.broker_id}: the VM's certificate or trust bundle changed; "
                    "starting the agent again so its clients load them",
                    action="reload",
                )
                self.reload_requested = True
                stop.set()
                break
            self.wake.wait(self.settings.loop_interval_s)
            self.wake.clear()

    def identity_changed(self) -> bool:
        """The identity files differ from those this process loaded, and no start or restart
        runs (it finishes first: a reload must not cut a broker restart in half)."""
        running = self.long_action.running if self.long_action is not None else None
        if running is not None and running.is_alive():
            return False
        return self.settings.identity.stamp() != self.identity_stamp

    def _kafka_version(self) -> str | None:
        spec = self.memory.last_good_spec
        return spec.kafka_version if spec is not None else None

    def start_metrics(self, stop: threading.Event) -> threading.Thread:
        spec = self.memory.last_good_spec
        replication = min(3, spec.broker_count) if spec else 3

        def on_sample(problem: str | None) -> None:
            self.metrics_problem = problem

        def statsd_target() -> tuple[str, int] | None:
            good = self.memory.last_good_spec
            if good is None or good.monitoring is None:
                return None
            return good.monitoring.statsd_host, good.monitoring.statsd_port

        s = self.settings
        logs = followed_logs(
            kafka=True, controller=s.runs_controller, zookeeper=s.zookeeper_server_id is not None
        )
        shipper = LogShipper(
            s.cluster,
            s.vm_id,
            s.logs_dir,
            s.local_state_dir,
            logs,
            s.kafka_client,
            lambda: self.broker_id if self.broker_id >= 0 else None,
            topic=s.logs_topic,
            topic_replication_factor=replication,
        )
        start_log_shipper(shipper, s.log_poll_s, stop)
        return start_metrics_loop(
            self.settings,
            self.broker_id,
            replication,
            AGENT_VERSION,
            stop,
            on_sample,
            statsd_target,
            stats=self.stats,
            is_planner=lambda: self.planner_role.is_planner,
            log_rates=lambda: shipper.rate.per_minute(time.time()),
            mirror_lags=(
                self.ports.mirror.lag_gauges if self.ports.mirror is not None else lambda: ([], [])
            ),
        )

    def close(self) -> None:
        self.zk.close()
