"""Steps as registered objects: what runs for a step of an operation of a given kind, how
long it may take and what an error does to it.

A step name may have several variants, one per group of operation kinds (`write_spec` of a
new cluster writes the stored spec as it is; of any other operation it applies the
operation's changes): the operation's kind chooses the variant, so no step body branches on
the kind, and the stored step names stay as they always were.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, TypeVar

from management_plane.errors import PermanentError
from management_plane.service.db import OperationRow
from management_plane.service.operations import OperationKind, Outcome, StepName, StepRef

H = TypeVar("H")


class Patience(StrEnum):
    """Which of the configurable timeouts a step gets."""

    CREATE = "create"  # making or deleting VMs
    JOINED = "joined"  # a new VM's agent joining
    DRAINED = "drained"  # Kafka moving data
    APPLIED = "applied"  # every agent applying a spec
    OTHER = "other"
    DRILL = "drill"  # a chaos drill running to its report


class RetryPolicy(StrEnum):
    UNTIL_TIMEOUT = "until_timeout"
    """A temporary error makes the step wait and run again, until the step's timeout."""
    NEVER = "never"
    """Any error fails the operation at once."""


@dataclass(frozen=True)
class StepTimeouts:
    """Seconds a step may take before its operation fails (documented defaults)."""

    create: float = 900.0
    joined: float = 600.0
    drained: float = 3600.0
    applied: float = 1200.0
    other: float = 300.0
    drill: float = 7200.0

    def seconds(self, patience: Patience) -> float:
        return float(getattr(self, patience.value))

    @classmethod
    def capped(cls, seconds: float) -> StepTimeouts:
        """Every step gets the same timeout."""
        if seconds <= 0:
            raise ValueError(f"a step timeout must be positive, got {seconds}")
        return cls(seconds, seconds, seconds, seconds, seconds, seconds)


StepFunction = Callable[[H, OperationRow, int], Outcome]
"""(the object that holds the steps, the operation, the batch the step works on)."""


@dataclass(frozen=True)
class Step(Generic[H]):
    name: StepName
    run: StepFunction[H]
    kinds: frozenset[OperationKind]
    patience: Patience
    retry: RetryPolicy


class UnknownStep(PermanentError):
    """An operation names a step that has no variant for its kind."""


class StepRegistry(Generic[H]):
    def __init__(self) -> None:
        self._steps: dict[tuple[StepName, OperationKind], Step[H]] = {}

    def register(
        self,
        name: StepName,
        kinds: Collection[OperationKind],
        patience: Patience = Patience.OTHER,
        retry: RetryPolicy = RetryPolicy.UNTIL_TIMEOUT,
    ) -> Callable[[StepFunction[H]], StepFunction[H]]:
        """A decorator: the function is the step `name` of operations of `kinds`."""
        if not kinds:
            raise ValueError(f"step {name} must serve at least one operation kind")

        def add(function: StepFunction[H]) -> StepFunction[H]:
            step = Step(name, function, frozenset(kinds), patience, retry)
            for kind in step.kinds:
                if (name, kind) in self._steps:
                    raise ValueError(f"step {name} of {kind} is registered twice")
                self._steps[(name, kind)] = step
            return function

        return add

    def lookup(self, step: StepRef, kind: OperationKind) -> Step[H]:
        found = self._steps.get((step.name, kind))
        if found is None:
            raise UnknownStep(f"no step {step.name} is registered for {kind} operations")
        return found

    def __iter__(self) -> Iterator[Step[H]]:
        seen: set[int] = set()
        for step in self._steps.values():
            if id(step) not in seen:
                seen.add(id(step))
                yield step
