"""A drill's report: one JSON document (`build_report`, pure) and an HTML page drawn from it
(`render_html`, pure: inline SVG, no script, no outside resource, so it opens offline) with
the timeline (acks per second, p99 latency, errors, the fault windows, KaaS's own actions).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from management_plane.drills.checker import Verdict
from management_plane.drills.health import JournalLine
from management_plane.drills.recorder import AckLatency

REPORT_SCHEMA_VERSION = 1


def p99(values: Sequence[float]) -> float:
    """The nearest-rank 99th percentile."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def timeline(
    latencies: Sequence[AckLatency], started_s: float, ended_s: float
) -> list[dict[str, Any]]:
    """One bucket per second from the start: acks, errors, p99 latency of the acks (ms)."""
    seconds = max(1, math.ceil(ended_s - started_s))
    acks: list[list[float]] = [[] for _ in range(seconds)]
    errors = [0] * seconds
    for outcome in latencies:
        index = min(seconds - 1, max(0, int(outcome.time_s - started_s)))
        if outcome.ok:
            acks[index].append(outcome.latency_s)
        else:
            errors[index] += 1
    return [
        {
            "second": second,
            "acks": len(acks[second]),
            "errors": errors[second],
            "p99_ms": round(p99(acks[second]) * 1000, 1) if acks[second] else None,
        }
        for second in range(seconds)
    ]


def build_report(
    *,
    drill: str,
    cluster: str,
    topic: str,
    duration_s: float,
    rate_per_s: float,
    started_s: float,
    ended_s: float,
    verdict: Verdict,
    latencies: Sequence[AckLatency],
    journal: Sequence[JournalLine],
    recovered: bool,
    figures: Mapping[str, Mapping[str, float | None]] | None = None,
) -> dict[str, Any]:
    """`figures`: a fault's own figures by fault id (a controller failover's times)."""
    figures = figures or {}
    availability = verdict.availability
    stall = availability.longest_stall
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "drill": drill,
        "cluster": cluster,
        "topic": topic,
        "fault_duration_s": duration_s,
        "rate_per_s": rate_per_s,
        "started_s": started_s,
        "ended_s": ended_s,
        "valid": verdict.valid,
        "recovered": recovered,
        "passed": verdict.valid and recovered,
        "summary": {
            "acknowledged": verdict.totals.acknowledged,
            "failed_sends": verdict.totals.failed,
            "anomalies": {kind.value: count for kind, count in verdict.counts().items()},
            "longest_stall_s": round(stall.seconds, 3) if stall is not None else None,
            "faults": [
                {
                    "fault_id": f.fault_id,
                    "fault": f.fault,
                    "target": f.target,
                    "started_at_s": round(f.started_s - started_s, 3),
                    "healed_at_s": round(f.healed_s - started_s, 3)
                    if f.healed_s is not None
                    else None,
                    "first_ack_after_fault_s": _rounded(f.unavailable_s),
                    "recovery_s": _rounded(f.recovery_s),
                    "figures": dict(figures.get(f.fault_id, {})),
                }
                for f in availability.faults
            ],
        },
        "timeline": timeline(latencies, started_s, ended_s),
        "journal": [
            {"at_s": round(line.time_s - started_s, 3), "text": line.text} for line in journal
        ],
        "verdict": verdict.to_json(),
    }


def _figures_text(figures: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in figures.items())


def _rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


# --- HTML ------------------------------------------------------------------------------

_WIDTH, _HEIGHT, _MARGIN = 900, 140, 40


def _series_svg(
    title: str,
    values: Sequence[float | None],
    seconds: int,
    faults: Sequence[dict[str, Any]],
    actions: Sequence[dict[str, Any]],
    color: str,
) -> str:
    """One chart: the series (broken where a second has no value), the fault windows (red,
    inject to heal) and their recovery (yellow, heal to every ISR complete), and KaaS's
    journal actions (grey ticks)."""
    top = max((v for v in values if v is not None), default=0.0) or 1.0
    x_scale = (_WIDTH - 2 * _MARGIN) / max(1, seconds)

    def x(second: float) -> float:
        return _MARGIN + second * x_scale

    def y(value: float) -> float:
        return _HEIGHT - 20 - (value / top) * (_HEIGHT - 40)

    def band(start: float, end: float, fill: str, label: str) -> str:
        return (
            f'<rect x="{x(start):.1f}" y="20" width="{max(1.0, x(end) - x(start)):.1f}" '
            f'height="{_HEIGHT - 40}" fill="{fill}" opacity="0.5">'
            f"<title>{html.escape(label)}</title></rect>"
        )

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'role="img" aria-label="{html.escape(title)}">',
        f'<text x="{_MARGIN}" y="14" font-size="12">{html.escape(title)} (max {top:g})</text>',
    ]
    for fault in faults:
        start = fault["started_at_s"]
        healed = fault["healed_at_s"] if fault["healed_at_s"] is not None else seconds
        parts.append(band(start, healed, "#f4b4b4", f"{fault['fault']}: {fault['target']}"))
        if fault["recovery_s"] is not None:
            parts.append(
                band(healed, healed + fault["recovery_s"], "#f6e3a1", f"{fault['fault']}: recovery")
            )
    for action in actions:
        parts.append(
            f'<line x1="{x(action["at_s"]):.1f}" y1="20" x2="{x(action["at_s"]):.1f}" '
            f'y2="{_HEIGHT - 20}" stroke="#999" stroke-dasharray="2,2">'
            f"<title>{html.escape(action['text'])}</title></line>"
        )
    runs: list[list[str]] = [[]]
    for second, value in enumerate(values):
        if value is None:
            runs.append([])
        else:
            runs[-1].append(f"{x(second + 0.5):.1f},{y(value):.1f}")
    for run in runs:
        if len(run) == 1:
            cx, cy = run[0].split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
        elif run:
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                f'points="{" ".join(run)}"/>'
            )
    parts.append(
        f'<line x1="{_MARGIN}" y1="{_HEIGHT - 20}" x2="{_WIDTH - _MARGIN}" '
        f'y2="{_HEIGHT - 20}" stroke="#888"/>'
    )
    parts.append(
        f'<text x="{_WIDTH - _MARGIN}" y="{_HEIGHT - 4}" font-size="11" text-anchor="end">'
        f"{seconds} s</text></svg>"
    )
    return "".join(parts)


def render_html(report: dict[str, Any]) -> str:
    summary = report["summary"]
    buckets = report["timeline"]
    seconds = len(buckets)
    faults = summary["faults"]
    verdict = "PASSED" if report["passed"] else "FAILED"
    rows = "".join(
        f"<tr><td>{html.escape(f['fault'])}</td><td>{html.escape(f['target'])}</td>"
        f"<td>{f['started_at_s']}</td><td>{f['healed_at_s']}</td>"
        f"<td>{f['first_ack_after_fault_s']}</td><td>{f['recovery_s']}</td>"
        f"<td>{html.escape(_figures_text(f.get('figures', {})))}</td></tr>"
        for f in faults
    )
    anomalies = "".join(
        f"<tr><td>{html.escape(kind)}</td><td>{count}</td></tr>"
        for kind, count in summary["anomalies"].items()
    )
    journal = (
        "".join(
            f"<li>{line['at_s']} s: {html.escape(line['text'])}</li>" for line in report["journal"]
        )
        or "<li>no journal entries (a cluster without agents, or none in the window)</li>"
    )
    charts = "".join(
        _series_svg(title, values, seconds, faults, report["journal"], color)
        for title, values, color in (
            ("acks per second", [b["acks"] for b in buckets], "#2a6fdb"),
            ("p99 ack latency (ms)", [b["p99_ms"] for b in buckets], "#8a4fd8"),
            ("failed sends per second", [b["errors"] for b in buckets], "#d83a3a"),
        )
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>drill {html.escape(report['drill'])}: {verdict}</title>"
        "<style>body{font-family:sans-serif;margin:20px}td,th{padding:2px 8px;"
        "border-bottom:1px solid #ddd;text-align:left}svg{display:block;margin:6px 0}</style>"
        "</head><body>"
        f"<h1>drill {html.escape(report['drill'])} on {html.escape(report['cluster'])}: "
        f"{verdict}</h1>"
        f"<p>checker verdict: {'valid' if report['valid'] else 'INVALID'}; recovered: "
        f"{'yes' if report['recovered'] else 'NO'}; acknowledged {summary['acknowledged']}, "
        f"failed sends {summary['failed_sends']}; longest produce stall "
        f"{summary['longest_stall_s']} s; fault duration {report['fault_duration_s']} s at "
        f"{report['rate_per_s']} msg/s (topic {html.escape(report['topic'])})</p>"
        "<h2>Timeline</h2><p>red: fault windows (inject to heal); yellow: recovery (heal to "
        "every ISR complete); dashed: KaaS's journal actions</p>"
        f"{charts}"
        "<h2>Faults</h2><table><tr><th>fault</th><th>target</th><th>start (s)</th>"
        "<th>healed (s)</th><th>first ack after start (s)</th><th>recovery (s)</th>"
        "<th>its own figures</th></tr>"
        f"{rows}</table>"
        f"<h2>Anomalies</h2><table>{anomalies}</table>"
        f"<h2>KaaS's journal</h2><ul>{journal}</ul>"
        "</body></html>\n"
    )


def write_report(directory: Path, report: dict[str, Any]) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "report.json"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    html_path = directory / "report.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    return json_path, html_path
