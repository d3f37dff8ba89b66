"""Alert rules: one versioned TOML file, one parser. Pure.

A refused file names the line and the reason (`alert rules line 12: rule 'disk_free':
severity must be one of critical, error, warning, info`); the caller keeps the rules it runs.
"""

from __future__ import annotations

import fnmatch
import math
import re
import tomllib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from management_plane.errors import KaasError

RULES_SCHEMA_VERSION = 1
DEFAULT_RULES_FILE = Path(__file__).with_name("default_rules.toml")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
# The agents' gauge names make every character outside [A-Za-z0-9_-] into '_' (a topic's
# dots too); a band's glob gets the same treatment, its wildcards kept.
_UNSAFE_IN_GLOB = re.compile(r"[^A-Za-z0-9_\-*?\[\]!]")
TOPIC_SUBJECT_PREFIX = "topic:"


class RulesError(KaasError):
    """A rules file that must not replace the running rules; the message names line and reason."""


class Severity(Enum):
    # PagerDuty Events API v2's severities.
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Scope(Enum):
    CLUSTER = "cluster"  # one series for the whole cluster; held by any operation in it
    BROKER = "broker"  # one series per broker, named by its id; held by that broker's operation
    TOPIC = "topic"  # one value per topic over its brokers' series; held by any operation


class HeldBy(Enum):
    """Whose operations hold a broker rule. A broker's produce latency and its log's fetch
    errors rise while another broker restarts (acks=all waits on the restarting follower;
    followers lose their leader), so those rules are held by any broker's operation."""

    SUBJECT = "subject"  # the broker the series names
    ANY_BROKER = "any_broker"


class Aggregate(Enum):
    """How a cluster rule combines its brokers' series: each broker's own latest point, then
    this function over the brokers whose series is current. (Graphite's sumSeries adds the
    points of one timestamp, and the newest timestamp usually holds only the brokers that
    reported first: a partial sum.)"""

    SUM = "sum"
    MAX = "max"
    MIN = "min"


class Comparison(Enum):
    ABOVE = ">"
    BELOW = "<"
    NOT_EQUAL = "!="
    OUTSIDE = "outside"  # a band: below `low` or above `high`


@dataclass(frozen=True)
class Band:
    """The messages-per-second band of the topics a glob names (a topic rule's own bounds)."""

    topics: str  # an fnmatch glob over topic names, as the operator wrote it
    low: float
    high: float
    line: int

    def matches(self, topic: str) -> bool:
        """`topic` as Graphite names it (see _UNSAFE_IN_GLOB)."""
        return fnmatch.fnmatchcase(topic, _UNSAFE_IN_GLOB.sub("_", self.topics))


def topic_subject(topic: str) -> str:
    """A topic alert's subject (its dedup key's last part): kept apart from broker ids."""
    return f"{TOPIC_SUBJECT_PREFIX}{topic}"


def topic_of(subject: str) -> str | None:
    return (
        subject.removeprefix(TOPIC_SUBJECT_PREFIX)
        if subject.startswith(TOPIC_SUBJECT_PREFIX)
        else None
    )


@dataclass(frozen=True)
class Rule:
    name: str
    summary: str
    target: str  # a Graphite target; `{cluster}` becomes the cluster's metric segment
    scope: Scope
    comparison: Comparison
    threshold: float  # for >, <, !=
    low: float  # for outside
    high: float  # for outside
    for_s: float
    severity: Severity
    line: int  # where the rule starts in its file, for messages
    aggregate: Aggregate | None = None  # cluster rules over per-broker series
    held_by: HeldBy = HeldBy.SUBJECT  # broker rules only: cluster rules are held by any broker
    settle_s: float | None = None
    """How long this rule's hold outlives an operation, when not [maintenance]'s: a
    percentile Kafka draws from a sample of the last minutes stays high that long."""
    window_s: float | None = None
    """How far back the render reads (None: the loop's few intervals): a batch job's gauge
    (the audit's completeness) is one point per run, still the latest hours later."""
    bands: tuple[Band, ...] = ()
    """Topic rules only: the first band whose glob matches a topic bounds it."""

    def band_for(self, topic: str) -> Band | None:
        return next((band for band in self.bands if band.matches(topic)), None)

    def breached(self, value: float, subject: str | None = None) -> bool:
        if self.scope is Scope.TOPIC:
            band = self.band_for(topic_of(subject or "") or "")
            return band is not None and (value < band.low or value > band.high)
        match self.comparison:
            case Comparison.ABOVE:
                return value > self.threshold
            case Comparison.BELOW:
                return value < self.threshold
            case Comparison.NOT_EQUAL:
                return value != self.threshold
            case Comparison.OUTSIDE:
                return value < self.low or value > self.high

    def condition(self) -> str:
        if self.scope is Scope.TOPIC:
            return "; ".join(f"{b.topics} outside {b.low:g}..{b.high:g}" for b in self.bands)
        if self.comparison is Comparison.OUTSIDE:
            return f"outside {self.low:g}..{self.high:g}"
        return f"{self.comparison.value} {self.threshold:g}"

    def target_for(self, cluster_segment: str) -> str:
        return self.target.replace("{cluster}", cluster_segment)


@dataclass(frozen=True)
class Maintenance:
    """How long KaaS's own operations may keep a rule breached before it fires anyway."""

    restart_s: float = 600.0
    drain_s: float = 3600.0
    settle_s: float = 0.0
    """How long the hold outlives the operation: the agents' samples reach Graphite up to an
    agent interval, a statsd flush and an evaluation after they were taken."""


@dataclass(frozen=True)
class RuleSet:
    version: int
    interval_s: float
    maintenance: Maintenance
    rules: tuple[Rule, ...]

    def longest_settle_s(self) -> float:
        """How long an ended operation is remembered: the longest any rule's hold outlives it."""
        own = [r.settle_s for r in self.rules if r.settle_s is not None]
        return max([self.maintenance.settle_s, *own])


def _header_lines(text: str, header: str) -> list[int]:
    """The line of each `header` (`[[rules]]`, `[[rules.bands]]`), in order (tomllib keeps
    no positions)."""
    return [
        number
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip().startswith(header)
    ]


def _number(table: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    if key not in table:
        if default is None:
            raise RulesError(f"{where}: {key} is missing")
        return default
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RulesError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def _enum(kind: type[Any], table: dict[str, Any], key: str, where: str, default: Any = None) -> Any:
    value = table.get(key)
    if value is None and default is not None:
        return default
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in kind)
        raise RulesError(f"{where}: {key} must be one of {allowed}, got {value!r}") from None


RULE_KEYS = {
    "name",
    "summary",
    "target",
    "scope",
    "op",
    "threshold",
    "low",
    "high",
    "for_s",
    "severity",
    "aggregate",
    "window_s",
    "held_by",
    "settle_s",
    "bands",
}
BAND_KEYS = {"topics", "low", "high"}


def _parse_bands(value: Any, where: str, rule_line: int, lines: list[int]) -> tuple[Band, ...]:
    """A topic rule's [[rules.bands]]; `lines`: their headers' lines, when written as
    headers (an inline array of tables has none: the rule's line is named)."""
    if not isinstance(value, list) or not value:
        raise RulesError(
            f"{where}: a topic rule needs at least one [[rules.bands]] "
            "(topics = GLOB, low = N, high = N)"
        )
    bands: list[Band] = []
    for index, table in enumerate(value):
        line = lines[index] if len(lines) == len(value) else rule_line
        at = f"alert rules line {line}: {where.partition(': ')[2]} band {index + 1}"
        if not isinstance(table, dict):
            raise RulesError(f"{at}: must be a table of topics, low, high")
        unknown = set(table) - BAND_KEYS
        if unknown:
            raise RulesError(f"{at}: unknown keys {', '.join(sorted(unknown))}")
        topics = table.get("topics")
        if not isinstance(topics, str) or not topics.strip():
            raise RulesError(f'{at}: topics must be a topic name or glob, e.g. "orders-*"')
        low, high = _number(table, "low", at), _number(table, "high", at)
        if low < 0:
            raise RulesError(f"{at}: low must not be negative, got {low:g}")
        if low > high:
            raise RulesError(f"{at}: low {low:g} is above high {high:g}")
        bands.append(Band(topics.strip(), low, high, line))
    return tuple(bands)


def _parse_rule(table: Any, line: int, index: int, band_lines: list[int]) -> Rule:
    where = f"alert rules line {line}"
    if not isinstance(table, dict):
        raise RulesError(f"{where}: rule {index + 1} must be a table")
    name = table.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise RulesError(f"{where}: name must be 1-64 of a-z, 0-9, '_' starting with a letter")
    where = f"{where}: rule {name!r}"
    unknown = set(table) - RULE_KEYS
    if unknown:
        raise RulesError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    target = table.get("target")
    if not isinstance(target, str) or "{cluster}" not in target:
        raise RulesError(f"{where}: target must be a Graphite target containing {{cluster}}")
    summary = table.get("summary", name)
    if not isinstance(summary, str):
        raise RulesError(f"{where}: summary must be a string")
    comparison = _enum(Comparison, table, "op", where)
    scope = _enum(Scope, table, "scope", where, Scope.CLUSTER)
    bands: tuple[Band, ...] = ()
    if scope is Scope.TOPIC:
        if comparison is not Comparison.OUTSIDE:
            raise RulesError(f'{where}: a topic rule is a band rule: op must be "outside"')
        stray = sorted({"low", "high", "threshold"} & set(table))
        if stray:
            raise RulesError(
                f"{where}: a topic rule's bounds go in its [[rules.bands]], not {', '.join(stray)}"
            )
        bands = _parse_bands(table.get("bands"), where, line, band_lines)
        threshold, low, high = 0.0, 0.0, 0.0
    elif "bands" in table:
        raise RulesError(f'{where}: bands apply to scope = "topic" rules')
    elif comparison is Comparison.OUTSIDE:
        low, high = _number(table, "low", where), _number(table, "high", where)
        if low > high:
            raise RulesError(f"{where}: low {low:g} is above high {high:g}")
        threshold = 0.0
    else:
        threshold, low, high = _number(table, "threshold", where), 0.0, 0.0
    for_s = _number(table, "for_s", where, 0.0)
    if for_s < 0:
        raise RulesError(f"{where}: for_s must not be negative, got {for_s:g}")
    aggregate = _enum(Aggregate, table, "aggregate", where) if "aggregate" in table else None
    if aggregate is not None and scope is Scope.BROKER:
        raise RulesError(
            f"{where}: aggregate combines brokers into one series: scope must be cluster or topic"
        )
    if scope is Scope.TOPIC and aggregate is None:
        aggregate = Aggregate.SUM  # a topic's rate is the sum of its leaders'
    held_by = _enum(HeldBy, table, "held_by", where, HeldBy.SUBJECT)
    if held_by is not HeldBy.SUBJECT and scope is not Scope.BROKER:
        raise RulesError(
            f"{where}: held_by applies to broker rules (a cluster rule is held by any broker)"
        )
    settle_s = _number(table, "settle_s", where) if "settle_s" in table else None
    if settle_s is not None and not 0 <= settle_s <= 3600:
        raise RulesError(f"{where}: settle_s must be 0-3600 seconds, got {settle_s:g}")
    window_s = _number(table, "window_s", where) if "window_s" in table else None
    if window_s is not None and not 60 <= window_s <= 7 * 86400:
        raise RulesError(f"{where}: window_s must be 60-604800 seconds, got {window_s:g}")
    return Rule(
        name=name,
        summary=summary,
        target=target,
        scope=scope,
        comparison=comparison,
        threshold=threshold,
        low=low,
        high=high,
        for_s=for_s,
        severity=_enum(Severity, table, "severity", where),
        line=line,
        aggregate=aggregate,
        window_s=window_s,
        held_by=held_by,
        settle_s=settle_s,
        bands=bands,
    )


def parse_rules(text: str) -> RuleSet:
    try:
        value = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)".
        raise RulesError(f"alert rules: not valid TOML: {exc}") from None
    version = value.get("schema_version")
    if version != RULES_SCHEMA_VERSION:
        raise RulesError(
            f"alert rules line 1: schema_version is {version!r}; this reader knows {RULES_SCHEMA_VERSION}"
        )
    interval_s = _number(value, "interval_s", "alert rules", 10.0)
    if interval_s <= 0:
        raise RulesError(f"alert rules: interval_s must be positive, got {interval_s:g}")
    maintenance_table = value.get("maintenance", {})
    if not isinstance(maintenance_table, dict):
        raise RulesError("alert rules: [maintenance] must be a table")
    where = "alert rules [maintenance]"
    maintenance = Maintenance(
        restart_s=_number(maintenance_table, "restart_s", where, 600.0),
        drain_s=_number(maintenance_table, "drain_s", where, 3600.0),
        settle_s=_number(maintenance_table, "settle_s", where, 0.0),
    )
    if maintenance.settle_s < 0:
        raise RulesError(f"{where}: settle_s must not be negative, got {maintenance.settle_s:g}")
    tables = value.get("rules", [])
    if not isinstance(tables, list) or not tables:
        raise RulesError("alert rules: no [[rules]] tables")
    lines = _header_lines(text, "[[rules]]")
    band_headers = _header_lines(text, "[[rules.bands]]")
    rules: list[Rule] = []
    for index, table in enumerate(tables):
        line = lines[index] if index < len(lines) else 0
        after = lines[index + 1] if index + 1 < len(lines) else math.inf
        band_lines = [n for n in band_headers if line < n < after]
        rule = _parse_rule(table, line, index, band_lines)
        if any(r.name == rule.name for r in rules):
            raise RulesError(f"alert rules line {line}: rule {rule.name!r} is defined twice")
        rules.append(rule)
    return RuleSet(int(version), interval_s, maintenance, tuple(rules))


def load_rules(path: Path = DEFAULT_RULES_FILE) -> RuleSet:
    try:
        text = path.read_text()
    except OSError as exc:
        raise RulesError(f"alert rules {path}: cannot be read ({exc.strerror})") from None
    try:
        return parse_rules(text)
    except RulesError as exc:
        raise RulesError(f"{path}: {exc}") from None
