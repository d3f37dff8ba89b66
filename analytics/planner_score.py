"""The one place analytics meets the planner: the balance score of measured load.

The score's definition lives in planner/score.py and is imported, never rewritten here.
This module only turns one window's measured per-broker load into the input the
planner's definition takes, and its answer into a `MeasuredScore`.

INTEGRATION POINT. planner/score.py had not landed when this was written, so
`score_measured_load` reports the score as unavailable (with the reason, which the
balance job prints and writes to summary.json; the job does everything else). To wire
it: call the planner's score function in `_score_with_planner` below with the window's
brokers (ids, racks) and their measured resources (bytes in/out, leader bytes in, disk
bytes, partitions, leaders: analytics.balance.RESOURCES), and return its 0..100 value
and its per-goal terms. Nothing else in analytics changes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pandas as pd

PLANNER_SCORE_MODULE = "planner.score"


@dataclass(frozen=True)
class MeasuredScore:
    score: float | None
    """0..100 by the planner's definition; None when it could not be computed."""
    parts: dict[str, Any] = field(default_factory=dict)
    """The definition's per-goal or per-resource terms, as the planner reports them."""
    unavailable_reason: str | None = None


def _planner_score_module() -> ModuleType | str:
    """The planner's score module, or why it cannot be used."""
    try:
        return importlib.import_module(PLANNER_SCORE_MODULE)
    except ImportError as error:
        return f"{PLANNER_SCORE_MODULE} is not available ({error})"


def _score_with_planner(module: ModuleType, broker_loads: pd.DataFrame) -> MeasuredScore:
    """Call the planner's definition on one window (see the module docstring)."""
    return MeasuredScore(
        None, {}, f"{PLANNER_SCORE_MODULE} exists but analytics does not call it yet"
    )


def score_measured_load(broker_loads: pd.DataFrame) -> MeasuredScore:
    """Score one window: `broker_loads` has one row per broker (broker_id, rack and the
    resources of analytics.balance.RESOURCES)."""
    module = _planner_score_module()
    if isinstance(module, str):
        return MeasuredScore(None, {}, module)
    return _score_with_planner(module, broker_loads)
