"""A running KRaft cluster's controller quorum, for `kaas status` and the drills: asked of
the brokers (one DescribeQuorum request), else read with Kafka's own kafka-metadata-quorum
tool from the image's jars (a JVM run, the only way when no broker answers)."""

from __future__ import annotations

import subprocess
import time

from management_plane.errors import KaasError
from management_plane.local import kraft
from management_plane.local.layout import ClusterLayout
from management_plane.local.tls import admin_client
from planner.contracts.kraft_quorum_state import (
    QuorumOutputError,
    QuorumReplica,
    parse_replication,
)
from planner.kraft_quorum_reader import QuorumReadError, describe_quorum_through_brokers

DESCRIBE_TIMEOUT_S = 60.0


def quorum_replicas(layout: ClusterLayout, java: str, libs: str) -> tuple[QuorumReplica, ...]:
    try:
        return describe_quorum_through_brokers(admin_client(layout), int(time.time() * 1000))[1]
    except (QuorumReadError, QuorumOutputError):
        pass  # no broker answers: ask the controllers with the tool
    try:
        with admin_client(layout).java_security_file() as command_config:
            command = kraft.metadata_quorum_command(
                java,
                layout.vms[0],
                libs,
                ",".join(kraft.bootstrap_endpoints(layout)),
                str(command_config),
                "describe",
                "--replication",
            )
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=DESCRIBE_TIMEOUT_S, check=False
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KaasError(f"kafka-metadata-quorum describe failed: {exc}") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()] or ["no output"]
        raise KaasError(f"kafka-metadata-quorum describe failed: {lines[-1][:200]}")
    try:
        return parse_replication(done.stdout, int(time.time() * 1000))
    except QuorumOutputError as exc:
        raise KaasError(f"kafka-metadata-quorum describe: {exc}") from None
