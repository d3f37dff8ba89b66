"""The one runner of operations, cluster and tenant alike: it runs the current step, turns
what happened into the next stored state (`operations.transition`) and persists it with its
journal entry before anything else runs.

Two ways in:
- `advance`: the engine's thread; a cluster operation goes on until a step waits, fails or
  the last one is done. A step that overran its timeout fails the operation.
- `run_through`: a tenant operation inside its request; every step runs now, in order, and
  any error fails the operation at once (after the caller's rollback) and is raised again
  for the request's answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import structlog

from management_plane.service.db import Database, OperationRow
from management_plane.service.operations import (
    CLUSTER_KINDS,
    DONE,
    FAIL,
    FAILED,
    RUNNING,
    OperationKind,
    OperationState,
    OperationStatus,
    Outcome,
    StepName,
    StepRef,
    Transition,
    transition,
)

log = structlog.get_logger("kaas.engine")

# The cluster's status once an operation of this kind failed (otherwise: running again).
CLUSTER_STATUS_AFTER_FAILURE = {OperationKind.CREATE_CLUSTER: "failed"}


def state_of(op: OperationRow) -> OperationState:
    return OperationState(op.status, op.steps, op.step_index, op.context, op.message)


class OperationRunner:
    def __init__(self, db: Database, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    def record(self, op: OperationRow, state: OperationState, outcome: Outcome) -> Transition:
        """Persist the state after `outcome` of the current step, with its journal entry."""
        step = state.step
        assert step is not None
        moved = transition(state, outcome)
        new = moved.state
        self.db.save_operation(
            op.op_id,
            new.status,
            new.step_index,
            new.context,
            new.message,
            journal=(moved.journal, step) if moved.journal else None,
            step_started=moved.step_started,
        )
        if moved.journal:
            log.info(
                "operation_step",
                op_id=op.op_id,
                cluster=op.cluster,
                step=str(step),
                outcome=moved.journal,
                message=new.message,
            )
        if new.status == FAILED and op.kind in CLUSTER_KINDS:
            status = CLUSTER_STATUS_AFTER_FAILURE.get(op.kind, "running")
            self.db.update_cluster(op.cluster, status=status)
        return moved

    # -- the engine's way ---------------------------------------------------------------

    def advance(
        self,
        op: OperationRow,
        run_step: Callable[[OperationRow], Outcome],
        timeout_of: Callable[[OperationRow], float],
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        """Run the operation's steps as far as they go now."""
        current: OperationRow | None = op
        while current is not None and not stopping():
            step = current.step
            if step is None:
                return
            timeout = timeout_of(current)
            if current.status == RUNNING and self.clock() - current.step_started_at > timeout:
                outcome = Outcome(
                    FAIL, f"step {step} did not finish within {timeout:.0f}s: {current.message}"
                )
            else:
                outcome = run_step(current)
            moved = self.record(current, state_of(current), outcome)
            if outcome.kind != DONE or moved.state.finished:
                return
            current = self.db.operation(current.op_id)

    # -- a request's way ----------------------------------------------------------------

    def run_through(
        self,
        op: OperationRow,
        actions: Mapping[StepName, Callable[[], str]],
        on_fail: Callable[[], None],
    ) -> None:
        """Run every step now; a step's action returns its journal message. A step's
        exception fails the operation (after `on_fail`, e.g. a rollback) and is raised
        again. If `on_fail` itself fails, the operation stays unfinished, marked for the
        engine to finish (`resume`)."""
        missing = {s.name for s in op.steps} - actions.keys()
        if missing:
            raise ValueError(f"operation {op.op_id} ({op.kind}) has no action for {missing}")
        state = state_of(op)
        for step in op.steps:
            try:
                outcome = Outcome(DONE, actions[step.name]())
            except Exception as exc:
                message = f"{step}: {exc}"
                try:
                    on_fail()
                except Exception as cleanup:  # the engine finishes the clean-up later
                    log.warning("operation_cleanup_failed", op_id=op.op_id, error=str(cleanup))
                    self.db.save_operation(
                        op.op_id,
                        RUNNING,
                        state.step_index,
                        {**state.context, "resume": True},
                        f"{message}; clean-up left to the engine: {cleanup}",
                    )
                    raise exc from None
                self.record(op, state, Outcome(FAIL, message))
                raise
            state = self.record(op, state, outcome).state

    def settle(self, op: OperationRow, status: OperationStatus, journal: str, message: str) -> None:
        """End an operation its request could not (the engine's resume of a tenant
        operation): succeeded past its last step, or failed where it stands."""
        index = len(op.steps) if status == OperationStatus.SUCCEEDED else op.step_index
        step: StepRef = op.step or op.steps[-1]
        self.db.save_operation(
            op.op_id, status, index, op.context, message, journal=(journal, step)
        )
        log.info("operation_settled", op_id=op.op_id, kind=op.kind, status=status.value)
