"""Messages-in bands per topic (seed 002): the parser's [[rules.bands]] (refusals name the
band's line and the reason), the per-topic values from the agents' per-broker topic series,
and the evaluation: one alert per topic outside its band, held while KaaS works on any
broker."""

from __future__ import annotations

import pytest

from management_plane.monitoring.evaluate import (
    Alert,
    AlertKey,
    AlertState,
    Notification,
    NotificationKind,
    Operation,
    OperationKind,
    evaluate,
)
from management_plane.monitoring.notify import event_body, subject_text
from management_plane.monitoring.rules import (
    Aggregate,
    RulesError,
    Scope,
    load_rules,
    parse_rules,
    topic_subject,
)
from management_plane.monitoring.series import Point, rule_values

pytestmark = pytest.mark.unit

HEADER = "schema_version = 1\ninterval_s = 10\n[maintenance]\nrestart_s = 100\n"
TOPIC_RULE = """
[[rules]]
name = "rate"
target = "aliasByNode(kaas.{cluster}.brokers.*.topics.*.messages_in_per_s, 5, 3)"
scope = "topic"
op = "outside"
for_s = 20
severity = "warning"

[[rules.bands]]
topics = "orders.*"
low = 10
high = 100

[[rules.bands]]
topics = "*"
low = 0
high = 1000
"""
RULES = parse_rules(HEADER + TOPIC_RULE)
RATE = RULES.rules[0]


def test_a_topic_rule_parses_with_its_bands_and_their_lines() -> None:
    assert RATE.scope is Scope.TOPIC and RATE.aggregate is Aggregate.SUM
    assert [(b.topics, b.low, b.high, b.line) for b in RATE.bands] == [
        ("orders.*", 10.0, 100.0, 14),
        ("*", 0.0, 1000.0, 19),
    ]
    assert RATE.condition() == "orders.* outside 10..100; * outside 0..1000"


@pytest.mark.parametrize(
    ("topic", "band"),
    [
        ("orders_eu", "orders.*"),  # Graphite's name of orders.eu: the glob's dot reads as _
        ("orders-eu", "*"),
        ("payments", "*"),
    ],
)
def test_a_topic_takes_its_first_matching_band(topic: str, band: str) -> None:
    found = RATE.band_for(topic)
    assert found is not None and found.topics == band


@pytest.mark.parametrize(
    ("value", "subject", "breached"),
    [
        (5.0, "topic:orders_eu", True),
        (50.0, "topic:orders_eu", False),
        (101.0, "topic:orders_eu", True),
        (500.0, "topic:payments", False),
        (1001.0, "topic:payments", True),
        (5.0, "cluster", False),  # not a topic: no band, never breached
    ],
)
def test_breached_is_per_topic_band(value: float, subject: str, breached: bool) -> None:
    assert RATE.breached(value, subject) is breached


def _replace(old: str, new: str) -> str:
    assert old in TOPIC_RULE
    return HEADER + TOPIC_RULE.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_replace("low = 10", "low = 1000"), "line 14: rule 'rate' band 1: low 1000 is above high 100"),
        (_replace("high = 1000\n", ""), "line 19: rule 'rate' band 2: high is missing"),
        (_replace('topics = "orders.*"', 'topics = ""'), "line 14: rule 'rate' band 1: topics must be"),
        (_replace('topics = "orders.*"', "topics = 3"), "line 14: rule 'rate' band 1: topics must be"),
        (_replace("low = 10", 'low = "ten"'), "line 14: rule 'rate' band 1: low must be a number"),
        (_replace("low = 10", "low = -1"), "line 14: rule 'rate' band 1: low must not be negative"),
        (_replace("low = 10", "lo = 10"), "line 14: rule 'rate' band 1: unknown keys lo"),
        (_replace('op = "outside"', 'op = ">"'), 'line 6: rule \'rate\': a topic rule is a band rule'),
        (_replace("for_s = 20", "for_s = 20\nlow = 1"), "line 6: rule 'rate': a topic rule's bounds go in"),
        (_replace('scope = "topic"', 'scope = "topics"'), "line 6: rule 'rate': scope must be one of"),
        (
            HEADER + TOPIC_RULE.split("[[rules.bands]]")[0],
            "line 6: rule 'rate': a topic rule needs at least one \\[\\[rules.bands\\]\\]",
        ),
        (
            _replace('scope = "topic"', 'scope = "cluster"'),
            "line 6: rule 'rate': bands apply to scope = \"topic\" rules",
        ),
        (_replace('scope = "topic"', 'scope = "topic"\nheld_by = "any_broker"'), "held_by applies to broker rules"),
        # An inline array of bands has no header lines: the rule's line is named.
        (
            HEADER
            + TOPIC_RULE.split("[[rules.bands]]")[0]
            + 'bands = [{topics = "a", low = 5, high = 1}]\n',
            "line 6: rule 'rate' band 1: low 5 is above high 1",
        ),
    ],
)  # fmt: skip
def test_a_malformed_band_is_refused_with_its_line_and_reason(text: str, message: str) -> None:
    with pytest.raises(RulesError, match=message):
        parse_rules(text)


def _points(values: list[float | None], start: float = 0.0) -> list[Point]:
    return [(v, start + 10.0 * i) for i, v in enumerate(values)]


def test_topic_values_sum_each_topics_current_brokers_and_skip_unbanded_topics() -> None:
    only_orders = parse_rules(HEADER + TOPIC_RULE.split('[[rules.bands]]\ntopics = "*"')[0])
    series = {
        # orders.eu: led by brokers 1 and 2; broker 3 led it until it moved (its series
        # stopped at t=10, three of its periods before the newest point)
        "orders_eu.1": _points([10, 12, 14, 16, 16, 16]),
        "orders_eu.2": _points([20, 20, None, 21, 21, None]),
        "orders_eu.3": _points([30, 30, None, None, None, None]),
        "payments.1": _points([7, 7, 7, 7]),  # no band names it here
        "orders_us.2": _points([None, None, None, None]),
    }
    assert rule_values(only_orders.rules[0], series) == {
        "topic:orders_eu": 37.0,
        "topic:orders_us": None,
    }
    assert rule_values(RATE, series)["topic:payments"] == 7.0


def _run(
    steps: list[tuple[float, dict[str, float | None], list[Operation]]],
) -> list[tuple[float, str, str]]:
    alerts: dict[AlertKey, Alert] = {}
    sent = []
    for now, values, operations in steps:
        result = evaluate(RULES, "c", {"rate": values}, alerts, operations, now)
        alerts = result.alerts
        sent += [(now, n.kind.value, n.alert.key.subject) for n in result.notifications]
    return sent


RESTART_2 = [Operation(2, OperationKind.RESTART, 0.0)]
DRAIN_3 = [Operation(3, OperationKind.DRAIN, 0.0)]
CASES = {
    "each topic against its own band": (
        [
            (0, {"topic:orders_eu": 5.0, "topic:payments": 5.0}, []),
            (20, {"topic:orders_eu": 5.0, "topic:payments": 5.0}, []),
            (30, {"topic:orders_eu": 50.0, "topic:payments": 5.0}, []),
        ],
        [(20, "trigger", "topic:orders_eu"), (30, "resolve", "topic:orders_eu")],
    ),
    "above the band fires too": (
        [(0, {"topic:payments": 2000.0}, []), (20, {"topic:payments": 2000.0}, [])],
        [(20, "trigger", "topic:payments")],
    ),
    "a breach shorter than for_s: nothing": (
        [(0, {"topic:orders_eu": 500.0}, []), (10, {"topic:orders_eu": 50.0}, [])],
        [],
    ),
    "held while KaaS restarts any broker, fires past restart_s": (
        [
            (0, {"topic:orders_eu": 0.0}, RESTART_2),
            (90, {"topic:orders_eu": 0.0}, RESTART_2),
            (100, {"topic:orders_eu": 0.0}, RESTART_2),
        ],
        [(100, "trigger", "topic:orders_eu")],
    ),
    "held while KaaS drains any broker": (
        [(0, {"topic:orders_eu": 0.0}, DRAIN_3), (1000, {"topic:orders_eu": 0.0}, DRAIN_3)],
        [],
    ),
    "no data for a topic changes nothing": (
        [
            (0, {"topic:orders_eu": 1.0}, []),
            (20, {"topic:orders_eu": 1.0}, []),
            (30, {"topic:orders_eu": None}, []),
            (40, {}, []),
        ],
        [(20, "trigger", "topic:orders_eu")],
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_topic_band_evaluation_table(case: str) -> None:
    steps, expected = CASES[case]
    assert _run(steps) == expected  # type: ignore[arg-type]


def test_a_held_topic_alert_and_its_page_name_the_topic() -> None:
    result = evaluate(RULES, "c", {"rate": {"topic:orders_eu": 0.0}}, {}, RESTART_2, 5.0)
    (alert,) = result.alerts.values()
    assert alert.state is AlertState.HELD and alert.held_until == 100.0
    assert alert.key.dedup_key == "kaas/c/rate/topic:orders_eu"
    assert subject_text(alert.key.subject) == "topic orders_eu"
    assert subject_text("cluster") == "the cluster" and subject_text("2") == "broker 2"
    body = event_body(Notification(NotificationKind.TRIGGER, alert), "k")
    assert body["payload"]["component"] == "topic orders_eu"


def test_the_shipped_band_watches_the_metrics_topic_at_the_agents_rate() -> None:
    rule = next(r for r in load_rules().rules if r.name == "messages_in_band")
    assert rule.scope is Scope.TOPIC and [b.topics for b in rule.bands] == ["_kaas_metrics"]
    assert rule.target_for("prod") == (
        "aliasByNode(kaas.prod.brokers.*.topics.*.messages_in_per_s, 5, 3)"
    )
    metrics = topic_subject("_kaas_metrics")
    # Three agents at 30 s and at 10 s, one record each per interval: inside the band.
    assert not rule.breached(3 / 30, metrics) and not rule.breached(3 / 10, metrics)
    assert rule.breached(0.0, metrics)  # the records stopped
    assert not rule.breached(0.0, topic_subject("orders"))  # a topic no band names
    series = {"_kaas_metrics.1": _points([0.1, 0.1]), "_kaas_metrics.2": _points([0.2, 0.2])}
    assert rule_values(rule, series) == {metrics: pytest.approx(0.3)}
