"""Class-data-sharing archives of the image's JVMs: one per class path (each Kafka version's
libs, ZooKeeper's lib), recorded at image build by starting the server once, then named on
every start of a JVM with that class path.

Why: a Kafka broker spends about a third of its start-up CPU loading and verifying classes
(about 8 CPU-s without an archive, 5.5 with one, measured on the 2-core reference machine).
Local VMs share a few cores, and every cluster start, roll and tool run pays it again. An
archive that does not match the JVM (Java upgraded after the build) is ignored by the JVM
with a warning in the process's log, never fatal: `-Xshare:auto` is the default.

`python -m planner.contracts.vm_config class-archives --root ROOT` records them.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from planner.errors import PlannerError

ARCHIVE_NAME: Final = "classes.jsa"
KAFKA_MAIN: Final = "kafka.Kafka"
KAFKA_STORAGE_TOOL: Final = "kafka.tools.StorageTool"
ZOOKEEPER_MAIN: Final = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# The recording run's server: loopback, a few seconds.
RECORD_ADDRESS: Final = "127.0.0.1"
READY_TIMEOUT_S: Final = 180.0
SETTLE_S: Final = 5.0
"""After the port answers: the rest of start-up (the broker registers, the controller
elects itself) loads classes too."""
EXIT_TIMEOUT_S: Final = 300.0
"""Kafka 4 takes most of a minute to stop on a loaded machine; the JVM dumps after that."""


class ArchiveError(PlannerError, RuntimeError):
    """A recording run failed; the message quotes the server's last lines."""


def archive_path(class_dir: Path) -> Path:
    """Where the archive of the JVMs whose class path is `class_dir/*` lives: beside that
    folder (opt/kaas/kafka/4.3.1/libs -> opt/kaas/kafka/4.3.1/classes.jsa)."""
    return class_dir.parent / ARCHIVE_NAME


def class_path_options(class_dir: str | Path) -> list[str]:
    """The options that name a JVM's class path: the archive recorded for it when the image
    has one, then `-cp class_dir/*`. The class path string must be the recording run's, or
    the JVM ignores the archive."""
    archive = archive_path(Path(class_dir))
    sharing = [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []
    return [*sharing, "-cp", f"{class_dir}/*"]


@dataclass(frozen=True)
class Recording:
    """One server run that records an archive: its main class and arguments, the port that
    answers once it is up, and the runs that prepare its data first."""

    main: str
    arguments: tuple[str, ...]
    ready_port: int
    preparations: tuple[tuple[str, ...], ...] = ()


def free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((RECORD_ADDRESS, 0))
        return [s.getsockname()[1] for s in sockets]


def kafka_recording(libs: Path, work: Path) -> Recording:
    """A single-node KRaft broker and controller (every Kafka version of the image runs one):
    it loads the broker's, the controller's and the log layer's classes."""
    broker_port, controller_port = free_ports(2)
    config = work / "server.properties"
    config.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@{RECORD_ADDRESS}:{controller_port}",
                f"listeners=PLAINTEXT://{RECORD_ADDRESS}:{broker_port},"
                f"CONTROLLER://{RECORD_ADDRESS}:{controller_port}",
                "controller.listener.names=CONTROLLER",
                f"log.dirs={work / 'data'}",
                "offsets.topic.replication.factor=1",
                "",
            ]
        )
    )
    format_run = (
        *class_path_options(libs),
        KAFKA_STORAGE_TOOL,
        "format",
        "--cluster-id",
        "a0ClassArchiveRun0000A",
        "--config",
        str(config),
    )
    return Recording(KAFKA_MAIN, (str(config),), broker_port, (format_run,))


def zookeeper_recording(work: Path) -> Recording:
    (port,) = free_ports(1)
    config = work / "zoo.cfg"
    config.write_text(
        f"dataDir={work / 'data'}\nclientPort={port}\nclientPortAddress={RECORD_ADDRESS}\n"
        "admin.enableServer=false\n"
    )
    return Recording(ZOOKEEPER_MAIN, (str(config),), port)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((RECORD_ADDRESS, port), timeout=1.0):
            return True
    except OSError:
        return False


def record_archive(
    java: str,
    class_dir: Path,
    make_recording: Callable[[Path], Recording],
    *,
    heap: Sequence[str] = ("-Xmx512m",),
) -> Path:
    """Run the server once with -XX:ArchiveClassesAtExit, stop it cleanly (the JVM writes
    the archive as it exits) and put the archive in place; an existing one is replaced."""
    target = archive_path(class_dir)
    with tempfile.TemporaryDirectory(prefix="kaas-class-archive-") as folder:
        work = Path(folder)
        recording = make_recording(work)
        log = work / "run.log"
        with log.open("w") as out:
            for prepare in recording.preparations:
                done = subprocess.run(
                    [java, "-Xmx128m", *prepare], stdout=out, stderr=subprocess.STDOUT, timeout=300
                )
                if done.returncode != 0:
                    raise ArchiveError(
                        f"preparing the run ({' '.join(prepare)}) failed: {_tail(log)}"
                    )
            staged = work / ARCHIVE_NAME
            command = [
                java,
                *heap,
                f"-XX:ArchiveClassesAtExit={staged}",
                "-cp",
                f"{class_dir}/*",
                recording.main,
                *recording.arguments,
            ]
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            try:
                _await_ready(process, recording.ready_port, log)
                time.sleep(SETTLE_S)
                process.send_signal(signal.SIGTERM)
                process.wait(EXIT_TIMEOUT_S)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        if not staged.is_file():
            raise ArchiveError(f"{recording.main} exited without writing {staged}: {_tail(log)}")
        target.unlink(missing_ok=True)
        # The archive is read by JVMs of every user of the image, written once.
        staged.chmod(0o444)
        staged.replace(target)
    return target


def _await_ready(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _answers(port):
        if process.poll() is not None:
            raise ArchiveError(f"the recording run exited early: {_tail(log)}")
        if time.monotonic() > deadline:
            raise ArchiveError(f"port {port} did not answer within {READY_TIMEOUT_S:.0f}s")
        time.sleep(0.5)


def _tail(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return " | ".join(lines[-3:]) or "no output"
