"""A user's terminal shows what `kaas` says, not what its libraries log: librdkafka's
`%N|...` lines and Spark's (log4j) lines go to files under the cluster's folder."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from analytics.session import LOG_FILE_ENV
from planner.client_logs import client_logger, log_client_lines_to
from tests.harness import ClusterHandle, kaas_cli

pytestmark = pytest.mark.integration

LIBRDKAFKA_LINE = re.compile(r"^%\d\|\d+\.\d+\|", re.MULTILINE)
SPARK_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO|ERROR) ", re.MULTILINE)


def library_noise(text: str) -> list[str]:
    """The lines of `text` that a library, not `kaas`, printed."""
    found = [m.group(0) for m in LIBRDKAFKA_LINE.finditer(text)]
    found += [m.group(0) for m in SPARK_LINE.finditer(text)]
    found += [line for line in text.splitlines() if "log4j" in line or "kaas.kafka_client" in line]
    found += [line for line in text.splitlines() if "Setting default log level" in line]
    return found


@pytest.fixture
def restored_client_logger() -> Iterator[None]:
    handlers = list(client_logger.handlers)
    propagate, level = client_logger.propagate, client_logger.level
    yield
    for handler in list(client_logger.handlers):
        client_logger.removeHandler(handler)
        handler.close()
    for handler in handlers:
        client_logger.addHandler(handler)
    client_logger.propagate, client_logger.level = propagate, level


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_librdkafka_lines_go_to_the_client_log_and_not_to_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], restored_client_logger: None
) -> None:
    log = tmp_path / "logs" / "kafka-clients.log"
    log_client_lines_to(log)
    # Nothing listens there: librdkafka logs the refused connection.
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}, logger=client_logger)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        producer.poll(0.5)
        for handler in client_logger.handlers:
            handler.flush()
        if log.exists() and "Connection refused" in log.read_text():
            break
    assert "Connection refused" in log.read_text()
    assert client_logger.level == logging.INFO
    captured = capfd.readouterr()
    assert "Connection refused" not in captured.out + captured.err
    assert library_noise(captured.out + captured.err) == []


def test_the_demo_and_the_audit_print_no_library_lines(
    kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    ledger = tmp_path / "ledger"
    env = {**os.environ, "KAAS_HOME": str(home), "KAAS_PRODUCED_LEDGER_DIR": str(ledger)}
    env.pop(LOG_FILE_ENV, None)

    demo = kaas_cli(
        "demo",
        *("--home", str(kafka_cluster.home), "--messages", "3000", "--partitions", "3"),
        *("--consumers", "2", "--no-managed"),
        env=env,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "OK: all 3000 messages arrived exactly once and in order per key" in demo.stdout
    assert library_noise(demo.stdout + demo.stderr) == []

    audit = kaas_cli(
        "analytics",
        "audit",
        *("--bootstrap-servers", kafka_cluster.bootstrap_servers, "--ledger", str(ledger)),
        *("--client-dir", str(kafka_cluster.admin.identity.directory)),
        *("--out", str(tmp_path / "audit")),
        env=env,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert library_noise(audit.stdout + audit.stderr) == []
    # Spark did log: into the file under the cluster's folder.
    spark_log = home / "logs" / "spark.log"
    assert spark_log.is_file() and spark_log.stat().st_size > 0
    assert re.search(r" (INFO|WARN) ", spark_log.read_text())
