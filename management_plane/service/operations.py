"""Operations as journaled state machines (pure: no I/O).

An operation's whole step list is expanded when it is created (a replacement of two VMs one
at a time is `create_vm:0, wait_joined:0, drain:0, ...:1, finish`) and stored with the index
of the current step. Each run of a step returns an Outcome; `transition` turns the stored
state and the outcome into the next stored state. The engine persists every transition
before it runs the next step, so a service killed anywhere resumes at the persisted step,
and every step is written to be safe to run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PENDING, RUNNING, SUCCEEDED, FAILED = "pending", "running", "succeeded", "failed"
DONE, WAIT, FAIL = "done", "wait", "fail"

# The steps of one replacement batch (seed 002, Aiven's immutable replacement).
REPLACE_BATCH = (
    "create_vm",
    "wait_joined",
    "drain",
    "wait_drained",
    "recycle",
    "ensemble",
    "undrain",
)
# Broker loss: the lost VM is gone already, so there is nothing to drain. Recycle it (its ENI
# and EBS volume are freed for the new VM), start a VM that keeps the lost broker id, and wait
# until Kafka has re-replicated every partition naming that id onto it.
REPLACE_LOST_BATCH = ("recycle_lost", "create_vm", "wait_joined", "wait_replicated", "ensemble")
# Scale-down: the same path without a new VM.
REMOVE_BATCH = ("drain", "wait_drained", "recycle", "ensemble", "undrain")

KINDS = (
    "create_cluster",
    "replace_vm",
    "replace_lost_vm",
    "scale_up",
    "scale_down",
    "upgrade",
    "change_instance_type",
    "change_config",
    "delete_cluster",
)


@dataclass(frozen=True)
class Outcome:
    kind: str  # done | wait | fail
    message: str
    context: dict[str, Any] = field(default_factory=dict)  # merged into the stored context


@dataclass(frozen=True)
class OperationState:
    status: str
    steps: tuple[str, ...]
    step_index: int
    context: dict[str, Any]
    message: str

    @property
    def step(self) -> str | None:
        return self.steps[self.step_index] if self.step_index < len(self.steps) else None

    @property
    def finished(self) -> bool:
        return self.status in (SUCCEEDED, FAILED)


@dataclass(frozen=True)
class Transition:
    state: OperationState
    journal: str | None  # the journal outcome to record: started | done | failed | None
    step_started: bool  # the current step changed (its timeout starts now)


def step_name(step: str) -> str:
    """`drain:1` -> `drain`."""
    return step.split(":", 1)[0]


def step_batch(step: str) -> int:
    """`drain:1` -> 1; a step outside the batches -> 0."""
    _, _, batch = step.partition(":")
    return int(batch) if batch else 0


def batches(items: list[str], per_batch: int) -> list[list[str]]:
    if per_batch < 1:
        raise ValueError(f"batch size must be at least 1, got {per_batch}")
    return [items[i : i + per_batch] for i in range(0, len(items), per_batch)]


def replacement_steps(batch_count: int, create_new: bool = True) -> list[str]:
    one = REPLACE_BATCH if create_new else REMOVE_BATCH
    return [f"{s}:{b}" for b in range(batch_count) for s in one]


def expand_steps(kind: str, batch_count: int = 0) -> list[str]:
    """Every step of an operation of `kind`, in order."""
    if kind == "create_cluster":
        return ["create_vms", "write_spec", "wait_joined", "finish"]
    if kind in ("replace_vm", "change_instance_type"):
        return ["write_spec", *replacement_steps(batch_count), "finish"]
    if kind == "replace_lost_vm":
        return [*(f"{s}:0" for s in REPLACE_LOST_BATCH), "finish"]
    if kind == "upgrade":
        # inter.broker.protocol.version in two phases: pinned to the running version while
        # old and new brokers mix, raised once every broker runs the new one.
        return [
            "pin_protocol",
            "wait_applied:0",
            "write_spec",
            *replacement_steps(batch_count),
            "unpin_protocol",
            "wait_applied:1",
            "finish",
        ]
    if kind == "scale_up":
        return ["create_vm:0", "wait_joined:0", "write_spec", "finish"]
    if kind == "scale_down":
        return [*replacement_steps(batch_count, create_new=False), "write_spec", "finish"]
    if kind == "change_config":
        return ["write_spec", "wait_applied", "finish"]
    if kind == "delete_cluster":
        return ["recycle_all", "finish"]
    raise ValueError(f"unknown operation kind {kind!r}")


def start(steps: list[str], context: dict[str, Any] | None = None) -> OperationState:
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
