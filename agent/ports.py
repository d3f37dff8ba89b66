"""What the agent's shell talks to, as typing.Protocol ports: ZooKeeper (what the agent reads
and writes there), the Kafka admin (the local broker, and the whole cluster for the planner),
Kafka's reassignment API, the process supervisor, the plan store, the clock, and MirrorMaker's
flows, files and process.

The real adapters (agent/adapters.py, agent/supervisor.py, agent/reassign_admin.py,
planner/store.py) implement them; `Agent` and `PlanExecutor` take them injected, so unit
tests drive a whole cycle or a planner tick against fakes in memory. No I/O here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Protocol

from agent.broker_config import ConfigDiff, RunningValue
from agent.cert_renewal import CertStep
from agent.errors import AgentError
from agent.metrics.mirror_lag import OffsetSync
from agent.pipeline import ConfigChange, Move, PartitionKey, Reassigning
from agent.zk_membership import ReconfigChange
from planner.contracts.kafka_state import PartitionState
from planner.contracts.mirror_flow import MirrorFlow
from planner.contracts.plan_records import Progress
from planner.contracts.plan_status import PlanStatus
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.mirror import MirrorEndpoint, RestStores
from planner.store import StoredPlan


class ProcessState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"  # SIGSTOP: alive but answering nothing
    STOPPED = "stopped"


RUNNING, PAUSED, STOPPED = ProcessState.RUNNING, ProcessState.PAUSED, ProcessState.STOPPED

Assignment = Mapping[tuple[str, int], tuple[int, ...]]
"""(topic, partition) -> replicas, preferred leader first."""


class StoreUnavailable(AgentError):
    """ZooKeeper did not answer (no session, or the session was lost during the call)."""


class AdminUnavailable(AgentError):
    """A Kafka admin request failed or timed out; the message names the request."""


# -- ZooKeeper ----------------------------------------------------------------------------


class RestartLock(Protocol):
    """The cluster-wide restart lock: one broker restarts at a time."""

    def acquire(self, timeout: float) -> bool:
        """True once held; False when `timeout` passed first. StoreUnavailable: no session."""

    def holders(self) -> list[str]:
        """Identifiers of the holder and the waiters, holder first."""

    def release(self) -> None: ...


class AgentZooKeeper(Protocol):
    """The znodes the agent reads and writes. Values cross as bytes: their encoding and
    parsing stay in one place each, beside the record they are."""

    @property
    def connected(self) -> bool: ...

    def connect(self, timeout: float) -> None:
        """Open the session (and authenticate, when the adapter holds credentials)."""

    def on_connected(self, callback: Callable[[], None]) -> None:
        """Call `callback` on every new session (ephemeral znodes must be made again)."""

    def watch_spec(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever the spec znode changes."""

    def claim_broker_id(self, vm_id: str, volume_id: str, limit: int, preferred: int | None) -> int:
        """Claim (or keep) this volume's broker id; see agent/identity.py."""

    def close(self) -> None: ...

    def read_spec(self) -> bytes | None:
        """The spec znode's value; None when there is none."""

    def read_measured_load(self) -> bytes | None:
        """The measured-load znode's value (written by analytics); None when there is none."""

    def measured_load_version(self) -> int | None:
        """The measured-load znode's version (a cheap look: a new one plans again)."""

    def read_members(self) -> dict[int, bytes]:
        """Every member znode's value by broker id (a member that vanished is left out)."""

    def write_member(self, broker_id: int, value: bytes) -> None:
        """Set this agent's ephemeral member znode, creating it after a new session."""

    def append_journal(self, value: bytes) -> None:
        """One sequential journal entry."""

    def registered_brokers(self) -> frozenset[int]:
        """Broker ids registered with Kafka (in ZooKeeper mode, /brokers/ids)."""

    def claimed_broker_ids(self) -> frozenset[int]:
        """Broker ids some VM claims (/kaas/<cluster>/ids)."""

    def controller_id(self) -> int | None: ...

    def restart_lock(self, identifier: str) -> RestartLock: ...

    def restart_lock_held(self) -> bool: ...

    def request_controller_election(self) -> None:
        """Delete Kafka's controller znode so another broker takes over the controller."""


class PlannerSeat(Protocol):
    """The planner election: while this agent holds it, its plan executor works."""

    @property
    def is_planner(self) -> bool: ...

    def start(self, stop: threading.Event) -> threading.Thread: ...


class EnsembleMembership(Protocol):
    """ZooKeeper ensemble membership: the change to make, and making it."""

    def change(self, spec: ClusterSpec | None, now: float) -> ReconfigChange | None: ...

    def apply(self, change: ReconfigChange) -> object:
        """Make the change; what it returns (the outcome, for the journal) the cycle ignores."""
        ...


# -- Kafka ----------------------------------------------------------------------------------


class BrokerAdmin(Protocol):
    """Reads and config writes of this VM's broker (and, through it, the cluster)."""

    def metadata_answers(self, broker_id: int, timeout: float) -> bool:
        """Whether the broker answers a metadata request and lists itself."""

    def partition_states(self) -> list[PartitionState]: ...

    def topic_min_isr(self, topics: set[str]) -> dict[str, int]: ...

    def running_config(self, broker_id: int) -> dict[str, RunningValue]:
        """Every config in effect; AdminUnavailable when the broker cannot be asked."""

    def apply_config(self, broker_id: int, diff: ConfigDiff, kafka_version: str) -> str | None:
        """Apply the dynamic part of `diff` and read it back; the error, or None when done."""

    def under_replicated(self, jolokia_url: str) -> int:
        """A broker's UnderReplicatedPartitions, read through Jolokia; raises when unreadable."""

    def serving(self, jolokia_url: str) -> bool:
        """Whether the broker process behind this Jolokia says it runs (Kafka's BrokerState
        RUNNING: started, and in KRaft unfenced); False when unreadable."""


class ClusterAdmin(Protocol):
    """The whole cluster as the elected planner reads it (bootstrap: every live member)."""

    def assignment(self) -> tuple[dict[tuple[str, int], tuple[int, ...]], frozenset[int]]:
        """(live assignment of every topic, Kafka's internal ones too; registered broker
        ids) from one metadata request."""

    def read_layout(self) -> dict[str, Any]:
        """The cluster as a LAYOUT.json document (sizes and load included)."""

    def elect_preferred_leaders(self, partitions: Sequence[tuple[str, int]]) -> None:
        """Ask for a preferred-leader election; failures are logged, not raised."""


class ReassignmentAdmin(Protocol):
    """Kafka's reassignment API (KIP-455), throttles, elections, and the reads the
    concurrency adjuster needs; the adapter is agent/reassign_admin.py. Failures raise
    AgentError (ReassignmentAdminError)."""

    def reassigning(self) -> dict[PartitionKey, Reassigning]:
        """Every reassignment Kafka runs now."""

    def submit(self, moves: Sequence[Move]) -> dict[PartitionKey, str]:
        """Start the moves; the ones Kafka refused, with its error."""

    def cancel(self, partitions: Iterable[PartitionKey]) -> dict[PartitionKey, str]: ...

    def elect_preferred(self, partitions: Sequence[PartitionKey]) -> None:
        """Failures are logged, not raised."""

    def write_configs(self, changes: Sequence[ConfigChange]) -> None: ...

    def throttle_configs(self, topics: Iterable[str], brokers: Iterable[int]) -> dict[str, str]:
        """Throttle keys set on these topics and brokers."""

    def isr(self) -> dict[PartitionKey, tuple[tuple[int, ...], tuple[int, ...]]]:
        """(replicas, ISR) of every partition."""

    def min_isr(self, topics: Iterable[str]) -> dict[str, int]: ...

    def request_queues(self) -> dict[int, int]:
        """Each answering broker's request queue length."""


ReassignmentAdminFactory = Callable[[], ReassignmentAdmin]


# -- the broker process ---------------------------------------------------------------------


class CertificateTender(Protocol):
    """The VM's certificate renewal (agent/cert_keeper.py): one look and at most one
    non-destructive step per cycle; returns why the broker must restart, if it must."""

    def tend(self, broker_id: int) -> CertStep | None:
        """A restart the certificate needs (of the broker, or of the VM's ZooKeeper server),
        which the agent runs under the restart lock; None: nothing to restart."""
        ...


class BrokerSupervisor(Protocol):
    def state(self) -> ProcessState: ...

    def start(self, kafka_version: str) -> None: ...

    def stop(self, timeout: float) -> None: ...

    def pid(self) -> int | None: ...


# -- the plan store -------------------------------------------------------------------------


class PlanStorePort(Protocol):
    def read(self) -> StoredPlan | None: ...

    def read_progress(self) -> Progress | None: ...

    def read_status(self) -> PlanStatus: ...

    def write(self, plan: StoredPlan, expected_meta_version: int | None) -> StoredPlan: ...

    def write_progress(self, progress: Progress) -> Progress: ...


# -- time -----------------------------------------------------------------------------------


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float:
        """Wall time, seconds since the epoch."""

    def sleep(self, seconds: float) -> None: ...


class MirrorFlowSource(Protocol):
    """The target cluster's MirrorMaker flows and its live agents, as the keeper reads them
    (StoreUnavailable when ZooKeeper does not answer)."""

    def read_flows(self) -> dict[str, bytes]:
        """The raw value of every child of `/kaas/<cluster>/mirror/flows`, by name."""

    def live_broker_ids(self) -> frozenset[int]:
        """The broker ids of the agents whose member znodes exist."""


class MirrorProcessControl(Protocol):
    """This VM's MirrorMaker process."""

    def running(self) -> bool: ...

    def started_properties(self) -> str | None:
        """The properties the process was (last) started with, None before any start."""

    def start(self, properties: Mapping[str, str], kafka_version: str) -> None: ...

    def stop(self, timeout: float) -> None: ...


class MirrorCredentials(Protocol):
    """How this VM's MirrorMaker reaches the clusters: its files."""

    def target(self) -> MirrorEndpoint: ...

    def sources_held(self) -> frozenset[str]:
        """The flows whose source CA and client identity are on this VM."""

    def source(self, flow: MirrorFlow) -> MirrorEndpoint: ...

    def rest_stores(self) -> RestStores: ...


class MirrorOffsets(Protocol):
    """End offsets for a flow's lag (StoreUnavailable when a cluster does not answer)."""

    def source_ends(self, flow: MirrorFlow, endpoint: MirrorEndpoint) -> dict[tuple[str, int], int]:
        """Every partition of the source topics the flow mirrors, and its end offset."""

    def target_ends(self, alias: str) -> dict[tuple[str, int], int]:
        """Every partition of the target's topics mirrored from `alias`, and its end offset."""

    def offset_syncs(self, alias: str) -> Mapping[tuple[str, int], OffsetSync]:
        """MirrorMaker's latest offset sync per source partition of `alias` ({}: none yet)."""


class MirrorLagStore(Protocol):
    def write_lag(self, flow: str, value: bytes) -> None:
        """Store the flow's lag record (`/kaas/<cluster>/mirror/lag/<flow>`)."""


# -- a migration's controller storage ----------------------------------------------------------


class ControllerStorage(Protocol):
    """This VM's KRaft controller metadata dir as a migration needs it: formatted with the
    ZooKeeper-mode cluster's id before its first start, discarded after a rollback."""

    def formatted(self) -> bool: ...

    def format(self, cluster_id: str, kafka_version: str) -> None:
        """AgentError when Kafka's storage tool fails."""

    def discard(self) -> None: ...


class KafkaZnodes(Protocol):
    """Kafka's own znodes a migration has the elected agent delete (agent/kraft_migration.py
    decides when); each call returns what it deleted, empty when nothing was there."""

    def delete_kafka_chroot(self) -> list[str]: ...

    def delete_kraft_controller_state(self) -> list[str]: ...
