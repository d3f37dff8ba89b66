"""A rule's values from the render API's points (pure), against the series shapes a real
pipeline produces: the newest timestamp holding only the brokers that reported first, gaps
where an agent's cycle ran longer than its interval, and the stopped series of a recycled
VM's broker. The shipped active-controllers rule stays quiet on all of them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from management_plane.monitoring.evaluate import Alert, AlertKey, NotificationKind, evaluate
from management_plane.monitoring.rules import Aggregate, RulesError, load_rules, parse_rules
from management_plane.monitoring.series import (
    Point,
    current_latest,
    reporting_period,
    rule_values,
)

pytestmark = pytest.mark.unit

DEFAULTS = load_rules()
CONTROLLERS = next(r for r in DEFAULTS.rules if r.name == "active_controllers")
DISK = next(r for r in DEFAULTS.rules if r.name == "disk_free")


def graphite_sum(series: Mapping[str, Sequence[Point]]) -> float | None:
    """What sumSeries(...) then "the last non-null point" gave: the points that share the
    newest timestamp any series has, added (Graphite's safeSum skips nulls)."""
    by_time: dict[float, list[float]] = {}
    for points in series.values():
        for value, at in points:
            if value is not None:
                by_time.setdefault(at, []).append(value)
    return sum(by_time[max(by_time)]) if by_time else None


def points(values: Sequence[float | None], start: float = 0.0, step: float = 10.0) -> list[Point]:
    return [(v, start + i * step) for i, v in enumerate(values)]


# Broker 1 leads the controller; brokers 2 and 3 have reported into the newest 10 s bucket
# (t=50), broker 1's point for it is still on its way.
PARTIAL_NEWEST = {
    "kaas.c.brokers.1.active_controller_count": points([1, 1, 1, 1, 1, None]),
    "kaas.c.brokers.2.active_controller_count": points([0, 0, 0, 0, 0, 0]),
    "kaas.c.brokers.3.active_controller_count": points([0, 0, 0, 0, 0, 0]),
}
# The controller's agent ran a little longer than its interval and skipped buckets.
GAPS = {
    "kaas.c.brokers.1.active_controller_count": points([1, None, 1, 1, None, None]),
    "kaas.c.brokers.2.active_controller_count": points([0, 0, None, 0, 0, 0]),
    "kaas.c.brokers.3.active_controller_count": points([0, 0, 0, 0, None, 0]),
}
# vm2 replaced: its broker 2 held the controller until it was recycled (its last point at
# t=20); broker 4 on the new VM took over.
REPLACED = {
    "kaas.c.brokers.1.active_controller_count": points([0] * 10),
    "kaas.c.brokers.2.active_controller_count": points([1, 1, 1] + [None] * 7),
    "kaas.c.brokers.3.active_controller_count": points([0] * 10),
    "kaas.c.brokers.4.active_controller_count": points([None, None, None] + [1] * 7),
}


@pytest.mark.parametrize(
    ("shape", "graphite_said", "value"),
    [("partial newest bucket", 0, 1.0), ("gaps", 0, 1.0), ("replaced VM", 1, 1.0)],
)
def test_active_controllers_counts_each_brokers_latest_point(
    shape: str, graphite_said: float, value: float
) -> None:
    series = {"partial newest bucket": PARTIAL_NEWEST, "gaps": GAPS, "replaced VM": REPLACED}
    assert graphite_sum(series[shape]) == graphite_said
    assert rule_values(CONTROLLERS, series[shape]) == {"cluster": value}


def test_the_recycled_brokers_series_counts_until_it_is_a_few_periods_behind() -> None:
    # 20 s after its last point broker 2 still counts (its next point may be late): 2
    # controllers for the moment the drain's hold covers; 30 s after, it has stopped.
    just_after = {name: p[:5] for name, p in REPLACED.items()}
    assert rule_values(CONTROLLERS, just_after) == {"cluster": 2.0}
    later = {name: p[:6] for name, p in REPLACED.items()}
    assert rule_values(CONTROLLERS, later) == {"cluster": 1.0}


def test_no_controller_anywhere_is_still_zero() -> None:
    none_active = {name: points([0, 0, 0]) for name in ("a", "b", "c")}
    assert rule_values(CONTROLLERS, none_active) == {"cluster": 0.0}


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        ({}, {}),
        ({"a": points([None, None])}, {}),
        # A single point: measured by the others' period (10 s): 40 s behind has stopped.
        ({"a": points([5.0, 5.0, 5.0, 5.0, 5.0]), "b": [(7.0, 0.0)]}, {"a": 5.0}),
        ({"a": points([5.0, 5.0]), "b": [(7.0, 0.0)]}, {"a": 5.0, "b": 7.0}),
        # No period known at all: every series with a point counts.
        ({"a": [(5.0, 100.0)], "b": [(7.0, 0.0)]}, {"a": 5.0, "b": 7.0}),
    ],
)
def test_current_latest(series: dict[str, list[Point]], expected: dict[str, float]) -> None:
    assert current_latest(series) == expected


def test_reporting_period_is_the_median_gap() -> None:
    assert reporting_period(points([1, None, 1, 1, 1])) == 10.0
    assert reporting_period(points([1, None, None, 1], step=30)) == 90.0
    assert reporting_period(points([1])) is None


@pytest.mark.parametrize(
    ("how", "expected"), [(Aggregate.SUM, 9.0), (Aggregate.MAX, 5.0), (Aggregate.MIN, 4.0)]
)
def test_aggregates(how: Aggregate, expected: float) -> None:
    rules = parse_rules(
        "schema_version = 1\n[[rules]]\nname = 'x'\ntarget = 'kaas.{cluster}.b.*.v'\n"
        f"aggregate = '{how.value}'\nop = '>'\nthreshold = 0\nseverity = 'info'\n"
    )
    series = {"a": points([4.0]), "b": points([5.0])}
    assert rule_values(rules.rules[0], series) == {"cluster": expected}


def test_broker_rules_keep_each_series_last_point() -> None:
    series = {"1": points([40.0, None]), "2": points([None, None]), "3": points([12.0, 11.0])}
    assert rule_values(DISK, series) == {"1": 40.0, "2": None, "3": 11.0}


def test_aggregate_on_a_broker_rule_is_refused() -> None:
    text = (
        "schema_version = 1\n\n[[rules]]\nname = 'x'\ntarget = 'kaas.{cluster}.b.*.v'\n"
        "scope = 'broker'\naggregate = 'sum'\nop = '>'\nthreshold = 0\nseverity = 'info'\n"
    )
    with pytest.raises(RulesError, match=r"line 3: rule 'x': aggregate .* scope must be cluster"):
        parse_rules(text)
    with pytest.raises(RulesError, match="aggregate must be one of sum, max, min, got 'avg'"):
        parse_rules(text.replace("scope = 'broker'\n", "").replace("'sum'", "'avg'"))


def test_the_shipped_rules_stay_quiet_over_a_demo_like_sequence() -> None:
    """Agents at their own phases, each cycle a second longer than its 10 s interval, the
    controller's agent the last to report; evaluated every 10 s for five minutes, with vm2's
    broker 2 (the controller) replaced by broker 4 halfway. Graphite's per-timestamp sum
    says 0 controllers in most rounds; every cluster rule sees a healthy cluster."""
    metrics = ("active_controller_count", "under_replicated_partitions")
    reports: list[tuple[float, str, float]] = []  # (when, broker, active controller 0/1)
    at = {1: 1.0, 2: 8.0, 3: 3.0}
    while min(at.values()) < 300:
        broker = min(at, key=lambda b: at[b])
        controller = 4 if at[broker] >= 150 else 2
        reports.append((at[broker], str(broker), float(broker == controller)))
        at[broker] += 11.0
        if broker == 2 and at[broker] >= 150:  # recycled: broker 4 starts on the new VM
            del at[2]
            at[4] = 158.0

    def series_at(now: float, metric: str) -> dict[str, list[Point]]:
        """What the render API answers at `now` for the last minute: 10 s buckets."""
        series: dict[str, list[Point]] = {}
        for broker in ("1", "2", "3", "4"):
            buckets: dict[float, float | None] = {
                b: None for b in range(int(now) // 10 * 10 - 60, int(now) + 1, 10)
            }
            for when, who, controller in reports:
                if who == broker and when <= now and when // 10 * 10 in buckets:
                    buckets[when // 10 * 10] = controller if metric == metrics[0] else 0.0
            series[f"kaas.c.brokers.{broker}.{metric}"] = [
                (v, float(b)) for b, v in buckets.items()
            ]
        return series

    alerts: dict[AlertKey, Alert] = {}
    old_alerts: dict[AlertKey, Alert] = {}
    changed = []
    old_triggers = []
    for now in range(65, 300, 10):
        old_value = graphite_sum(series_at(now, metrics[0]))
        old = evaluate(
            DEFAULTS, "c", {CONTROLLERS.name: {"cluster": old_value}}, old_alerts, [], now
        )
        old_alerts = old.alerts
        old_triggers += [now for n in old.notifications if n.kind is NotificationKind.TRIGGER]
        values = {}
        for rule in DEFAULTS.rules:
            metric = next((m for m in metrics if m in rule.target), None)
            if metric is None:
                continue
            series = series_at(now, metric)
            values[rule.name] = rule_values(rule, series)
            if rule.name == "active_controllers" and not 150 <= now <= 185:
                # (in between, the recycled controller's last point still counts)
                assert values[rule.name] == {"cluster": 1.0}, now
        result = evaluate(DEFAULTS, "c", values, alerts, [], float(now))
        alerts = result.alerts
        changed += [(now, a.key.rule, a.state.value) for a in result.changed]
    assert old_triggers, "the per-timestamp sum no longer shows the false alarm"
    assert all(state == "pending" for _, _, state in changed), changed
    assert alerts == {}
