"""Alert rules: the one parser (refusals name line and reason) and the pure evaluator
(`for` durations, severities, maintenance holds, one trigger and one resolve)."""

from __future__ import annotations

from pathlib import Path

import pytest

from management_plane.monitoring.evaluate import (
    Alert,
    AlertKey,
    AlertState,
    NotificationKind,
    Operation,
    OperationKind,
    Seen,
    evaluate,
    operations_of,
    track_operations,
)
from management_plane.monitoring.rules import (
    Comparison,
    HeldBy,
    RulesError,
    Scope,
    Severity,
    load_rules,
    parse_rules,
)

pytestmark = pytest.mark.unit

HEADER = "schema_version = 1\ninterval_s = 10\n"
URP = """
[[rules]]
name = "urp"
target = "sumSeries(kaas.{cluster}.brokers.*.under_replicated_partitions)"
op = ">"
threshold = 0
for_s = 30
severity = "critical"
"""
DISK = """
[[rules]]
name = "disk"
target = "aliasByNode(kaas.{cluster}.brokers.*.host.log_dir_free_percent, 3)"
scope = "broker"
op = "<"
threshold = 15
for_s = 0
severity = "error"
"""
BAND = """
[[rules]]
name = "band"
target = "sumSeries(kaas.{cluster}.brokers.*.messages_in_per_s)"
op = "outside"
low = 10
high = 100
severity = "warning"
"""
LATENCY = """
[[rules]]
name = "latency"
target = "aliasByNode(kaas.{cluster}.brokers.*.produce_total_time_ms_p99, 3)"
scope = "broker"
held_by = "any_broker"
op = ">"
threshold = 1000
for_s = 0
severity = "warning"
"""
RULES = parse_rules(HEADER + "[maintenance]\nrestart_s = 100\n" + URP + DISK + BAND + LATENCY)


def test_default_rules_file_parses_with_every_required_rule() -> None:
    rules = load_rules()
    names = {r.name for r in rules.rules}
    assert {
        "under_replicated_partitions",
        "offline_partitions",
        "active_controllers",
        "under_min_isr_partitions",
        "offline_log_directories",
        "disk_free",
        "messages_in_band",
        "log_errors",
        "audit_completeness",
        "produce_latency_p99",
        "fetch_consumer_latency_p99",
        "zookeeper_outstanding_requests",
        "zookeeper_latency",
        "mirror_lag",
    } <= names
    audit = next(r for r in rules.rules if r.name == "audit_completeness")
    assert audit.window_s == 86400 and audit.breached(99.9) and not audit.breached(100)
    assert all(r.window_s is None for r in rules.rules if r.name != "audit_completeness")
    controllers = next(r for r in rules.rules if r.name == "active_controllers")
    assert controllers.comparison is Comparison.NOT_EQUAL and controllers.threshold == 1
    mirror = next(r for r in rules.rules if r.name == "mirror_lag")
    assert mirror.target_for("backup") == "kaas.backup.mirror.*.lag_records"
    assert mirror.breached(10001) and not mirror.breached(10000) and mirror.for_s == 300


def test_parsed_rule_fields() -> None:
    urp, disk, band, latency = RULES.rules
    assert (urp.scope, urp.severity, urp.for_s, urp.line) == (
        Scope.CLUSTER,
        Severity.CRITICAL,
        30.0,
        6,
    )
    assert disk.scope is Scope.BROKER and disk.breached(14.9) and not disk.breached(15)
    assert (disk.held_by, latency.held_by, urp.held_by) == (
        HeldBy.SUBJECT,
        HeldBy.ANY_BROKER,
        HeldBy.SUBJECT,
    )
    assert band.breached(9) and band.breached(101) and not band.breached(50)
    assert RULES.maintenance.restart_s == 100 and RULES.maintenance.drain_s == 3600
    assert urp.target_for("prod") == "sumSeries(kaas.prod.brokers.*.under_replicated_partitions)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("schema_version = 1\n[[rules]\n", "not valid TOML: .*line 2"),
        ("schema_version = 2\n" + URP, "line 1: schema_version is 2"),
        (HEADER, "no \\[\\[rules\\]\\] tables"),
        (
            HEADER + URP.replace('"critical"', '"loud"'),
            "line 4: rule 'urp': severity must be one of critical",
        ),
        (HEADER + URP.replace('op = ">"', 'op = ">="'), "line 4: rule 'urp': op must be one of"),
        (HEADER + URP.replace("threshold = 0\n", ""), "line 4: rule 'urp': threshold is missing"),
        (HEADER + URP.replace("threshold = 0", 'threshold = "0"'), "threshold must be a number"),
        (HEADER + URP.replace("for_s = 30", "for_s = -1"), "for_s must not be negative"),
        (
            HEADER + URP.replace("kaas.{cluster}", "kaas.x"),
            "target must be a Graphite target containing",
        ),
        (HEADER + URP.replace('name = "urp"', 'name = "Bad Name"'), "line 4: name must be"),
        (HEADER + URP + URP, "line 12: rule 'urp' is defined twice"),
        (HEADER + URP.replace("for_s", "fer_s"), "unknown keys fer_s"),
        (HEADER + BAND.replace("low = 10", "low = 1000"), "low 1000 is above high 100"),
        ("schema_version = 1\ninterval_s = 0\n" + URP, "interval_s must be positive"),
        (HEADER + URP.replace("for_s = 30", "window_s = 10"), "window_s must be 60-604800"),
        (HEADER + URP + 'held_by = "any_broker"\n', "held_by applies to broker rules"),
        (HEADER + DISK + 'held_by = "all"\n', "held_by must be one of subject, any_broker"),
        (HEADER + DISK + "settle_s = -5\n", "settle_s must be 0-3600"),
    ],
)
def test_malformed_rules_are_refused_with_line_and_reason(text: str, message: str) -> None:
    with pytest.raises(RulesError, match=message):
        parse_rules(text)


def test_load_rules_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "rules.toml"
    bad.write_text(HEADER + URP.replace('"critical"', '"loud"'))
    with pytest.raises(RulesError, match=f"{bad}: alert rules line 4"):
        load_rules(bad)
    with pytest.raises(RulesError, match="cannot be read"):
        load_rules(tmp_path / "missing.toml")


def _run(
    steps: list[tuple[float, dict[str, dict[str, float | None]], list[Operation]]],
) -> list[tuple[float, str, str, str]]:
    """Run rounds; return (time, notification, rule, subject) of every notification."""
    alerts: dict[AlertKey, Alert] = {}
    sent = []
    for now, values, operations in steps:
        result = evaluate(RULES, "c", values, alerts, operations, now)
        alerts = result.alerts
        sent += [
            (now, n.kind.value, n.alert.key.rule, n.alert.key.subject) for n in result.notifications
        ]
    return sent


def _urp(value: float | None) -> dict[str, dict[str, float | None]]:
    return {"urp": {"cluster": value}}


RESTART_1 = [Operation(1, OperationKind.RESTART, 0.0)]
RESTART_1_ENDED = [Operation(1, OperationKind.RESTART, 0.0, ended=50.0)]
DRAIN_1 = [Operation(1, OperationKind.DRAIN, 0.0)]  # drain_s: [maintenance]'s default, 3600

CASES = {
    "breach shorter than for_s: nothing": (
        [(0, _urp(2), []), (20, _urp(2), []), (25, _urp(0), [])],
        [],
    ),
    "breach for for_s: one trigger, then one resolve": (
        [
            (0, _urp(2), []),
            (10, _urp(2), []),
            (30, _urp(3), []),
            (40, _urp(1), []),
            (50, _urp(0), []),
            (60, _urp(0), []),
        ],
        [(30, "trigger", "urp", "cluster"), (50, "resolve", "urp", "cluster")],
    ),
    "no data keeps a firing alert firing": (
        [
            (0, _urp(1), []),
            (30, _urp(1), []),
            (40, _urp(None), []),
            (50, {}, []),
            (60, _urp(0), []),
        ],
        [(30, "trigger", "urp", "cluster"), (60, "resolve", "urp", "cluster")],
    ),
    "KaaS restarting a broker holds the cluster rule": (
        [
            (0, _urp(2), RESTART_1),
            (60, _urp(2), RESTART_1),
            (90, _urp(0), RESTART_1),
            (100, _urp(0), []),
        ],
        [],
    ),
    "lagging data after the operation gets for_s again": (
        [(0, _urp(2), RESTART_1), (60, _urp(2), RESTART_1), (70, _urp(2), []), (80, _urp(0), [])],
        [],
    ),
    "after an ended operation's settle time the breach gets for_s again, not the hold's": (
        [
            (0, _urp(2), RESTART_1),
            (40, _urp(2), RESTART_1),
            (50, _urp(2), RESTART_1_ENDED),  # no settle time in these rules: pending from here
            (70, _urp(2), RESTART_1_ENDED),
            (80, _urp(2), RESTART_1_ENDED),
        ],
        [(80, "trigger", "urp", "cluster")],
    ),
    "an operation that outlasts its expected time fires": (
        [
            (0, _urp(2), RESTART_1),
            (60, _urp(2), RESTART_1),
            (100, _urp(2), RESTART_1),
            (110, _urp(0), RESTART_1),
        ],
        [(100, "trigger", "urp", "cluster"), (110, "resolve", "urp", "cluster")],
    ),
    "a broker rule is held only for the broker KaaS works on": (
        [(0, {"disk": {"1": 5.0, "2": 5.0}}, RESTART_1)],
        [(0, "trigger", "disk", "2")],
    ),
    "a broker rule held by any broker is held for every broker": (
        [(0, {"latency": {"1": 1500.0, "2": 1500.0}}, RESTART_1), (30, {"latency": {}}, [])],
        [],
    ),
    "KaaS draining a broker holds that broker's rule, not another's": (
        [
            (0, {"disk": {"1": 5.0, "2": 5.0}}, DRAIN_1),
            (1800, {"disk": {"1": 5.0}}, DRAIN_1),
            (3590, {"disk": {"1": 5.0}}, DRAIN_1),
        ],
        [(0, "trigger", "disk", "2")],
    ),
    "KaaS draining a broker holds the cluster rule for the drain's expected time": (
        [(0, _urp(2), DRAIN_1), (1800, _urp(2), DRAIN_1), (3590, _urp(0), DRAIN_1)],
        [],
    ),
    "a drain that outlasts its expected time fires": (
        [
            (0, {"disk": {"1": 5.0}}, DRAIN_1),
            (3599, {"disk": {"1": 5.0}}, DRAIN_1),
            (3600, {"disk": {"1": 5.0}}, DRAIN_1),
            (3610, {"disk": {"1": 50.0}}, DRAIN_1),
        ],
        [(3600, "trigger", "disk", "1"), (3610, "resolve", "disk", "1")],
    ),
    "a drain is held longer than a restart of the same broker would be": (
        [(0, _urp(2), DRAIN_1), (100, _urp(2), DRAIN_1), (130, _urp(2), DRAIN_1)],
        [],
    ),
    "band rule fires below and above": (
        [
            (0, {"band": {"cluster": 5.0}}, []),
            (10, {"band": {"cluster": 50.0}}, []),
            (20, {"band": {"cluster": 500.0}}, []),
        ],
        [
            (0, "trigger", "band", "cluster"),
            (10, "resolve", "band", "cluster"),
            (20, "trigger", "band", "cluster"),
        ],
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_evaluation_table(case: str) -> None:
    steps, expected = CASES[case]
    assert _run(steps) == expected  # type: ignore[arg-type]


def test_held_alert_shows_its_hold() -> None:
    result = evaluate(RULES, "c", _urp(2), {}, RESTART_1, 5.0)
    (alert,) = result.alerts.values()
    assert alert.state is AlertState.HELD and alert.held_until == 100.0
    assert alert.key.dedup_key == "kaas/c/urp/cluster"


def test_a_held_drain_shows_its_hold_until_the_drain_s_expected_time() -> None:
    result = evaluate(RULES, "c", {"disk": {"1": 5.0}}, {}, DRAIN_1, 5.0)
    (alert,) = result.alerts.values()
    assert alert.state is AlertState.HELD and alert.held_until == 3600.0
    assert result.notifications == ()


def test_track_operations_keeps_first_seen_and_forgets_ended() -> None:
    seen = track_operations({}, [(1, OperationKind.RESTART)], 10.0)
    seen = track_operations(seen, [(1, OperationKind.RESTART), (2, OperationKind.DRAIN)], 20.0)
    assert seen == {(1, OperationKind.RESTART): Seen(10.0), (2, OperationKind.DRAIN): Seen(20.0)}
    assert track_operations(seen, [], 30.0) == {}
    assert NotificationKind.TRIGGER.value == "trigger"


def test_track_operations_keeps_an_ended_operation_for_the_settle_time() -> None:
    restart = (1, OperationKind.RESTART)
    seen = track_operations({}, [restart], 10.0, settle_s=30)
    seen = track_operations(seen, [], 50.0, settle_s=30)
    assert seen == {restart: Seen(10.0, ended=50.0)}
    assert track_operations(seen, [], 70.0, settle_s=30) == {restart: Seen(10.0, ended=50.0)}
    assert track_operations(seen, [], 80.0, settle_s=30) == {}
    # Starting again within the settle time is a new operation with a new count.
    assert track_operations(seen, [restart], 60.0, settle_s=30) == {restart: Seen(60.0)}
    assert operations_of({restart: Seen(10.0, 50.0)}) == [
        Operation(1, OperationKind.RESTART, 10.0, ended=50.0)
    ]


SETTLED = parse_rules(HEADER + "[maintenance]\nrestart_s = 100\nsettle_s = 30\n" + URP + DISK)


def _rounds(
    rounds: list[tuple[float, float, list[tuple[int, OperationKind]]]],
) -> list[tuple[float, str]]:
    """Rounds of (time, URP, operations running) through the loop's own tracking; returns
    every (time, state) the URP alert went through and every notification."""
    alerts: dict[AlertKey, Alert] = {}
    seen: dict[tuple[int, OperationKind], Seen] = {}
    states: list[tuple[float, str]] = []
    for now, value, running in rounds:
        seen = track_operations(seen, running, now, SETTLED.maintenance.settle_s)
        result = evaluate(SETTLED, "c", _urp(value), alerts, operations_of(seen), now)
        alerts = result.alerts
        states += [(now, a.state.value) for a in result.changed]
        states += [(now, n.kind.value) for n in result.notifications]
    return states


def test_data_lagging_an_ended_restart_stays_held_for_the_settle_time() -> None:
    restart = [(1, OperationKind.RESTART)]
    # The restart ends at 60; the agents' last samples from during it show URP until 85,
    # then for_s (30) would have passed at 90 without the settle time.
    rounds = [(0.0, 2.0, restart), (30.0, 2.0, restart), (60.0, 2.0, [])]
    rounds += [(70.0, 2.0, []), (80.0, 1.0, []), (85.0, 1.0, []), (95.0, 0.0, [])]
    assert _rounds(rounds) == [(0.0, "held")]


def test_a_breach_that_outlasts_the_settle_time_pages_after_for_s() -> None:
    restart = [(1, OperationKind.RESTART)]
    rounds = [(0.0, 2.0, restart), (10.0, 2.0, [])]
    rounds += [(t, 2.0, []) for t in (20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0)]
    assert _rounds(rounds) == [
        (0.0, "held"),
        (40.0, "pending"),
        (70.0, "firing"),
        (70.0, "trigger"),
    ]


def test_a_rule_with_its_own_settle_time_is_held_that_long_after_the_operation() -> None:
    rules = parse_rules(
        HEADER + "[maintenance]\nsettle_s = 30\n" + URP + LATENCY + "settle_s = 300\n"
    )
    assert rules.longest_settle_s() == 300
    ended = [Operation(1, OperationKind.RESTART, 0.0, ended=60.0)]
    values = {"urp": {"cluster": 2.0}, "latency": {"2": 1500.0}}
    result = evaluate(rules, "c", values, {}, ended, 100.0)
    states = {k.rule: a.state for k, a in result.alerts.items()}
    # URP's hold ended at 90 (for_s 30 pending now); latency's lasts until 360.
    assert states == {"urp": AlertState.PENDING, "latency": AlertState.HELD}
    assert next(a for a in result.alerts.values() if a.key.rule == "latency").held_until == 360
    seen = track_operations({}, [(1, OperationKind.RESTART)], 0.0, rules.longest_settle_s())
    seen = track_operations(seen, [], 60.0, rules.longest_settle_s())
    assert track_operations(seen, [], 350.0, rules.longest_settle_s()) == seen


def test_settle_time_is_refused_when_negative() -> None:
    with pytest.raises(RulesError, match="settle_s must not be negative"):
        parse_rules(HEADER + "[maintenance]\nsettle_s = -1\n" + URP)


def test_a_held_alert_whose_series_is_gone_goes_once_the_hold_ends() -> None:
    """A broker KaaS drained and recycled (a replacement) stops reporting: its held alert is
    kept while the hold lasts, then dropped without a page (it never fired)."""
    held = evaluate(RULES, "c", _urp(2), {}, RESTART_1, 5.0).alerts
    assert [a.state for a in held.values()] == [AlertState.HELD]
    during = evaluate(RULES, "c", _urp(None), held, RESTART_1, 50.0)
    assert list(during.alerts.values()) == list(held.values())
    after = evaluate(RULES, "c", _urp(None), held, [], 200.0)
    assert after.alerts == {} and after.notifications == ()
    pending = evaluate(RULES, "c", _urp(2), {}, [], 0.0).alerts
    assert [a.state for a in pending.values()] == [AlertState.PENDING]
    assert evaluate(RULES, "c", _urp(None), pending, [], 10.0).alerts == {}
