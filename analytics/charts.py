"""PNG charts of the balance job, drawn with matplotlib from small pandas frames."""

from __future__ import annotations

from pathlib import Path

import matplotlib

# No display on VMs and CI: draw to files only.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from analytics.balance import BYTES_IN, BYTES_OUT, CPU, DISK, LEADERS, RESOURCES

CHART_RESOURCES = (BYTES_IN, BYTES_OUT, DISK, LEADERS)
# Beyond this many brokers, bars become unreadable; the chart shows the sorted load
# profile instead (a flat line is a balanced cluster).
MAX_BARS = 60
_TITLES = {
    BYTES_IN: "bytes in /s (with replication)",
    BYTES_OUT: "bytes out /s (with replication)",
    DISK: "disk bytes",
    LEADERS: "leaders",
    CPU: "CPU %",
}


def broker_load_chart(before_after: pd.DataFrame, cluster: str, path: Path) -> Path:
    """Per-broker load before and after the plan, one panel per resource.

    `before_after` has broker_id and `before_<resource>` / `after_<resource>` columns.
    """
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    frame = before_after.sort_values("broker_id")
    for axis, resource in zip(axes.flat, CHART_RESOURCES, strict=True):
        before = frame[f"before_{resource}"].fillna(0.0)
        after = frame[f"after_{resource}"].fillna(0.0)
        if len(frame) <= MAX_BARS:
            positions = range(len(frame))
            axis.bar([p - 0.2 for p in positions], before, width=0.4, label="before")
            axis.bar([p + 0.2 for p in positions], after, width=0.4, label="after")
            axis.set_xticks(list(positions), [str(b) for b in frame["broker_id"]], fontsize=7)
            axis.set_xlabel("broker")
        else:
            axis.plot(sorted(before, reverse=True), label="before")
            axis.plot(sorted(after, reverse=True), label="after")
            axis.set_xlabel("brokers, most loaded first")
        axis.set_title(_TITLES[resource])
        axis.legend()
    figure.suptitle(f"{cluster}: per-broker load before and after the plan")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def balance_over_time_chart(
    broker_balance: pd.DataFrame, scores: pd.DataFrame, cluster: str, path: Path
) -> Path:
    """Coefficient of variation per resource over the windows, and the score if known."""
    figure, cv_axis = plt.subplots(figsize=(12, 5))
    for resource in RESOURCES:
        series = broker_balance[broker_balance["resource"] == resource].sort_values("window_start")
        if not series.empty:
            cv_axis.plot(series["window_start"], series["cv"], label=f"CV {resource}")
    cv_axis.set_ylabel("coefficient of variation across brokers")
    cv_axis.set_xlabel("window start (UTC)")
    cv_axis.legend(loc="upper left", fontsize=7)
    known = scores.dropna(subset=["score"]) if "score" in scores else scores.iloc[0:0]
    if not known.empty:
        score_axis = cv_axis.twinx()
        score_axis.plot(
            known["window_start"], known["score"], color="black", linewidth=2, label="score"
        )
        score_axis.set_ylim(0, 100)
        score_axis.set_ylabel("balance score (0..100)")
        score_axis.legend(loc="upper right")
    figure.suptitle(f"{cluster}: balance over time")
    figure.autofmt_xdate()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
