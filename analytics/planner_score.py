"""The one place analytics meets the planner: the balance score of measured load.

The score's definition lives in planner/score.py (`score_measured`: the same terms and
weights as a plan's score, over the goals load can judge) and is imported, never rewritten
here. This module only turns one window's measured per-broker load into its input, and
its answer into a `MeasuredScore`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from analytics.balance import RESOURCES

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


def _score_with_planner(
    module: ModuleType, columns: Mapping[str, np.ndarray[Any, Any]], brokers: int
) -> MeasuredScore:
    """Call the planner's definition on one window. A measurement missing on any broker
    leaves its goal out (named in `parts`), rather than scoring a partial picture."""
    needed = sorted({name for names in module.MEASURED_GOALS.values() for name in names})
    loads: dict[str, list[float]] = {}
    missing = []
    for name in needed:
        values = columns.get(name)
        if values is None or bool(np.isnan(values).any()):
            missing.append(name)
            continue
        # tolist() makes the Python floats in C; a loop over a Series costs ms per window.
        loads[name] = values.tolist()
    if not loads or brokers == 0:
        return MeasuredScore(None, {}, f"no complete measurement in the window ({missing})")
    result = module.score_measured(loads)
    if not result.goals:
        return MeasuredScore(None, {}, f"no goal has all its measurements ({missing})")
    parts: dict[str, Any] = {"goals": {k: round(v, 2) for k, v in result.goals.items()}}
    if missing:
        parts["missing_measurements"] = missing
    return MeasuredScore(round(float(result.total), 2), parts, None)


def _measurement_arrays(broker_loads: pd.DataFrame) -> dict[str, np.ndarray[Any, Any]]:
    """The resource columns present, as float arrays (a missing value is NaN)."""
    return {
        name: broker_loads[name].to_numpy(dtype=float, na_value=np.nan)
        for name in RESOURCES
        if name in broker_loads
    }


def score_measured_load(broker_loads: pd.DataFrame) -> MeasuredScore:
    """Score one window: `broker_loads` has one row per broker (broker_id, rack and the
    resources of analytics.balance.RESOURCES)."""
    module = _planner_score_module()
    if isinstance(module, str):
        return MeasuredScore(None, {}, module)
    return _score_with_planner(module, _measurement_arrays(broker_loads), len(broker_loads))


def score_windows(
    broker_load: pd.DataFrame, keys: Sequence[str]
) -> list[tuple[tuple[Any, ...], MeasuredScore]]:
    """Score every window of `broker_load` (one row per window and broker), in `keys`
    order: the same as `score_measured_load` on each group, with the columns turned into
    arrays once rather than once per window."""
    module = _planner_score_module()
    ordered = broker_load.sort_values(list(keys), kind="stable").reset_index(drop=True)
    if ordered.empty:
        return []
    key_frame = ordered[list(keys)]
    # Compared by pandas, column by column: timezone-aware timestamps as numpy arrays
    # would be Python objects.
    changed = key_frame.ne(key_frame.shift()).any(axis=1).to_numpy()
    changed[0] = True
    starts = np.flatnonzero(changed).tolist()
    bounds = [*starts, len(ordered)]
    window_keys = list(key_frame.iloc[starts].itertuples(index=False, name=None))
    columns = _measurement_arrays(ordered)
    scored = []
    for key, start, end in zip(window_keys, bounds[:-1], bounds[1:], strict=True):
        if isinstance(module, str):
            scored.append((key, MeasuredScore(None, {}, module)))
            continue
        window = {name: values[start:end] for name, values in columns.items()}
        scored.append((key, _score_with_planner(module, window, end - start)))
    return scored
