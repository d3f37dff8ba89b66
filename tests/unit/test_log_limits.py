"""spec.logs: its parser's refusals, the bound, and the rendered rolling configs."""

from __future__ import annotations

import json

import pytest

from planner.contracts.fields import ContractError
from planner.contracts.log_limits import LogLimits, parse_log_limits
from planner.contracts.spec import ClusterSpec, SpecError, parse_spec
from planner.contracts.vm_config.broker import render_kafka_log4j
from planner.contracts.vm_config.zookeeper import render_zookeeper_logback

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({}, LogLimits(100, 10)),
        ({"max_file_mb": 5, "files": 3}, LogLimits(5, 3)),
    ],
)
def test_log_limits_parse(value: dict[str, int], expected: LogLimits) -> None:
    assert parse_log_limits(value) == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([], "spec.logs must be an object"),
        ({"max_file_mb": 0}, r"spec.logs.max_file_mb must be an integer 1-10240, got 0"),
        ({"files": True}, r"spec.logs.files must be an integer 1-100, got True"),
        ({"files": 101}, r"spec.logs.files must be an integer 1-100, got 101"),
        ({"size": 1}, "spec.logs has unknown keys: size"),
    ],
)
def test_log_limits_refusals(value: object, problem: str) -> None:
    with pytest.raises(ContractError, match=problem):
        parse_log_limits(value)


def test_spec_carries_logs_only_when_set() -> None:
    spec = ClusterSpec("c", "3.9.2", 3, ("a", "b", "c"))
    assert "logs" not in spec.to_json() and spec.log_limits == LogLimits()
    limited = ClusterSpec("c", "3.9.2", 3, ("a", "b", "c"), logs=LogLimits(2, 4))
    assert parse_spec(limited.encode()).logs == LogLimits(2, 4)
    bad = {**limited.to_json(), "logs": {"files": 0}}
    with pytest.raises(SpecError, match=r"spec\.logs\.files"):
        parse_spec(json.dumps(bad))
    assert LogLimits(2, 4).bound_bytes == 5 * 2 * 2**20


def test_rendered_configs_roll_at_the_limits_and_write_nothing_to_the_console() -> None:
    log4j = render_kafka_log4j(LogLimits(7, 3))
    assert "log4j.rootLogger=INFO, file\n" in log4j
    assert "log4j.appender.file.MaxFileSize=7MB\n" in log4j
    assert "log4j.appender.file.MaxBackupIndex=3\n" in log4j
    assert "${kafka.logs.dir}/server.log" in log4j and "ConsoleAppender" not in log4j
    logback = render_zookeeper_logback(LogLimits(7, 3))
    assert "<maxFileSize>7MB</maxFileSize>" in logback and "<maxIndex>3</maxIndex>" in logback
    assert "${zookeeper.log.dir}/zookeeper-server.log.%i" in logback
    assert "ConsoleAppender" not in logback
