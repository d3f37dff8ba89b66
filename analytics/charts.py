"""PNG charts of the balance job, drawn with matplotlib from small pandas frames."""

from __future__ import annotations

from pathlib import Path

import matplotlib

# No display on VMs and CI: draw to files only.
matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd

from analytics.balance import BYTES_IN, BYTES_OUT, CPU, DISK, LEADERS, RESOURCES
from analytics.window_tables import Comparison

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


def broker_load_chart(
    before_after: pd.DataFrame, comparison: Comparison, cluster: str, path: Path
) -> Path:
    """Per-broker load of two spans, one panel per resource, labelled with what they are
    (`comparison`: the windows before and after a plan, or the first and latest window).

    `before_after` has broker_id and `before_<resource>` / `after_<resource>` columns.
    """
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    frame = before_after.sort_values("broker_id")
    for axis, resource in zip(axes.flat, CHART_RESOURCES, strict=True):
        before = frame[f"before_{resource}"].fillna(0.0)
        after = frame[f"after_{resource}"].fillna(0.0)
        if len(frame) <= MAX_BARS:
            positions = range(len(frame))
            axis.bar([p - 0.2 for p in positions], before, width=0.4, label=comparison.before)
            axis.bar([p + 0.2 for p in positions], after, width=0.4, label=comparison.after)
            axis.set_xticks(list(positions), [str(b) for b in frame["broker_id"]], fontsize=7)
            axis.set_xlabel("broker")
        else:
            axis.plot(sorted(before, reverse=True), label=comparison.before)
            axis.plot(sorted(after, reverse=True), label=comparison.after)
            axis.set_xlabel("brokers, most loaded first")
        axis.set_title(_TITLES[resource])
        axis.legend(fontsize=7)
    figure.suptitle(f"{cluster}: {comparison.title}")
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


def score_over_time_chart(scores: pd.DataFrame, window: str, cluster: str, path: Path) -> Path:
    """The planner's balance score of the measured load, one point per window."""
    figure, axis = plt.subplots(figsize=(12, 4))
    known = scores.dropna(subset=["score"]).sort_values("window_start")
    axis.plot(
        known["window_start"],
        known["score"],
        marker="o",
        markersize=3,
        label=f"balance score of the measured load, per {window} window",
    )
    axis.set_ylim(0, 100)
    axis.set_ylabel("balance score (0..100, planner's definition)")
    axis.set_xlabel("window start (UTC)")
    axis.legend(loc="lower left")
    if known.empty:
        axis.text(0.5, 0.5, "no window could be scored", ha="center", transform=axis.transAxes)
    figure.suptitle(f"{cluster}: balance score over time")
    figure.autofmt_xdate()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
