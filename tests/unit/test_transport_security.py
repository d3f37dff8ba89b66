"""A pre-TLS cluster's plaintext transport and its conversion's phases: the spec value, its
parser, and what the one renderer writes for each phase."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from pathlib import Path, PurePosixPath

import pytest

from management_plane.errors import KaasError
from management_plane.local.cluster import LocalCluster
from management_plane.local.layout import plan_layout
from management_plane.local.state import ClusterState
from planner.contracts.spec import ClusterSpec, SpecError, parse_spec
from planner.contracts.transport_security import (
    CONVERSION_PHASES,
    TransportSecurity,
    TransportSecurityError,
    conversion_refusal,
    conversion_start,
    parse_transport,
)
from planner.contracts.vm_config import (
    BrokerConfigError,
    BrokerFacts,
    SizingProfile,
    render_server_properties,
    render_zoo_cfg,
    sizing_properties,
)
from planner.contracts.vm_config.jolokia import JolokiaTls, render_jolokia_properties
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.zookeeper_security import ZookeeperSecurity, ZookeeperTlsFiles
from planner.pki.authority import Role
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles
from planner.zookeeper_client import ZookeeperIdentityError, zookeeper_client

pytestmark = pytest.mark.unit

T = TransportSecurity
SPEC = ClusterSpec("c1", "3.9.2", 3, ("a", "b", "c"))
FACTS = BrokerFacts(
    broker_id=1,
    rack="a",
    listener_address="10.0.0.2",
    port=9092,
    tenant_port=9094,
    advertised_address="10.0.0.2",
    log_dirs=("/data/kafka",),
    zookeeper_connect="10.0.0.1:2181/kafka/c1",
    host_sizing=sizing_properties(SizingProfile.LOCAL),
    tls=TlsFiles("/etc/kaas/tls/node.pem", "/etc/kaas/tls/ca.pem"),
)
ZK_SECURITY = ZookeeperSecurity(
    ZookeeperTlsFiles(PurePosixPath("/tls/node.pem"), PurePosixPath("/tls/ca.pem")),
    "CN=kaas-node,O=KaaS",
)


@pytest.mark.parametrize(
    ("transport", "plain", "tls", "clients_tls", "zk_plain", "zk_tls"),
    [
        (T.PLAINTEXT_LEGACY, True, False, False, True, False),
        (T.BOTH_LISTENERS, True, True, False, True, True),
        (T.TLS_CLIENTS, True, True, True, True, True),
        (T.TLS, False, True, True, False, True),
    ],
)
def test_each_phase_keeps_what_the_phase_before_it_still_uses(
    transport: TransportSecurity,
    plain: bool,
    tls: bool,
    clients_tls: bool,
    zk_plain: bool,
    zk_tls: bool,
) -> None:
    assert transport.plain_listeners is plain
    assert transport.tls_listeners is tls
    assert transport.clients_use_tls is clients_tls
    assert transport.zookeeper_plain_port is zk_plain
    assert transport.zookeeper_tls is zk_tls


def test_no_phase_closes_a_channel_before_its_clients_have_moved() -> None:
    """Walking the conversion: a listener closes only in a phase after the one that moved
    every KaaS client off it, and one opens before any client is moved onto it."""
    walk = (T.PLAINTEXT_LEGACY, *CONVERSION_PHASES)
    for before, after in pairwise(walk):
        if before.plain_listeners and not after.plain_listeners:
            assert before.clients_use_tls
        if after.clients_use_tls and not before.clients_use_tls:
            assert before.tls_listeners and before.zookeeper_tls


@pytest.mark.parametrize(
    ("current", "refusal", "start"),
    [
        (T.PLAINTEXT_LEGACY, "", 0),
        (T.BOTH_LISTENERS, "", 0),
        (T.TLS_CLIENTS, "", 1),
        (T.TLS, "already runs TLS", None),
    ],
)
def test_a_conversion_resumes_in_its_phase_and_is_refused_once_secure(
    current: TransportSecurity, refusal: str, start: int | None
) -> None:
    found = conversion_refusal(current)
    assert refusal in found if refusal else found == ""
    if start is None:
        with pytest.raises(TransportSecurityError, match="nothing to convert"):
            conversion_start(current)
    else:
        assert conversion_start(current) == start


@pytest.mark.parametrize(
    ("value", "error"),
    [(1, "must be a string, got int"), ("ssl", "must be one of plaintext_legacy")],
)
def test_parse_transport_names_the_field(value: object, error: str) -> None:
    with pytest.raises(TransportSecurityError, match=f"spec.transport_security {error}"):
        parse_transport(value)


def test_a_secure_spec_keeps_its_bytes_and_a_legacy_one_round_trips() -> None:
    assert "transport_security" not in SPEC.to_json()
    assert parse_spec(SPEC.encode()).transport_security is T.TLS
    for transport in T:
        spec = replace(SPEC, transport_security=transport)
        assert parse_spec(spec.encode()) == spec


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"transport_security": "clear"}, "spec.transport_security must be one of"),
        (
            {"transport_security": "plaintext_legacy", "kafka_version": "4.3.1"},
            "only ZooKeeper-mode clusters ran before TLS",
        ),
    ],
)
def test_a_spec_with_a_bad_transport_is_refused(change: dict[str, object], error: str) -> None:
    value = {**SPEC.to_json(), **change}
    with pytest.raises(SpecError, match=error):
        parse_spec(json.dumps(value))


def _render(transport: TransportSecurity) -> dict[str, str]:
    return render_server_properties(replace(SPEC, transport_security=transport), FACTS)


@pytest.mark.parametrize(
    ("transport", "listeners", "protocols", "inter_broker"),
    [
        (
            T.PLAINTEXT_LEGACY,
            "INTERNAL_PLAIN://10.0.0.2:9091,TENANT_PLAIN://10.0.0.2:9095",
            "INTERNAL_PLAIN:PLAINTEXT,TENANT_PLAIN:SASL_PLAINTEXT",
            "INTERNAL_PLAIN",
        ),
        (
            T.BOTH_LISTENERS,
            "INTERNAL://10.0.0.2:9092,TENANT://10.0.0.2:9094,"
            "INTERNAL_PLAIN://10.0.0.2:9091,TENANT_PLAIN://10.0.0.2:9095",
            "INTERNAL:SSL,TENANT:SASL_SSL,INTERNAL_PLAIN:PLAINTEXT,TENANT_PLAIN:SASL_PLAINTEXT",
            "INTERNAL_PLAIN",
        ),
        (
            T.TLS_CLIENTS,
            "INTERNAL://10.0.0.2:9092,TENANT://10.0.0.2:9094,"
            "INTERNAL_PLAIN://10.0.0.2:9091,TENANT_PLAIN://10.0.0.2:9095",
            "INTERNAL:SSL,TENANT:SASL_SSL,INTERNAL_PLAIN:PLAINTEXT,TENANT_PLAIN:SASL_PLAINTEXT",
            "INTERNAL",
        ),
        (
            T.TLS,
            "INTERNAL://10.0.0.2:9092,TENANT://10.0.0.2:9094",
            "INTERNAL:SSL,TENANT:SASL_SSL",
            "INTERNAL",
        ),
    ],
)
def test_server_properties_of_each_phase(
    transport: TransportSecurity, listeners: str, protocols: str, inter_broker: str
) -> None:
    props = _render(transport)
    assert props["listeners"] == listeners
    assert props["advertised.listeners"] == listeners
    assert props["listener.security.protocol.map"] == protocols
    assert props["inter.broker.listener.name"] == inter_broker
    anonymous = "User:ANONYMOUS" in props["super.users"].split(";")
    assert anonymous is transport.plain_listeners
    assert ("listener.name.internal.ssl.keystore.location" in props) is transport.tls_listeners
    assert ("listener.name.tenant_plain.sasl.enabled.mechanisms" in props) is (
        transport.plain_listeners
    )
    assert props["zookeeper.set.acl"] == str(transport.clients_use_tls).lower()
    assert ("zookeeper.ssl.client.enable" in props) is transport.clients_use_tls


def test_the_tls_phase_renders_what_a_cluster_made_secure_renders() -> None:
    assert _render(T.TLS) == render_server_properties(SPEC, FACTS)


def test_a_plain_listener_port_shared_with_a_tls_one_is_refused() -> None:
    facts = replace(FACTS, plain_port=9094)
    with pytest.raises(BrokerConfigError, match="share a port"):
        render_server_properties(replace(SPEC, transport_security=T.PLAINTEXT_LEGACY), facts)


def _zoo_cfg(transport: TransportSecurity) -> list[str]:
    text = render_zoo_cfg(
        PurePosixPath("/d"), PurePosixPath("/c/dyn"), ZK_SECURITY, 2181, "10.0.0.2", transport
    )
    return text.splitlines()


@pytest.mark.parametrize(
    ("transport", "present", "absent"),
    [
        (
            T.PLAINTEXT_LEGACY,
            {"clientPort=2181", "clientPortAddress=10.0.0.2"},
            {"secureClientPort=2181", "client.portUnification=true", "enforce.auth.enabled=true"},
        ),
        (
            T.BOTH_LISTENERS,
            {"clientPort=2181", "client.portUnification=true", "sslQuorum=false"},
            {"secureClientPort=2181", "enforce.auth.enabled=true", "sslQuorum=true"},
        ),
        (
            T.TLS_CLIENTS,
            {"clientPort=2181", "client.portUnification=true", "sslQuorum=true"},
            {"secureClientPort=2181", "enforce.auth.enabled=true"},
        ),
        (
            T.TLS,
            {"secureClientPort=2181", "enforce.auth.enabled=true", "sslQuorum=true"},
            {"clientPort=2181", "client.portUnification=true", "portUnification=true"},
        ),
    ],
)
def test_zoo_cfg_of_each_phase_keeps_one_client_port(
    transport: TransportSecurity, present: set[str], absent: set[str]
) -> None:
    lines = set(_zoo_cfg(transport))
    assert present <= lines
    assert not absent & lines
    assert any(line.startswith("ssl.keyStore.location=") for line in lines) is (
        transport.zookeeper_tls
    )


@pytest.mark.parametrize("transport", list(T))
def test_jolokia_is_http_until_the_agents_move_to_tls(transport: TransportSecurity) -> None:
    tls = JolokiaTls(PurePosixPath("/ca.pem"), PurePosixPath("/c.pem"), PurePosixPath("/k.pem"))
    text = render_jolokia_properties(
        "10.0.0.2", 8778, tls, PurePosixPath("/p.xml"), "CN=kaas-node,O=KaaS", transport
    )
    lines = set(text.splitlines())
    scheme = "https" if transport.clients_use_tls else "http"
    assert f"protocol={scheme}" in lines
    assert ("useSslClientAuthentication=true" in lines) is transport.clients_use_tls
    assert "policyLocation=file:///p.xml" in lines


# -- the clients and the local cluster of a legacy cluster ----------------------------------


def _identity(tmp_path: Path) -> IdentityFiles:
    return IdentityFiles(tmp_path / "client", Role.ADMIN)


@pytest.mark.parametrize("transport", list(T))
def test_internal_client_settings_follow_the_phase_of_the_clients(
    tmp_path: Path, transport: TransportSecurity
) -> None:
    client = InternalClient("h:9091", _identity(tmp_path), transport)
    protocol = "SSL" if transport.clients_use_tls else "PLAINTEXT"
    assert client.librdkafka(acks="all")["security.protocol"] == protocol
    assert client.librdkafka(acks="all")["acks"] == "all"
    assert client.java()["security.protocol"] == protocol
    assert client.kafka_python()["security_protocol"] == protocol
    assert ("ssl.key.location" in client.librdkafka()) is transport.clients_use_tls


def test_a_plaintext_zookeeper_client_is_anonymous_and_sets_no_acl(tmp_path: Path) -> None:
    plain = zookeeper_client("h:2181", _identity(tmp_path), transport=T.BOTH_LISTENERS)
    assert plain.default_acl is None
    with pytest.raises(ZookeeperIdentityError, match="needs its certificate"):
        zookeeper_client("h:2181", _identity(tmp_path), transport=T.TLS_CLIENTS)


def test_a_legacy_layout_names_its_plain_listeners_and_round_trips(tmp_path: Path) -> None:
    layout = plan_layout("old", tmp_path, 3, "127.0.99", transport=T.PLAINTEXT_LEGACY)
    assert layout.bootstrap_servers == "127.0.99.1:9091,127.0.99.2:9091,127.0.99.3:9091"
    assert layout.tenant_bootstrap_servers.split(",")[0] == "127.0.99.1:9095"
    both = replace(layout, transport=T.BOTH_LISTENERS)
    assert both.bootstrap_servers.split(",")[0] == "127.0.99.1:9091"
    assert both.tenant_bootstrap_servers.split(",")[0] == "127.0.99.1:9094"
    state = ClusterState(layout=layout, kafka_version="3.9.2")
    value = json.loads(json.dumps(state.to_json()))
    assert value["transport_security"] == "plaintext_legacy"
    assert ClusterState.from_json(value, tmp_path).layout.transport is T.PLAINTEXT_LEGACY
    secure = ClusterState(layout=replace(layout, transport=T.TLS), kafka_version="3.9.2")
    assert "transport_security" not in secure.to_json()
    with pytest.raises(KaasError, match="malformed"):
        ClusterState.from_json({**value, "transport_security": "clear"}, tmp_path)


def test_kaas_up_refuses_a_legacy_cluster_with_agents_before_anything_starts(
    tmp_path: Path,
) -> None:
    with pytest.raises(KaasError, match="runs without agents"):
        LocalCluster(tmp_path).up(3, agents=True, transport=T.PLAINTEXT_LEGACY)
    assert list(tmp_path.iterdir()) == []
