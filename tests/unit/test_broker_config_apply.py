"""The apply adapter's ordering rules, against an in-memory stand-in for the Admin client:
nothing is called when our checks fail, nothing is written when Kafka's dry run refuses,
and per-broker changes are undone when the cluster-wide step fails. The real broker is
exercised in tests/integration/test_broker_config.py."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from agent.broker_config import ConfigChange, ConfigDiff
from agent.broker_config.apply import REMOVAL_SETTLE_S, ConfigApplyError, apply_config_diff

pytestmark = pytest.mark.unit


class FakeAdmin:
    """One broker's per-broker dynamic layer over a fixed static layer."""

    def __init__(self, static: dict[str, str], refuse: dict[str, str] | None = None) -> None:
        self.static = static
        self.overrides: dict[str, str] = {}
        self.refuse = refuse or {}  # key -> Kafka's message
        self.calls: list[tuple[str, bool, list[tuple[str, str | None]]]] = []

    def describe_configs(self, resources: list[ConfigResource], **_: Any) -> dict[Any, Future]:
        self.calls.append(("describe", False, []))
        # confluent-kafka hands the source over as a plain int, as here.
        entries = {
            key: ConfigEntry(
                key,
                self.overrides.get(key, value),
                source=ConfigSource.DYNAMIC_BROKER_CONFIG.value  # type: ignore[arg-type]
                if key in self.overrides
                else ConfigSource.STATIC_BROKER_CONFIG.value,
            )
            for key, value in self.static.items()
        }
        return {resources[0]: done(entries)}

    def incremental_alter_configs(
        self, resources: list[ConfigResource], validate_only: bool = False, **_: Any
    ) -> dict[Any, Future]:
        entries = resources[0].incremental_configs
        ops = [(e.name, e.value) for e in entries]
        self.calls.append(("alter", validate_only, ops))
        refused = [self.refuse[name] for name, _ in ops if name in self.refuse]
        if refused:
            failed: Future = Future()
            failed.set_exception(KafkaException(KafkaError(KafkaError.INVALID_REQUEST, refused[0])))
            return {resources[0]: failed}
        if not validate_only:
            for entry in entries:
                if entry.incremental_operation == AlterConfigOpType.DELETE:
                    self.overrides.pop(entry.name, None)
                else:
                    self.overrides[entry.name] = str(entry.value)
        return {resources[0]: done(None)}

    def writes(self) -> list[list[tuple[str, str | None]]]:
        return [ops for kind, dry, ops in self.calls if kind == "alter" and not dry]


def done(value: object) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class RecordingDefaults:
    def __init__(self, fail_with: str | None = None, admin: FakeAdmin | None = None) -> None:
        self.fail_with = fail_with
        self.admin = admin
        self.altered: list[Sequence[ConfigChange]] = []

    def alter(self, changes: Sequence[ConfigChange]) -> None:
        self.altered.append(changes)
        if self.fail_with:
            raise ConfigApplyError(self.fail_with)
        if self.admin is not None:  # the fake has one layer: good enough to read back
            for c in changes:
                assert c.desired is not None
                self.admin.static[c.key] = c.desired


STATIC = {"num.io.threads": "4", "log.cleaner.threads": "1", "log.cleaner.backoff.ms": "15000"}


def test_our_own_checks_refuse_before_any_kafka_call() -> None:
    admin, defaults = FakeAdmin(dict(STATIC)), RecordingDefaults()
    diff = ConfigDiff(
        per_broker=(ConfigChange("num.io.threads", "4", "abc"),),
        cluster_wide=(ConfigChange("no.such.key", None, "1"),),
    )
    result = apply_config_diff(admin, 0, diff, defaults)  # type: ignore[arg-type]
    assert not result.ok and result.verified == ()
    assert "num.io.threads='abc' is not a whole number" in str(result.error)
    assert "unknown key 'no.such.key'" in str(result.error)
    assert admin.calls == [] and defaults.altered == []


def test_kafkas_dry_run_refusal_names_the_key_and_writes_nothing() -> None:
    admin = FakeAdmin(
        dict(STATIC),
        refuse={
            "log.cleaner.threads": "Log cleaner threads cannot be increased to more than double"
        },
    )
    defaults = RecordingDefaults()
    diff = ConfigDiff(
        per_broker=(ConfigChange("num.io.threads", "4", "5"),),
        cluster_wide=(ConfigChange("log.cleaner.threads", "1", "8"),),
    )
    result = apply_config_diff(admin, 0, diff, defaults)  # type: ignore[arg-type]
    assert result.error == (
        "Kafka refused log.cleaner.threads=8: Log cleaner threads cannot be increased to more "
        "than double; nothing applied"
    )
    assert admin.writes() == [] and defaults.altered == []


def test_a_failed_cluster_wide_step_undoes_the_per_broker_step() -> None:
    admin = FakeAdmin(dict(STATIC))
    admin.overrides["num.io.threads"] = "3"  # an earlier override, to be put back
    defaults = RecordingDefaults(
        fail_with="cluster-wide default of log.cleaner.backoff.ms refused: boom"
    )
    diff = ConfigDiff(
        per_broker=(
            ConfigChange("num.io.threads", "3", "5"),
            ConfigChange("log.cleaner.threads", "1", "2"),
        ),
        cluster_wide=(ConfigChange("log.cleaner.backoff.ms", "15000", "16000"),),
    )
    result = apply_config_diff(admin, 0, diff, defaults)  # type: ignore[arg-type]
    assert result.error == (
        "cluster-wide default of log.cleaner.backoff.ms refused: boom; "
        "the per-broker changes were undone"
    )
    assert admin.overrides == {"num.io.threads": "3"}
    assert admin.writes() == [
        [("num.io.threads", "5"), ("log.cleaner.threads", "2")],
        [("num.io.threads", "3"), ("log.cleaner.threads", None)],
    ]


def test_applied_changes_are_read_back() -> None:
    admin = FakeAdmin(dict(STATIC))
    defaults = RecordingDefaults(admin=admin)
    diff = ConfigDiff(
        per_broker=(ConfigChange("num.io.threads", "4", "5"),),
        cluster_wide=(ConfigChange("log.cleaner.backoff.ms", "15000", "16000"),),
    )
    result = apply_config_diff(admin, 0, diff, defaults)  # type: ignore[arg-type]
    assert result.ok and result.verified == diff.dynamic
    assert admin.overrides == {"num.io.threads": "5"}
    assert [list(c) for c in defaults.altered] == [list(diff.cluster_wide)]


def test_a_change_the_broker_never_shows_is_an_error_naming_it() -> None:
    admin = FakeAdmin(dict(STATIC))
    defaults = RecordingDefaults()  # claims success, changes nothing
    diff = ConfigDiff(cluster_wide=(ConfigChange("log.cleaner.backoff.ms", "15000", "16000"),))
    result = apply_config_diff(admin, 0, diff, defaults, read_back_s=0.5)  # type: ignore[arg-type]
    assert result.error is not None
    assert "does not show it" in result.error
    assert "log.cleaner.backoff.ms (broker reports '15000'" in result.error


def test_read_only_changes_are_not_applied_here() -> None:
    admin = FakeAdmin(dict(STATIC))
    diff = ConfigDiff(read_only=(ConfigChange("log.retention.hours", "24", "48"),))
    result = apply_config_diff(admin, 0, diff, RecordingDefaults())  # type: ignore[arg-type]
    assert result.ok and result.verified == ()
    assert admin.calls == []


def test_a_removal_showing_the_old_value_counts_only_once_it_has_settled() -> None:
    # Brokers switch the source before the value: "5 from server.properties" may be a moment
    # of the removal, or the file's own value. Only a value that stays is taken as final.
    admin = FakeAdmin({"num.io.threads": "5", "log.cleaner.threads": "1"})
    admin.overrides = {"num.io.threads": "5", "log.cleaner.threads": "2"}
    diff = ConfigDiff(
        per_broker=(
            ConfigChange("log.cleaner.threads", "2", None),
            ConfigChange("num.io.threads", "5", None),
        )
    )
    started = time.monotonic()
    result = apply_config_diff(admin, 0, diff, RecordingDefaults())  # type: ignore[arg-type]
    assert result.ok and result.verified == diff.per_broker
    assert time.monotonic() - started >= REMOVAL_SETTLE_S
    assert admin.overrides == {}
