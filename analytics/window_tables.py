"""The balance job's small tables, derived on the driver from the per-window tables.

Spark scans each large metric table once into a small per-window table (one row per
window and broker, replica or broker and topic: `analytics.balance`). Everything after
that works on at most a few hundred thousand rows, where a Spark job's fixed cost
(planning, code generation, a shuffle per grouping, tasks, a commit) is most of the
time: these pandas functions compute the same tables as the Spark transforms of the same
names did, in a fraction of it. Pure: frames in, frames out, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

import numpy as np
import pandas as pd
import pyarrow as pa

from analytics.balance import (
    BYTES_IN,
    BYTES_OUT,
    DEFAULT_HOT_THRESHOLD,
    RESOURCES,
    WINDOW_COLUMNS,
    ZONE_MEAN_RESOURCES,
)

_WINDOW_KEYS = list(WINDOW_COLUMNS)
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def zone_window_load(broker_load: pd.DataFrame) -> pd.DataFrame:
    """Per window and zone (rack): summed broker loads (CPU averaged), brokers counted.

    Brokers without a rack form the zone "unknown". A zone whose brokers all lack a
    value has no value (as Spark's sum and avg of nulls), not 0.
    """
    frame = broker_load.assign(zone=broker_load["rack"].fillna("unknown"))
    grouped = frame.groupby([*_WINDOW_KEYS, "zone"], sort=False, dropna=False)
    aggregates = {"brokers": grouped.size()}
    for resource in RESOURCES:
        column = grouped[resource]
        if resource in ZONE_MEAN_RESOURCES:
            aggregates[resource] = column.mean()
        else:
            aggregates[resource] = column.sum(min_count=1)
    result = pd.DataFrame(aggregates).reset_index()
    return result[[*_WINDOW_KEYS, "zone", "brokers", *RESOURCES]]


def resource_balance(
    load: pd.DataFrame, entity: str, hot_threshold: float = DEFAULT_HOT_THRESHOLD
) -> pd.DataFrame:
    """Per window and resource: mean, coefficient of variation, max/mean, hot entities.

    The same definitions as `analytics.balance.resource_balance` documents: population
    standard deviation over the mean; hot above `hot_threshold` times the mean; a mean of
    0 is perfectly even; missing values are left out, a resource with none gets no row.
    Hot entities are sorted as ids (2 before 10) and given as text.
    """
    if hot_threshold <= 1.0:
        raise ValueError(
            f"hot_threshold must be above 1.0 (a multiple of the mean); got {hot_threshold}"
        )
    # Grouped by one integer per window (the keys factorised once, on the wide table):
    # melting to one row per window, entity and resource first and grouping by three
    # keys and the resource name cost most of the job's driver time at 10M records.
    window_code = load.groupby(_WINDOW_KEYS, sort=False, dropna=False).ngroup().to_numpy()
    values = load[list(RESOURCES)].astype("float64")
    values.index = pd.RangeIndex(len(values))
    by_window = values.groupby(window_code, sort=False)
    means = by_window.transform("mean")
    first_rows = pd.Series(np.arange(len(load))).groupby(window_code, sort=False).first()
    window_keys = load[_WINDOW_KEYS].iloc[first_rows.to_numpy()].reset_index(drop=True)
    entity_ids = load[entity].to_numpy()
    parts = []
    for resource in RESOURCES:
        column = by_window[resource]
        stats = pd.DataFrame(
            {
                "entities": column.count(),
                "total": column.sum(),
                "mean": column.mean(),
                "stddev": column.std(ddof=0),
                "min": column.min(),
                "max": column.max(),
            }
        )
        stats = stats[stats["entities"] > 0]
        hot_mask = (values[resource] > hot_threshold * means[resource]).to_numpy()
        hot_lists = (
            pd.DataFrame({"window": window_code[hot_mask], "entity": entity_ids[hot_mask]})
            .sort_values(["window", "entity"], kind="stable")
            .groupby("window", sort=False)["entity"]
            .agg(list)
        )
        positive = stats["mean"] > 0
        stats["cv"] = np.where(positive, stats["stddev"] / stats["mean"].where(positive, 1.0), 0.0)
        stats["max_over_mean"] = np.where(
            positive, stats["max"] / stats["mean"].where(positive, 1.0), 1.0
        )
        listed = hot_lists.reindex(stats.index)
        stats["hot"] = [
            [str(each) for each in ids] if is_positive and isinstance(ids, list) else []
            for ids, is_positive in zip(listed, positive, strict=True)
        ]
        stats["hot_count"] = stats["hot"].map(len).astype("int32")
        stats["resource"] = resource
        parts.append(
            pd.concat(
                [window_keys.iloc[stats.index.to_numpy()].reset_index(drop=True),
                 stats.reset_index(drop=True)],
                axis=1,
            )
        )  # fmt: skip
    if not parts:
        return pd.DataFrame(columns=[*_WINDOW_KEYS, "resource", *_BALANCE_STATS])
    result = pd.concat(parts, ignore_index=True)
    result["entities"] = result["entities"].astype("int64")
    return result[[*_WINDOW_KEYS, "resource", *_BALANCE_STATS]]


_BALANCE_STATS = (
    "entities",
    "total",
    "mean",
    "stddev",
    "min",
    "max",
    "cv",
    "max_over_mean",
    "hot",
    "hot_count",
)


def partition_load(replicas: pd.DataFrame, topic_rates: pd.DataFrame) -> pd.DataFrame:
    """Per window and partition: size, and the leaders' topic rates split by log growth.

    `analytics.balance.partition_window_load` documents the method: a broker's topic
    rate goes to the partitions of that topic it leads, in proportion to how much each
    log grew in the window (equal shares when none grew); sizes come from every replica;
    two leaders in one window (a leadership change) both count.
    """
    # Windows and topics are turned into integer codes shared by both tables first:
    # joining and grouping on three string and timestamp keys cost most of this at 10M.
    window_codes, windows = _shared_codes(replicas, topic_rates, _WINDOW_KEYS)
    topic_codes, topics = _shared_codes(replicas, topic_rates, ["topic"])
    replica_rows = pd.DataFrame(
        {
            "_w": window_codes[0],
            "_t": topic_codes[0],
            "broker_id": replicas["broker_id"].to_numpy(),
            "partition": replicas["partition"].to_numpy(),
            "leader": replicas["leader"].fillna(False).astype(bool).to_numpy(),
            "size_bytes": replicas["size_bytes"].to_numpy(),
            "growth_bytes": replicas["growth_bytes"].to_numpy(),
        }
    )
    rates = pd.DataFrame(
        {
            "_w": window_codes[1],
            "_t": topic_codes[1],
            "broker_id": topic_rates["broker_id"].to_numpy(),
            "topic_bytes_in_per_s": topic_rates["topic_bytes_in_per_s"].to_numpy(),
            "topic_bytes_out_per_s": topic_rates["topic_bytes_out_per_s"].to_numpy(),
        }
    )
    rate_keys = ["_w", "broker_id", "_t"]
    partition_keys = ["_w", "_t", "partition"]
    leaders = replica_rows[replica_rows["leader"]].merge(rates, on=rate_keys, how="left")
    growth = leaders["growth_bytes"].fillna(0).clip(lower=0).astype("float64")
    by_led_topic = growth.groupby([leaders[key] for key in rate_keys], sort=False)
    total_growth = by_led_topic.transform("sum")
    led_count = by_led_topic.transform("size")
    share = np.where(
        total_growth > 0, growth / total_growth.where(total_growth > 0, 1.0), 1.0 / led_count
    )
    leaders = leaders.assign(
        **{
            BYTES_IN: leaders["topic_bytes_in_per_s"].fillna(0.0) * share,
            BYTES_OUT: leaders["topic_bytes_out_per_s"].fillna(0.0) * share,
        }
    )
    sizes = replica_rows.groupby(partition_keys, sort=False)["size_bytes"].max()
    grouped = leaders.groupby(partition_keys, sort=False)
    top = leaders.loc[grouped[BYTES_IN].idxmax(), [*partition_keys, "broker_id"]]
    led = (
        grouped[[BYTES_IN, BYTES_OUT]]
        .sum()
        .join(top.set_index(partition_keys)["broker_id"].rename("leader_broker_id"))
    )
    coded = sizes.to_frame().join(led, how="left").reset_index()
    result = pd.concat(
        [
            windows.iloc[coded["_w"].to_numpy()].reset_index(drop=True),
            pd.DataFrame(
                {
                    "topic": topics["topic"].to_numpy()[coded["_t"].to_numpy()],
                    "partition": coded["partition"].to_numpy(),
                }
            ),
            coded[["leader_broker_id", "size_bytes", BYTES_IN, BYTES_OUT]],
        ],
        axis=1,
    )
    result[BYTES_IN] = result[BYTES_IN].fillna(0.0)
    result[BYTES_OUT] = result[BYTES_OUT].fillna(0.0)
    result["leader_broker_id"] = result["leader_broker_id"].astype("Int32")
    return result[
        [*_WINDOW_KEYS, "topic", "partition", "leader_broker_id", "size_bytes", BYTES_IN, BYTES_OUT]
    ]


def _shared_codes(
    first: pd.DataFrame, second: pd.DataFrame, keys: list[str]
) -> tuple[tuple[np.ndarray, np.ndarray], pd.DataFrame]:
    """One integer per distinct value of `keys` across both frames, each frame's codes,
    and the distinct values (row i holds code i's keys)."""
    both = pd.concat([first[keys], second[keys]], ignore_index=True)
    codes = both.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    distinct_rows = pd.Series(np.arange(len(both))).groupby(codes, sort=True).first().to_numpy()
    return (codes[: len(first)], codes[len(first) :]), both.iloc[distinct_rows].reset_index(
        drop=True
    )


def partition_measured_load(partition_load: pd.DataFrame) -> pd.DataFrame:
    """One row per partition over the whole run: mean rates, latest size."""
    keys = ["cluster", "topic", "partition"]
    ordered = partition_load.sort_values("window_start", kind="stable")
    grouped = ordered.groupby(keys, sort=False)
    # The latest window's size, even when unknown there (as Spark's max_by).
    latest_size = ordered.groupby(keys, sort=False).tail(1).set_index(keys)["size_bytes"]
    result = pd.DataFrame(
        {
            "size_bytes": latest_size,
            BYTES_IN: grouped[BYTES_IN].mean(),
            BYTES_OUT: grouped[BYTES_OUT].mean(),
            "windows": grouped.size(),
        }
    )
    return result.reset_index()


def split_before_after(broker_load: pd.DataFrame, plan_applied_at: datetime | None) -> pd.DataFrame:
    """Per broker: mean load before and after a plan (`before_<resource>`, `after_<resource>`).

    With `plan_applied_at` (timezone-aware), "before" is every window that ended by then
    and "after" every window that started after it. Without it, "before" is the first
    window and "after" the latest.
    """
    starts = pd.to_datetime(broker_load["window_start"], utc=True)
    ends = pd.to_datetime(broker_load["window_end"], utc=True)
    if plan_applied_at is None:
        first = starts.groupby(broker_load["cluster"]).transform("min")
        last = starts.groupby(broker_load["cluster"]).transform("max")
        phase = np.select([starts == last, starts == first], ["after", "before"], default="")
    else:
        if plan_applied_at.tzinfo is None:
            raise ValueError("plan_applied_at needs a timezone (e.g. 2026-01-01T12:00:00+00:00)")
        applied = pd.Timestamp(plan_applied_at)
        phase = np.select([ends <= applied, starts >= applied], ["before", "after"], default="")
    phased = broker_load[phase != ""].assign(phase=phase[phase != ""])
    means = phased.groupby(["cluster", "broker_id", "phase"])[list(RESOURCES)].mean()
    wide = means.unstack("phase")
    columns = {}
    for phase_name in ("before", "after"):
        for resource in RESOURCES:
            key = (resource, phase_name)
            columns[f"{phase_name}_{resource}"] = (
                wide[key] if key in wide.columns else pd.Series(np.nan, index=wide.index)
            )
    return pd.DataFrame(columns, index=wide.index).reset_index()


# Arrow schemas of the written tables: the types Spark gave these tables, so Spark and
# pyarrow readers see the same columns whichever engine computed them.
_WINDOW_FIELDS = [
    ("cluster", pa.string()),
    ("window_start", _TIMESTAMP),
    ("window_end", _TIMESTAMP),
]
ZONE_LOAD_SCHEMA = pa.schema(
    [*_WINDOW_FIELDS, ("zone", pa.string()), ("brokers", pa.int64())]
    + [(resource, pa.float64()) for resource in RESOURCES]
)
BALANCE_SCHEMA = pa.schema(
    [*_WINDOW_FIELDS, ("resource", pa.string()), ("entities", pa.int64())]
    + [(name, pa.float64()) for name in ("total", "mean", "stddev", "min", "max")]
    + [("cv", pa.float64()), ("max_over_mean", pa.float64())]
    + [("hot", pa.list_(pa.string())), ("hot_count", pa.int32())]
)
PARTITION_LOAD_SCHEMA = pa.schema(
    [
        *_WINDOW_FIELDS,
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("leader_broker_id", pa.int32()),
        ("size_bytes", pa.int64()),
        (BYTES_IN, pa.float64()),
        (BYTES_OUT, pa.float64()),
    ]
)


def to_arrow(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """`frame` as an Arrow table of `schema` (timestamps in microseconds, UTC)."""
    return cast(
        pa.Table, pa.Table.from_pandas(frame, schema=schema, preserve_index=False, safe=False)
    )


@dataclass(frozen=True)
class Comparison:
    """What the per-broker load chart compares, in words: its two series and its title."""

    before: str
    after: str
    title: str


def comparison_labels(broker_load: pd.DataFrame, plan_applied_at: datetime | None) -> Comparison:
    """The labels of `split_before_after`'s two sides: without a plan time they are the
    first and the latest window (named with their times), not "before and after the plan"."""
    if plan_applied_at is not None:
        at = pd.Timestamp(plan_applied_at).tz_convert("UTC").strftime("%Y-%m-%d %H:%M UTC")
        return Comparison(
            before=f"windows ending by {at} (before the plan)",
            after=f"windows starting from {at} (after the plan)",
            title=f"per-broker load before and after the plan applied at {at}",
        )
    if broker_load.empty:
        return Comparison("first window", "latest window", "per-broker load: no windows")
    starts = pd.to_datetime(broker_load["window_start"], utc=True)
    ends = pd.to_datetime(broker_load["window_end"], utc=True)
    first, latest = starts.min(), starts.max()

    def span(start: pd.Timestamp) -> str:
        end = ends[starts == start].max()
        return f"{start:%Y-%m-%d %H:%M}-{end:%H:%M} UTC"

    return Comparison(
        before=f"first window {span(first)}",
        after=f"latest window {span(latest)}",
        title="per-broker load: first window against latest window (no plan time given)",
    )
