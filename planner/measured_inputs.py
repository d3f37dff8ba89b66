"""The planner's traffic inputs from the measured load (`/kaas/<cluster>/load`), when fresh.

Pure: a LAYOUT.json document and the parsed load in, the document with each partition's
`bytes_in_per_s` / `bytes_out_per_s` set from the measurement and a sentence out. A load
older than `max_age_s` (or none) leaves the rates as they were, so the leader-bytes goals
fall back to what the layout holds (sizes, when read from a live cluster), and the
sentence says so: the plan's reason names which input its traffic goals used.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from planner.contracts.fields import ContractError
from planner.contracts.measured_load import MeasuredLoad, parse_measured_load

DEFAULT_MAX_AGE_S = 3600.0


@dataclass(frozen=True)
class TrafficInputs:
    layout: dict[str, Any]
    measured: bool
    sentence: str


def with_measured_load(
    layout: dict[str, Any],
    load: MeasuredLoad | None,
    now: datetime,
    max_age_s: float = DEFAULT_MAX_AGE_S,
) -> TrafficInputs:
    if load is None:
        return TrafficInputs(layout, False, "traffic goals use sizes: no measured load")
    age = load.age_s(now)
    if age > max_age_s:
        return TrafficInputs(
            layout,
            False,
            f"traffic goals use sizes: measured load is {age:.0f} s old (over {max_age_s:.0f} s)",
        )
    measured = load.by_partition()
    updated = copy.deepcopy(layout)
    found = 0
    for entry in updated.get("partitions", []):
        item = measured.get((entry.get("topic"), entry.get("partition")))
        if item is None:
            # Not measured (created since): no traffic known, so it weighs nothing.
            entry["bytes_in_per_s"] = 0.0
            entry["bytes_out_per_s"] = 0.0
            continue
        entry["bytes_in_per_s"] = item.bytes_in_per_s
        entry["bytes_out_per_s"] = item.bytes_out_per_s
        found += 1
    total = len(updated.get("partitions", []))
    return TrafficInputs(
        updated,
        True,
        f"traffic goals use measured load of {found}/{total} partitions "
        f"({load.window_start} .. {load.window_end}, {age:.0f} s old)",
    )


def traffic_inputs(
    layout: dict[str, Any],
    raw_load: bytes | None,
    now: datetime,
    cluster: str,
    max_age_s: float = DEFAULT_MAX_AGE_S,
) -> TrafficInputs:
    """`with_measured_load` from the znode's bytes as read (None: no znode): a value the
    contract's parser refuses, or one measured on another cluster, is not used, and the
    sentence names why."""
    if raw_load is None:
        return with_measured_load(layout, None, now, max_age_s)
    try:
        load = parse_measured_load(raw_load)
    except ContractError as exc:
        return TrafficInputs(
            layout, False, f"traffic goals use sizes: measured load refused: {exc}"
        )
    if load.cluster != cluster:
        return TrafficInputs(
            layout,
            False,
            f"traffic goals use sizes: measured load is of cluster {load.cluster!r}, not {cluster!r}",
        )
    return with_measured_load(layout, load, now, max_age_s)
