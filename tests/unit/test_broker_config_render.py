"""Rendering server.properties (planner.contracts.vm_config), validating spec keys, and the
renderer's callers: the agent and `kaas up` render a broker's file by the same call."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.broker_config import rendering as agent_rendering
from agent.restart_runner import write_properties
from agent.settings import parse_settings
from management_plane.local import render as local_render
from management_plane.local.layout import plan_layout
from management_plane.local.vm_files import write_vm_files
from planner.contracts import vm_config
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import (
    AGENT_OWNED_KEYS,
    BROKER_CONFIGS,
    BrokerConfigError,
    BrokerFacts,
    SizingProfile,
    broker_config_problems,
    parse_server_properties,
    render_server_properties,
    server_properties_text,
    sizing_properties,
)
from planner.contracts.vm_config.kafka_tls import (
    BROKER_SECURITY,
    LISTENER_SECURITY_KEYS,
    RENDERED_OUTSIDE_CATALOG,
    ListenerName,
    TlsFiles,
    internal_listener_security,
)
from planner.contracts.vm_config.zookeeper_security import (
    ZOOKEEPER_CLIENT_SECURITY_KEYS,
)

pytestmark = pytest.mark.unit


def spec(broker_config: dict[str, str] | None = None, broker_count: int = 3) -> ClusterSpec:
    return ClusterSpec(
        cluster="c1",
        kafka_version="3.9.2",
        broker_count=broker_count,
        zones=("zone-a", "zone-b", "zone-c"),
        broker_config=broker_config or {},
    )


FACTS = BrokerFacts(
    broker_id=2,
    rack="zone-c",
    listener_address="10.0.0.3",
    port=9092,
    tenant_port=9094,
    advertised_address="broker-2.example",
    log_dirs=("/data/kafka-1", "/data/kafka-2"),
    zookeeper_connect="10.0.0.1:2181,10.0.0.2:2181/kafka/c1",
    host_sizing=sizing_properties(SizingProfile.LOCAL),
    tls=TlsFiles("/etc/kaas/tls/node.pem", "/etc/kaas/tls/ca.pem"),
)


@pytest.mark.parametrize("nodes", [1, 2, 3, 5])
def test_the_agent_and_kaas_up_without_agents_render_the_same_bytes_by_the_same_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes: int
) -> None:
    """For the same spec and VM, the file `kaas up --no-agents` writes and the one the VM's
    agent writes are byte-identical, because both are the renderer's one function called
    with equal inputs: each caller's binding is replaced by a recorder of its calls."""
    calls: dict[str, list[tuple[ClusterSpec, BrokerFacts]]] = {"agent": [], "kaas up": []}

    def recorder(caller: str) -> Any:
        def record(spec: ClusterSpec, facts: BrokerFacts) -> dict[str, str]:
            calls[caller].append((spec, facts))
            return vm_config.render_server_properties(spec, facts)

        return record

    assert agent_rendering.render_server_properties is vm_config.render_server_properties
    assert local_render.render_server_properties is vm_config.render_server_properties
    monkeypatch.setattr(agent_rendering, "render_server_properties", recorder("agent"))
    monkeypatch.setattr(local_render, "render_server_properties", recorder("kaas up"))

    layout = plan_layout("c1", tmp_path / "home", nodes)
    the_spec = local_render.local_spec(layout, "3.9.2")
    for vm in layout.vms:
        write_vm_files(layout, vm, "3.9.2", agents=False)
        by_kaas_up = (vm.config_dir / "server.properties").read_bytes()

        settings = parse_settings(
            local_render.agent_settings(layout, vm, "/image", "java"), "agent.json"
        )
        by_agent = tmp_path / f"agent-{vm.name}.properties"
        write_properties(
            by_agent, agent_rendering.desired_server_properties(settings, vm.broker_id, the_spec)
        )

        assert by_agent.read_bytes() == by_kaas_up
        assert (
            calls["agent"][-1]
            == calls["kaas up"][-1]
            == (
                the_spec,
                local_render.broker_facts(layout, vm),
            )
        )
    assert len(calls["agent"]) == len(calls["kaas up"]) == nodes


def test_the_local_sizing_is_an_input_of_the_local_provider_and_its_agents(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path, 3)
    vm = layout.vms[0]
    settings = parse_settings(local_render.agent_settings(layout, vm, "/image", "java"))
    assert settings.host_sizing is SizingProfile.LOCAL
    assert local_render.broker_facts(layout, vm).host_sizing == sizing_properties(
        SizingProfile.LOCAL
    )
    rendered = render_server_properties(spec(), FACTS)
    assert rendered["num.io.threads"] == "4"
    assert rendered["offsets.topic.num.partitions"] == "12"


def test_the_standard_sizing_leaves_kafkas_own_defaults() -> None:
    standard = replace(FACTS, host_sizing=sizing_properties(SizingProfile.STANDARD))
    rendered = render_server_properties(spec(), standard)
    for key in sizing_properties(SizingProfile.LOCAL):
        assert key not in rendered
    assert rendered["min.insync.replicas"] == "2"  # the durable defaults stay


def test_agent_owned_keys_come_from_the_facts() -> None:
    rendered = render_server_properties(spec(), FACTS)
    assert {key: rendered[key] for key in AGENT_OWNED_KEYS} == {
        "broker.id": "2",
        "broker.rack": "zone-c",
        "listeners": "INTERNAL://10.0.0.3:9092,TENANT://10.0.0.3:9094",
        "advertised.listeners": "INTERNAL://broker-2.example:9092,TENANT://broker-2.example:9094",
        "log.dirs": "/data/kafka-1,/data/kafka-2",
        "zookeeper.connect": "10.0.0.1:2181,10.0.0.2:2181/kafka/c1",
    }


def test_spec_overrides_replace_defaults_in_place_and_append_new_keys_sorted() -> None:
    rendered = render_server_properties(
        spec({"num.io.threads": "6", "min.insync.replicas": "1", "log.cleaner.threads": "2"}),
        FACTS,
    )
    default_order = list(render_server_properties(spec(), FACTS))
    assert list(rendered) == [*default_order, "log.cleaner.threads"]
    assert rendered["num.io.threads"] == "6"
    assert rendered["min.insync.replicas"] == "1"


@pytest.mark.parametrize(
    ("key", "given", "rendered"),
    [
        ("num.io.threads", " +06 ", "6"),
        ("unclean.leader.election.enable", "TRUE", "true"),
        ("log.cleanup.policy", "compact , delete", "compact,delete"),
        ("log.cleaner.min.cleanable.ratio", "0.50", "0.50"),
        ("log.message.format.version", "3.9", "3.9"),
    ],
)
def test_spec_values_are_rendered_in_kafkas_canonical_form(
    key: str, given: str, rendered: str
) -> None:
    assert render_server_properties(spec({key: given}), FACTS)[key] == rendered


def test_host_sizing_replaces_the_local_sizing() -> None:
    big = replace(FACTS, host_sizing={"num.io.threads": "16"})
    rendered = render_server_properties(spec(), big)
    assert rendered["num.io.threads"] == "16"
    assert "num.network.threads" not in rendered


@pytest.mark.parametrize("key", [*AGENT_OWNED_KEYS, "log.dir", "node.id"])
def test_the_spec_may_not_set_agent_owned_keys(key: str) -> None:
    with pytest.raises(BrokerConfigError) as refused:
        render_server_properties(spec({key: "x"}), FACTS)
    assert f"'{key}' is set by the agent" in str(refused.value)
    assert [p.key for p in refused.value.problems] == [key]


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("no.such.key", "1", "unknown key 'no.such.key': not a Kafka 3.9.2 broker config"),
        ("num.io.threds", "4", "did you mean 'num.io.threads'?"),
        ("listener.name.plaintext.ssl.client.auth", "none", "listener-prefixed config"),
        ("leader.replication.throttled.rate", "1000", "set by the agent while it moves replicas"),
        ("ssl.keystore.password", "secret", "is a password"),
        ("num.io.threads", "abc", "num.io.threads='abc' is not a whole number (int)"),
        ("num.io.threads", "4.0", "is not a whole number (int)"),
        ("num.io.threads", "2147483648", "does not fit in a 32-bit int"),
        ("num.io.threads", "0", "out of range; valid values: [1,...]"),
        ("log.retention.bytes", "9223372036854775808", "does not fit in a 64-bit long"),
        ("sasl.login.refresh.buffer.seconds", "40000", "does not fit in a 16-bit short"),
        ("auto.leader.rebalance.enable", "yes", "is not a boolean"),
        ("log.cleaner.min.cleanable.ratio", "half", "is not a number (double)"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "out of range; valid values: [0,...,1]"),
        ("compression.type", "lz5", "is not one of the valid values"),
        ("compression.gzip.level", "10", "out of range; valid values: [1,...,9] or -1"),
        ("log.cleanup.policy", "compact,,delete", "has an empty item"),
        ("log.cleanup.policy", "compact,forever", "has 'forever'"),
        ("log.message.format.version", "9.9", "is not one of the valid values"),
        ("alter.config.policy.class.name", "not a class", "is not a Java class name"),
        ("remote.log.metadata.manager.class.name", " ", "must not be empty"),
    ],
)
def test_bad_spec_keys_and_values_are_refused_naming_the_key(
    key: str, value: str, says: str
) -> None:
    problems = broker_config_problems({key: value})
    assert [p.key for p in problems] == [key]
    assert says in problems[0].message
    with pytest.raises(BrokerConfigError, match=re.escape("spec.broker_config")):
        render_server_properties(spec({key: value}), FACTS)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("compression.gzip.level", "-1"),
        ("compression.gzip.level", "9"),
        ("log.message.format.version", "3.9.2"),
        ("inter.broker.protocol.version", "3.9-IV0"),
        ("log.retention.bytes", "-1"),
        ("log.cleaner.min.cleanable.ratio", "1e-1"),
        ("metric.reporters", ""),
        ("auto.leader.rebalance.enable", "False"),
    ],
)
def test_values_kafka_accepts_are_accepted(key: str, value: str) -> None:
    assert broker_config_problems({key: value}) == ()


def test_every_problem_is_reported_at_once_in_key_order() -> None:
    problems = broker_config_problems({"zzz.unknown": "1", "num.io.threads": "x", "broker.id": "3"})
    assert [p.key for p in problems] == ["broker.id", "num.io.threads", "zzz.unknown"]


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"zookeeper_connect": "10.0.0.1:2181"}, "zookeeper.connect"),
        ({"port": 0}, "listeners"),
        ({"tenant_port": 65536}, "listeners"),
        ({"tenant_port": 9092}, "listeners"),
        ({"broker_id": -1}, "broker.id"),
        ({"log_dirs": ()}, "log.dirs"),
        ({"rack": " "}, "broker.rack"),
        ({"advertised_address": "a,b"}, "advertised.listeners"),
        ({"host_sizing": {"num.io.threads": "many"}}, "num.io.threads"),
        ({"tls": TlsFiles("node.pem", "/etc/kaas/tls/ca.pem")}, "ssl"),
        ({"tls": TlsFiles("/etc/kaas/tls/node.pem", "/a,b/ca.pem")}, "ssl"),
    ],
)
def test_bad_facts_are_refused_naming_the_key(change: dict[str, Any], key: str) -> None:
    facts = replace(FACTS, **change)
    with pytest.raises(BrokerConfigError) as refused:
        render_server_properties(spec(), facts)
    assert [p.key for p in refused.value.problems] == [key]


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "C:\\kafka\\data",
        " leading space",
        "a=b:c #not a comment",
        "RULE:^CN=(.*?),OU=.*$/$1/,DEFAULT",
        "zone-ä ☃",
        "line\nbreak\ttab",
        "",
    ],
)
def test_properties_text_round_trips(value: str) -> None:
    properties = {"sasl.kerberos.principal.to.local.rules": value, "num.io.threads": "4"}
    text = server_properties_text(properties)
    assert text.isascii() and text.count("\n") == 2
    assert parse_server_properties(text) == properties


def test_parse_reads_comments_separators_and_continuations() -> None:
    text = "# comment\n! also\n\nbroker.id = 1\nlog.dirs:/a,\\\n    /b\nempty.value=\n"
    assert parse_server_properties(text) == {
        "broker.id": "1",
        "log.dirs": "/a,/b",
        "empty.value": "",
    }


def test_the_listeners_and_authorizer_are_rendered() -> None:
    rendered = render_server_properties(spec(), FACTS)
    assert {key: rendered[key] for key in BROKER_SECURITY} == {
        "listener.security.protocol.map": "INTERNAL:SSL,TENANT:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.principal.mapping.rules": "RULE:^CN=(kaas-node|kaas-admin),O=KaaS$/$1/,DEFAULT",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:kaas-node;User:kaas-admin",
    }
    # No plaintext listener, and no ANONYMOUS super user.
    assert "PLAINTEXT" not in rendered["listener.security.protocol.map"]
    assert "ANONYMOUS" not in rendered["super.users"]


def test_the_internal_listener_wants_a_client_certificate_from_pem_stores() -> None:
    rendered = render_server_properties(spec(), FACTS)
    assert {k: v for k, v in rendered.items() if k.startswith("listener.name.internal.")} == {
        "listener.name.internal.ssl.keystore.type": "PEM",
        "listener.name.internal.ssl.keystore.location": "/etc/kaas/tls/node.pem",
        "listener.name.internal.ssl.truststore.type": "PEM",
        "listener.name.internal.ssl.truststore.location": "/etc/kaas/tls/ca.pem",
        "listener.name.internal.ssl.enabled.protocols": "TLSv1.3,TLSv1.2",
        "listener.name.internal.ssl.client.auth": "required",
    }


def test_the_tenant_listener_is_sasl_ssl_with_scram_and_no_client_certificate() -> None:
    rendered = render_server_properties(spec(), FACTS)
    tenant = {k: v for k, v in rendered.items() if k.startswith("listener.name.tenant.")}
    assert tenant["listener.name.tenant.ssl.client.auth"] == "none"
    assert tenant["listener.name.tenant.ssl.keystore.location"] == "/etc/kaas/tls/node.pem"
    assert tenant["listener.name.tenant.ssl.enabled.protocols"] == "TLSv1.3,TLSv1.2"
    assert tenant["listener.name.tenant.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert tenant["listener.name.tenant.scram-sha-512.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    )


def test_a_controller_listener_takes_the_internal_listeners_security() -> None:
    files = TlsFiles("/k.pem", "/t.pem")
    internal = internal_listener_security(ListenerName.INTERNAL, files)
    controller = internal_listener_security("CONTROLLER", files)
    assert {k.replace("listener.name.internal.", ""): v for k, v in internal.items()} == {
        k.replace("listener.name.controller.", ""): v for k, v in controller.items()
    }


@pytest.mark.parametrize("key", sorted(LISTENER_SECURITY_KEYS | RENDERED_OUTSIDE_CATALOG))
def test_the_spec_may_not_weaken_the_listeners(key: str) -> None:
    problems = broker_config_problems({key: "x"})
    assert [p.key for p in problems] == [key]
    assert "is set by KaaS for the listeners' TLS and authentication" in problems[0].message


def test_the_spec_may_not_open_the_authorizer_to_everyone() -> None:
    # The authorizer's own setting, unknown to KafkaConfig: refused as an unknown key.
    problems = broker_config_problems({"allow.everyone.if.no.acl.found": "true"})
    assert "unknown key 'allow.everyone.if.no.acl.found'" in problems[0].message


def test_the_brokers_zookeeper_client_runs_over_tls_with_acls() -> None:
    rendered = render_server_properties(spec(), FACTS)
    assert rendered["zookeeper.clientCnxnSocket"] == "org.apache.zookeeper.ClientCnxnSocketNetty"
    assert rendered["zookeeper.ssl.client.enable"] == "true"
    assert rendered["zookeeper.ssl.keystore.location"] == "/etc/kaas/tls/node.pem"
    assert rendered["zookeeper.ssl.truststore.location"] == "/etc/kaas/tls/ca.pem"
    assert rendered["zookeeper.ssl.keystore.type"] == "PEM"
    assert rendered["zookeeper.ssl.truststore.type"] == "PEM"
    assert rendered["zookeeper.set.acl"] == "true"
    assert set(ZOOKEEPER_CLIENT_SECURITY_KEYS) <= set(BROKER_CONFIGS)


@pytest.mark.parametrize("key", sorted(ZOOKEEPER_CLIENT_SECURITY_KEYS))
def test_the_spec_may_not_touch_the_zookeeper_client_security(key: str) -> None:
    value = {"boolean": "false", "password": "x"}.get(BROKER_CONFIGS[key].type.value, "x")
    with pytest.raises(BrokerConfigError, match=key):
        render_server_properties(spec({key: value}), FACTS)
