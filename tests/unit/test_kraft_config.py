"""The KRaft renderer (planner/contracts/vm_config/kraft.py), the release table and the spec's
KRaft fields: pure, table-tested."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from planner.contracts.fields import ContractError
from planner.contracts.kafka_release import KafkaMode, kafka_mode, kraft_quorum_size_problem
from planner.contracts.log_limits import LogLimits
from planner.contracts.spec import ClusterSpec, SpecError, parse_spec
from planner.contracts.vm_config import render_server_properties
from planner.contracts.vm_config.kafka_tls import SUPER_USERS
from planner.contracts.vm_config.kraft import (
    CONTROLLER_NODE_ID_OFFSET,
    KRAFT_AUTHORIZER,
    ControllerFacts,
    InitialVoter,
    KraftConfigError,
    StorageFormat,
    controller_node_id,
    format_arguments,
    internal_protocol,
    log_file_option,
    random_kafka_uuid,
    render_controller_properties,
    render_kafka_log4j2,
    render_kraft_broker_properties,
    storage_format,
)
from planner.contracts.vm_config.sizing import SizingProfile, sizing_properties
from tests.unit.kraft_render_facts import CONTROLLER, CONTROLLER_ENDPOINTS, KRAFT_BROKER

pytestmark = pytest.mark.unit

SPEC = ClusterSpec(cluster="k1", kafka_version="4.3.1", broker_count=3, zones=("a", "b", "c"))
FACTS = KRAFT_BROKER
BOOTSTRAP = CONTROLLER_ENDPOINTS


@pytest.mark.parametrize(
    ("version", "mode"),
    [("3.8.1", KafkaMode.ZOOKEEPER), ("3.9.2", KafkaMode.ZOOKEEPER), ("4.3.1", KafkaMode.KRAFT)],
)
def test_each_release_has_its_mode(version: str, mode: KafkaMode) -> None:
    assert kafka_mode(version) is mode


def test_an_unknown_version_is_named() -> None:
    with pytest.raises(
        ContractError, match=r"Kafka version '4\.0\.9' is unknown; KaaS runs 3\.8\.1"
    ):
        kafka_mode("4.0.9")


@pytest.mark.parametrize(
    ("size", "ok"),
    [(1, True), (3, True), (5, True), (2, False), (4, False), (True, False), ("3", False)],
)
def test_quorum_sizes(size: object, ok: bool) -> None:
    assert (kraft_quorum_size_problem(size) == "") is ok


def _spec_json(**changes: object) -> str:
    value = json.loads(SPEC.encode())
    value.update(changes)
    return json.dumps(value)


def test_a_kraft_spec_round_trips_with_its_quorum_size() -> None:
    spec = replace(SPEC, kraft_controllers=5)
    assert json.loads(spec.encode())["kraft"] == {"controllers": 5}
    assert parse_spec(spec.encode()) == spec


def test_a_zookeeper_mode_spec_carries_no_kraft_section() -> None:
    spec = replace(SPEC, kafka_version="3.9.2")
    assert "kraft" not in json.loads(spec.encode())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kafka_version": "2.8.0"}, r"spec\.kafka_version: Kafka version '2\.8\.0' is unknown"),
        ({"kraft": {"controllers": 2}}, r"spec\.kraft\.controllers must be one of 1, 3, 5, got 2"),
        ({"kraft": {"controllers": 4}}, r"spec\.kraft\.controllers must be one of 1, 3, 5, got 4"),
        ({"kraft": {"voters": 3}}, r"spec\.kraft has unknown keys: voters"),
        ({"kraft": []}, r"spec\.kraft must be an object"),
        (
            {"kafka_version": "3.9.2", "kraft": {"controllers": 3}},
            r"Kafka 3\.9\.2 runs in ZooKeeper mode, not KRaft",
        ),
    ],
)
def test_bad_kraft_specs_are_refused_by_name(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(_spec_json(**changes))


def test_the_broker_keeps_the_zookeeper_mode_listeners_rack_and_defaults() -> None:
    kraft = render_kraft_broker_properties(SPEC, FACTS, BOOTSTRAP)
    zookeeper_mode = render_server_properties(
        replace(SPEC, kafka_version="3.9.2"), replace(FACTS, zookeeper_connect="z:2181/kafka/k1")
    )
    for key in (
        "listeners",
        "advertised.listeners",
        "broker.rack",
        "log.dirs",
        "min.insync.replicas",
        "default.replication.factor",
        "unclean.leader.election.enable",
        "sasl.enabled.mechanisms",
    ):
        assert kraft[key] == zookeeper_mode[key], key
    assert kraft["node.id"] == "1"
    assert "broker.id" not in kraft
    assert not [key for key in kraft if key.startswith("zookeeper.")]
    assert kraft["process.roles"] == "broker"
    assert kraft["controller.listener.names"] == "CONTROLLER"
    assert kraft["controller.quorum.bootstrap.servers"] == ",".join(BOOTSTRAP)
    assert kraft["listener.security.protocol.map"] == (
        "CONTROLLER:SSL,INTERNAL:SSL,TENANT:SASL_SSL"
    )
    # The broker reaches the controllers with the VM's certificate, as on the internal listener.
    assert kraft["listener.name.controller.ssl.keystore.location"] == "/tls/node.pem"
    assert kraft["listener.name.controller.ssl.truststore.location"] == "/tls/ca.pem"
    assert kraft["listener.name.controller.ssl.client.auth"] == "required"
    assert kraft["authorizer.class.name"] == KRAFT_AUTHORIZER
    assert list(kraft)[:2] == ["node.id", "process.roles"]


def test_the_controller_speaks_the_internal_protocol_and_applies_topic_defaults() -> None:
    props = render_controller_properties(
        replace(SPEC, broker_config={"log.retention.hours": "48"}), FACTS, CONTROLLER, BOOTSTRAP
    )
    assert props["node.id"] == "3001"
    assert props["process.roles"] == "controller"
    assert props["listeners"] == props["advertised.listeners"] == "CONTROLLER://127.0.9.2:9093"
    assert props["listener.security.protocol.map"] == "CONTROLLER:SSL"
    assert props["listener.name.controller.ssl.keystore.location"] == "/tls/node.pem"
    assert props["listener.name.controller.ssl.truststore.type"] == "PEM"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["listener.name.controller.ssl.enabled.protocols"] == "TLSv1.3,TLSv1.2"
    assert props["ssl.principal.mapping.rules"].startswith("RULE:^CN=(kaas-node|kaas-admin)")
    assert props["super.users"] == SUPER_USERS
    assert props["log.dirs"] == "/data/kraft-controller"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["num.partitions"] == sizing_properties(SizingProfile.LOCAL)["num.partitions"]
    assert props["log.retention.hours"] == "48"
    assert props["authorizer.class.name"] == KRAFT_AUTHORIZER
    assert "inter.broker.listener.name" not in props


def test_the_internal_protocol_follows_a_protocol_map() -> None:
    assert internal_protocol({"listener.security.protocol.map": "INTERNAL:SSL,X:SASL_SSL"}) == "SSL"
    with pytest.raises(KraftConfigError, match="no protocol for the INTERNAL listener"):
        internal_protocol({"listener.security.protocol.map": "X:SASL_SSL"})


@pytest.mark.parametrize(
    ("spec", "bootstrap", "controller", "message"),
    [
        (replace(SPEC, kafka_version="3.9.2"), BOOTSTRAP, CONTROLLER, "runs in ZooKeeper mode"),
        (SPEC, (), CONTROLLER, "no controller endpoint given"),
        (SPEC, ("127.0.9.1",), CONTROLLER, "'127.0.9.1' is not host:port"),
        (
            replace(SPEC, broker_config={"process.roles": "broker"}),
            BOOTSTRAP,
            CONTROLLER,
            "'process.roles' is set by KaaS for a KRaft cluster",
        ),
        (SPEC, BOOTSTRAP, replace(CONTROLLER, node_id=7), "node id must be at least 3000"),
        (SPEC, BOOTSTRAP, replace(CONTROLLER, port=0), "port must be 1-65535"),
    ],
)
def test_bad_kraft_input_is_refused_by_name(
    spec: ClusterSpec, bootstrap: tuple[str, ...], controller: ControllerFacts, message: str
) -> None:
    with pytest.raises(KraftConfigError, match=message):
        render_controller_properties(spec, FACTS, controller, bootstrap)


def test_a_bad_broker_fact_is_refused_in_kraft_mode_too() -> None:
    with pytest.raises(KraftConfigError, match="rack"):
        render_kraft_broker_properties(SPEC, replace(FACTS, rack=" "), BOOTSTRAP)


def test_controller_node_ids_follow_the_broker_id() -> None:
    assert controller_node_id(0) == CONTROLLER_NODE_ID_OFFSET
    assert controller_node_id(7) == CONTROLLER_NODE_ID_OFFSET + 7
    with pytest.raises(KraftConfigError, match="outside 0-2999"):
        controller_node_id(CONTROLLER_NODE_ID_OFFSET)


@pytest.mark.parametrize(
    ("joining", "controller", "voters", "expected"),
    [
        (False, True, 3, StorageFormat.INITIAL_CONTROLLERS),
        (False, True, 5, StorageFormat.INITIAL_CONTROLLERS),
        (False, True, 1, StorageFormat.STANDALONE),
        (False, False, 3, StorageFormat.NO_INITIAL_CONTROLLERS),
        (True, True, 3, StorageFormat.NO_INITIAL_CONTROLLERS),
        (True, False, 3, StorageFormat.NO_INITIAL_CONTROLLERS),
    ],
)
def test_storage_format_as_the_case_needs(
    joining: bool, controller: bool, voters: int, expected: StorageFormat
) -> None:
    assert storage_format(joining, controller, voters) is expected


def test_format_arguments() -> None:
    voters = (InitialVoter(3000, "h1:9093", "AAAA"), InitialVoter(3001, "h2:9093", "BBBB"))
    assert format_arguments("CID", "/c.properties", StorageFormat.INITIAL_CONTROLLERS, voters) == [
        "format",
        "--cluster-id",
        "CID",
        "--config",
        "/c.properties",
        "--ignore-formatted",
        "--initial-controllers",
        "3000@h1:9093:AAAA,3001@h2:9093:BBBB",
    ]
    assert format_arguments("CID", "/c", StorageFormat.STANDALONE)[-1] == "--standalone"
    assert format_arguments("CID", "/s", StorageFormat.NO_INITIAL_CONTROLLERS)[-1] == (
        "--no-initial-controllers"
    )
    with pytest.raises(KraftConfigError, match="needs its voters"):
        format_arguments("CID", "/c", StorageFormat.INITIAL_CONTROLLERS)


def test_kafka_uuids_look_like_kafkas() -> None:
    ids = {random_kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") and "=" not in i for i in ids)


def test_log4j2_writes_one_bounded_rolling_file_per_process_and_nothing_to_the_console() -> None:
    text = render_kafka_log4j2(LogLimits(max_file_mb=7, files=3))
    assert "rootLogger.level = INFO" in text
    assert "rootLogger.appenderRef.file.ref = FILE" in text
    assert "appender.file.type = RollingFile" in text
    assert "appender.file.policies.size.size = 7MB" in text
    assert "appender.file.strategy.max = 3" in text
    assert "${sys:kafka.logs.dir}/${sys:kaas.log.file:-server.log}" in text
    assert "Console" not in text
    assert "appender.file.policies.size.size = 100MB" in render_kafka_log4j2()  # the default
    assert log_file_option(controller=True) == "-Dkaas.log.file=controller-server.log"
    assert log_file_option(controller=False) == "-Dkaas.log.file=server.log"
