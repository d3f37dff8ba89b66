"""Control of the broker process behind one interface: systemd on a real VM, a child JVM on
the local provider. Processes are known by pid and start time, never by name."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from enum import StrEnum
from pathlib import Path

import psutil

from agent.errors import AgentError
from agent.ports import PAUSED, RUNNING, STOPPED, BrokerSupervisor, ProcessState
from agent.settings import AgentSettings
from planner.contracts.vm_config.class_archive import class_path_options
from planner.contracts.vm_config.jolokia import (
    CONTROLLER_JOLOKIA_PROPERTIES,
    JOLOKIA_PROPERTIES,
    jolokia_agent_option,
)
from planner.contracts.vm_config.kraft import log_file_option

__all__ = [
    "BrokerSupervisor",
    "KafkaProcess",
    "LocalProcessSupervisor",
    "SystemdSupervisor",
    "make_supervisor",
]


class ImageError(AgentError, RuntimeError):
    pass


def kafka_libs(image_root: Path, kafka_version: str) -> Path:
    manifest = image_root / "opt" / "kaas" / "image.json"
    try:
        libs = json.loads(manifest.read_text())["kafka_versions"][kafka_version]
    except OSError as exc:
        raise ImageError(f"cannot read the image manifest {manifest} ({exc.strerror})") from None
    except (ValueError, KeyError, TypeError):
        raise ImageError(f"Kafka {kafka_version} is not in the image manifest {manifest}") from None
    return image_root / libs


def jolokia_agent(image_root: Path) -> Path:
    return image_root / "opt" / "kaas" / "jolokia" / "jolokia-agent.jar"


class KafkaProcess(StrEnum):
    """The Kafka processes an agent supervises: the broker, on a KRaft cluster's first VMs
    the controller (a process of its own: isolated mode), and MirrorMaker where flows run."""

    BROKER = "kafka"
    CONTROLLER = "controller"
    MIRROR_MAKER = "mirror-maker"
    """MirrorMaker 2, when flows into the cluster run on the VM (agent/mirror_maker.py)."""


KAFKA_LOG4J2 = "kafka-log4j2.properties"
KAFKA_TOOLS_LOG4J2 = "kafka-tools-log4j2.properties"
CONTROLLER_PROPERTIES = "controller.properties"


def start_recorded(
    command: list[str], log_file: Path, pid_file: Path, cwd: str | None = None
) -> None:
    """Start a process of the VM in a session of its own, its output appended to `log_file`,
    and record it in `pid_file` (pid and start time, where `kaas vm` and `kaas down` find it)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        child = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    record = {"pid": child.pid, "create_time": psutil.Process(child.pid).create_time()}
    tmp = pid_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.rename(pid_file)


class LocalProcessSupervisor:
    """The broker (or the controller) as a child JVM of the agent; its pid file lets `kaas vm`
    and `kaas down` find it."""

    def __init__(
        self, settings: AgentSettings, process: KafkaProcess = KafkaProcess.BROKER
    ) -> None:
        self.settings = settings
        self.process = process
        self.pid_file = settings.local_state_dir / f"{process.value}.pid"
        self.log_file = settings.logs_dir / f"{process.value}.log"

    def _record(self) -> tuple[int, float] | None:
        try:
            value = json.loads(self.pid_file.read_text())
            return int(value["pid"]), float(value["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _process(self) -> psutil.Process | None:
        record = self._record()
        if record is None:
            return None
        pid, create_time = record
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap our own exited child
        try:
            process = psutil.Process(pid)
            if (
                abs(process.create_time() - create_time) > 0.05
                or process.status() == psutil.STATUS_ZOMBIE
            ):
                return None
            return process
        except psutil.Error:
            return None

    def pid(self) -> int | None:
        process = self._process()
        return process.pid if process else None

    def state(self) -> ProcessState:
        process = self._process()
        if process is None:
            return STOPPED
        try:
            return PAUSED if process.status() == psutil.STATUS_STOPPED else RUNNING
        except psutil.Error:
            return STOPPED

    def command(self, kafka_version: str) -> list[str]:
        s = self.settings
        controller = self.process is KafkaProcess.CONTROLLER
        # Kafka 4 (KRaft) logs through Log4j 2, 3.x through Log4j 1.
        logging = (
            (
                f"-Dlog4j2.configurationFile=file:{s.config_dir / KAFKA_LOG4J2}",
                log_file_option(controller),
            )
            if s.kraft
            else (f"-Dlog4j.configuration=file:{s.config_dir / 'kafka-log4j.properties'}",)
        )
        # Log4j 1 names one file (server.log): a migration's controller writes its own
        # beside the broker's, in a folder of its own.
        logs_dir = s.logs_dir / "controller" if controller and not s.kraft else s.logs_dir
        return [
            s.java,
            *shlex.split(s.controller_heap if controller else s.kafka_heap),
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={logs_dir}",
            *logging,
            # Each process its own Jolokia port: the controller-only metrics (active
            # controller, offline partitions) are in the controller's JVM.
            jolokia_agent_option(
                jolokia_agent(s.image_root),
                s.config_dir,
                CONTROLLER_JOLOKIA_PROPERTIES if controller else JOLOKIA_PROPERTIES,
            ),
            *class_path_options(kafka_libs(s.image_root, kafka_version)),
            "kafka.Kafka",
            str(s.config_dir / (CONTROLLER_PROPERTIES if controller else "server.properties")),
        ]

    def start(self, kafka_version: str) -> None:
        if self.state() != STOPPED:
            return
        start_recorded(self.command(kafka_version), self.log_file, self.pid_file)

    def stop(self, timeout: float) -> None:
        process = self._process()
        if process is None:
            return
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
            process.send_signal(signal.SIGTERM)  # Kafka's controlled shutdown
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._process() is not None:
            time.sleep(0.2)
        if self._process() is not None:
            with contextlib.suppress(psutil.Error):
                process.kill()
            while self._process() is not None:
                time.sleep(0.1)


class SystemdSupervisor:
    """The broker as the systemd unit kaas-kafka (the controller: kaas-controller); the env
    file beside the config names its libs."""

    def __init__(
        self, settings: AgentSettings, process: KafkaProcess = KafkaProcess.BROKER
    ) -> None:
        self.settings = settings
        self.process = process
        self.unit = f"kaas-{process.value}.service"

    def _show(self) -> dict[str, str]:
        out = subprocess.run(
            ["systemctl", "show", self.unit, "-p", "MainPID,ActiveState,SubState"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def pid(self) -> int | None:
        pid = int(self._show().get("MainPID", "0"))
        return pid or None

    def state(self) -> ProcessState:
        pid = self.pid()
        if pid is None:
            return STOPPED
        try:
            return PAUSED if psutil.Process(pid).status() == psutil.STATUS_STOPPED else RUNNING
        except psutil.Error:
            return STOPPED

    def start(self, kafka_version: str) -> None:
        s = self.settings
        controller = self.process is KafkaProcess.CONTROLLER
        env = self.settings.config_dir / ("controller.env" if controller else "env")
        heap = s.controller_heap if controller else s.kafka_heap
        env.write_text(
            f"KAFKA_LIBS={kafka_libs(s.image_root, kafka_version)}\nKAFKA_HEAP={heap}\nJOLOKIA_HOST={s.address}\n"
        )
        subprocess.run(["systemctl", "start", self.unit], check=True, timeout=60)

    def stop(self, timeout: float) -> None:
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).send_signal(signal.SIGCONT)
        subprocess.run(["systemctl", "stop", self.unit], check=True, timeout=timeout + 30)


def make_supervisor(
    settings: AgentSettings, process: KafkaProcess = KafkaProcess.BROKER
) -> BrokerSupervisor:
    if settings.supervisor == "systemd":
        return SystemdSupervisor(settings, process)
    return LocalProcessSupervisor(settings, process)
