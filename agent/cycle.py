"""The agent's loop (../shared/DESIGN.md, "The agent's cycle"): one snapshot, a pure
`decide`, at most one action, one sentence, written to the member znode. Long actions
(start, restart) run off the loop under the cluster-wide restart lock; the cycles in
between report their progress.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout, NodeExistsError, NoNodeError
from kazoo.recipe.lock import Lock

from agent import brokerview
from agent.broker_config import ConfigDiff, desired_server_properties, diff_broker_config
from agent.broker_config.apply import (
    ConfigApplyError,
    ConfigCommandClusterDefaults,
    apply_config_diff,
    describe_running_config,
)
from agent.decide import RUNNING, STOPPED, Action, BrokerView, ConfigChanges, Snapshot, decide
from agent.identity import claim_broker_id, volume_broker_id, volume_id
from agent.metrics_loop import start_metrics_loop
from agent.plan_executor import PlanExecutor, start_plan_executor
from agent.planner_role import PlannerRole
from agent.safety import lagging_on_running_brokers, restart_blockers
from agent.settings import AgentSettings
from agent.supervisor import BrokerSupervisor, kafka_libs, make_supervisor
from agent.zk_ensemble import EnsembleKeeper
from planner.contracts.vm_config import (
    BrokerConfigError,
    parse_server_properties,
    server_properties_text,
)
from planner.spec import ClusterSpec, SpecError, parse_spec
from planner.zkpaths import ClusterPaths

AGENT_VERSION = "0.1.0"
MEMBER_SCHEMA_VERSION = 1
log = structlog.get_logger("kaas.agent")


def read_properties(path: Path) -> dict[str, str]:
    try:
        return parse_server_properties(path.read_text())
    except OSError:
        return {}


def write_properties(path: Path, properties: dict[str, str]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(server_properties_text(properties))
    tmp.rename(path)


@dataclass
class LongAction:
    name: str
    progress: str
    thread: threading.Thread


class Agent:
    def __init__(self, settings: AgentSettings, supervisor: BrokerSupervisor | None = None) -> None:
        self.settings = settings
        self.paths = ClusterPaths(settings.cluster)
        self.supervisor = supervisor or make_supervisor(settings)
        self.zk = KazooClient(hosts=settings.zookeeper_hosts, timeout=10.0)
        self.zk.add_listener(self._on_zk_state)
        self.zk_connected = False
        self.wake = threading.Event()
        self.broker_id: int = -1
        self.last_good_spec: ClusterSpec | None = None
        self.spec_error: str | None = None
        self.long_action: LongAction | None = None
        self.unresponsive_since: float | None = None
        self.last_sentence = ""
        self.admin = brokerview.admin_client(settings.bootstrap)
        self.server_properties = settings.config_dir / "server.properties"
        self.metrics_problem: str | None = None
        self.pending_diff: ConfigDiff | None = None
        self.admin_secret: str | None = None
        if settings.zookeeper_admin_secret_file is not None:
            self.admin_secret = settings.zookeeper_admin_secret_file.read_text().strip()
        self.planner_role = PlannerRole(self.zk, self.paths, f"broker-{settings.vm_id}")
        self.plan_executor = PlanExecutor(
            settings,
            self.zk,
            self._read_spec,
            self.cluster_bootstrap,
            lambda version: kafka_libs(settings.image_root, version),
            self.journal,
        )
        self.ensemble = EnsembleKeeper(
            self.zk, settings, self.admin_secret is not None, self.journal
        )

    # -- ZooKeeper ------------------------------------------------------------------------

    def _on_zk_state(self, state: str) -> None:
        self.zk_connected = state == KazooState.CONNECTED
        if state == KazooState.CONNECTED:
            # The member znode is ephemeral: after a new session it must be made again.
            self.wake.set()

    def start(self, timeout: float = 30.0) -> None:
        self.zk.start(timeout=timeout)
        self.zk_connected = True
        if self.admin_secret is not None:
            self.zk.add_auth("digest", f"super:{self.admin_secret}")
        volume = volume_id(self.settings.data_dir)
        limit = self._id_limit()
        self.broker_id = claim_broker_id(
            self.zk,
            self.paths,
            self.settings.vm_id,
            volume,
            limit,
            self._preferred_broker_id(),
        )
        self.zk.ensure_path(self.paths.members)
        self.zk.DataWatch(self.paths.spec, self._on_spec_change)
        log.info(
            "agent_started", broker_id=self.broker_id, vm_id=self.settings.vm_id, volume_id=volume
        )

    def _preferred_broker_id(self) -> int | None:
        """The id Kafka recorded on the volume; on an empty volume, the one the settings ask
        for (a replacement of a lost VM keeps the lost broker's id)."""
        recorded = volume_broker_id(self.settings.data_dir)
        return recorded if recorded is not None else self.settings.preferred_broker_id

    def _on_spec_change(self, data: bytes | None, stat: object) -> bool:
        self.wake.set()
        return True  # keep watching

    def _id_limit(self) -> int:
        spec, _ = self._read_spec()
        count = spec.broker_count if spec else 3
        return count + self.settings.spare_broker_ids

    def _read_spec(self) -> tuple[ClusterSpec | None, str | None]:
        try:
            raw, _ = self.zk.get(self.paths.spec)
        except NoNodeError:
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
        entry = {
            "schema_version": 1,
            "broker_id": self.broker_id,
            "vm_id": self.settings.vm_id,
            "action": action,
            "reason": reason,
            "result": result,
            "at_ms": int(time.time() * 1000),
        }
        try:
            self.zk.create(
                self.paths.journal_entry_prefix,
                json.dumps(entry).encode(),
                sequence=True,
                makepath=True,
            )
        except KazooException as exc:
            log.warning("journal_write_failed", error=str(exc))

    def _write_member(self, sentence: str, pending_restart: bool) -> None:
        generation = self.last_good_spec.generation if self.last_good_spec else -1
        value = json.dumps(
            {
                "schema_version": MEMBER_SCHEMA_VERSION,
                "broker_id": self.broker_id,
                "vm_id": self.settings.vm_id,
                "address": self.settings.address,
                "jolokia_url": self.settings.jolokia_url,
                "agent_version": AGENT_VERSION,
                "sentence": sentence,
                "pending_restart": pending_restart,
                "role": "planner" if self.planner_role.is_planner else "member",
                "plan": self.plan_executor.status if self.planner_role.is_planner else None,
                "spec_generation": generation,
                "updated_at_ms": int(time.time() * 1000),
            }
        ).encode()
        path = self.paths.member(self.broker_id)
        try:
            self.zk.set(path, value)
        except NoNodeError:
            try:
                self.zk.create(path, value, ephemeral=True, makepath=True)
            except NodeExistsError:
                self.zk.set(path, value)

    def cluster_bootstrap(self) -> str:
        """Every live member's broker, this one first: the planner reads the whole cluster
        even while its own broker restarts."""
        port = self.settings.kafka_port
        others = sorted(
            f"{m['address']}:{port}"
            for b, m in self.members().items()
            if b != self.broker_id and isinstance(m.get("address"), str)
        )
        return ",".join([self.settings.bootstrap, *others])

    def members(self) -> dict[int, dict[str, Any]]:
        result = {}
        for child in self.zk.get_children(self.paths.members):
            try:
                raw, _ = self.zk.get(f"{self.paths.members}/{child}")
                result[int(child)] = json.loads(raw)
            except (NoNodeError, ValueError):
                continue
        return result

    # -- snapshot -------------------------------------------------------------------------

    def _desired_properties(self, spec: ClusterSpec) -> dict[str, str]:
        """server.properties as the spec and this VM's facts say; BrokerConfigError names a bad key."""
        return desired_server_properties(self.settings, self.broker_id, spec)

    def _config_changes(self, spec: ClusterSpec, responsive: bool) -> ConfigChanges:
        """What differs between the rendered config and what the running broker uses."""
        self.pending_diff = None
        try:
            desired = self._desired_properties(spec)
        except BrokerConfigError as exc:
            return ConfigChanges(error=str(exc))
        if not responsive:
            return ConfigChanges()
        try:
            running = describe_running_config(self.admin, self.broker_id, timeout=5.0)
        except ConfigApplyError as exc:
            log.warning("running_config_unreadable", error=str(exc))
            return ConfigChanges()
        diff = diff_broker_config(desired, running)
        self.pending_diff = diff
        return ConfigChanges(dynamic=diff.dynamic_keys, read_only=diff.read_only_keys)

    def _apply_dynamic(self, action: Action) -> None:
        diff, spec = self.pending_diff, self.last_good_spec
        if diff is None or spec is None:
            return
        s = self.settings
        cluster_defaults = ConfigCommandClusterDefaults(
            s.java, kafka_libs(s.image_root, spec.kafka_version), s.bootstrap
        )
        result = apply_config_diff(self.admin, self.broker_id, diff, cluster_defaults)
        if result.ok:
            # The file too, so that a later restart keeps what was applied dynamically.
            write_properties(self.server_properties, self._desired_properties(spec))
        self.journal(
            action.kind,
            action.reason,
            "done, read back" if result.ok else f"failed: {result.error}",
        )

    def snapshot(self) -> Snapshot:
        now = time.monotonic()
        if not self.zk_connected:
            return Snapshot(broker_id=self.broker_id, zk_connected=False, spec=self.last_good_spec)
        spec, error = self._read_spec()
        if spec is not None:
            self.last_good_spec = spec
        self.spec_error = error  # None whenever the spec read is valid
        process = self.supervisor.state()
        responsive = process == RUNNING and brokerview.metadata_answers(
            self.admin, self.broker_id, timeout=3.0
        )
        if process == STOPPED or responsive:
            self.unresponsive_since = None
        elif self.unresponsive_since is None:
            self.unresponsive_since = now
        registered = self.zk.exists(f"{self.paths.kafka_broker_ids}/{self.broker_id}") is not None
        controller_id = None
        try:
            raw, _ = self.zk.get(self.paths.kafka_controller)
            controller_id = int(json.loads(raw)["brokerid"])
        except (NoNodeError, ValueError, KeyError, TypeError):
            pass
        changes = ConfigChanges()
        if self.last_good_spec is not None:
            changes = self._config_changes(self.last_good_spec, responsive)
        # Brokers that need a restart, or have not yet looked at the current spec: the
        # controller waits for both before restarting itself.
        generation = self.last_good_spec.generation if self.last_good_spec else -1
        awaiting = frozenset(
            b
            for b, m in self.members().items()
            if m.get("pending_restart") or int(m.get("spec_generation", -1)) < generation
        )
        zookeeper_change = self.ensemble.change(self.last_good_spec, now)
        long_action = None
        if self.long_action is not None:
            if self.long_action.thread.is_alive():
                long_action = self.long_action.progress
            else:
                self.long_action = None
        return Snapshot(
            broker_id=self.broker_id,
            zk_connected=True,
            spec=self.last_good_spec,
            spec_error=self.spec_error,
            broker=BrokerView(
                process,
                registered,
                responsive,
                0.0 if self.unresponsive_since is None else now - self.unresponsive_since,
            ),
            config=changes,
            long_action=long_action,
            controller_id=controller_id,
            brokers_awaiting_restart=awaiting,
            unresponsive_threshold_s=self.settings.broker_unresponsive_s,
            zookeeper_change=zookeeper_change,
        )

    # -- actions --------------------------------------------------------------------------

    def execute(self, action: Action, snap: Snapshot) -> None:
        if action.kind in ("start", "restart"):
            self._run_long(action)
        elif action.kind == "zk_reconfig" and snap.zookeeper_change is not None:
            self.ensemble.apply(snap.zookeeper_change)
        elif action.kind == "apply_dynamic":
            self._apply_dynamic(action)

    def _run_long(self, action: Action) -> None:
        long_action = LongAction(
            action.kind, f"{action.kind}: waiting to begin", threading.Thread()
        )
        target: Callable[[], None] = lambda: self._start_or_restart(action, long_action)  # noqa: E731
        long_action.thread = threading.Thread(
            target=target, name=f"agent-{action.kind}", daemon=True
        )
        self.long_action = long_action
        long_action.thread.start()

    def _start_or_restart(self, action: Action, progress: LongAction) -> None:
        restart = action.kind == "restart"
        steps = 3 if restart else 2
        lock = Lock(self.zk, self.paths.restart_lock, identifier=f"broker {self.broker_id}")
        try:
            while True:
                try:
                    if lock.acquire(timeout=5):
                        break
                except LockTimeout:
                    holders = lock.contenders()
                    holder = holders[0] if holders else "nobody"
                    progress.progress = f"{action.kind}: waiting for restart lock held by {holder}"
        except KazooException as exc:
            progress.progress = f"{action.kind}: restart lock unavailable ({exc})"
            return
        try:
            if restart and self.supervisor.state() != STOPPED:
                blockers = self._blockers()
                if blockers:
                    detail = ", ".join(blockers[:3])
                    progress.progress = (
                        f"restart blocked: stopping would take {detail} below min ISR"
                    )
                    self.journal(action.kind, action.reason, progress.progress)
                    return
                progress.progress = f"restart 1/{steps}: stopping broker (controlled shutdown)"
                self.supervisor.stop(timeout=120)
            if self.last_good_spec is not None:
                write_properties(
                    self.server_properties, self._desired_properties(self.last_good_spec)
                )
            step = 2 if restart else 1
            progress.progress = f"{action.kind} {step}/{steps}: starting broker"
            version = self.last_good_spec.kafka_version if self.last_good_spec else ""
            self.supervisor.start(version)
            if not self._wait(
                lambda: brokerview.metadata_answers(self.admin, self.broker_id, 3.0), 180
            ):
                progress.progress = f"{action.kind}: broker did not answer within 180s"
                self.journal(action.kind, action.reason, progress.progress)
                return
            progress.progress = (
                f"{action.kind} {steps}/{steps}: waiting until every ISR is complete"
            )
            complete = self._wait_isr_complete()
            result = (
                "done, ISR complete" if complete else "broker up, ISR still incomplete after 300s"
            )
            progress.progress = f"{action.kind} {steps}/{steps} {result}"
            self.journal(action.kind, action.reason, result)
            log.info(
                "long_action_done", action=action.kind, result=result, broker_id=self.broker_id
            )
        except Exception as exc:  # a failed step is reported, the next cycle decides again
            progress.progress = f"{action.kind} failed: {exc}"
            self.journal(action.kind, action.reason, progress.progress)
        finally:
            lock.release()

    def _blockers(self) -> list[str]:
        partitions = brokerview.partition_states(self.admin)
        mine = {p.topic for p in partitions if self.broker_id in p.isr}
        overrides = brokerview.topic_min_isr(self.admin, mine)
        default = int(read_properties(self.server_properties).get("min.insync.replicas", "1"))
        return restart_blockers(partitions, self.broker_id, overrides, default)

    @staticmethod
    def _wait(check: Callable[[], bool], timeout: float, interval: float = 1.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(interval)
        return False

    def _wait_isr_complete(self, timeout: float = 300.0) -> bool:
        """0 under-replicated partitions on every member's broker, read through Jolokia,
        on `isr_stable_checks` consecutive checks."""
        streak = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                # Brokers that are down have no ISR to complete: read the registered ones.
                registered = set(self.zk.get_children(self.paths.kafka_broker_ids))
                urls = [
                    m["jolokia_url"]
                    for broker_id, m in self.members().items()
                    if "jolokia_url" in m and str(broker_id) in registered
                ]
                urls = urls or [self.settings.jolokia_url]
                total = sum(brokerview.under_replicated(url) for url in urls)
                if total > 0 and set(self.members()) - {int(b) for b in registered}:
                    # A member's broker is down (a cold start): only replicas that can catch up.
                    total = len(
                        lagging_on_running_brokers(
                            brokerview.partition_states(self.admin),
                            (int(b) for b in registered),
                        )
                    )
            except Exception:
                total = -1
            streak = streak + 1 if total == 0 else 0
            if streak >= self.settings.isr_stable_checks:
                return True
            time.sleep(self.settings.isr_check_interval_s)
        return False

    # -- the loop -------------------------------------------------------------------------

    def run_cycle(self) -> str:
        snap = self.snapshot()
        action = decide(snap)
        if not action.is_none:
            self.journal(action.kind, action.reason, "started")
        self.execute(action, snap)
        sentence = action.reason
        if self.metrics_problem:
            sentence += f"; {self.metrics_problem}"
        if self.planner_role.is_planner and self.plan_executor.sentence:
            sentence += f"; {self.plan_executor.sentence}"
        if self.zk_connected:
            try:
                self._write_member(sentence, pending_restart=bool(snap.config.read_only))
            except KazooException as exc:
                log.warning("member_write_failed", error=str(exc))
        if sentence != self.last_sentence or not action.is_none:
            log.info(sentence, action=action.kind)
        self.last_sentence = sentence
        return sentence

    def run_forever(
        self, stop: threading.Event, on_cycle: Callable[[str], None] = lambda s: None
    ) -> None:
        self.start_metrics(stop)
        self.planner_role.start(stop)
        start_plan_executor(self.plan_executor, lambda: self.planner_role.is_planner, stop)
        while not stop.is_set():
            try:
                sentence = self.run_cycle()
            except Exception as exc:  # never let one bad cycle end the agent
                sentence = f"broker {self.broker_id}: cycle failed: {exc}"
                log.error("cycle_failed", error=str(exc))
            on_cycle(sentence)
            self.wake.wait(self.settings.loop_interval_s)
            self.wake.clear()

    def start_metrics(self, stop: threading.Event) -> threading.Thread:
        replication = min(3, self.last_good_spec.broker_count) if self.last_good_spec else 3

        def on_sample(problem: str | None) -> None:
            self.metrics_problem = problem

        return start_metrics_loop(
            self.settings, self.broker_id, replication, AGENT_VERSION, stop, on_sample
        )

    def close(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except KazooException:
            pass
