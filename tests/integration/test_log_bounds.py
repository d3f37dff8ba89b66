"""Kafka's and ZooKeeper's logs stay within the spec's bound: each rendered logging config
(log4j for the 3.x broker, Log4j 2 for Kafka 4's broker and controller, logback for ZooKeeper) runs in a JVM with the image's own logging jars
and the JVM property the local VMs set (kafka.logs.dir, zookeeper.log.dir), and that JVM logs
4.5 MB in lines as long as a stack trace's, at up to 1 MB/s. The files it leaves
never hold more than (files + 1) x max_file_mb, and the newest lines are still there."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from agent.logging_files import LoggingFiles
from agent.settings import parse_settings
from management_plane.local.image import find_java, load_image
from planner.contracts.log_limits import LogLimits
from planner.contracts.vm_config.broker import KAFKA_SERVER_LOG, render_kafka_log4j
from planner.contracts.vm_config.kraft import (
    KRAFT_CONTROLLER_LOG,
    log_file_option,
    render_kafka_log4j2,
)
from planner.contracts.vm_config.zookeeper import ZOOKEEPER_SERVER_LOG, render_zookeeper_logback

pytestmark = pytest.mark.integration

LIMITS = LogLimits(max_file_mb=1, files=2)
NOISE_LINES = 4500  # about 4.5 MB: the files roll four times
# Logs through SLF4J, as Kafka and ZooKeeper do, at most about 1 MB/s (a line of 1 KB a
# millisecond); the last line names itself.
NOISY_JAVA = """
public class Noisy {
    public static void main(String[] args) throws Exception {
        org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger("kafka.server.ReplicaFetcherThread");
        String filler = "x".repeat(900);
        long lines = Long.parseLong(args[0]);
        long n = 0;
        while (n < lines) {
            log.error("noisy line " + (n++) + " " + filler);
            Thread.sleep(1);
        }
        log.error("LAST LINE " + n);
    }
}
"""


def _noisy_jvm(tmp_path: Path, classpath: str, properties: list[str]) -> str:
    source = tmp_path / "Noisy.java"
    source.write_text(NOISY_JAVA)
    result = subprocess.run(
        [str(find_java()), "-cp", classpath, *properties, str(source), str(NOISE_LINES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout + result.stderr


def _assert_bounded(logs: Path, name: str, slack_per_file: int) -> None:
    files = sorted(p for p in logs.iterdir() if p.name.startswith(name))
    sizes = {p.name: p.stat().st_size for p in files}
    total = sum(sizes.values())
    print(
        f"{name}: {len(files)} files, {total / 2**20:.2f} MiB (bound {LIMITS.bound_bytes / 2**20:.0f} MiB): {sizes}"
    )
    assert len(files) == LIMITS.files + 1, sizes  # it did roll, and kept `files` of them
    assert total <= LIMITS.bound_bytes + (LIMITS.files + 1) * slack_per_file, sizes
    assert "LAST LINE" in (logs / name).read_text()


def test_the_brokers_log4j_keeps_its_bound_under_noise(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    config = tmp_path / "log4j.properties"
    config.write_text(render_kafka_log4j(LIMITS))
    libs = load_image(verify=False).kafka_libs("3.9.2")
    console = _noisy_jvm(
        tmp_path,
        f"{libs}/*",
        [f"-Dlog4j.configuration=file:{config}", f"-Dkafka.logs.dir={logs}"],
    )
    # log4j checks the size at every line: a file passes it by at most the line that rolls it.
    _assert_bounded(logs, KAFKA_SERVER_LOG, 4096)
    assert "noisy line" not in console  # nothing to the supervisor's unbounded capture


@pytest.mark.parametrize("controller", [False, True], ids=["broker", "controller"])
def test_kafka_4s_log4j2_keeps_its_bound_under_noise(tmp_path: Path, controller: bool) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    config = tmp_path / "log4j2.properties"
    config.write_text(render_kafka_log4j2(LIMITS))
    libs = load_image(verify=False).kafka_libs("4.3.1")
    console = _noisy_jvm(
        tmp_path,
        f"{libs}/*",
        [
            f"-Dlog4j2.configurationFile=file:{config}",
            f"-Dkafka.logs.dir={logs}",
            log_file_option(controller),
        ],
    )
    # Log4j 2 checks the size before every line: a file passes it by at most one line.
    _assert_bounded(logs, KRAFT_CONTROLLER_LOG if controller else KAFKA_SERVER_LOG, 4096)
    assert "noisy line" not in console


def test_zookeepers_logback_keeps_its_bound_under_noise(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    config = tmp_path / "logback.xml"
    config.write_text(render_zookeeper_logback(LIMITS))
    console = _noisy_jvm(
        tmp_path,
        f"{load_image(verify=False).zookeeper_lib}/*",
        [f"-Dlogback.configurationFile={config}", f"-Dzookeeper.log.dir={logs}"],
    )
    # logback checks the size at most every 100 ms or so (its invocation gate): a file passes
    # it by what is written meanwhile, here about 100 KB.
    _assert_bounded(logs, ZOOKEEPER_SERVER_LOG, 256 * 1024)
    assert "noisy line" not in console


def test_running_jvms_take_new_bounds_when_the_agent_rewrites_their_files(
    tmp_path: Path,
) -> None:
    """Kafka 4's Log4j 2 and ZooKeeper's logback, logging at 4 MB a file, are rewritten by the
    agent's LoggingFiles to 1 MB while they log: the files rolled after the reload hold 1 MB,
    with no restart. (The 3.x broker's Log4j 1 reads its file once: not checked here.)"""
    config = tmp_path / "config"
    config.mkdir()
    settings = parse_settings(
        {
            "cluster": "c",
            "zookeeper_hosts": "127.0.0.1:2181",
            "vm_id": "vm-0",
            "address": "127.0.0.1",
            "zone": "zone-a",
            "data_dir": str(tmp_path / "data"),
            "config_dir": str(config),
            "controller_bootstrap": "127.0.0.1:9093",
            "zookeeper_log_config": str(config / "logback.xml"),
        }
    )
    files = LoggingFiles(settings)
    files.follow(LogLimits(max_file_mb=4, files=1))
    image = load_image(verify=False)
    kafka_logs, zookeeper_logs = tmp_path / "kafka-logs", tmp_path / "zookeeper-logs"
    kafka_logs.mkdir()
    zookeeper_logs.mkdir()
    (tmp_path / "Noisy.java").write_text(NOISY_JAVA)
    lines = "16000"  # about 16 MB, at most 1 MB/s
    java = [str(find_java()), "-cp"]
    jvms = [
        subprocess.Popen(
            [
                *java,
                f"{image.kafka_libs('4.3.1')}/*",
                f"-Dlog4j2.configurationFile=file:{config / 'kafka-log4j2.properties'}",
                f"-Dkafka.logs.dir={kafka_logs}",
                str(tmp_path / "Noisy.java"),
                lines,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [
                *java,
                f"{image.zookeeper_lib}/*",
                f"-Dlogback.configurationFile={config / 'logback.xml'}",
                f"-Dzookeeper.log.dir={zookeeper_logs}",
                str(tmp_path / "Noisy.java"),
                lines,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
    ]
    try:
        live = (kafka_logs / KAFKA_SERVER_LOG, zookeeper_logs / ZOOKEEPER_SERVER_LOG)
        deadline = time.monotonic() + 60
        # Both have read the 4 MB files and are logging before the bounds change.
        while not all(p.exists() and p.stat().st_size > 0 for p in live):
            assert time.monotonic() < deadline, "the JVMs did not start logging"
            time.sleep(0.2)
        files.follow(LogLimits(max_file_mb=1, files=1))
        assert len(files.written) == 2
        for jvm in jvms:
            assert jvm.wait(timeout=180) == 0
    finally:
        for jvm in jvms:
            jvm.kill()
    for logs, name, slack in (
        (kafka_logs, KAFKA_SERVER_LOG, 4096),
        (zookeeper_logs, ZOOKEEPER_SERVER_LOG, 256 * 1024),
    ):
        sizes = {p.name: p.stat().st_size for p in sorted(logs.iterdir())}
        print(f"{name} after the reload: {sizes}")
        # At 4 MB a file, 16 MB would leave a full 4 MB file behind the live one.
        assert sizes[f"{name}.1"] <= 2**20 + slack, sizes
        assert sizes[name] <= 2**20 + slack, sizes
        assert "LAST LINE" in (logs / name).read_text()
