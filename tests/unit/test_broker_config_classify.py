"""Classifying config changes (agent.broker_config.classify) and Kafka's table behind it."""

from __future__ import annotations

import re

import pytest

from agent.broker_config import (
    ChangeKind,
    ConfigChange,
    ConfigDiff,
    ConfigLayer,
    RunningValue,
    change_kind,
    diff_broker_config,
)
from planner.contracts.vm_config import (
    BROKER_CONFIGS,
    KAFKA_VERSION,
    BrokerConfigError,
    UpdateMode,
)

pytestmark = pytest.mark.unit

PER_BROKER, CLUSTER, STATIC, DEFAULT = (
    ConfigLayer.PER_BROKER,
    ConfigLayer.CLUSTER_DEFAULT,
    ConfigLayer.STATIC,
    ConfigLayer.DEFAULT,
)


def test_the_table_is_kafka_3_9s_with_its_three_update_modes() -> None:
    assert KAFKA_VERSION.startswith("3.9.")
    modes = [definition.update_mode for definition in BROKER_CONFIGS.values()]
    # Counts of Kafka 3.9.2's generated kafka_config.html (KafkaConfig main).
    assert len(BROKER_CONFIGS) == 315
    assert (
        modes.count(UpdateMode.READ_ONLY),
        modes.count(UpdateMode.PER_BROKER),
        modes.count(UpdateMode.CLUSTER_WIDE),
    ) == (226, 37, 52)


def test_only_two_valid_value_texts_are_prose_and_checked_by_type_alone() -> None:
    prose = sorted(n for n, d in BROKER_CONFIGS.items() if not d.valid_values.understood)
    assert prose == [
        "remote.log.manager.copier.thread.pool.size",
        "remote.log.manager.expiration.thread.pool.size",
    ]


@pytest.mark.parametrize(
    ("key", "mode", "kind"),
    [
        ("num.io.threads", UpdateMode.CLUSTER_WIDE, ChangeKind.CLUSTER_WIDE),
        ("log.cleaner.threads", UpdateMode.CLUSTER_WIDE, ChangeKind.CLUSTER_WIDE),
        ("log.retention.ms", UpdateMode.CLUSTER_WIDE, ChangeKind.CLUSTER_WIDE),
        # DynamicBrokerConfig.ClusterLevelListenerConfigs: listener configs kept cluster-wide.
        ("num.network.threads", UpdateMode.CLUSTER_WIDE, ChangeKind.CLUSTER_WIDE),
        ("max.connections", UpdateMode.CLUSTER_WIDE, ChangeKind.CLUSTER_WIDE),
        ("listener.security.protocol.map", UpdateMode.PER_BROKER, ChangeKind.PER_BROKER),
        ("ssl.client.auth", UpdateMode.PER_BROKER, ChangeKind.PER_BROKER),
        ("log.retention.hours", UpdateMode.READ_ONLY, ChangeKind.READ_ONLY),
        ("num.partitions", UpdateMode.READ_ONLY, ChangeKind.READ_ONLY),
        ("zookeeper.session.timeout.ms", UpdateMode.READ_ONLY, ChangeKind.READ_ONLY),
        # Agent-owned: dynamic for Kafka, but the agent changes them by restart only.
        ("listeners", UpdateMode.PER_BROKER, ChangeKind.READ_ONLY),
        ("advertised.listeners", UpdateMode.PER_BROKER, ChangeKind.READ_ONLY),
        # Kafka updates these dynamically only with a listener prefix.
        ("ssl.keystore.location", UpdateMode.PER_BROKER, ChangeKind.READ_ONLY),
        ("ssl.truststore.type", UpdateMode.PER_BROKER, ChangeKind.READ_ONLY),
    ],
)
def test_change_kind_follows_kafkas_update_mode_except_where_kaas_restarts(
    key: str, mode: UpdateMode, kind: ChangeKind
) -> None:
    assert BROKER_CONFIGS[key].update_mode is mode
    assert change_kind(key) is kind


def test_change_kind_of_an_unknown_key_names_it() -> None:
    with pytest.raises(BrokerConfigError, match=re.escape("unknown key 'log.retention.dayz'")):
        change_kind("log.retention.dayz")


def running(**entries: tuple[str | None, ConfigLayer]) -> dict[str, RunningValue]:
    return {key.replace("_", "."): RunningValue(v, layer) for key, (v, layer) in entries.items()}


BASE = running(
    num_io_threads=("4", STATIC),
    log_retention_hours=("24", STATIC),
    log_cleaner_threads=("1", DEFAULT),
    log_cleaner_min_cleanable_ratio=("0.5", DEFAULT),
    unclean_leader_election_enable=("false", STATIC),
    listener_security_protocol_map=("PLAINTEXT:PLAINTEXT", DEFAULT),
    listeners=("PLAINTEXT://10.0.0.3:9092", STATIC),
    ssl_keystore_type=("JKS", DEFAULT),
    log_retention_ms=(None, DEFAULT),
    leader_replication_throttled_rate=("9223372036854775807", DEFAULT),
)
DESIRED = {
    "num.io.threads": "4",
    "log.retention.hours": "24",
    "unclean.leader.election.enable": "false",
    "listeners": "PLAINTEXT://10.0.0.3:9092",
}


def change(key: str, current: str | None, desired: str | None) -> ConfigChange:
    return ConfigChange(key, current, desired)


@pytest.mark.parametrize(
    ("desired", "overrides", "expected"),
    [
        pytest.param({}, {}, ConfigDiff(), id="in sync"),
        pytest.param(
            {"unclean.leader.election.enable": "FALSE", "log.cleaner.min.cleanable.ratio": "0.50"},
            {},
            ConfigDiff(),
            id="same values in another spelling",
        ),
        pytest.param(
            {"log.retention.hours": "48"},
            {},
            ConfigDiff(read_only=(change("log.retention.hours", "24", "48"),)),
            id="read-only key changed",
        ),
        pytest.param(
            {"num.io.threads": "6"},
            {},
            ConfigDiff(cluster_wide=(change("num.io.threads", "4", "6"),)),
            id="cluster-wide key set in the file",
        ),
        pytest.param(
            {"log.cleaner.threads": "2"},
            {},
            ConfigDiff(cluster_wide=(change("log.cleaner.threads", "1", "2"),)),
            id="cluster-wide key at Kafka's default",
        ),
        pytest.param(
            {"num.io.threads": "6"},
            running(num_io_threads=("5", CLUSTER)),
            ConfigDiff(cluster_wide=(change("num.io.threads", "5", "6"),)),
            id="cluster-wide default replaced",
        ),
        pytest.param(
            {"num.io.threads": "6"},
            running(num_io_threads=("5", PER_BROKER)),
            ConfigDiff(per_broker=(change("num.io.threads", "5", None),)),
            id="stray per-broker override of a cluster-wide key removed first",
        ),
        pytest.param(
            {},
            running(num_io_threads=("5", PER_BROKER)),
            ConfigDiff(per_broker=(change("num.io.threads", "5", None),)),
            id="per-broker override shadowing the file removed",
        ),
        pytest.param(
            {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL"},
            {},
            ConfigDiff(
                per_broker=(
                    change(
                        "listener.security.protocol.map",
                        "PLAINTEXT:PLAINTEXT",
                        "PLAINTEXT:PLAINTEXT,SSL:SSL",
                    ),
                )
            ),
            id="per-broker key set on this broker",
        ),
        pytest.param(
            {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL"},
            running(listener_security_protocol_map=("PLAINTEXT:PLAINTEXT", PER_BROKER)),
            ConfigDiff(
                per_broker=(
                    change(
                        "listener.security.protocol.map",
                        "PLAINTEXT:PLAINTEXT",
                        "PLAINTEXT:PLAINTEXT,SSL:SSL",
                    ),
                )
            ),
            id="per-broker override replaced",
        ),
        pytest.param(
            {},
            running(log_cleaner_threads=("2", CLUSTER)),
            ConfigDiff(cluster_wide=(change("log.cleaner.threads", "2", None),)),
            id="key gone from the spec: cluster-wide default removed",
        ),
        pytest.param(
            {},
            running(log_cleaner_threads=("2", STATIC)),
            ConfigDiff(read_only=(change("log.cleaner.threads", "2", None),)),
            id="key gone from the spec but in the loaded file: restart drops it",
        ),
        pytest.param(
            {"listeners": "PLAINTEXT://10.0.0.9:9092"},
            {},
            ConfigDiff(
                read_only=(
                    change("listeners", "PLAINTEXT://10.0.0.3:9092", "PLAINTEXT://10.0.0.9:9092"),
                )
            ),
            id="agent-owned key changes by restart",
        ),
        pytest.param(
            {},
            running(listeners=("PLAINTEXT://10.0.0.7:9092", PER_BROKER)),
            ConfigDiff(per_broker=(change("listeners", "PLAINTEXT://10.0.0.7:9092", None),)),
            id="dynamic override of an agent-owned key removed",
        ),
        pytest.param(
            {"broker.id": "2"},
            running(broker_id=("2", STATIC), node_id=("2", STATIC)),
            ConfigDiff(),
            id="node.id copied from broker.id by a ZooKeeper-mode broker",
        ),
        pytest.param(
            {"node.id": "2"},
            running(broker_id=("2", STATIC), node_id=("2", STATIC)),
            ConfigDiff(),
            id="broker.id copied from node.id by a KRaft broker",
        ),
        pytest.param(
            {"node.id": "3"},
            running(broker_id=("2", STATIC), node_id=("2", STATIC)),
            ConfigDiff(
                read_only=(change("broker.id", "2", "3"), change("node.id", "2", "3")),
            ),
            id="a new node id restarts a KRaft broker",
        ),
        pytest.param(
            {"broker.id": "3"},
            running(broker_id=("2", STATIC), node_id=("2", STATIC)),
            ConfigDiff(
                read_only=(change("broker.id", "2", "3"), change("node.id", "2", "3")),
            ),
            id="a new broker id restarts",
        ),
        pytest.param(
            {"ssl.keystore.type": "PKCS12"},
            {},
            ConfigDiff(read_only=(change("ssl.keystore.type", "JKS", "PKCS12"),)),
            id="listener-prefix-only key changes by restart",
        ),
        pytest.param(
            {},
            running(leader_replication_throttled_rate=("1000000", PER_BROKER)),
            ConfigDiff(),
            id="replication throttles of replica moves left alone",
        ),
        pytest.param(
            {"log.retention.ms": "3600000"},
            {},
            ConfigDiff(cluster_wide=(change("log.retention.ms", None, "3600000"),)),
            id="key with no value yet",
        ),
        pytest.param(
            {"log.retention.hours": "48", "num.io.threads": "6"},
            running(listener_security_protocol_map=("SSL:SSL", PER_BROKER)),
            ConfigDiff(
                per_broker=(change("listener.security.protocol.map", "SSL:SSL", None),),
                cluster_wide=(change("num.io.threads", "4", "6"),),
                read_only=(change("log.retention.hours", "24", "48"),),
            ),
            id="all three at once",
        ),
    ],
)
def test_diff(
    desired: dict[str, str], overrides: dict[str, RunningValue], expected: ConfigDiff
) -> None:
    assert diff_broker_config({**DESIRED, **desired}, {**BASE, **overrides}) == expected


def test_a_rendered_key_the_broker_does_not_report_is_refused() -> None:
    broker = dict(BASE)
    del broker["num.io.threads"]
    with pytest.raises(BrokerConfigError, match=re.escape("does not report 'num.io.threads'")):
        diff_broker_config(DESIRED, broker)


def test_an_unknown_rendered_key_is_refused() -> None:
    with pytest.raises(BrokerConfigError, match=re.escape("unknown key 'num.io.thread'")):
        diff_broker_config({**DESIRED, "num.io.thread": "4"}, BASE)


def test_diff_summaries() -> None:
    diff = ConfigDiff(
        per_broker=(change("listener.security.protocol.map", "SSL:SSL", None),),
        cluster_wide=(change("num.io.threads", "4", "6"),),
        read_only=(change("log.retention.hours", "24", "48"),),
    )
    assert not diff.empty and ConfigDiff().empty
    assert diff.dynamic_keys == ("listener.security.protocol.map", "num.io.threads")
    assert diff.read_only_keys == ("log.retention.hours",)
    assert diff.describe() == (
        "per-broker listener.security.protocol.map: SSL:SSL -> (removed); "
        "cluster-wide num.io.threads: 4 -> 6; restart log.retention.hours: 24 -> 48"
    )
    assert ConfigDiff().describe() == "no config change"
    assert diff == ConfigDiff(diff.per_broker, diff.cluster_wide, diff.read_only)
    assert hash(diff) == hash(ConfigDiff(diff.per_broker, diff.cluster_wide, diff.read_only))


JAAS = "listener.name.tenant.scram-sha-512.sasl.jaas.config"
JAAS_VALUE = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        # What a broker reports for keys outside its table: present, value hidden.
        pytest.param(
            {"super.users": RunningValue(None, STATIC), JAAS: RunningValue(None, STATIC)},
            ConfigDiff(),
            id="hidden values in the loaded file: in sync",
        ),
        pytest.param(
            {
                "super.users": RunningValue("User:ANONYMOUS", STATIC),
                JAAS: RunningValue(None, STATIC),
            },
            ConfigDiff(),
            id="a shown value that matches: in sync",
        ),
        pytest.param(
            {"super.users": RunningValue("User:admin", STATIC), JAAS: RunningValue(None, STATIC)},
            ConfigDiff(read_only=(change("super.users", "User:admin", "User:ANONYMOUS"),)),
            id="a shown value that differs: restart",
        ),
        pytest.param(
            {},
            ConfigDiff(
                read_only=(
                    change(JAAS, None, JAAS_VALUE),
                    change("super.users", None, "User:ANONYMOUS"),
                )
            ),
            id="a broker started before the tenant listener: restart with the new file",
        ),
    ],
)
def test_rendered_keys_outside_kafkas_table(
    reported: dict[str, RunningValue], expected: ConfigDiff
) -> None:
    desired = {**DESIRED, "super.users": "User:ANONYMOUS", JAAS: JAAS_VALUE}
    assert diff_broker_config(desired, {**BASE, **reported}) == expected


def test_a_listener_prefixed_key_the_renderer_does_not_write_is_dropped_by_restart() -> None:
    other = "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    diff = diff_broker_config(DESIRED, {**BASE, other: RunningValue(None, STATIC)})
    assert diff == ConfigDiff(read_only=(change(other, None, None),))
