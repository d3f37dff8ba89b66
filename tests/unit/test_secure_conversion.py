"""`kaas cluster secure`: the conversion of a pre-TLS cluster's step list, every step driven by
the real engine against fakes of the cluster (the spec, the agents, the znodes), a service
restart in between, and the API's refusals."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from management_plane.security.conversion import transport_phase
from management_plane.security.znode_acls import AclMigration
from management_plane.service.controller import STEPS, Controller
from management_plane.service.db import OperationRow
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    FAILED,
    RUNNING,
    SUCCEEDED,
    OperationKind,
    StepName,
    StepRef,
    conversion_steps,
    expand_steps,
)
from management_plane.service.steps import Patience
from planner.contracts.spec import parse_spec
from planner.contracts.transport_security import TransportSecurity, conversion_start
from planner.pki.authority import Role
from planner.pki.files import IdentityFiles
from tests.unit.api_server import running_api
from tests.unit.fake_cluster import FakeCluster, FakeProvider
from tests.unit.test_mp_controller import World

pytestmark = pytest.mark.unit

K = OperationKind
T = TransportSecurity


@pytest.mark.parametrize(
    ("current", "steps"),
    [
        (
            T.PLAINTEXT_LEGACY,
            "transport_phase:0 wait_applied:0 transport_phase:1 wait_applied:1 secure_znodes "
            "transport_phase:2 wait_applied:2 finish",
        ),
        (
            T.BOTH_LISTENERS,
            "transport_phase:0 wait_applied:0 transport_phase:1 wait_applied:1 secure_znodes "
            "transport_phase:2 wait_applied:2 finish",
        ),
        (
            T.TLS_CLIENTS,
            "transport_phase:1 wait_applied:1 secure_znodes transport_phase:2 wait_applied:2 "
            "finish",
        ),
    ],
)
def test_a_conversion_goes_on_from_the_phase_the_spec_holds(
    current: TransportSecurity, steps: str
) -> None:
    assert " ".join(map(str, conversion_steps(conversion_start(current)))) == steps


def test_the_conversion_is_its_kinds_whole_step_list_and_its_steps_are_registered() -> None:
    assert expand_steps(K.SECURE_CLUSTER) == conversion_steps()
    for name in (StepName.TRANSPORT_PHASE, StepName.SECURE_ZNODES, StepName.WAIT_APPLIED):
        assert STEPS.lookup(StepRef(name, 0), K.SECURE_CLUSTER).name == name
    assert STEPS.lookup(StepRef(StepName.SECURE_ZNODES), K.SECURE_CLUSTER).patience is (
        Patience.APPLIED
    )
    with pytest.raises(ValueError, match="starts at phase 0-2"):
        conversion_steps(3)


@dataclass
class PlainCluster(FakeCluster):
    """The fake cluster with znodes an older release left open."""

    open_znodes: set[str] = field(default_factory=lambda: {"/kaas/orders/spec", "/kafka/x"})
    kafka_secured: int = 0

    def secure_kaas_znodes(self) -> AclMigration:
        changed = sorted(z for z in self.open_znodes if z.startswith("/kaas/"))
        self.open_znodes -= set(changed)
        return AclMigration(checked=5, changed=len(changed))

    def secure_kafka_znodes(self, kafka_version: str, node: IdentityFiles) -> None:
        assert kafka_version == "3.9.2" and node.role is Role.NODE
        self.open_znodes = {z for z in self.open_znodes if not z.startswith("/kafka/")}
        self.kafka_secured += 1

    def every_agent_applies(self) -> None:
        assert self.spec is not None
        for broker_id in list(self.member_znodes):
            self.agent_applies(broker_id, self.spec.generation, pending_restart=False)


class NodeIdentityProvider(FakeProvider):
    """A provider that presents the cluster's node identity (the brokers' own)."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        self.node = IdentityFiles(tmp_path / "node", Role.NODE)

    def node_identity(self, cluster: str) -> IdentityFiles | None:
        return self.node


class ConversionWorld(World):
    def __init__(self, tmp_path: Path, node_identity: bool = True) -> None:
        super().__init__(
            tmp_path, NodeIdentityProvider(tmp_path) if node_identity else FakeProvider()
        )
        self.cluster = PlainCluster()
        self.restart_service()

    def restart_service(self) -> None:
        """A new controller and engine over the same database (a killed service restarted)."""
        self.controller = Controller(self.db, self.provider, self.cluster.connect)
        self.engine = Engine(self.db, self.controller)

    @property
    def fake(self) -> PlainCluster:
        assert isinstance(self.cluster, PlainCluster)
        return self.cluster

    def transport(self) -> TransportSecurity:
        assert self.fake.spec is not None
        return self.fake.spec.transport_security

    def queue_steps(self, steps: list[StepRef]) -> OperationRow:
        return self.db.add_operation("orders", K.SECURE_CLUSTER, {}, steps, "test")


@pytest.fixture
def cworld(tmp_path: Path) -> ConversionWorld:
    world = ConversionWorld(tmp_path)
    world.running_cluster(kafka_version="3.9.2", transport_security=T.PLAINTEXT_LEGACY)
    return world


def _at(step: str, op: OperationRow) -> bool:
    return str(op.step) == step


def test_a_conversion_walks_the_phases_waiting_for_every_agent(cworld: ConversionWorld) -> None:
    op = cworld.run(cworld.queue_steps(conversion_steps()))
    assert _at("wait_applied:0", op) and op.status == RUNNING
    assert cworld.transport() is T.BOTH_LISTENERS
    op = cworld.run(op)  # the agents have not rolled: nothing moves on
    assert _at("wait_applied:0", op) and cworld.transport() is T.BOTH_LISTENERS

    cworld.fake.every_agent_applies()
    op = cworld.run(op)
    assert _at("wait_applied:1", op) and cworld.transport() is T.TLS_CLIENTS
    assert cworld.fake.open_znodes  # not before every client talks TLS

    # The service is killed here and restarted: the operation resumes at its stored step.
    cworld.restart_service()
    cworld.fake.every_agent_applies()
    op = cworld.run(op)
    assert _at("wait_applied:2", op) and cworld.transport() is T.TLS
    assert cworld.fake.open_znodes == set() and cworld.fake.kafka_secured == 1
    cworld.fake.every_agent_applies()
    op = cworld.run(op)
    assert op.status == SUCCEEDED, op.message
    stored = cworld.db.cluster("orders")
    assert stored is not None
    assert parse_spec(stored["spec"]).transport_security is T.TLS
    assert ("secure_znodes", "done") in cworld.journal(op)


def test_a_phase_written_before_a_kill_is_not_written_again(cworld: ConversionWorld) -> None:
    op = cworld.run(cworld.queue_steps(conversion_steps()))
    assert cworld.fake.spec is not None
    generation = cworld.fake.spec.generation
    again = transport_phase(cworld.controller, op, 0)
    assert again.message == "transport both_listeners asked already"
    assert again.context == {"spec_generation": generation}
    assert cworld.fake.spec.generation == generation


def test_a_conversion_never_moves_a_spec_back(cworld: ConversionWorld) -> None:
    assert cworld.fake.spec is not None
    cworld.fake.spec = replace(cworld.fake.spec, transport_security=T.TLS_CLIENTS)
    op = cworld.run(cworld.queue_steps(conversion_steps(0)))
    assert op.status == FAILED and "never goes back" in op.message
    assert cworld.transport() is T.TLS_CLIENTS


def test_znodes_keep_no_acl_while_a_client_may_still_talk_plaintext(
    cworld: ConversionWorld,
) -> None:
    op = cworld.run(cworld.queue_steps([StepRef(StepName.SECURE_ZNODES), StepRef(StepName.FINISH)]))
    assert op.status == FAILED and "still talk plaintext" in op.message
    assert cworld.fake.open_znodes == {"/kaas/orders/spec", "/kafka/x"}


def test_without_the_node_identity_kafkas_znodes_are_not_touched(tmp_path: Path) -> None:
    world = ConversionWorld(tmp_path, node_identity=False)
    world.running_cluster(kafka_version="3.9.2", transport_security=T.TLS_CLIENTS)
    op = world.run(world.queue_steps([StepRef(StepName.SECURE_ZNODES), StepRef(StepName.FINISH)]))
    assert op.status == FAILED and "presents no node identity" in op.message
    assert world.fake.open_znodes == {"/kaas/orders/spec", "/kafka/x"}


def test_secure_is_refused_for_a_secure_or_busy_cluster_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    with running_api(tmp_path / "service") as api:
        for name in ("tls", "legacy"):
            status, op = api.call("POST", "/v1/clusters", {"name": name})
            assert status == 202, op
        # A cluster made before TLS: only the spec says so (the API makes none).
        row = api.service.db.cluster("legacy")
        assert row is not None
        legacy = replace(parse_spec(row["spec"]), transport_security=T.PLAINTEXT_LEGACY)
        api.service.db.update_cluster("legacy", spec=json.dumps(legacy.to_json()))
        specs = {n: api.service.db.cluster(n)["spec"] for n in ("tls", "legacy")}  # type: ignore[index]
        operations = [op.op_id for op in api.service.db.list_operations(None, 1000)]
        cases = [
            ("tls", 409, "already_secure", "already runs TLS on every channel"),
            # Its create operation has not run (the engine is paused): one at a time.
            ("legacy", 409, "cluster_busy", "wait for it to finish"),
            ("nosuch", 404, "not_found", "no cluster named nosuch"),
        ]
        for name, status, code, fragment in cases:
            answer = api.call("POST", f"/v1/clusters/{name}/secure")
            assert answer[0] == status and answer[1]["code"] == code, (name, answer)
            assert fragment in answer[1]["message"], answer
        assert [op.op_id for op in api.service.db.list_operations(None, 1000)] == operations
        for name, spec in specs.items():
            assert api.service.db.cluster(name)["spec"] == spec  # type: ignore[index]
        # A new cluster cannot be asked for the plaintext listeners.
        refused = api.call(
            "POST", "/v1/clusters", {"name": "plain", "transport_security": "plaintext_legacy"}
        )
        assert refused[0] == 422 and api.service.db.cluster("plain") is None
