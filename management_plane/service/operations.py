"""Operations as journaled state machines (pure: no I/O).

An operation's whole step list is expanded when it is created (a replacement of two VMs one
at a time is `create_vm:0, wait_joined:0, drain:0, ...:1, finish`: each a `StepRef`, the step's
name and the batch it works on) and stored with the index of the current step. Each run of a step returns an Outcome; `transition` turns the stored
state and the outcome into the next stored state. The engine persists every transition
before it runs the next step, so a service killed anywhere resumes at the persisted step,
and every step is written to be safe to run again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from planner.contracts.kraft_migration import MigrationPhase
from planner.contracts.transport_security import CONVERSION_PHASES, TransportSecurity
from planner.pki.rotation import ROUNDS, RotationKind


class OperationKind(StrEnum):
    CREATE_CLUSTER = "create_cluster"
    REPLACE_VM = "replace_vm"
    REPLACE_LOST_VM = "replace_lost_vm"
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    UPGRADE = "upgrade"
    CHANGE_INSTANCE_TYPE = "change_instance_type"
    CHANGE_CONFIG = "change_config"
    DELETE_CLUSTER = "delete_cluster"
    MIGRATE_TO_KRAFT = "migrate_to_kraft"
    ROLLBACK_KRAFT_MIGRATION = "rollback_kraft_migration"
    RUN_DRILL = "run_drill"
    ROTATE_CERTS = "rotate_certs"
    ROTATE_CA = "rotate_ca"
    SECURE_CLUSTER = "secure_cluster"
    CREATE_MIRROR_FLOW = "create_mirror_flow"
    DELETE_MIRROR_FLOW = "delete_mirror_flow"
    # Tenant operations run inside their request (tenant_service), through the same runner.
    CREATE_TENANT = "create_tenant"
    DELETE_TENANT = "delete_tenant"
    CREATE_TOPIC = "create_topic"
    DELETE_TOPIC = "delete_topic"
    ALTER_TOPIC = "alter_topic"

    @classmethod
    def parse(cls, value: str) -> OperationKind:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"unknown operation kind {value!r}; kinds: {', '.join(k.value for k in cls)}"
            ) from None


TENANT_KINDS = frozenset(
    {
        OperationKind.CREATE_TENANT,
        OperationKind.DELETE_TENANT,
        OperationKind.CREATE_TOPIC,
        OperationKind.DELETE_TOPIC,
        OperationKind.ALTER_TOPIC,
    }
)
CLUSTER_KINDS = frozenset(set(OperationKind) - TENANT_KINDS)
KINDS = tuple(k.value for k in OperationKind if k in CLUSTER_KINDS)


class OperationStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class OutcomeKind(StrEnum):
    DONE = "done"  # the next step runs
    WAIT = "wait"  # this step runs again soon
    FAIL = "fail"  # the operation fails here


PENDING, RUNNING, SUCCEEDED, FAILED = OperationStatus
DONE, WAIT, FAIL = OutcomeKind
UNFINISHED = (OperationStatus.PENDING, OperationStatus.RUNNING)


class StepName(StrEnum):
    # cluster steps (management_plane.service.controller)
    CREATE_VMS = "create_vms"
    WRITE_SPEC = "write_spec"
    WAIT_JOINED = "wait_joined"
    CREATE_VM = "create_vm"
    DRAIN = "drain"
    WAIT_DRAINED = "wait_drained"
    RECYCLE = "recycle"
    ENSEMBLE = "ensemble"
    UNDRAIN = "undrain"
    RECYCLE_LOST = "recycle_lost"
    WAIT_REPLICATED = "wait_replicated"
    PIN_PROTOCOL = "pin_protocol"
    UNPIN_PROTOCOL = "unpin_protocol"
    WAIT_APPLIED = "wait_applied"
    RECYCLE_ALL = "recycle_all"
    FINISH = "finish"
    # migration steps (management_plane.migration.steps); the batch is the phase's index
    MIGRATION_PHASE = "migration_phase"
    WAIT_MIGRATED = "wait_migrated"
    CLEAR_MIGRATION = "clear_migration"
    REMOVE_KAFKA_CHROOT = "remove_kafka_chroot"
    # a drill (management_plane.drills.operation)
    START_DRILL = "start_drill"
    WAIT_DRILL = "wait_drill"
    # certificate rotation (management_plane.security.rotation)
    STAGE_CA = "stage_ca"
    CERT_ROUND = "cert_round"
    SIGN_LEAVES = "sign_leaves"
    WAIT_LEAVES = "wait_leaves"
    PROMOTE_CA = "promote_ca"
    # a pre-TLS cluster's conversion (management_plane.security.conversion); the batch is
    # the phase's index
    TRANSPORT_PHASE = "transport_phase"
    SECURE_ZNODES = "secure_znodes"
    # MirrorMaker 2 flows into the cluster (management_plane.mirror.operation)
    GRANT_SOURCE_ACLS = "grant_source_acls"
    DELIVER_SOURCE = "deliver_source"
    WRITE_FLOW = "write_flow"
    STOP_FLOW = "stop_flow"
    REMOVE_FLOW = "remove_flow"
    WITHDRAW_SOURCE = "withdraw_source"
    REVOKE_SOURCE_ACLS = "revoke_source_acls"
    # tenant steps (management_plane.service.tenant_service)
    REGISTER = "register"
    CREDENTIAL = "credential"
    ACLS = "acls"
    QUOTAS = "quotas"
    VERIFY = "verify"
    API_KEY = "api_key"
    DELETE_IN_KAFKA = "delete_in_kafka"
    FORGET = "forget"
    CREATE_TOPIC = "create_topic"
    DELETE_TOPIC = "delete_topic"
    ALTER_TOPIC = "alter_topic"


_STEP = re.compile(r"^([a-z_]+)(?::(\d+))?$")


@dataclass(frozen=True, order=True)
class StepRef:
    """One step of an operation: which step, and for a step that works on one batch of VMs,
    which batch. Stored as text, `drain:1` or `finish`, so the database stays readable."""

    name: StepName
    batch: int | None = None

    def __post_init__(self) -> None:
        if self.batch is not None and self.batch < 0:
            raise ValueError(f"step {self.name}: batch must be 0 or more, got {self.batch}")

    def __str__(self) -> str:
        return self.name.value if self.batch is None else f"{self.name.value}:{self.batch}"

    @property
    def batch_index(self) -> int:
        """The batch this step works on; a step outside the batches works on batch 0."""
        return 0 if self.batch is None else self.batch

    @classmethod
    def parse(cls, text: str) -> StepRef:
        match = _STEP.match(text)
        if match is None:
            raise ValueError(f"step {text!r} is not a step name with an optional ':<batch>'")
        try:
            name = StepName(match[1])
        except ValueError:
            raise ValueError(f"step {text!r}: no step is named {match[1]!r}") from None
        return cls(name, int(match[2]) if match[2] is not None else None)


def parse_steps(texts: Sequence[str]) -> tuple[StepRef, ...]:
    return tuple(StepRef.parse(t) for t in texts)


def _steps(*names: StepName, batch: int | None = None) -> list[StepRef]:
    return [StepRef(n, batch) for n in names]


# The steps of one replacement batch (an immutable replacement: a new VM joins before the
# old one is drained and recycled).
REPLACE_BATCH = (
    StepName.CREATE_VM,
    StepName.WAIT_JOINED,
    StepName.DRAIN,
    StepName.WAIT_DRAINED,
    StepName.RECYCLE,
    StepName.ENSEMBLE,
    StepName.UNDRAIN,
)
# Broker loss: the lost VM is gone already, so there is nothing to drain. Recycle it (its ENI
# and EBS volume are freed for the new VM), start a VM that keeps the lost broker id, and wait
# until Kafka has re-replicated every partition naming that id onto it.
REPLACE_LOST_BATCH = (
    StepName.RECYCLE_LOST,
    StepName.CREATE_VM,
    StepName.WAIT_JOINED,
    StepName.WAIT_REPLICATED,
    StepName.ENSEMBLE,
)
# Scale-down: the same path without a new VM.
REMOVE_BATCH = (
    StepName.DRAIN,
    StepName.WAIT_DRAINED,
    StepName.RECYCLE,
    StepName.ENSEMBLE,
    StepName.UNDRAIN,
)


@dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    message: str
    context: dict[str, Any] = field(default_factory=dict)  # merged into the stored context


@dataclass(frozen=True)
class OperationState:
    status: OperationStatus
    steps: tuple[StepRef, ...]
    step_index: int
    context: dict[str, Any]
    message: str

    @property
    def step(self) -> StepRef | None:
        return self.steps[self.step_index] if self.step_index < len(self.steps) else None

    @property
    def finished(self) -> bool:
        return self.status in (SUCCEEDED, FAILED)


@dataclass(frozen=True)
class Transition:
    state: OperationState
    journal: str | None  # the journal outcome to record: started | done | failed | None
    step_started: bool  # the current step changed (its timeout starts now)


def batches(items: list[str], per_batch: int) -> list[list[str]]:
    if per_batch < 1:
        raise ValueError(f"batch size must be at least 1, got {per_batch}")
    return [items[i : i + per_batch] for i in range(0, len(items), per_batch)]


def replacement_steps(batch_count: int, create_new: bool = True) -> list[StepRef]:
    one = REPLACE_BATCH if create_new else REMOVE_BATCH
    return [StepRef(s, b) for b in range(batch_count) for s in one]


def expand_steps(kind: OperationKind | str, batch_count: int = 0) -> list[StepRef]:
    """Every step of an operation of `kind`, in order."""
    kind = OperationKind.parse(kind)
    N = StepName
    if kind == OperationKind.CREATE_CLUSTER:
        return _steps(N.CREATE_VMS, N.WRITE_SPEC, N.WAIT_JOINED, N.FINISH)
    if kind in (OperationKind.REPLACE_VM, OperationKind.CHANGE_INSTANCE_TYPE):
        return [StepRef(N.WRITE_SPEC), *replacement_steps(batch_count), StepRef(N.FINISH)]
    if kind == OperationKind.REPLACE_LOST_VM:
        return [*_steps(*REPLACE_LOST_BATCH, batch=0), StepRef(N.FINISH)]
    if kind == OperationKind.UPGRADE:
        # inter.broker.protocol.version in two phases: pinned to the running version while
        # old and new brokers mix, raised once every broker runs the new one.
        return [
            StepRef(N.PIN_PROTOCOL),
            StepRef(N.WAIT_APPLIED, 0),
            StepRef(N.WRITE_SPEC),
            *replacement_steps(batch_count),
            StepRef(N.UNPIN_PROTOCOL),
            StepRef(N.WAIT_APPLIED, 1),
            StepRef(N.FINISH),
        ]
    if kind == OperationKind.SCALE_UP:
        return [StepRef(N.CREATE_VM, 0), StepRef(N.WAIT_JOINED, 0), *_steps(N.WRITE_SPEC, N.FINISH)]
    if kind == OperationKind.SCALE_DOWN:
        return [*replacement_steps(batch_count, create_new=False), *_steps(N.WRITE_SPEC, N.FINISH)]
    if kind == OperationKind.CHANGE_CONFIG:
        return _steps(N.WRITE_SPEC, N.WAIT_APPLIED, N.FINISH)
    if kind == OperationKind.DELETE_CLUSTER:
        return _steps(N.RECYCLE_ALL, N.FINISH)
    if kind == OperationKind.MIGRATE_TO_KRAFT:
        return migration_steps()
    if kind == OperationKind.ROLLBACK_KRAFT_MIGRATION:
        return rollback_steps(batch_count)
    if kind == OperationKind.RUN_DRILL:
        return _steps(N.START_DRILL, N.WAIT_DRILL, N.FINISH)
    if kind in (OperationKind.ROTATE_CERTS, OperationKind.ROTATE_CA):
        # One round per new leaf: a CA rotation is three.
        rotation = RotationKind.LEAVES if kind == OperationKind.ROTATE_CERTS else RotationKind.CA
        rounds = len(ROUNDS[rotation])
        steps = [
            StepRef(s, r)
            for r in range(rounds)
            for s in (N.CERT_ROUND, N.SIGN_LEAVES, N.WAIT_LEAVES)
        ]
        if kind == OperationKind.ROTATE_CERTS:
            return [*steps, StepRef(N.FINISH)]
        return [StepRef(N.STAGE_CA), *steps, StepRef(N.PROMOTE_CA), StepRef(N.FINISH)]
    if kind == OperationKind.SECURE_CLUSTER:
        return conversion_steps()
    if kind == OperationKind.CREATE_MIRROR_FLOW:
        # The source's ACLs and credentials first: the agents start the flow as soon as they
        # read it.
        return _steps(N.GRANT_SOURCE_ACLS, N.DELIVER_SOURCE, N.WRITE_FLOW, N.FINISH)
    if kind == OperationKind.DELETE_MIRROR_FLOW:
        # Marked deleting first, so the agents stop mirroring before the value is gone.
        return _steps(N.STOP_FLOW, N.REMOVE_FLOW, N.WITHDRAW_SOURCE, N.REVOKE_SOURCE_ACLS, N.FINISH)
    if kind == OperationKind.CREATE_TENANT:
        return _steps(N.REGISTER, N.CREDENTIAL, N.ACLS, N.QUOTAS, N.VERIFY, N.API_KEY)
    if kind == OperationKind.DELETE_TENANT:
        return _steps(N.DELETE_IN_KAFKA, N.FORGET)
    if kind == OperationKind.CREATE_TOPIC:
        return _steps(N.CREATE_TOPIC)
    if kind == OperationKind.ALTER_TOPIC:
        return _steps(N.ALTER_TOPIC)
    return _steps(N.DELETE_TOPIC)


# The phases a migration writes into the spec, by the index its steps carry as their batch.
MIGRATION_PHASES = (
    MigrationPhase.CONTROLLERS,
    MigrationPhase.BROKERS_MIGRATING,
    MigrationPhase.BROKERS_KRAFT,
    MigrationPhase.FINALIZED,
)


def migration_steps(first_phase: int = 0, finalize: bool = True) -> list[StepRef]:
    """Each phase from `first_phase` on written, then applied by every agent; the metadata
    copied before the brokers leave ZooKeeper; Kafka's chroot removed last. Without
    `finalize` the operation stops with the brokers in KRaft and the controllers still
    writing to ZooKeeper, where a rollback is still possible."""
    last = len(MIGRATION_PHASES) if finalize else len(MIGRATION_PHASES) - 1
    if not 0 <= first_phase < last:
        raise ValueError(f"a migration starts at phase 0-{last - 1}, got {first_phase}")
    N = StepName
    steps: list[StepRef] = []
    for index in range(first_phase, last):
        steps += [StepRef(N.MIGRATION_PHASE, index), StepRef(N.WAIT_APPLIED, index)]
        if MIGRATION_PHASES[index] is MigrationPhase.BROKERS_MIGRATING:
            steps.append(StepRef(N.WAIT_MIGRATED))
    if finalize:
        steps.append(StepRef(N.REMOVE_KAFKA_CHROOT))
    return [*steps, StepRef(N.FINISH)]


def migration_start(phase: MigrationPhase | None) -> int:
    """Where a migration goes on from: the phase the spec holds is written again (its step
    is idempotent), so a migration stopped anywhere before finalisation resumes there."""
    return 0 if phase is None else MIGRATION_PHASES.index(phase)


# A rollback's phases: brokers back into migration mode, the controllers stopped, then
# (after Kafka's controller and migration znodes are gone) no migration at all.
ROLLBACK_PHASES = (
    MigrationPhase.BROKERS_MIGRATING,
    MigrationPhase.ROLLBACK_CONTROLLERS_STOPPED,
    None,
)


def rollback_start(phase: MigrationPhase) -> int:
    """Brokers in KRaft go back to migration mode first; brokers still in ZooKeeper mode
    start at stopping the controllers; controllers started alone are just stopped."""
    if phase.brokers_in_kraft:
        return 0
    if phase is MigrationPhase.CONTROLLERS:
        return 2
    return 1


def rollback_steps(first_phase: int = 0) -> list[StepRef]:
    """The rollback as Kafka's documentation orders it, from `first_phase` of
    ROLLBACK_PHASES (brokers still in ZooKeeper mode skip the first)."""
    if not 0 <= first_phase < len(ROLLBACK_PHASES):
        raise ValueError(f"a rollback starts at phase 0-{len(ROLLBACK_PHASES) - 1}")
    N = StepName
    steps: list[StepRef] = []
    for index in range(first_phase, len(ROLLBACK_PHASES)):
        if ROLLBACK_PHASES[index] is None:
            steps.append(StepRef(N.CLEAR_MIGRATION))
        steps += [StepRef(N.MIGRATION_PHASE, index), StepRef(N.WAIT_APPLIED, index)]
    return [*steps, StepRef(N.FINISH)]


def conversion_steps(first_phase: int = 0) -> list[StepRef]:
    """Each phase of CONVERSION_PHASES from `first_phase` on written, then applied by every
    agent; once every client talks TLS (and before the plain side closes) the znodes an
    older release left open get the cluster's ACLs."""
    if not 0 <= first_phase < len(CONVERSION_PHASES):
        raise ValueError(f"a conversion starts at phase 0-{len(CONVERSION_PHASES) - 1}")
    N = StepName
    steps: list[StepRef] = []
    for index in range(first_phase, len(CONVERSION_PHASES)):
        steps += [StepRef(N.TRANSPORT_PHASE, index), StepRef(N.WAIT_APPLIED, index)]
        if CONVERSION_PHASES[index] is TransportSecurity.TLS_CLIENTS:
            steps.append(StepRef(N.SECURE_ZNODES))
    return [*steps, StepRef(N.FINISH)]


def start(steps: Sequence[StepRef], context: dict[str, Any] | None = None) -> OperationState:
    if not steps:
        raise ValueError("an operation needs at least one step")
    return OperationState(PENDING, tuple(steps), 0, dict(context or {}), "queued")


def transition(state: OperationState, outcome: Outcome) -> Transition:
    """The stored state after running the current step with this outcome."""
    if state.finished:
        raise ValueError(f"operation already {state.status}; no step runs")
    step = state.step
    assert step is not None
    context = {**state.context, **outcome.context}
    if outcome.kind == WAIT:
        journal = "started" if state.status == PENDING else None
        return Transition(
            OperationState(RUNNING, state.steps, state.step_index, context, outcome.message),
            journal,
            state.status == PENDING,
        )
    if outcome.kind == FAIL:
        return Transition(
            OperationState(FAILED, state.steps, state.step_index, context, outcome.message),
            "failed",
            False,
        )
    if outcome.kind != DONE:
        raise ValueError(f"unknown outcome {outcome.kind!r}")
    following = state.step_index + 1
    status = SUCCEEDED if following >= len(state.steps) else RUNNING
    return Transition(
        OperationState(status, state.steps, following, context, outcome.message), "done", True
    )


def progress(state: OperationState) -> tuple[int, int]:
    """Steps finished and steps in all, for a progress bar."""
    finished = len(state.steps) if state.status == SUCCEEDED else state.step_index
    return finished, len(state.steps)
