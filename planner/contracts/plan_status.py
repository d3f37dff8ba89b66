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
class PlanMovement:
    """How far the data movement of a running plan has come: what the executor measured at
    its last look (bytes count each new replica's copy of its partition)."""

    bytes_moved: int
    bytes_total: int
    rate_bytes_per_s: float
    """Bytes per second over the last minute or so (0 before the second look)."""
    eta_s: float | None
    """Seconds left at that rate (None: no rate yet)."""
    moving: int = 0
    """Partition moves running now."""
    concurrency: int = 0
    """Moves the executor allows at once now (backs off while the cluster is strained)."""

    @property
    def bytes_to_move(self) -> int:
        return max(0, self.bytes_total - self.bytes_moved)

    def to_json(self) -> dict[str, Any]:
        return {
            "bytes_moved": self.bytes_moved,
            "bytes_total": self.bytes_total,
            "bytes_to_move": self.bytes_to_move,
            "rate_bytes_per_s": round(self.rate_bytes_per_s, 1),
            "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
            "moving": self.moving,
            "concurrency": self.concurrency,
        }


def _seconds(value: Mapping[str, Any], key: str, what: str, optional: bool) -> float | None:
    item = value.get(key)
    if item is None and optional:
        return None
    if not isinstance(item, (int, float)) or isinstance(item, bool) or item < 0:
        raise ContractError(f"{what}.{key} must be a number >= 0, got {item!r}")
    return float(item)


def parse_movement(value: Any, what: str = "plan movement") -> PlanMovement:
    if not isinstance(value, Mapping):
        raise ContractError(f"{what} must be an object, got {type(value).__name__}")
    moved = integer(value, "bytes_moved", what, minimum=0)
    total = integer(value, "bytes_total", what, minimum=0)
    if moved > total:
        raise ContractError(f"{what}.bytes_moved {moved} is more than bytes_total {total}")
    rate = _seconds(value, "rate_bytes_per_s", what, optional=False)
    assert rate is not None
    return PlanMovement(
        moved,
        total,
        rate,
        _seconds(value, "eta_s", what, optional=True),
        integer(value, "moving", what, minimum=0) if "moving" in value else 0,
        integer(value, "concurrency", what, minimum=0) if "concurrency" in value else 0,
    )


@dataclass(frozen=True)
class PlanStatus:
    state: PlanState
    plan_id: int | None = None
    completed_batches: int = 0
    batch_count: int = 0
    partitions: int = 0
    replicas_moved: int | None = None
    detail: str = ""
    movement: PlanMovement | None = None
    """The running plan's data movement (None: not measured yet, or no plan running)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "movement": None if self.movement is None else self.movement.to_json(),
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
        None if value.get("movement") is None else parse_movement(value["movement"], what),
    )
