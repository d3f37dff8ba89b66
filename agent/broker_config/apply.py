"""The Kafka side of broker config: read what a broker runs, apply a ConfigDiff's dynamic
changes, read them back. An adapter: the decisions are in classify.py.

Per-broker changes go through confluent-kafka's AdminClient (incremental_alter_configs on
the broker's resource). The cluster-wide default is the broker resource with the empty
name, which librdkafka refuses to address (ValueError "Invalid ConfigResource"; see
confluentinc/confluent-kafka-go#396), so cluster-wide changes go through Kafka's own
ConfigCommand (`kafka-configs --entity-default`, Java's Admin client) from the VM's image.

Nothing is applied half-way without saying so: every change is first checked here and then
by Kafka (validate_only), the per-broker changes are one request, and when the cluster-wide
step fails after them the per-broker step is undone. The result names what was verified
and, on failure, the key and Kafka's message.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import ConfigSource as KafkaConfigSource

from agent.broker_config.classify import ConfigChange, ConfigDiff, ConfigLayer, RunningValue
from agent.errors import AgentError
from planner.contracts.vm_config.class_archive import class_path_options
from planner.contracts.vm_config.properties import server_properties_text
from planner.contracts.vm_config.validation import BROKER_CONFIGS, broker_config_problems
from planner.pki.client_settings import InternalClient

# Keyed by the numbers: describe_configs hands ConfigEntry.source over as a plain int.
_LAYERS = {
    KafkaConfigSource.DYNAMIC_BROKER_CONFIG.value: ConfigLayer.PER_BROKER,
    KafkaConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value: ConfigLayer.CLUSTER_DEFAULT,
    KafkaConfigSource.STATIC_BROKER_CONFIG.value: ConfigLayer.STATIC,
    KafkaConfigSource.DEFAULT_CONFIG.value: ConfigLayer.DEFAULT,
}


def _layer(source: object) -> ConfigLayer:
    number = source.value if isinstance(source, KafkaConfigSource) else source
    return _LAYERS.get(number, ConfigLayer.OTHER) if isinstance(number, int) else ConfigLayer.OTHER


class ConfigApplyError(AgentError, RuntimeError):
    """A Kafka call about broker config failed; the message names the keys involved."""


def describe_running_config(
    admin: AdminClient, broker_id: int, timeout: float = 10.0
) -> dict[str, RunningValue]:
    """Every config of the broker with the value in effect and the layer it comes from."""
    resource = ConfigResource("broker", str(broker_id))
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result(
            timeout=timeout
        )
    except KafkaException as exc:
        raise ConfigApplyError(f"describe_configs of broker {broker_id} failed: {exc}") from None
    return {
        name: RunningValue(entry.value, _layer(entry.source)) for name, entry in entries.items()
    }


class ClusterDefaults(Protocol):
    """Writes the cluster-wide dynamic default (the broker resource named "")."""

    def alter(self, changes: Sequence[ConfigChange]) -> None:
        """Apply every change (desired None: remove the key) or raise ConfigApplyError."""


@dataclass(frozen=True)
class ConfigCommandClusterDefaults:
    """Cluster-wide defaults through `kafka.admin.ConfigCommand --entity-default` (the Java
    Admin client of the image's Kafka): the empty resource name librdkafka cannot send."""

    java: str
    kafka_libs: Path
    kafka: InternalClient
    timeout_s: float = 120.0

    def command(
        self, command_config: Path, add_config_file: Path | None, delete_keys: Sequence[str]
    ) -> list[str]:
        command = [
            self.java,
            "-Xmx128m",
            "-XX:TieredStopAtLevel=1",  # a short-lived JVM: start fast rather than run fast
            *class_path_options(self.kafka_libs),
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            self.kafka.bootstrap_servers,
            "--command-config",
            str(command_config),
            "--entity-type",
            "brokers",
            "--entity-default",
            "--alter",
        ]
        if add_config_file is not None:
            command += ["--add-config-file", str(add_config_file)]
        if delete_keys:
            command += ["--delete-config", ",".join(delete_keys)]
        return command

    def alter(self, changes: Sequence[ConfigChange]) -> None:
        if not changes:
            return
        to_set = {c.key: c.desired for c in changes if c.desired is not None}
        to_delete = [c.key for c in changes if c.desired is None]
        keys = ", ".join(c.key for c in changes)
        with (
            tempfile.TemporaryDirectory(prefix="kaas-cluster-config-") as scratch,
            self.kafka.java_properties_file() as command_config,
        ):
            # A properties file, not --add-config: values may hold commas, '=' or brackets.
            add_file = Path(scratch) / "add.properties" if to_set else None
            if add_file is not None:
                add_file.write_text(server_properties_text(to_set), encoding="latin-1")
            try:
                done = subprocess.run(
                    self.command(command_config, add_file, to_delete),
                    capture_output=True,
                    text=True,
                    timeout=self.timeout_s,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ConfigApplyError(
                    f"cluster-wide default of {keys}: kafka-configs did not run ({exc})"
                ) from None
        if done.returncode != 0:
            raise ConfigApplyError(
                f"cluster-wide default of {keys} refused: {_last_error_line(done.stderr + done.stdout)}"
            )


def _last_error_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "Exception" in line]
    return (errors or lines or ["no output"])[-1][:500]


@dataclass(frozen=True)
class ApplyResult:
    """What apply_config_diff did: every change read back from the broker, or why not."""

    verified: tuple[ConfigChange, ...] = ()
    error: str | None = None  # names the key(s) and Kafka's message; nothing else half-done

    @property
    def ok(self) -> bool:
        return self.error is None


def _alter_entries(changes: Sequence[ConfigChange]) -> list[ConfigEntry]:
    return [
        ConfigEntry(change.key, change.desired, incremental_operation=AlterConfigOpType.SET)
        if change.desired is not None
        else ConfigEntry(change.key, None, incremental_operation=AlterConfigOpType.DELETE)
        for change in changes
    ]


def _alter_broker(
    admin: AdminClient,
    broker_id: int,
    changes: Sequence[ConfigChange],
    validate_only: bool,
    timeout: float,
) -> str | None:
    """One incremental_alter_configs of this broker's resource; Kafka's message on failure."""
    resource = ConfigResource("broker", str(broker_id), incremental_configs=_alter_entries(changes))
    try:
        admin.incremental_alter_configs(
            [resource], validate_only=validate_only, request_timeout=timeout
        )[resource].result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        return error.str() if isinstance(error, KafkaError) else str(exc)
    return None


def _kafka_refusal(
    admin: AdminClient, broker_id: int, changes: Sequence[ConfigChange], timeout: float
) -> str | None:
    """Kafka's own validation of every change (validate_only: nothing is written), naming the
    key it refuses. Cluster-wide keys are checked on this broker's resource, where Kafka
    accepts them too and validates them the same way."""
    if not changes or _alter_broker(admin, broker_id, changes, True, timeout) is None:
        return None
    refusals = []
    for change in changes:  # find the culprit(s): Kafka's message may not name the key
        message = _alter_broker(admin, broker_id, [change], True, timeout)
        if message is not None:
            asked = (
                f"removing {change.key}"
                if change.desired is None
                else f"{change.key}={change.desired}"
            )
            refusals.append(f"Kafka refused {asked}: {message}")
    if not refusals:  # each alone is fine, together they are not
        message = _alter_broker(admin, broker_id, changes, True, timeout)
        keys = ", ".join(change.key for change in changes)
        refusals.append(f"Kafka refused {keys} together: {message}")
    return "; ".join(refusals)


def _restore_per_broker(
    admin: AdminClient,
    broker_id: int,
    applied: Sequence[ConfigChange],
    before: dict[str, RunningValue],
    timeout: float,
    read_back_s: float,
) -> str | None:
    """Undo per-broker changes: put back each key's earlier override, or remove the new one,
    and read back the earlier state; None when done, else what went wrong."""
    undo = [
        ConfigChange(c.key, c.desired, before[c.key].value)
        if c.key in before and before[c.key].layer is ConfigLayer.PER_BROKER
        else ConfigChange(c.key, c.desired, None)
        for c in applied
    ]
    message = _alter_broker(admin, broker_id, undo, False, timeout)
    if message is not None:
        return message
    earlier = [
        _Expectation(c, ConfigLayer.PER_BROKER, exact=before[c.key])
        for c in undo
        if c.key in before
    ]
    unseen = _wait_until_seen(admin, broker_id, earlier, timeout, read_back_s)
    return None if unseen is None else f"the broker does not show the earlier values: {unseen}"


# A broker switches a key's source before its value when a dynamic value is removed (seen:
# "5 from server.properties" for a moment before "4 from server.properties"), so a removal
# still showing the old value counts as done only once it has not moved for this long.
REMOVAL_SETTLE_S = 1.0


@dataclass
class _Expectation:
    """What one change looks like on the broker once it has taken effect."""

    change: ConfigChange
    layer: ConfigLayer  # where the change was made
    exact: RunningValue | None = None  # for an undo: exactly the earlier state
    unchanged_since: float | None = None

    def seen(self, entry: RunningValue | None, now: float) -> bool:
        if entry is None:
            return False
        if self.exact is not None:
            return entry == self.exact
        if self.change.desired is not None:
            return BROKER_CONFIGS[self.change.key].same_value(entry.value, self.change.desired)
        if entry.layer is self.layer:
            return False
        if entry.value != self.change.current:
            return True
        if self.unchanged_since is None:
            self.unchanged_since = now
        return now - self.unchanged_since >= REMOVAL_SETTLE_S


def _wait_until_seen(
    admin: AdminClient,
    broker_id: int,
    expectations: Sequence[_Expectation],
    timeout: float,
    read_back_s: float,
) -> str | None:
    """Describe the broker until it shows every expectation; what it does not show, if not."""
    deadline = time.monotonic() + read_back_s
    while True:
        now = time.monotonic()
        try:
            running = describe_running_config(admin, broker_id, timeout)
        except ConfigApplyError as exc:
            unseen = [str(exc)]
        else:
            unseen = [
                f"{e.change.key} (broker reports {_shown(running.get(e.change.key))})"
                for e in expectations
                if not e.seen(running.get(e.change.key), now)
            ]
        if not unseen:
            return None
        if now >= deadline:
            return "; ".join(unseen)
        time.sleep(0.25)


def _shown(entry: RunningValue | None) -> str:
    return "nothing" if entry is None else f"{entry.value!r} from {entry.layer}"


def apply_config_diff(
    admin: AdminClient,
    broker_id: int,
    diff: ConfigDiff,
    cluster_defaults: ClusterDefaults,
    timeout: float = 15.0,
    read_back_s: float = 15.0,
) -> ApplyResult:
    """Apply the dynamic part of `diff` to broker `broker_id` and read it back.

    The read-only part is not touched: it takes the controlled restart. Order: our own
    checks (no Kafka call when they fail), Kafka's validate_only of every change, the
    per-broker changes in one request, the cluster-wide ones in one ConfigCommand run
    (undoing the per-broker ones if it fails), then describe_configs until the broker
    shows every change (dynamic updates reach a ZooKeeper-mode broker asynchronously).
    """
    changes = diff.dynamic
    if not changes:
        return ApplyResult()
    problems = broker_config_problems(
        {c.key: c.desired for c in changes if c.desired is not None}, "config change"
    )
    unknown = [c.key for c in changes if c.desired is None and c.key not in BROKER_CONFIGS]
    if problems or unknown:
        messages = [p.message for p in problems] + [
            f"config change: unknown key {key!r}" for key in unknown
        ]
        return ApplyResult(error="; ".join(messages) + "; nothing applied")
    refusal = _kafka_refusal(admin, broker_id, changes, timeout)
    if refusal is not None:
        return ApplyResult(error=f"{refusal}; nothing applied")
    try:
        before = describe_running_config(admin, broker_id, timeout)  # to undo, if need be
    except ConfigApplyError as exc:
        return ApplyResult(error=f"{exc}; nothing applied")
    if diff.per_broker:
        message = _alter_broker(admin, broker_id, diff.per_broker, False, timeout)
        if message is not None:
            keys = ", ".join(c.key for c in diff.per_broker)
            return ApplyResult(
                error=f"broker {broker_id} refused {keys}: {message}; nothing applied"
            )
    try:
        cluster_defaults.alter(diff.cluster_wide)
    except ConfigApplyError as exc:
        undone = _restore_per_broker(
            admin, broker_id, diff.per_broker, before, timeout, read_back_s
        )
        if not diff.per_broker:
            outcome = "nothing applied"
        elif undone is None:
            outcome = "the per-broker changes were undone"
        else:
            keys = ", ".join(c.key for c in diff.per_broker)
            outcome = f"undoing the per-broker changes of {keys} FAILED too ({undone})"
        return ApplyResult(error=f"{exc}; {outcome}")
    return _read_back(admin, broker_id, diff, timeout, read_back_s)


def _read_back(
    admin: AdminClient, broker_id: int, diff: ConfigDiff, timeout: float, read_back_s: float
) -> ApplyResult:
    expectations = [_Expectation(c, ConfigLayer.PER_BROKER) for c in diff.per_broker] + [
        _Expectation(c, ConfigLayer.CLUSTER_DEFAULT) for c in diff.cluster_wide
    ]
    unseen = _wait_until_seen(admin, broker_id, expectations, timeout, read_back_s)
    if unseen is not None:
        return ApplyResult(
            error=f"applied, but broker {broker_id} does not show it after {read_back_s:.0f}s: "
            f"{unseen}"
        )
    return ApplyResult(verified=diff.dynamic)
