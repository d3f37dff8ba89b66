"""The operations engine: one thread that runs every unfinished operation, step by step,
persisting each transition before the next step runs.

At start it simply reads the unfinished operations from the database, so a service killed
mid-operation resumes at the step it had reached. Operations on one cluster run one at a
time, in the order they were made.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from typing import Protocol

import structlog

from management_plane.service.controller import Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.operations import TENANT_KINDS, OperationKind
from management_plane.service.runner import OperationRunner
from management_plane.service.steps import StepTimeouts, UnknownStep

log = structlog.get_logger("kaas.engine")


class Watcher(Protocol):
    """Something the engine's thread runs between operation steps (the broker-loss watcher),
    so that what it decides is queued by the same thread that runs operations."""

    def check_if_due(self) -> None: ...


class Engine:
    def __init__(
        self,
        db: Database,
        controller: Controller,
        poll_interval_s: float = 2.0,
        timeouts: StepTimeouts | None = None,
    ) -> None:
        self.db = db
        # Operations that requests run themselves (tenants): the engine only finishes those
        # a request did not, i.e. made before this process started or handed over.
        self.started_at = time.time()
        self.inline_kinds: Collection[OperationKind] = TENANT_KINDS
        self.resume_inline: Callable[[OperationRow], None] | None = None
        self.controller = controller
        self.runner = OperationRunner(db)
        self.poll_interval_s = poll_interval_s
        self.timeouts = timeouts or StepTimeouts()
        self.watchers: list[Watcher] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kaas-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def wake(self) -> None:
        """A new operation was queued: run it now rather than at the next poll."""
        self._wake.set()

    def _loop(self) -> None:
        log.info("engine_started", unfinished=len(self.db.unfinished_operations()))
        while not self._stop.is_set():
            try:
                self.run_once()
                for watcher in self.watchers:
                    watcher.check_if_due()
            except Exception as exc:  # the engine outlives any one bad step
                log.exception("engine_cycle_failed", error=str(exc))
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()

    def run_once(self) -> None:
        """Advance every cluster's oldest unfinished operation as far as it goes now."""
        seen: set[str] = set()
        for op in self.db.unfinished_operations():
            if op.cluster in seen:
                continue
            seen.add(op.cluster)
            if op.kind in self.inline_kinds:
                self._resume_inline(op)
            else:
                self._advance(op)

    def _resume_inline(self, op: OperationRow) -> None:
        if self.resume_inline is None:
            return
        if op.created_at >= self.started_at and not op.context.get("resume"):
            return  # its request is running it
        try:
            self.resume_inline(op)
        except Exception as exc:  # tried again at the next cycle
            log.warning("inline_resume_failed", op_id=op.op_id, kind=op.kind, error=str(exc))

    def _timeout(self, op: OperationRow) -> float:
        try:
            return self.timeouts.seconds(self.controller.step_of(op).patience)
        except UnknownStep:
            return self.timeouts.other  # the step itself fails at once

    def _advance(self, op: OperationRow) -> None:
        self.runner.advance(op, self.controller.run, self._timeout, self._stop.is_set)
