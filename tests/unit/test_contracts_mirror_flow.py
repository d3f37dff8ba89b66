"""MirrorMaker 2 flows: the contract value and the properties rendered from it."""

from __future__ import annotations

import datetime as dt
import json
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

from planner.contracts.fields import ContractError
from planner.contracts.mirror_flow import (
    FlowState,
    MirrorFlow,
    MirrorSource,
    SourceKind,
    filter_matches,
    parse_mirror_flow,
)
from planner.contracts.paths import ClusterPaths
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.mirror import (
    MirrorEndpoint,
    RestStores,
    render_mirror_maker_properties,
)
from planner.pki.authority import Role, create_authority, issue
from planner.pki.files import IdentityFiles, write_identity
from planner.pki.pkcs12 import write_pkcs12_stores

pytestmark = pytest.mark.unit


def _flow(**changes: Any) -> MirrorFlow:
    flow = MirrorFlow(
        name="orders-dr",
        source=MirrorSource(SourceKind.KAAS, "primary", "127.0.1.1:9092,127.0.1.2:9092"),
        target_cluster="backup",
        topics="orders\\..*",
        groups="billing-.*",
    )
    return replace(flow, **changes)


def test_round_trip_keeps_every_field() -> None:
    flow = _flow(checkpoint_interval_s=5, replication_factor=2, state=FlowState.DELETING)
    assert parse_mirror_flow(flow.encode()) == flow


def test_mirrored_topic_takes_the_source_alias_as_prefix() -> None:
    assert _flow().mirrored_topic("orders.eu") == "primary.orders.eu"


def test_flow_znode_lives_under_the_target_cluster() -> None:
    assert ClusterPaths("backup").mirror_flow("orders-dr") == "/kaas/backup/mirror/flows/orders-dr"


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"name": "Orders"}, "flow name"),
        ({"name": "a" * 41}, "flow name"),
        ({"name": "orders\n"}, "flow name"),
        ({"target_cluster": "primary"}, "both cluster primary"),
        ({"target_cluster": "back.up"}, "target cluster"),
        ({"topics": ""}, "topics filter"),
        ({"topics": "orders("}, "not a regular expression"),
        ({"groups": "(?<name>x)"}, "Java and Python read differently"),
        ({"topics": "a\nb"}, "one line"),
        ({"checkpoint_interval_s": 0}, "checkpoint_interval_s"),
        ({"replication_factor": 6}, "replication_factor"),
        ({"workers": 0}, "workers must be 1 to 16"),
        ({"placement": (1, 1)}, "placement names a broker twice"),
        ({"placement": (-1,)}, "placement must be at most 16 broker ids"),
    ],
)
def test_bad_flows_are_refused_with_the_field_named(changes: dict[str, Any], named: str) -> None:
    with pytest.raises(ContractError, match=named):
        _flow(**changes)


@pytest.mark.parametrize(
    "servers", ["", "host", "host:99999", "host:1,", "a b:1", "host:1;other:2"]
)
def test_bad_bootstrap_servers_are_refused(servers: str) -> None:
    with pytest.raises(ContractError, match="bootstrap_servers"):
        _flow(source=MirrorSource(SourceKind.EXTERNAL, "ext", servers))


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda v: v.update(schema_version=3), "schema_version is 3, newer"),
        (lambda v: v.update(placement=[1, "2"]), "mirror_flow.placement must be a list"),
        (lambda v: v.update(workers=0), "mirror_flow.workers must be at least 1"),
        (lambda v: v.pop("topics"), "mirror_flow.topics is missing"),
        (lambda v: v.update(state="paused"), "mirror_flow.state must be one of"),
        (lambda v: v.update(source="primary"), "mirror_flow.source must be an object"),
        (lambda v: v["source"].update(kind="s3"), "mirror_flow.source.kind"),
        (lambda v: v.update(checkpoint_interval_s="10"), "must be an integer"),
    ],
)
def test_parser_names_what_it_refuses(mutate: Any, named: str) -> None:
    value = json.loads(_flow().encode())
    mutate(value)
    with pytest.raises(ContractError, match=named):
        parse_mirror_flow(json.dumps(value))


def test_placement_round_trips_and_a_schema_1_flow_runs_on_the_default_workers() -> None:
    flow = _flow(placement=(3, 1), workers=1)
    assert parse_mirror_flow(flow.encode()) == flow
    old = json.loads(_flow().encode())
    old["schema_version"] = 1
    del old["placement"], old["workers"]
    parsed = parse_mirror_flow(json.dumps(old))
    assert (parsed.placement, parsed.workers) == ((), 2)


@pytest.mark.parametrize(
    ("changes", "broker_id", "live", "runs"),
    [
        ({}, 1, {1, 2, 3}, True),
        ({}, 2, {1, 2, 3}, True),
        ({}, 3, {1, 2, 3}, False),
        ({}, 3, {2, 3}, True),  # broker 1's agent is gone: the flow moves to 3
        ({}, 3, set(), True),  # this VM counts itself even before its member znode is read
        ({"workers": 3}, 3, {1, 2, 3}, True),
        ({"placement": (3,)}, 3, {1, 2, 3}, True),
        ({"placement": (3,)}, 1, {1, 2, 3}, False),
        ({"state": FlowState.DELETING}, 1, {1, 2, 3}, False),
    ],
)
def test_a_flow_runs_on_its_placement_or_the_first_workers(
    changes: dict[str, Any], broker_id: int, live: set[int], runs: bool
) -> None:
    assert _flow(**changes).runs_on(broker_id, frozenset(live)) is runs


def test_filters_match_whole_names_as_mirror_maker_does() -> None:
    assert filter_matches("orders\\..*", "orders.eu")
    assert not filter_matches("orders", "orders-archive")


_TARGET = MirrorEndpoint("127.0.2.1:9092", TlsFiles("/vm/tls/node.pem", "/vm/tls/ca.pem"))
_SOURCE = MirrorEndpoint(
    "127.0.1.1:9092", TlsFiles("/vm/mirror/orders-dr/mirror.pem", "/vm/mirror/orders-dr/ca.pem")
)


def _render(*flows: MirrorFlow, sources: dict[str, MirrorEndpoint] | None = None) -> dict[str, str]:
    return render_mirror_maker_properties(
        target_cluster="backup",
        target=_TARGET,
        flows=flows,
        sources=sources if sources is not None else {f.name: _SOURCE for f in flows},
        rest_address="127.0.2.1",
        rest_port=8083,
        rest_stores=RestStores("/vm/rest/keystore.p12", "/vm/rest/truststore.p12", "pw"),
    )


def test_rendered_flow_reads_the_source_and_writes_only_the_target() -> None:
    props = _render(_flow())
    assert props["clusters"] == "backup,primary"
    assert props["primary->backup.enabled"] == "true"
    assert props["backup->primary.enabled"] == "false"
    assert props["emit.heartbeats.enabled"] == "false"
    assert props["primary->backup.offset-syncs.topic.location"] == "target"
    assert props["primary->backup.topics"] == "orders\\..*"
    assert props["primary->backup.sync.group.offsets.enabled"] == "true"
    assert props["primary.bootstrap.servers"] == "127.0.1.1:9092"
    assert props["primary.ssl.keystore.location"] == "/vm/mirror/orders-dr/mirror.pem"
    assert props["backup.ssl.truststore.location"] == "/vm/tls/ca.pem"
    assert props["backup.security.protocol"] == props["primary.security.protocol"] == "SSL"
    assert not any("PLAINTEXT" in value for value in props.values())


def test_internal_rest_is_mutual_tls_on_the_vm_address() -> None:
    props = _render(_flow())
    assert props["dedicated.mode.enable.internal.rest"] == "true"
    assert props["listeners"] == "https://127.0.2.1:8083"
    assert props["listeners.https.ssl.client.auth"] == "required"
    # a dead process's tasks go to the others in seconds, not Connect's default 5 minutes
    assert int(props["backup.scheduled.rebalance.max.delay.ms"]) <= 30_000


def test_deleting_flows_are_left_out_and_none_left_is_refused() -> None:
    active = _flow()
    leaving = _flow(name="old", source=MirrorSource(SourceKind.KAAS, "old", "127.0.3.1:9092"))
    props = _render(active, replace(leaving, state=FlowState.DELETING))
    assert "old->backup.enabled" not in props
    with pytest.raises(ContractError, match="no active flow"):
        _render(replace(active, state=FlowState.DELETING))


def test_two_flows_from_one_source_or_into_another_target_are_refused() -> None:
    twin = _flow(name="orders-dr2")
    with pytest.raises(ContractError, match="both read source primary"):
        _render(_flow(), twin)
    with pytest.raises(ContractError, match="not backup"):
        _render(_flow(target_cluster="elsewhere"))
    with pytest.raises(ContractError, match="no connection settings"):
        _render(_flow(), sources={})


def test_relative_identity_paths_are_refused() -> None:
    relative = MirrorEndpoint("127.0.1.1:9092", TlsFiles("mirror.pem", "/ca.pem"))
    with pytest.raises(ContractError, match="absolute path"):
        _render(_flow(), sources={"orders-dr": relative})


def test_pkcs12_stores_carry_the_identity_and_trust_its_ca(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    authority = create_authority("backup", now)
    identity = IdentityFiles(tmp_path / "tls", Role.NODE)
    issued = issue(authority, Role.NODE, ("127.0.2.1",), now)
    write_identity(identity, issued, authority.certificate_pem)
    stores = write_pkcs12_stores(identity, tmp_path / "rest")
    loaded = pkcs12.load_pkcs12(stores.keystore.read_bytes(), stores.password.encode())
    assert loaded.cert is not None
    assert loaded.cert.certificate.public_bytes(Encoding.PEM) in identity.certificate.read_bytes()
    trusted = pkcs12.load_pkcs12(stores.truststore.read_bytes(), stores.password.encode())
    assert [c.certificate.subject for c in trusted.additional_certs] == [
        authority.certificate.subject
    ]
    for path in (stores.keystore, stores.truststore, tmp_path / "rest" / "stores.password"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = write_pkcs12_stores(identity, tmp_path / "rest")
    assert again.password == stores.password
    with pytest.raises(ValueError):
        pkcs12.load_pkcs12(stores.keystore.read_bytes(), b"wrong")
