"""The controller quorum through Kafka's own kafka-metadata-quorum tool (describe,
add-controller, remove-controller) and kafka-cluster (unregister), run from the image's jars.

Kafka's Java Admin client has these calls (describeMetadataQuorum, addRaftVoter,
removeRaftVoter, unregisterBroker); of the Python clients, only kafka-python has one of them
(DescribeQuorum, and only through a broker), so a describe asks the brokers first and runs
the tool when none answers; the other calls run the tools Kafka ships. The parsers of their
output are pure; the adapter holds no decision (agent/kraft_quorum.py decides).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from agent.errors import AgentError
from planner.contracts.kraft_quorum_state import (
    QuorumOutputError,
    QuorumReplica,
    QuorumStatus,
    parse_replication,
    parse_status,
)
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config.class_archive import class_path_options
from planner.kraft_quorum_reader import QuorumReadError, describe_quorum_through_brokers
from planner.pki.client_settings import InternalClient

METADATA_QUORUM_TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"
CLUSTER_TOOL = "org.apache.kafka.tools.ClusterTool"
TOOL_TIMEOUT_S = 120.0


class QuorumToolError(AgentError):
    """A quorum tool that failed, or answered what the contract's parser refuses."""


Runner = Callable[[Sequence[str]], str]
BrokerReader = Callable[[InternalClient, int], tuple[QuorumStatus, tuple[QuorumReplica, ...]]]


def run_tool(command: Sequence[str]) -> str:
    """Run a Kafka tool; its stdout, or QuorumToolError with the last line it printed."""
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise QuorumToolError(f"{command[-1]}: {exc}") from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise QuorumToolError(f"kafka tool failed: {(lines or ['no output'])[-1][:300]}")
    return done.stdout


class ControllerQuorum(Protocol):
    """The controller quorum as the agent reads and changes it."""

    def describe(self) -> tuple[QuorumStatus, tuple[QuorumReplica, ...]]: ...

    def add_controller(self) -> None: ...

    def remove_controller(self, node_id: int, directory_id: str) -> None: ...

    def unregister_broker(self, broker_id: int) -> None: ...


@dataclass(frozen=True)
class MetadataQuorumTool:
    """The real ControllerQuorum: Kafka's tools run with this VM's java and jars.

    `controller_config` is this VM's controller.properties: add-controller reads the
    controller's node id, endpoint and metadata directory from it, so it is run on the VM
    whose controller joins. `kafka` is the identity the tools present (mutual TLS on the
    controller and internal listeners) and the brokers kafka-cluster reaches."""

    java: str
    libs: str
    log_config: str  # a Log4j 2 file that keeps the tools quiet on stdout
    bootstrap_controllers: str
    kafka: InternalClient
    controller_config: str | None
    clock_ms: Callable[[], int]
    runner: Runner = run_tool
    # None: describe with the tool alone (a migration's 3.9 brokers cannot answer for it).
    broker_reader: BrokerReader | None = describe_quorum_through_brokers

    def _command(self, tool: str, *arguments: str) -> list[str]:
        return [
            self.java,
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # a short run: C1 alone starts sooner, spends less CPU
            f"-Dlog4j2.configurationFile=file:{self.log_config}",
            *class_path_options(self.libs),
            tool,
            *arguments,
        ]

    def _quorum(self, *arguments: str, controller_config: str = "") -> str:
        # One --command-config: the identity's TLS settings, after the controller's own
        # properties when add-controller needs those.
        with self.kafka.java_security_file(controller_config) as command_config:
            return self.runner(
                self._command(
                    METADATA_QUORUM_TOOL,
                    "--bootstrap-controller",
                    self.bootstrap_controllers,
                    "--command-config",
                    str(command_config),
                    *arguments,
                )
            )

    def describe(self) -> tuple[QuorumStatus, tuple[QuorumReplica, ...]]:
        if self.broker_reader is not None:
            try:
                return self.broker_reader(self.kafka, self.clock_ms())
            except (QuorumReadError, QuorumOutputError):
                pass  # no broker up yet, or none answers: the tool asks the controllers
        # The status first: the replicas read after it are at least at its high watermark.
        status_text = self._quorum("describe", "--status")
        replication_text = self._quorum("describe", "--replication")
        try:
            status = parse_status(status_text)
            replicas = parse_replication(replication_text, self.clock_ms())
        except QuorumOutputError as exc:
            raise QuorumToolError(str(exc)) from None
        return status, replicas

    def add_controller(self) -> None:
        if self.controller_config is None:
            raise QuorumToolError("this VM runs no controller: it has none to add")
        try:
            controller_properties = Path(self.controller_config).read_text()
        except OSError as exc:
            raise QuorumToolError(f"add-controller: {exc}") from None
        self._quorum("add-controller", controller_config=controller_properties)

    def remove_controller(self, node_id: int, directory_id: str) -> None:
        self._quorum(
            "remove-controller",
            "--controller-id",
            str(node_id),
            "--controller-directory-id",
            directory_id,
        )

    def unregister_broker(self, broker_id: int) -> None:
        with self.kafka.java_security_file() as command_config:
            self.runner(
                self._command(
                    CLUSTER_TOOL,
                    "unregister",
                    "--bootstrap-server",
                    self.kafka.bootstrap_servers,
                    "--command-config",
                    str(command_config),
                    "--id",
                    str(broker_id),
                )
            )


@dataclass(frozen=True)
class MigrationQuorumTool:
    """A migrating cluster's controller quorum: described through the voters the spec's
    migration names, with the tools of the cluster's own release (a 4.x tool's requests are
    refused by 3.9 controllers as unsupported). Kafka 3.9 migrates onto a static quorum, so
    no voter ever changes."""

    tool: MetadataQuorumTool
    spec: Callable[[], ClusterSpec | None]
    libs: Callable[[str], str]
    """Kafka version -> the image's folder of its jars."""

    def describe(self) -> tuple[QuorumStatus, tuple[QuorumReplica, ...]]:
        spec = self.spec()
        if spec is None or spec.migration is None:
            raise QuorumToolError("no migration to KRaft: the cluster has no controller quorum")
        return replace(
            self.tool,
            bootstrap_controllers=spec.migration.controller_endpoints,
            libs=self.libs(spec.kafka_version),
            broker_reader=None,
        ).describe()

    def add_controller(self) -> None:
        raise QuorumToolError("a migration's controller quorum is static")

    def remove_controller(self, node_id: int, directory_id: str) -> None:
        raise QuorumToolError("a migration's controller quorum is static")

    def unregister_broker(self, broker_id: int) -> None:
        raise QuorumToolError("a migration's controller quorum is static")
