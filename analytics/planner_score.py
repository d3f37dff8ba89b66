"""The one place analytics meets the planner: the balance score of measured load.

The score's definition lives in planner/score.py and is imported, never rewritten
here. This module only turns one window's measured per-broker load into the input the
planner's definition takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class MeasuredScore:
    score: float | None
    """0..100 by the planner's definition; None when it could not be computed."""
    parts: dict[str, Any] = field(default_factory=dict)
    """The definition's per-goal or per-resource terms, as the planner reports them."""
    unavailable_reason: str | None = None


def score_measured_load(broker_loads: pd.DataFrame) -> MeasuredScore:
    """Score one window: `broker_loads` has one row per broker (broker_id, rack and the
    resources of analytics.balance.RESOURCES)."""
    try:
        from planner import score as planner_score  # type: ignore[attr-defined]  # noqa: F401
    except ImportError as error:
        return MeasuredScore(None, {}, f"planner.score is not available: {error}")
    return MeasuredScore(None, {}, "planner.score has no measured-load entry point wired yet")
