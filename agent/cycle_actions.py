"""Running the one action a cycle's `decide` chose.

Quick actions (a dynamic config change, a ZooKeeper reconfig, a controller start) run inside
the cycle. A broker start or restart and a controller restart run off the loop, under the
cluster-wide restart lock, as the `long_action` whose progress the next cycles report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agent.broker_config.rendering import desired_controller_properties, jolokia_files
from agent.controller_restart import ControllerRestartSettings, restart_controller
from agent.decide import (
    Action,
    ApplyDynamicConfig,
    BrokerLaunch,
    DoNothing,
    ReconfigureZookeeper,
    RestartBroker,
    RestartController,
    StartBroker,
    StartController,
    StopController,
)
from agent.errors import AgentError
from agent.kraft_keeper import QuorumKeeper
from agent.ports import (
    AgentZooKeeper,
    BrokerAdmin,
    BrokerSupervisor,
    Clock,
    ControllerStorage,
    EnsembleMembership,
)
from agent.restart import LaunchKind
from agent.restart_runner import RestartRunner, write_properties, write_text
from agent.settings import AgentSettings
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import BrokerConfigError
from planner.contracts.vm_config.kraft import controller_node_id


class Running(Protocol):
    def is_alive(self) -> bool: ...


Spawn = Callable[[str, Callable[[], None]], Running]
"""Run a long action off the loop: (name, work) -> a handle that tells whether it runs."""

Journal = Callable[[str, str, str], None]
"""(action, reason, result) -> one journal entry."""


def spawn_thread(name: str, work: Callable[[], None]) -> Running:
    thread = threading.Thread(target=work, name=f"agent-{name}", daemon=True)
    thread.start()
    return thread


@dataclass
class LongAction:
    name: str
    progress: str
    running: Running | None = None


@dataclass(frozen=True)
class ActionPorts:
    """What running an action reaches: a subset of the agent's ports."""

    zookeeper: AgentZooKeeper
    admin: BrokerAdmin
    ensemble: EnsembleMembership
    clock: Clock
    spawn: Spawn
    controller: BrokerSupervisor | None
    """This VM's KRaft controller process; None: the VM runs none."""
    storage: ControllerStorage | None = None
    """A migration's controller metadata dir; None: the agent formats none."""


class ActionRunner:
    """Runs actions for one agent and holds the long action in flight (None: none)."""

    def __init__(
        self,
        settings: AgentSettings,
        ports: ActionPorts,
        restarts: RestartRunner,
        quorum_keeper: QuorumKeeper | None,
        journal: Journal,
        wake: threading.Event,
    ) -> None:
        self.settings = settings
        self.ports = ports
        self.restarts = restarts
        self.quorum_keeper = quorum_keeper
        self.journal = journal
        self.wake = wake
        self.long_action: LongAction | None = None

    def execute(self, action: Action, broker_id: int, spec: ClusterSpec | None) -> None:
        """Run `action` for this VM's broker `broker_id`; `spec` is the last good spec."""
        match action:
            case StartBroker(reason, launch):
                self._run_long(LaunchKind.START, reason, launch, broker_id)
            case RestartBroker(reason, launch):
                self._run_long(LaunchKind.RESTART, reason, launch, broker_id)
            case ReconfigureZookeeper(_, change):
                self.ports.ensemble.apply(change)
            case ApplyDynamicConfig():
                self._apply_dynamic(action, broker_id)
            case StartController():
                self._start_controller(action, broker_id, spec)
            case RestartController():
                self._restart_controller(action, broker_id)
            case StopController():
                self._stop_controller(action)
            case DoNothing():
                pass

    def _apply_dynamic(self, action: ApplyDynamicConfig, broker_id: int) -> None:
        error = self.ports.admin.apply_config(broker_id, action.diff, action.kafka_version)
        if error is None:
            # The file too, so that a later restart keeps what was applied dynamically.
            write_properties(
                self.settings.config_dir / "server.properties", action.server_properties
            )
        self.journal(
            action.kind, action.reason, "done, read back" if error is None else f"failed: {error}"
        )

    def _start_controller(
        self, action: StartController, broker_id: int, spec: ClusterSpec | None
    ) -> None:
        controller = self.ports.controller
        if controller is None or spec is None:
            return
        try:
            properties = desired_controller_properties(self.settings, broker_id, spec)
        except BrokerConfigError as exc:
            self.journal(action.kind, action.reason, f"failed: {exc}")
            return
        if properties is None:
            return
        write_properties(self.settings.config_dir / "controller.properties", properties)
        for name, text in jolokia_files(self.settings, controller=True).items():
            write_text(self.settings.config_dir / name, text)
        try:
            storage = self.ports.storage
            if action.format_cluster_id is not None and storage is not None:
                storage.format(action.format_cluster_id, action.kafka_version)
            controller.start(action.kafka_version)
        except (AgentError, OSError) as exc:
            self.journal(action.kind, action.reason, f"failed: {exc}")
            return
        if action.format_cluster_id is not None:
            self.journal(action.kind, action.reason, "done, formatted and started")

    def _stop_controller(self, action: StopController) -> None:
        controller = self.ports.controller
        if controller is None:
            return
        controller.stop(self.settings.broker_stop_timeout_s)
        if self.ports.storage is not None:
            self.ports.storage.discard()
        self.journal(action.kind, action.reason, "done, metadata log discarded")

    def _restart_controller(self, action: RestartController, broker_id: int) -> None:
        controller, keeper = self.ports.controller, self.quorum_keeper
        if controller is None or keeper is None:
            return
        long_action = LongAction(str(action.kind), "controller restart: waiting to begin")

        def report(progress: str) -> None:
            long_action.progress = progress

        settings = ControllerRestartSettings(
            node_id=controller_node_id(broker_id),
            properties_path=self.settings.config_dir / "controller.properties",
            caught_up_within_ms=self.settings.controller_caught_up_ms,
            lock_poll_s=self.settings.restart_lock_poll_s,
        )

        def work() -> None:
            result = restart_controller(
                settings,
                self.ports.zookeeper.restart_lock(f"controller {settings.node_id}"),
                controller,
                keeper.describe,
                action.controller_properties,
                action.kafka_version,
                self.ports.clock,
                report,
            )
            self.journal(action.kind, action.reason, result)
            self.wake.set()

        self.long_action = long_action
        long_action.running = self.ports.spawn(str(action.kind), work)

    def _run_long(
        self, kind: LaunchKind, reason: str, launch: BrokerLaunch, broker_id: int
    ) -> None:
        long_action = LongAction(str(kind), f"{kind}: waiting to begin")

        def report(progress: str) -> None:
            long_action.progress = progress

        def work() -> None:
            self.restarts.run(broker_id, kind, launch, reason, report)

        self.long_action = long_action
        long_action.running = self.ports.spawn(str(kind), work)
