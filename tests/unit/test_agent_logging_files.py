from __future__ import annotations

import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agent.logging_files import LoggingFiles, rendered_logging_files
from planner.contracts.log_limits import LogLimits
from planner.contracts.vm_config.broker import render_kafka_log4j
from planner.contracts.vm_config.kraft import render_kafka_log4j2
from planner.contracts.vm_config.zookeeper import render_zookeeper_logback
from tests.unit.agent_fakes import settings_for

pytestmark = pytest.mark.unit

SMALL = LogLimits(max_file_mb=7, files=3)
KRAFT = {"controller_bootstrap": "127.0.1.1:9093"}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # ZooKeeper mode: the broker's Log4j 1 file and ZooKeeper's logback, where named.
        (
            {"broker_log_config": "b.properties", "zookeeper_log_config": "z.xml"},
            {"b.properties": render_kafka_log4j(SMALL), "z.xml": render_zookeeper_logback(SMALL)},
        ),
        # KRaft: the broker's and controller's Log4j 2 file in config_dir; no Log4j 1 file.
        (
            {**KRAFT, "broker_log_config": "b.properties", "zookeeper_log_config": "z.xml"},
            {
                "config/kafka-log4j2.properties": render_kafka_log4j2(SMALL),
                "z.xml": render_zookeeper_logback(SMALL),
            },
        ),
        ({}, {}),  # nothing named: nothing kept
        (KRAFT, {"config/kafka-log4j2.properties": render_kafka_log4j2(SMALL)}),
    ],
)
def test_the_files_kept_follow_the_mode_and_the_settings(
    tmp_path: Path, overrides: dict[str, str], expected: dict[str, str]
) -> None:
    named = {k: str(tmp_path / v) if k.endswith("_log_config") else v for k, v in overrides.items()}
    files = rendered_logging_files(settings_for(tmp_path, **named), SMALL)
    assert {str(p.relative_to(tmp_path)): t for p, t in files.items()} == expected


def test_a_bounds_change_rewrites_only_the_files_that_differ(tmp_path: Path) -> None:
    broker, zookeeper = tmp_path / "log4j.properties", tmp_path / "logback.xml"
    settings = settings_for(
        tmp_path, broker_log_config=str(broker), zookeeper_log_config=str(zookeeper)
    )
    broker.write_text(render_kafka_log4j(LogLimits()))
    zookeeper.write_text("<configuration/>")  # an older file
    files = LoggingFiles(settings)
    files.follow(LogLimits())
    assert files.written == [zookeeper]
    assert zookeeper.read_text() == render_zookeeper_logback(LogLimits())
    assert stat.S_IMODE(zookeeper.stat().st_mode) == 0o644  # the JVMs' users read it

    files.follow(SMALL)
    assert files.written == [broker, zookeeper]
    assert "MaxFileSize=7MB" in broker.read_text()
    assert "<maxIndex>3</maxIndex>" in zookeeper.read_text()
    assert not list(tmp_path.glob(".*.tmp"))

    broker.write_text("changed by hand")
    files.follow(SMALL)  # the same bounds: the disk is not looked at again
    assert broker.read_text() == "changed by hand"


def test_a_file_that_cannot_be_written_is_said_and_tried_again(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "logback.xml"
    files = LoggingFiles(settings_for(tmp_path, zookeeper_log_config=str(missing)))
    files.follow(SMALL)
    assert files.problem is not None
    assert "logging files not updated" in files.problem
    assert files.applied is None
    missing.parent.mkdir()
    files.follow(SMALL)
    assert files.problem is None
    assert missing.read_text() == render_zookeeper_logback(SMALL)


def test_the_reloading_frameworks_look_at_their_file_again() -> None:
    assert 'scan="true" scanPeriod="10 seconds"' in render_zookeeper_logback()
    assert render_kafka_log4j2().startswith("monitorInterval = 10\n")


def test_zookeeper_logs_no_line_per_tls_client_or_four_letter_word() -> None:
    rendered = ET.fromstring(render_zookeeper_logback())
    levels = {logger.get("name"): logger.get("level") for logger in rendered.iter("logger")}
    assert levels["org.apache.zookeeper.server.auth.X509AuthenticationProvider"] == "WARN"
    assert levels["org.apache.zookeeper.server.NettyServerCnxn"] == "WARN"
    assert rendered.find("root").get("level") == "INFO"  # type: ignore[union-attr]
