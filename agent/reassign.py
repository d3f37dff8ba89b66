"""Partition reassignment (KIP-455) with replication throttles, through Kafka's own
`kafka-reassign-partitions` (org.apache.kafka.tools.reassign.ReassignPartitionsCommand)
run from the image's jars.

confluent-kafka (librdkafka) has no AlterPartitionReassignments call, so the Java Admin
client of Kafka's own tool does it: `--execute --throttle` starts a batch and sets the
throttles on exactly the moving replicas, `--verify` reports progress and removes the
throttles once the batch is complete, `--cancel` stops it, `--list` shows what runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.errors import AgentError
from planner.pki.client_settings import InternalClient

TOOL = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


class ReassignToolError(AgentError, RuntimeError):
    pass


@dataclass(frozen=True)
class PartitionMove:
    topic: str
    partition: int
    replicas: tuple[int, ...]  # target replica list, preferred leader first


@dataclass(frozen=True)
class VerifyResult:
    complete: bool
    in_progress: tuple[tuple[str, int], ...]
    throttles_removed: bool


def reassignment_json(moves: Sequence[PartitionMove]) -> str:
    """Kafka's reassignment JSON, the format kafka-reassign-partitions reads."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": m.topic, "partition": m.partition, "replicas": list(m.replicas)}
                for m in moves
            ],
        }
    )


_IN_PROGRESS = re.compile(r"Reassignment of partition (\S+)-(\d+) is still in progress")


def parse_verify_output(output: str) -> VerifyResult:
    in_progress = tuple(
        (topic, int(partition)) for topic, partition in _IN_PROGRESS.findall(output)
    )
    complete = not in_progress and "is completed" in output
    return VerifyResult(complete, in_progress, "Throttle was removed" in output)


class ReassignmentTool:
    def __init__(
        self, java: str, kafka_libs: Path, kafka: InternalClient, timeout_s: float = 120.0
    ) -> None:
        self.java = java
        self.kafka_libs = kafka_libs
        self.kafka = kafka
        self.timeout_s = timeout_s

    def _run(self, *args: str, moves: Sequence[PartitionMove] | None = None) -> str:
        with (
            tempfile.TemporaryDirectory(prefix="kaas-reassign-") as scratch,
            self.kafka.java_properties_file() as command_config,
        ):
            command = [
                self.java,
                "-Xmx256m",
                "-cp",
                f"{self.kafka_libs}/*",
                TOOL,
                "--bootstrap-server",
                self.kafka.bootstrap_servers,
                "--command-config",
                str(command_config),
            ]
            if moves is not None:
                plan = Path(scratch) / "reassignment.json"
                plan.write_text(reassignment_json(moves))
                command += ["--reassignment-json-file", str(plan)]
            try:
                done = subprocess.run(
                    [*command, *args],
                    capture_output=True,
                    text=True,
                    timeout=self.timeout_s,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise ReassignToolError(
                    f"kafka-reassign-partitions {' '.join(args)} timed out"
                ) from None
        output = done.stdout + done.stderr
        if done.returncode != 0:
            last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
            raise ReassignToolError(f"kafka-reassign-partitions {' '.join(args)} failed: {last[0]}")
        return output

    def execute(self, moves: Sequence[PartitionMove], throttle_bytes_per_s: int) -> None:
        if not moves:
            return
        # --additional: an agent resuming a batch resubmits moves Kafka may already run.
        self._run("--execute", "--additional", "--throttle", str(throttle_bytes_per_s), moves=moves)

    def verify(self, moves: Sequence[PartitionMove]) -> VerifyResult:
        """Progress of a batch; once it is complete this also removes its throttles."""
        return parse_verify_output(self._run("--verify", moves=moves))

    def cancel(self, moves: Sequence[PartitionMove]) -> None:
        self._run("--cancel", moves=moves)

    def active(self) -> str:
        return self._run("--list")
