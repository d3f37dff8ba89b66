"""The one place analytics meets the planner: the balance score of measured load.

The score's definition lives in planner/score.py (`score_measured`: the same terms and
weights as a plan's score, over the goals load can judge) and is imported, never rewritten
here. This module only turns one window's measured per-broker load into its input, and
its answer into a `MeasuredScore`.
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
    """Call the planner's definition on one window. A measurement missing on any broker
    leaves its goal out (named in `parts`), rather than scoring a partial picture."""
    needed = sorted({name for names in module.MEASURED_GOALS.values() for name in names})
    loads: dict[str, list[float]] = {}
    missing = []
    for name in needed:
        if name not in broker_loads or broker_loads[name].isna().any():
            missing.append(name)
            continue
        loads[name] = [float(v) for v in broker_loads[name]]
    if not loads or broker_loads.empty:
        return MeasuredScore(None, {}, f"no complete measurement in the window ({missing})")
    result = module.score_measured(loads)
    if not result.goals:
        return MeasuredScore(None, {}, f"no goal has all its measurements ({missing})")
    parts: dict[str, Any] = {"goals": {k: round(v, 2) for k, v in result.goals.items()}}
    if missing:
        parts["missing_measurements"] = missing
    return MeasuredScore(round(float(result.total), 2), parts, None)


def score_measured_load(broker_loads: pd.DataFrame) -> MeasuredScore:
    """Score one window: `broker_loads` has one row per broker (broker_id, rack and the
    resources of analytics.balance.RESOURCES)."""
    module = _planner_score_module()
    if isinstance(module, str):
        return MeasuredScore(None, {}, module)
    return _score_with_planner(module, broker_loads)
