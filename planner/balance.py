"""How evenly one resource is spread over brokers: the measure every soft goal's term and
every resource of the score is made of. Pure arithmetic on plain numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.model import UNLIMITED


def balancedness(
    values: Sequence[float],
    capacities: Sequence[float] | None = None,
    integral: bool = False,
) -> float:
    """0..1: the even share's utilisation over the busiest broker's.

    `capacities` (same length; a broker's size or fair share) turn values into
    utilisations; unlimited or absent capacities count as 1 each. With `integral`, values
    are counts and the ideal peak is the even share rounded up per broker.
    """
    if not values:
        return 1.0
    if capacities is None or any(c == UNLIMITED for c in capacities):
        capacities = [1.0] * len(values)
    if len(capacities) != len(values):
        raise ValueError(f"{len(values)} values but {len(capacities)} capacities")
    if any(c <= 0 for c in capacities):
        raise ValueError("capacities must be > 0")
    total, room = float(sum(values)), float(sum(capacities))
    if total <= 0:
        return 1.0
    mean = total / room
    peak = max(v / c for v, c in zip(values, capacities, strict=True))
    ideal = mean
    if integral:
        ideal = max(math.ceil(mean * c - 1e-9) / c for c in set(capacities))
    return 1.0 if peak <= ideal else ideal / peak
