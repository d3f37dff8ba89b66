"""A tenant's user quotas through Kafka's own ConfigCommand: the command lines and the reading
of its answer are pure; `UserQuotaTool` runs them.

librdkafka (confluent-kafka 2.16) has no AlterClientQuotas or DescribeClientQuotas, so the
quotas go through `kafka.admin.ConfigCommand --entity-type users` of the image's Kafka, a
short-lived JVM talking to the internal listener with Java's Admin client, the way the
agent sets cluster-wide broker defaults (agent/broker_config/apply.py).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from management_plane.errors import KaasError
from management_plane.tenants.model import QUOTA_FIELDS
from planner.contracts.vm_config.class_archive import class_path_options
from planner.pki.client_settings import InternalClient

log = structlog.get_logger(__name__)

_QUOTA_LINE = re.compile(r"Quota configs for user-principal '([^']*)' are (.*)")


class QuotaToolError(KaasError, RuntimeError):
    """ConfigCommand did not run or refused; the message carries its last error line."""


def quota_command(
    java: str,
    kafka_libs: Path,
    bootstrap: str,
    command_config: Path,
    user: str,
    add: Mapping[str, float] | None = None,
    delete: Sequence[str] = (),
) -> list[str]:
    """ConfigCommand for one user: --describe when neither `add` nor `delete` is given."""
    command = [
        java,
        "-Xmx128m",
        "-XX:TieredStopAtLevel=1",  # a short-lived JVM: start fast rather than run fast
        *class_path_options(kafka_libs),
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        bootstrap,
        "--command-config",
        str(command_config),
        "--entity-type",
        "users",
        "--entity-name",
        user,
    ]
    if not add and not delete:
        return [*command, "--describe"]
    command.append("--alter")
    if add:
        command += ["--add-config", ",".join(f"{k}={_number(v)}" for k, v in sorted(add.items()))]
    if delete:
        command += ["--delete-config", ",".join(delete)]
    return command


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_quota_description(output: str, user: str) -> dict[str, float]:
    """The quotas ConfigCommand --describe prints for `user` ({} when it has none), e.g.
    "Quota configs for user-principal 'acme' are consumer_byte_rate=2.0, producer_byte_rate=1.0"."""
    for line in output.splitlines():
        match = _QUOTA_LINE.fullmatch(line.strip())
        if match and match.group(1) == user:
            pairs = (item.strip().split("=", 1) for item in match.group(2).split(","))
            return {key: float(value) for key, value in pairs}
    return {}


def last_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("log4j:")]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return (errors or lines or ["no output"])[-1][:500]


@dataclass(frozen=True)
class UserQuotaTool:
    """Runs ConfigCommand against the cluster's internal listener, as the admin identity."""

    java: str
    kafka_libs: Path
    kafka: InternalClient
    timeout_s: float = 120.0

    def _run(
        self,
        user: str,
        what: str,
        add: Mapping[str, float] | None = None,
        delete: Sequence[str] = (),
    ) -> str:
        try:
            with self.kafka.java_properties_file() as command_config:
                command = quota_command(
                    self.java,
                    self.kafka_libs,
                    self.kafka.bootstrap_servers,
                    command_config,
                    user,
                    add=add,
                    delete=delete,
                )
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=self.timeout_s, check=False
                )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise QuotaToolError(f"{what}: kafka-configs did not run ({exc})") from None
        if done.returncode != 0:
            raise QuotaToolError(f"{what} refused: {last_error_line(done.stderr + done.stdout)}")
        return done.stdout

    def set(self, user: str, quotas: Mapping[str, float]) -> None:
        self._run(user, f"quotas of user {user}", add=quotas)
        log.info("tenant_quotas_set", user=user, **quotas)

    def remove(self, user: str) -> None:
        """Remove every quota KaaS sets; a user without quotas is left as it is."""
        present = [key for key in QUOTA_FIELDS if key in self.describe(user)]
        if not present:
            return
        self._run(user, f"removing the quotas of user {user}", delete=present)
        log.info("tenant_quotas_removed", user=user)

    def describe(self, user: str) -> dict[str, float]:
        return parse_quota_description(self._run(user, f"describing user {user}"), user)
