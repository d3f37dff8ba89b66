"""Where the stored plan stands, in a few numbers: what the elected planner's agent reports
in its member record and what `kaas status` shows. Read from the plan's meta and progress
znodes only, so it is cheap enough to read on every status call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planner.contracts.fields import ContractError, choice, integer, text


class PlanState(StrEnum):
    NONE = "none"  # no plan stored
    REFUSED = "refused"  # a stored value is corrupt or foreign: never executed
    PENDING = "pending"
    EXECUTING = "executing"
    DONE = "done"
    FAILED = "failed"
    SUPERSEDED = "superseded"


@dataclass(frozen=True)
class PlanStatus:
    state: PlanState
    plan_id: int | None = None
    completed_batches: int = 0
    batch_count: int = 0
    partitions: int = 0
    replicas_moved: int | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "plan_id": self.plan_id,
            "completed_batches": self.completed_batches,
            "batch_count": self.batch_count,
            "partitions": self.partitions,
            "replicas_moved": self.replicas_moved,
            "detail": self.detail,
        }


def parse_plan_status(value: Any, what: str = "plan status") -> PlanStatus:
    if not isinstance(value, Mapping):
        raise ContractError(f"{what} must be an object, got {type(value).__name__}")
    state = choice(value, "state", what, PlanState)
    plan_id = value.get("plan_id")
    if plan_id is not None:
        plan_id = integer(value, "plan_id", what, minimum=0)
    replicas_moved = value.get("replicas_moved")
    if replicas_moved is not None:
        replicas_moved = integer(value, "replicas_moved", what, minimum=0)
    return PlanStatus(
        state,
        plan_id,
        integer(value, "completed_batches", what, minimum=0),
        integer(value, "batch_count", what, minimum=0),
        integer(value, "partitions", what, minimum=0),
        replicas_moved,
        text(value, "detail", what, allow_empty=True),
    )
