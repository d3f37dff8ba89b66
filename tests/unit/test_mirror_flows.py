"""MirrorMaker 2 flows through the management plane: the request checked at the boundary
(every problem named with its field, nothing queued on refusal), the flow operations' steps
run by the real engine against a fake of the target's ZooKeeper, and the routes on the real
app (engine paused)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from management_plane.errors import Refusal, RequestRefused
from management_plane.mirror.acls import (
    PatternKind,
    SourceGrant,
    filter_scope,
    mirror_source_grants,
)
from management_plane.mirror.flows import MirrorFlows
from management_plane.mirror.request import (
    ClusterFacts,
    FlowRequest,
    check_against_existing,
    check_flow_request,
)
from management_plane.providers.base import VmRequest
from management_plane.service.controller import Controller
from management_plane.service.db import Database, OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    SUCCEEDED,
    OperationKind,
    StepName,
    StepRef,
    expand_steps,
)
from management_plane.service.service import Service
from management_plane.tenants.acls import AclOperation, AclResource
from planner.contracts.mirror_flow import (
    FlowState,
    MirrorFlow,
    MirrorSource,
    SourceKind,
    filter_matches,
)
from planner.contracts.mirror_lag import MirrorFlowLag, TopicLag
from planner.contracts.spec import ClusterSpec
from planner.pki.authority import Authority, Role, create_authority, issue, issued_by
from planner.pki.files import IdentityFiles, write_identity
from tests.unit.api_server import RunningApi, running_api
from tests.unit.fake_cluster import FakeCluster, ZookeeperKeepingProvider

pytestmark = pytest.mark.unit

PRIMARY = ClusterFacts("running", "127.0.1.1:9092,127.0.1.2:9092", frozenset({0, 1, 2}))
BACKUP = ClusterFacts("running", "127.0.2.1:9092,127.0.2.2:9092", frozenset({0, 1, 2}))
CLUSTERS = {
    "primary": PRIMARY,
    "backup": BACKUP,
    "creating": ClusterFacts("creating", "", frozenset()),
}


def _request(**changes: Any) -> FlowRequest:
    values: dict[str, Any] = {"name": "orders-dr", "topics": "orders\\..*"}
    values["source_cluster"] = "primary"
    values.update(changes)
    return FlowRequest(**values)


def test_a_good_request_becomes_the_flow_with_the_source_brokers_known_to_the_service() -> None:
    flow = check_flow_request(_request(placement=(2,)), "backup", CLUSTERS)
    assert flow.source == MirrorSource(SourceKind.KAAS, "primary", PRIMARY.bootstrap_servers)
    assert (flow.target_cluster, flow.groups, flow.replication_factor) == ("backup", ".*", 3)
    assert flow.placement == (2,)


def test_an_outside_source_is_named_by_its_bootstrap_and_alias() -> None:
    request = _request(source_cluster=None, source_bootstrap="ext.example:9093", source_alias="ext")
    flow = check_flow_request(request, "backup", CLUSTERS)
    assert flow.source == MirrorSource(SourceKind.EXTERNAL, "ext", "ext.example:9093")


@pytest.mark.parametrize(
    ("changes", "target", "refusal", "fragment"),
    [
        ({}, "nowhere", Refusal.NOT_FOUND, "no cluster named nowhere"),
        (
            {"source_cluster": "backup"},
            "backup",
            Refusal.INVALID,
            "source_cluster: backup is the target",
        ),
        (
            {"source_cluster": "gone"},
            "backup",
            Refusal.INVALID,
            "source_cluster: no cluster named 'gone'",
        ),
        ({"source_cluster": "creating"}, "backup", Refusal.INVALID, "cluster creating is creating"),
        ({"source_cluster": None}, "backup", Refusal.INVALID, "source: give either source_cluster"),
        ({"source_bootstrap": "h:1"}, "backup", Refusal.INVALID, "source: give either"),
        ({"name": "Orders"}, "backup", Refusal.INVALID, "name: flow name 'Orders' is invalid"),
        (
            {"topics": "orders("},
            "backup",
            Refusal.INVALID,
            "topics filter 'orders(' is not",
        ),
        ({"groups": ""}, "backup", Refusal.INVALID, "groups filter must be a non-empty"),
        (
            {"placement": (7,)},
            "backup",
            Refusal.INVALID,
            "placement: cluster backup has no broker 7",
        ),
        ({"replication_factor": 4}, "backup", Refusal.INVALID, "replication_factor: 4 is more"),
        ({"workers": 0}, "backup", Refusal.INVALID, "workers must be 1 to 16"),
        (
            {"source_cluster": None, "source_bootstrap": "h:99999", "source_alias": "ext"},
            "backup",
            Refusal.INVALID,
            "source_bootstrap: port 99999 is out of range",
        ),
        (
            {"source_cluster": None, "source_bootstrap": "h:1", "source_alias": "primary"},
            "backup",
            Refusal.INVALID,
            "source_alias: primary names a cluster of this service",
        ),
        ({}, "creating", Refusal.CONFLICT, "cluster creating is creating"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(
    changes: dict[str, Any], target: str, refusal: Refusal, fragment: str
) -> None:
    with pytest.raises(RequestRefused) as refused:
        check_flow_request(_request(**changes), target, CLUSTERS)
    assert refused.value.refusal is refusal
    assert fragment in str(refused.value)


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(RequestRefused) as refused:
        check_flow_request(_request(name="X", topics="(", groups="("), "backup", CLUSTERS)
    message = str(refused.value)
    assert "name:" in message and "topics filter" in message and "groups filter" in message


def test_a_taken_name_or_a_second_flow_from_one_source_is_a_conflict() -> None:
    flow = check_flow_request(_request(), "backup", CLUSTERS)
    other_name = check_flow_request(_request(name="other"), "backup", CLUSTERS)
    with pytest.raises(RequestRefused, match="has a flow named orders-dr already"):
        check_against_existing(flow, {flow.name: flow})
    with pytest.raises(RequestRefused, match="flow other already mirrors primary"):
        check_against_existing(flow, {"other": other_name})
    check_against_existing(flow, {})  # nothing there: accepted


# -- the operations, run by the real engine against a fake target --------------------------


class DeliveringProvider(ZookeeperKeepingProvider):
    """Holds each cluster's CA and admin identity, and puts a flow's source credentials on
    the target's VMs (here: remembers them)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.authorities: dict[str, Authority] = {}
        self.delivered: dict[tuple[str, str], tuple[bytes, bytes]] = {}

    def cluster_authority(self, cluster: str) -> Authority:
        if cluster not in self.authorities:
            self.authorities[cluster] = create_authority(cluster, dt.datetime.now(dt.UTC))
        return self.authorities[cluster]

    def staged_authority(self, cluster: str) -> Authority | None:
        return None

    def client_identity(self, cluster: str) -> IdentityFiles | None:
        identity = IdentityFiles(self.folder / cluster, Role.ADMIN)
        if not identity.exists():
            authority = self.cluster_authority(cluster)
            issued = issue(authority, Role.ADMIN, (), dt.datetime.now(dt.UTC))
            write_identity(identity, issued, authority.certificate_pem)
        return identity

    def deliver_mirror_source(
        self, target: str, flow: str, client_pem: bytes, ca_pem: bytes
    ) -> None:
        self.delivered[(target, flow)] = (client_pem, ca_pem)

    def withdraw_mirror_source(self, target: str, flow: str) -> None:
        self.delivered.pop((target, flow), None)


class FakeSourceAcls:
    """Every source cluster's bindings, by its bootstrap servers."""

    def __init__(self) -> None:
        self.bindings: dict[str, set[SourceGrant]] = {}
        self.identities: list[IdentityFiles] = []

    def connect(self, bootstrap: str, identity: IdentityFiles) -> FakeSourceAcls.One:
        self.identities.append(identity)
        return FakeSourceAcls.One(self.bindings.setdefault(bootstrap, set()))

    @dataclass
    class One:
        held: set[SourceGrant]

        def grant(self, grants: Sequence[SourceGrant]) -> None:
            self.held.update(grants)

        def revoke(self, grants: Sequence[SourceGrant]) -> None:
            self.held.difference_update(grants)


class MirrorWorld:
    def __init__(self, tmp_path: Path, provider: ZookeeperKeepingProvider | None = None) -> None:
        self.db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
        self.target = FakeCluster()
        self.provider = provider or DeliveringProvider(tmp_path / "identities")
        provider = self.provider
        self.acls = FakeSourceAcls()
        controller = Controller(
            self.db, provider, self.target.connect, source_acls=self.acls.connect
        )
        self.engine = Engine(self.db, controller)
        self.service = Service(tmp_path, self.db, provider, self.engine)
        self.flows = MirrorFlows(self.service)
        for name in ("primary", "backup"):
            spec = ClusterSpec(
                cluster=name,
                kafka_version="3.9.2",
                broker_count=3,
                zones=("a", "b", "c"),
                zookeeper_participants=3,
            )
            self.db.add_cluster(name, "fake", "small", json.dumps(spec.to_json()))
            self.db.update_cluster(name, status="running")
            for broker_id, zone in enumerate(spec.zones):
                info = provider.create_vm(VmRequest(name, zone, "small", "3.9.2"))
                self.db.upsert_vm(
                    info.vm_id, name, zone, info.address, "small", "3.9.2", "running", broker_id
                )
        self.target.spec = ClusterSpec(
            cluster="backup",
            kafka_version="3.9.2",
            broker_count=3,
            zones=("a", "b", "c"),
            zookeeper_participants=3,
        )

    def run(self, op: OperationRow) -> OperationRow:
        for _ in range(len(op.steps) + 1):
            self.engine.run_once()
        found = self.db.operation(op.op_id)
        assert found is not None
        return found


@pytest.fixture
def world(tmp_path: Path) -> MirrorWorld:
    return MirrorWorld(tmp_path)


def test_the_flow_operations_are_registered_steps() -> None:
    assert expand_steps(OperationKind.CREATE_MIRROR_FLOW) == [
        StepRef(StepName.GRANT_SOURCE_ACLS),
        StepRef(StepName.DELIVER_SOURCE),
        StepRef(StepName.WRITE_FLOW),
        StepRef(StepName.FINISH),
    ]
    assert [s.name for s in expand_steps(OperationKind.DELETE_MIRROR_FLOW)] == [
        StepName.STOP_FLOW,
        StepName.REMOVE_FLOW,
        StepName.WITHDRAW_SOURCE,
        StepName.REVOKE_SOURCE_ACLS,
        StepName.FINISH,
    ]


def test_create_then_delete_writes_and_removes_the_flow_in_the_target(world: MirrorWorld) -> None:
    op = world.flows.create("backup", _request(), "admin")
    assert world.target.flows == {}, "the request only queues"
    assert world.run(op).status is SUCCEEDED
    assert isinstance(world.provider, DeliveringProvider)
    flow = world.target.flows["orders-dr"]
    # The source holds the flow's read-only bindings, made as the service's admin of it.
    assert world.acls.bindings[flow.source.bootstrap_servers] == set(mirror_source_grants(flow))
    assert world.acls.identities == [world.provider.client_identity("primary")]
    # The target's VMs get a kaas-mirror certificate of the source's CA, and that CA.
    client_pem, ca_pem = world.provider.delivered[("backup", "orders-dr")]
    certificate = x509.load_pem_x509_certificate(client_pem)
    assert certificate.subject.rfc4514_string() == "CN=kaas-mirror,O=KaaS"
    assert b"PRIVATE KEY" in client_pem
    assert issued_by(client_pem.split(b"-----END PRIVATE KEY-----\n")[-1], ca_pem)
    assert ca_pem == world.provider.cluster_authority("primary").certificate_pem
    primary_vms = [v["address"] for v in world.db.cluster_vms("primary")]
    assert flow.source.bootstrap_servers == ",".join(f"{a}:9092" for a in primary_vms)
    assert world.flows.get("backup", "orders-dr") == flow
    assert list(world.flows.list("backup").flows) == ["orders-dr"]

    states: list[FlowState] = []
    original = world.target.remove_mirror_flow

    def remove(name: str) -> None:
        states.append(world.target.flows[name].state)
        original(name)

    world.target.remove_mirror_flow = remove  # type: ignore[method-assign]
    done = world.run(world.flows.delete("backup", "orders-dr", "admin"))
    assert done.status is SUCCEEDED
    assert states == [FlowState.DELETING], "marked deleting before it is removed"
    assert world.target.flows == {}
    assert world.provider.delivered == {}
    assert world.acls.bindings[flow.source.bootstrap_servers] == set(), "bindings revoked"


def test_a_refused_request_stores_nothing(world: MirrorWorld) -> None:
    existing = check_flow_request(_request(), "backup", world.flows._facts())
    world.target.flows[existing.name] = existing
    for request in (_request(), _request(name="again"), _request(source_cluster="backup")):
        with pytest.raises(RequestRefused):
            world.flows.create("backup", request, "admin")
    assert world.db.list_operations(None, 100) == []
    assert list(world.target.flows) == ["orders-dr"]


def test_write_flow_is_safe_to_run_again_and_fails_on_another_flow_of_its_name(
    world: MirrorWorld,
) -> None:
    op = world.flows.create("backup", _request(), "admin")
    world.target.flows["orders-dr"] = check_flow_request(_request(), "backup", world.flows._facts())
    assert world.run(op).status is SUCCEEDED  # the same flow there already: done
    world.target.flows.clear()
    first = world.flows.create("backup", _request(), "admin")
    world.target.flows["orders-dr"] = MirrorFlow(
        name="orders-dr",
        source=MirrorSource(SourceKind.EXTERNAL, "elsewhere", "h:1"),
        target_cluster="backup",
        topics=".*",
        groups=".*",
    )
    failed = world.run(first)
    assert failed.status.value == "failed"
    assert "another flow named orders-dr" in failed.message


def test_a_provider_that_cannot_deliver_the_source_identity_is_refused_at_once(
    tmp_path: Path,
) -> None:
    world = MirrorWorld(tmp_path, ZookeeperKeepingProvider())
    with pytest.raises(RequestRefused, match="cannot put a client identity of primary"):
        world.flows.create("backup", _request(), "admin")
    assert world.db.list_operations(None, 100) == []


def test_deleting_an_unknown_flow_is_a_404_and_queues_nothing(world: MirrorWorld) -> None:
    from management_plane.errors import ApiError

    with pytest.raises(ApiError, match="has no flow nope"):
        world.flows.delete("backup", "nope", "admin")
    assert world.db.list_operations(None, 100) == []


# -- the routes on the real app ---------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningApi]:
    with running_api(tmp_path_factory.mktemp("mirror-api") / "service") as running:
        db = running.service.db
        for index, name in enumerate(("primary", "backup")):
            spec = ClusterSpec(
                cluster=name,
                kafka_version="3.9.2",
                broker_count=1,
                zones=("a",),
                zookeeper_participants=1,
            )
            db.add_cluster(name, "local", "small", json.dumps(spec.to_json()))
            db.update_cluster(name, status="running")
            db.upsert_vm(
                f"{name}/vm1", name, "a", f"127.0.{9 + index}.1", "small", "3.9.2", "running", 0
            )
        yield running


@pytest.mark.parametrize(
    ("target", "body", "status", "fragment"),
    [
        (
            "nowhere",
            {"name": "f", "topics": ".*", "source_cluster": "primary"},
            404,
            "no cluster named nowhere",
        ),
        (
            "backup",
            {"name": "f", "topics": ".*", "source_cluster": "backup"},
            400,
            "source_cluster: backup is the target",
        ),
        (
            "backup",
            {"name": "f", "topics": ".*", "source_cluster": "gone"},
            400,
            "no cluster named 'gone'",
        ),
        (
            "backup",
            {"name": "f", "topics": "a(", "source_cluster": "primary"},
            400,
            "topics filter 'a(' is not a regular expression",
        ),
        (
            "backup",
            {"name": "F_1", "topics": ".*", "source_cluster": "primary"},
            400,
            "name: flow name",
        ),
        (
            "backup",
            {"name": "f", "topics": ".*", "source_cluster": "primary", "workers": 99},
            422,
            "workers",
        ),
        (
            "backup",
            {"name": "f", "topics": ".*", "source_cluster": "primary", "speed": 1},
            422,
            "speed",
        ),
        # Valid, but the service holds no identity of the source to give the target's VMs.
        (
            "backup",
            {"name": "f", "topics": ".*", "source_cluster": "primary"},
            409,
            "the service holds no client identity of primary",
        ),
    ],
)
def test_the_create_route_refuses_bad_input_and_stores_nothing(
    api: RunningApi, target: str, body: dict[str, Any], status: int, fragment: str
) -> None:
    code, answer = api.call("POST", f"/v1/clusters/{target}/mirror/flows", body)
    assert code == status, answer
    assert fragment in answer["message"], answer
    assert api.service.db.list_operations(None, 100) == []


def test_the_mirror_routes_need_the_admin_key(api: RunningApi) -> None:
    for method, path in (
        ("GET", "/v1/clusters/backup/mirror/flows"),
        ("GET", "/v1/clusters/backup/mirror/flows/f"),
        ("DELETE", "/v1/clusters/backup/mirror/flows/f"),
        ("GET", "/v1/clusters/backup/mirror/flows/f/failover?group=g"),
    ):
        code, answer = api.call(method, path, key=None)
        assert code == 401, answer
        code, answer = api.call(method, path, key="not-a-key")
        assert code == 401, answer
    code, answer = api.call("GET", "/v1/clusters/backup/mirror/flows/BAD")
    assert code == 404 and "has no flow 'BAD'" in answer["message"]


# -- the source's read-only bindings ----------------------------------------------------------


@pytest.mark.parametrize(
    ("regex", "pattern", "name"),
    [
        ("orders\\..*", PatternKind.PREFIXED, "orders."),
        ("mirrored-.*", PatternKind.PREFIXED, "mirrored-"),
        ("orders", PatternKind.LITERAL, "orders"),
        ("orders\\.eu", PatternKind.LITERAL, "orders.eu"),
        ("billing-?x", PatternKind.PREFIXED, "billing"),  # the '-' may be absent
        ("ab{0,2}", PatternKind.PREFIXED, "a"),
        ("abc+", PatternKind.PREFIXED, "abc"),
        ("a\\d+", PatternKind.PREFIXED, "a"),
        (".*", PatternKind.LITERAL, "*"),
        ("[ab]c", PatternKind.LITERAL, "*"),
        ("orders|billing", PatternKind.LITERAL, "*"),  # an alternation has no common start
        ("x?", PatternKind.LITERAL, "*"),
    ],
)
def test_a_filter_is_covered_by_its_literal_start(
    regex: str, pattern: PatternKind, name: str
) -> None:
    assert filter_scope(regex) == (pattern, name)
    if name not in ("*",) and pattern is PatternKind.PREFIXED:
        # Every name the filter matches starts with the prefix.
        for example in (
            "orders.eu",
            "mirrored-1",
            "billingx",
            "billing-x",
            "a",
            "abb",
            "abcc",
            "a12",
        ):
            if filter_matches(regex, example):
                assert example.startswith(name), (regex, example)


def test_the_mirror_principal_reads_and_describes_only() -> None:
    flow = check_flow_request(_request(groups="billing-.*"), "backup", CLUSTERS)
    grants = mirror_source_grants(flow)
    assert {(g.resource, g.pattern, g.name, g.operation) for g in grants} == {
        (AclResource.TOPIC, PatternKind.PREFIXED, "orders.", AclOperation.READ),
        (AclResource.TOPIC, PatternKind.PREFIXED, "orders.", AclOperation.DESCRIBE),
        (AclResource.TOPIC, PatternKind.PREFIXED, "orders.", AclOperation.DESCRIBE_CONFIGS),
        (AclResource.GROUP, PatternKind.PREFIXED, "billing-", AclOperation.DESCRIBE),
    }
    assert {g.principal for g in grants} == {"User:CN=kaas-mirror,O=KaaS"}


def test_failover_reads_both_kaas_sides_with_the_service_identities(world: MirrorWorld) -> None:
    from management_plane.errors import ApiError
    from management_plane.mirror.failover import PartitionFailover

    flow = check_flow_request(_request(), "backup", world.flows._facts())
    world.target.flows[flow.name] = flow
    facts = world.flows._facts()
    topic = "orders.eu"
    offsets = {
        facts["primary"].bootstrap_servers: {(topic, 0): 50, (topic, 1): 70},
        facts["backup"].bootstrap_servers: {(f"primary.{topic}", 0): 40},
    }
    reads: list[tuple[str, str, str]] = []

    def group_offsets(
        bootstrap: str, identity: IdentityFiles, group: str
    ) -> dict[tuple[str, int], int]:
        reads.append((bootstrap, str(identity.directory), group))
        return offsets[bootstrap]

    world.flows.group_offsets = group_offsets
    report = world.flows.failover("backup", flow.name, "billing")
    assert [(r.partition, r.source_offset, r.target_offset, r.state) for r in report] == [
        (0, 50, 40, PartitionFailover.TRANSLATED),
        (1, 70, None, PartitionFailover.NOT_TRANSLATED),
    ]
    identities = [world.provider.client_identity(c) for c in ("backup", "primary")]
    assert reads == [
        (facts[c].bootstrap_servers, str(i.directory), "billing")
        for c, i in zip(("backup", "primary"), identities, strict=True)
        if i is not None
    ]
    reads.clear()
    with pytest.raises(ApiError, match="has no flow nope"):
        world.flows.failover("backup", "nope", "billing")
    assert reads == [], "an unknown flow is refused before any cluster is read"


def test_get_reads_the_agents_lag_record_and_delete_removes_it(world: MirrorWorld) -> None:
    world.run(world.flows.create("backup", _request(), "admin"))
    assert world.flows.lag("backup", "orders-dr") is None  # not measured yet
    record = MirrorFlowLag("orders-dr", 0, 100.0, 7, 2.0, (TopicLag("orders.a", 3, 7, 5),))
    world.target.mirror_lags["orders-dr"] = record.encode()
    assert world.flows.lag("backup", "orders-dr") == record
    world.run(world.flows.delete("backup", "orders-dr", "admin"))
    assert world.target.mirror_lags == {}
