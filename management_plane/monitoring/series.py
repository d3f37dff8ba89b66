"""A rule's values from the render API's points. Pure: the points in, one value per subject
out.

A rule without `aggregate` takes the last non-null point of each series its target names.
A cluster rule with `aggregate` names one series per broker and combines them here rather
than in Graphite: sumSeries adds the points that share a timestamp, and the newest
timestamp holds only the brokers whose agents happened to report first (the agents report
at their own phases, each a little later than its interval), so its "latest" sum is a
partial one: 0 active controllers while the controller's point is still on its way. Here
each broker's own latest point counts, and a broker whose series stopped (a recycled VM's
broker, an agent that is gone) is left out once it is a few of its own intervals behind
the others.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence

from management_plane.monitoring.evaluate import CLUSTER_SUBJECT, subject_of
from management_plane.monitoring.rules import Aggregate, Rule, Scope, topic_subject

Point = tuple[float | None, float]  # (value, unix time), as Graphite answers

STALE_PERIODS = 2.5
"""A series this many of its own reporting periods behind the newest point has stopped:
a live one lags by less than one period, or two when the agent's slower-than-interval
cycle skipped a bucket."""


def present(points: Sequence[Point]) -> list[tuple[float, float]]:
    """The non-null points, as (value, time)."""
    return [(value, at) for value, at in points if value is not None]


def reporting_period(points: Sequence[Point]) -> float | None:
    """The median time between a series' non-null points (None: fewer than two)."""
    times = [at for _, at in present(points)]
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    return statistics.median(gaps) if gaps else None


def current_latest(series: Mapping[str, Sequence[Point]]) -> dict[str, float]:
    """Each series' latest value, for the series that still report (see STALE_PERIODS). A
    series with a single point is measured by the others' median period; with no period
    known at all, every series with a point counts."""
    latest = {name: points[-1] for name, p in series.items() if (points := present(p))}
    if not latest:
        return {}
    newest = max(at for _, at in latest.values())
    periods = {name: reporting_period(p) for name, p in series.items() if name in latest}
    known = [p for p in periods.values() if p is not None]
    fallback = statistics.median(known) if known else None
    current: dict[str, float] = {}
    for name, (value, at) in latest.items():
        period = periods[name] if periods[name] is not None else fallback
        if period is None or newest - at <= STALE_PERIODS * period:
            current[name] = value
    return current


def combine(values: Sequence[float], how: Aggregate) -> float:
    match how:
        case Aggregate.SUM:
            return float(sum(values))
        case Aggregate.MAX:
            return max(values)
        case Aggregate.MIN:
            return min(values)


def rule_values(rule: Rule, series: Mapping[str, Sequence[Point]]) -> dict[str, float | None]:
    """`rule`'s value per subject from its target's series (None: a series without a point
    in the window). An aggregated rule with no current series has no subject: no data."""
    if rule.scope is Scope.TOPIC:
        return _topic_values(rule, series)
    if rule.aggregate is None:
        values: dict[str, float | None] = {}
        for name, points in series.items():
            last = present(points)
            values[subject_of(rule, name)] = last[-1][0] if last else None
        return values
    current = current_latest(series)
    if not current:
        return {}
    return {CLUSTER_SUBJECT: combine(list(current.values()), rule.aggregate)}


def _topic_values(rule: Rule, series: Mapping[str, Sequence[Point]]) -> dict[str, float | None]:
    """A topic rule: its series are `<topic>.<broker id>` (aliasByNode(..., 5, 3)); each
    topic a band names gets its brokers' current points combined (a broker that no longer
    leads the topic is left out as its series stops); other topics are not evaluated."""
    by_topic: dict[str, dict[str, Sequence[Point]]] = {}
    for name, points in series.items():
        topic, _, broker = name.partition(".")
        by_topic.setdefault(topic, {})[broker] = points
    values: dict[str, float | None] = {}
    for topic, brokers in sorted(by_topic.items()):
        if rule.band_for(topic) is None:
            continue
        current = current_latest(brokers)
        how = rule.aggregate or Aggregate.SUM
        values[topic_subject(topic)] = combine(list(current.values()), how) if current else None
    return values
