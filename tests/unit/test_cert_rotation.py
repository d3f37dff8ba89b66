"""Certificate rotation: the contract's values, the rounds, the agent's pure decision (fake
clocks), the agent's keeper over real identity files, and the management plane's steps run by
the engine against fakes whose agents run the real keeper."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from agent.cert_renewal import (
    CertStepKind,
    CertView,
    LocalLeaf,
    decide_certificate,
    expiry_round_id,
)
from agent.decide import (
    RUNNING,
    BrokerView,
    ConfigChanges,
    DoNothing,
    RestartBroker,
    Snapshot,
    decide,
)
from management_plane.security.renewal import RenewalSigner, unanswered_renewals
from management_plane.service.controller import Controller
from management_plane.service.db import Database
from management_plane.service.engine import Engine
from management_plane.service.operations import (
    FAILED,
    SUCCEEDED,
    OperationKind,
    StepName,
    expand_steps,
)
from planner.contracts.certificates import (
    CertRound,
    InstalledLeaf,
    LeafRequest,
    RequestReason,
    SignedLeaf,
    parse_cert_round,
    parse_installed_leaf,
    parse_leaf_request,
    parse_signed_leaf,
)
from planner.contracts.fields import ContractError
from planner.contracts.spec import ClusterSpec
from planner.pki.authority import (
    PkiError,
    Role,
    create_authority,
    expires_at,
    issue,
    issued_by,
    load_certificates,
    new_key_pem,
    public_key_pem,
)
from planner.pki.rotation import (
    ROUNDS,
    RotationKind,
    Signer,
    certificate_hosts,
    round_plan,
    serial_hex,
    sign_request,
    trust_bundle,
)
from tests.unit.api_server import running_api
from tests.unit.certificate_fakes import (
    NOW,
    AuthorityProvider,
    CertificateZnodes,
    ExchangeView,
    FakeVm,
    fake_vm,
)
from tests.unit.fake_cluster import FakeCluster, FakeProvider

pytestmark = pytest.mark.unit

CA = create_authority("orders", NOW)
OTHER_CA = create_authority("orders", NOW)
KEY = new_key_pem()
PUBLIC = public_key_pem(KEY).decode()
LEAF = issue(CA, Role.NODE, ("10.0.0.1",), NOW).certificate_pem.decode()


# -- the contract --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "parse"),
    [
        (CertRound("op1-round0", CA.certificate_pem.decode(), "operation 1"), parse_cert_round),
        (
            LeafRequest("op1-round0", 2, PUBLIC, ("10.0.0.1", "vm1"), RequestReason.EXPIRY),
            parse_leaf_request,
        ),
        (SignedLeaf("op1-round0", LEAF, CA.certificate_pem.decode()), parse_signed_leaf),
        (InstalledLeaf("op1-round0", "1f", 1_700_000_000_000), parse_installed_leaf),
    ],
)
def test_certificate_values_round_trip(value: Any, parse: Any) -> None:
    assert parse(value.to_bytes()) == value


def _broken(value: Any, **changes: Any) -> bytes:
    raw = json.loads(value.to_bytes())
    raw.update(changes)
    return json.dumps(raw).encode()


REQUEST = LeafRequest("r", 1, PUBLIC, ("10.0.0.1",), RequestReason.ROTATION)


@pytest.mark.parametrize(
    ("raw", "parse", "message"),
    [
        (b"[]", parse_leaf_request, "must be a JSON object"),
        (_broken(REQUEST, schema_version=2), parse_leaf_request, "schema_version is 2"),
        (_broken(REQUEST, hosts=[]), parse_leaf_request, "leaf_request.hosts"),
        (_broken(REQUEST, public_key_pem="abc"), parse_leaf_request, "PEM public key"),
        (_broken(REQUEST, reason="whim"), parse_leaf_request, "leaf_request.reason"),
        (_broken(REQUEST, broker_id=-1), parse_leaf_request, "broker_id must be at least 0"),
        (
            _broken(SignedLeaf("r", LEAF, LEAF), certificate_pem=PUBLIC),
            parse_signed_leaf,
            "PEM certificate",
        ),
        (
            _broken(InstalledLeaf("r", "1f", 1), serial="xyz"),
            parse_installed_leaf,
            "hexadecimal",
        ),
        (_broken(CertRound("r", LEAF, "op"), round_id=""), parse_cert_round, "round_id"),
    ],
)
def test_bad_certificate_values_are_refused_naming_the_field(
    raw: bytes, parse: Any, message: str
) -> None:
    with pytest.raises(ContractError, match=message):
        parse(raw)


# -- the rounds ----------------------------------------------------------------------------


def test_a_ca_rotation_trusts_both_cas_before_new_leaves_and_drops_the_old_one_last() -> None:
    plans = ROUNDS[RotationKind.CA]
    assert [p.signer for p in plans] == [Signer.CURRENT, Signer.NEXT, Signer.NEXT]
    # every leaf of a round is trusted by the bundle of the round before and after it
    for earlier, later in itertools.pairwise(plans):
        assert earlier.signer in later.trusted and later.signer in earlier.trusted
    bundles = [trust_bundle(p, CA, OTHER_CA) for p in plans]
    assert [len(load_certificates(b)) for b in bundles] == [2, 2, 1]
    assert bundles[2] == OTHER_CA.certificate_pem
    assert trust_bundle(round_plan(RotationKind.LEAVES, 0), CA, None) == CA.certificate_pem
    with pytest.raises(PkiError, match="rounds 0-0"):
        round_plan(RotationKind.LEAVES, 1)
    with pytest.raises(PkiError, match="none is staged"):
        trust_bundle(plans[2], CA, None)


def test_expand_steps_has_three_steps_per_round() -> None:
    leaves = [str(s) for s in expand_steps(OperationKind.ROTATE_CERTS)]
    assert leaves == ["cert_round:0", "sign_leaves:0", "wait_leaves:0", "finish"]
    ca = [str(s) for s in expand_steps(OperationKind.ROTATE_CA)]
    assert ca[0] == "stage_ca" and ca[-2:] == ["promote_ca", "finish"]
    assert ca.count("cert_round:2") == 1 and len(ca) == 3 + 3 * len(ROUNDS[RotationKind.CA])


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (("10.0.0.2",), "not the VM's address 10.0.0.1"),
        (("10.0.0.1", "10.0.0.2"), "another VM's address 10.0.0.2"),
        (("10.0.0.1", "127.0.1.5"), "another VM's address 127.0.1.5"),
    ],
)
def test_a_request_for_another_vms_address_is_refused(hosts: tuple[str, ...], message: str) -> None:
    with pytest.raises(PkiError, match=message):
        sign_request(CA, PUBLIC.encode(), hosts, "10.0.0.1", NOW)


def test_a_signed_request_carries_the_vms_key_and_names() -> None:
    certificate = sign_request(
        CA, PUBLIC.encode(), ("10.0.0.1", "127.0.0.1", "vm1"), "10.0.0.1", NOW
    )
    assert certificate_hosts(certificate) == ("10.0.0.1", "127.0.0.1", "vm1")
    assert issued_by(certificate, CA.certificate_pem)
    assert not issued_by(certificate, OTHER_CA.certificate_pem)


# -- the agent's decision ------------------------------------------------------------------

ROUND = CertRound("op1-round0", CA.certificate_pem.decode(), "operation 1")
LEAF_SERIAL = serial_hex(LEAF)
NEW_LEAF = issue(CA, Role.NODE, ("10.0.0.1",), NOW).certificate_pem.decode()
NEW_SERIAL = serial_hex(NEW_LEAF)
FAR = NOW + dt.timedelta(days=300)


def view(**changes: Any) -> CertView:
    base = CertView(
        broker_id=1,
        now=NOW,
        window=dt.timedelta(days=30),
        leaf=LocalLeaf("aa", FAR, "aa"),
        round=None,
        request=None,
        signed=None,
        signed_serial=None,
        signed_matches_staged=False,
        staged_matches_request=False,
        installed=None,
    )
    return dataclasses.replace(base, **changes)


ROUND_REQUEST = LeafRequest("op1-round0", 1, PUBLIC, ("10.0.0.1",), RequestReason.ROTATION)
ROUND_SIGNED = SignedLeaf("op1-round0", NEW_LEAF, CA.certificate_pem.decode())


@pytest.mark.parametrize(
    ("name", "changes", "kind", "round_id"),
    [
        ("current, nothing asked", {}, CertStepKind.NOTHING, ""),
        ("a round asks: request", {"round": ROUND}, CertStepKind.REQUEST, "op1-round0"),
        (
            "requested, not answered: wait",
            {"round": ROUND, "request": ROUND_REQUEST, "staged_matches_request": True},
            CertStepKind.NOTHING,
            "",
        ),
        (
            "requested but the staged key is lost: request again",
            {"round": ROUND, "request": ROUND_REQUEST, "staged_matches_request": False},
            CertStepKind.REQUEST,
            "op1-round0",
        ),
        (
            "answered for the staged key: install",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "staged_matches_request": True,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "signed_matches_staged": True,
            },
            CertStepKind.INSTALL,
            "op1-round0",
        ),
        (
            "answered for another key: not installed",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "staged_matches_request": True,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "signed_matches_staged": False,
            },
            CertStepKind.NOTHING,
            "",
        ),
        (
            "installed, the broker presents the old one: restart",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "leaf": LocalLeaf(NEW_SERIAL, FAR, "aa"),
            },
            CertStepKind.RESTART,
            "",
        ),
        (
            "presented: report",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "leaf": LocalLeaf(NEW_SERIAL, FAR, NEW_SERIAL),
            },
            CertStepKind.REPORT,
            "op1-round0",
        ),
        (
            "the broker presents it, the ZooKeeper server the old one: restart it, then report",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "leaf": LocalLeaf(NEW_SERIAL, FAR, NEW_SERIAL, "aa"),
            },
            CertStepKind.RESTART_ZOOKEEPER,
            "",
        ),
        (
            "both present it: report",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "leaf": LocalLeaf(NEW_SERIAL, FAR, NEW_SERIAL, NEW_SERIAL),
            },
            CertStepKind.REPORT,
            "op1-round0",
        ),
        (
            "the broker and the ZooKeeper server present the old one: the broker first",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "leaf": LocalLeaf(NEW_SERIAL, FAR, "aa", "aa"),
            },
            CertStepKind.RESTART,
            "",
        ),
        (
            "current and reported, the ZooKeeper server presents an older one: restart it",
            {"leaf": LocalLeaf("aa", FAR, "aa", "zz")},
            CertStepKind.RESTART_ZOOKEEPER,
            "",
        ),
        (
            "reported: nothing more",
            {
                "round": ROUND,
                "request": ROUND_REQUEST,
                "signed": ROUND_SIGNED,
                "signed_serial": NEW_SERIAL,
                "leaf": LocalLeaf(NEW_SERIAL, FAR, NEW_SERIAL),
                "installed": InstalledLeaf("op1-round0", NEW_SERIAL, 0),
            },
            CertStepKind.NOTHING,
            "",
        ),
        (
            "the broker does not answer: no restart, no report",
            {"leaf": LocalLeaf("bb", FAR, None), "round": ROUND},
            CertStepKind.NOTHING,
            "",
        ),
        (
            "31 days before expiry: nothing",
            {"leaf": LocalLeaf("aa", NOW + dt.timedelta(days=31), "aa")},
            CertStepKind.NOTHING,
            "",
        ),
        (
            "30 days before expiry: renew",
            {"leaf": LocalLeaf("aa", NOW + dt.timedelta(days=30), "aa")},
            CertStepKind.REQUEST,
            expiry_round_id("aa"),
        ),
        (
            "a window of one hour: 2 hours before expiry is not yet",
            {
                "leaf": LocalLeaf("aa", NOW + dt.timedelta(hours=2), "aa"),
                "window": dt.timedelta(hours=1),
            },
            CertStepKind.NOTHING,
            "",
        ),
    ],
)
def test_the_agent_decides_its_certificate_step(
    name: str, changes: dict[str, Any], kind: CertStepKind, round_id: str
) -> None:
    step = decide_certificate(view(**changes))
    assert (step.kind, step.round_id) == (kind, round_id), (name, step.reason)
    assert step.reason


def test_an_expiry_request_is_marked_as_one() -> None:
    step = decide_certificate(view(leaf=LocalLeaf("aa", NOW + dt.timedelta(days=1), "aa")))
    assert step.request_reason is RequestReason.EXPIRY
    assert "expires 2026-11-25" in step.reason


SPEC = ClusterSpec(
    cluster="orders",
    kafka_version="3.8.1",
    broker_count=3,
    zones=("a", "b", "c"),
    zookeeper_participants=3,
)


def test_a_certificate_restart_is_a_controlled_restart_and_waits_for_a_config_error() -> None:
    healthy = Snapshot(
        broker_id=1,
        zk_connected=True,
        spec=SPEC,
        broker=BrokerView(RUNNING, True, True),
        config=ConfigChanges(rendered={"broker.id": "1"}),
        certificate_restart="certificate 2 installed, the broker presents 1",
    )
    action = decide(healthy)
    assert isinstance(action, RestartBroker)
    assert "the broker presents 1, restarting" in action.reason
    assert action.launch.server_properties == {"broker.id": "1"}
    refused = dataclasses.replace(healthy, config=ConfigChanges(error="bad key"))
    assert isinstance(decide(refused), DoNothing)


# -- the agent's keeper and the management plane's steps -------------------------------------


@pytest.fixture(autouse=True)
def small_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys of 1024 bits for the whole-rotation tests: they make some twenty keys each."""
    monkeypatch.setattr("planner.pki.authority.KEY_BITS", 1024)


class RotationWorld:
    def __init__(self, tmp_path: Path, days: int = 365) -> None:
        self.db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
        self.provider = AuthorityProvider(tmp_path / "mp")
        self.znodes = CertificateZnodes()
        self.cluster = FakeCluster(spec=SPEC)
        self.controller = Controller(
            self.db, self.provider, self.cluster.connect, certificates=lambda *_: self.znodes
        )
        self.engine = Engine(self.db, self.controller)
        self.db.add_cluster("orders", "fake", "small", json.dumps(SPEC.to_json(), sort_keys=True))
        self.db.update_cluster("orders", status="running")
        self.vms: list[FakeVm] = []
        for broker_id in range(3):
            address = f"10.0.0.{broker_id + 1}"
            self.db.upsert_vm(
                f"orders/vm{broker_id}",
                "orders",
                "a",
                address,
                "small",
                "3.8.1",
                "running",
                broker_id,
            )
            self.vms.append(
                fake_vm(
                    tmp_path / f"vm{broker_id}",
                    broker_id,
                    address,
                    self.provider.authority,
                    ExchangeView(self.znodes),
                    days=days,
                )
            )

    def run(self, kind: OperationKind, agent_cycles: int = 40) -> Any:
        op = self.db.add_operation("orders", kind, {}, expand_steps(kind), "test")
        for _ in range(agent_cycles):
            self.engine.run_once()
            found = self.db.operation(op.op_id)
            assert found is not None
            if not found.unfinished:
                return found
            for vm in self.vms:
                vm.cycle()
        return self.db.operation(op.op_id)


def test_a_leaf_rotation_gives_every_vm_a_new_certificate_of_its_own_key(tmp_path: Path) -> None:
    world = RotationWorld(tmp_path)
    keys = [vm.identity.key.read_bytes() for vm in world.vms]
    before = [vm.presenting for vm in world.vms]
    op = world.run(OperationKind.ROTATE_CERTS)
    assert op.status == SUCCEEDED, op.message
    for vm, key, old in zip(world.vms, keys, before, strict=True):
        certificate = vm.identity.certificate.read_bytes()
        assert vm.presenting == serial_hex(certificate) != old
        assert vm.identity.key.read_bytes() != key  # a new key, made on the VM
        assert public_key_pem(vm.identity.key.read_bytes()) == public_key_pem(
            vm.identity.keystore.read_bytes()
        )
        assert issued_by(certificate, world.provider.authority.certificate_pem)
        assert vm.restarts == 1
        assert [r for _, _, r in vm.journal] == ["requested", "installed", "presented"]
        assert not vm.keeper.staged_key.exists()
    # no private key ever crossed ZooKeeper
    assert not any(b"PRIVATE KEY" in value for value in world.znodes.nodes.values())
    installed = world.znodes.installed()
    assert {b: i.serial for b, i in installed.items()} == {
        vm.broker_id: vm.presenting for vm in world.vms
    }


def test_a_ca_rotation_moves_every_vm_and_the_admin_to_the_new_ca(tmp_path: Path) -> None:
    world = RotationWorld(tmp_path)
    old = world.provider.authority
    op = world.run(OperationKind.ROTATE_CA, agent_cycles=80)
    assert op.status == SUCCEEDED, op.message
    new = world.provider.authority
    assert new != old and world.provider.staged is None
    for vm in world.vms:
        assert vm.restarts == 3  # one per round
        assert vm.identity.trust_bundle.read_bytes() == new.certificate_pem
        assert issued_by(vm.identity.certificate.read_bytes(), new.certificate_pem)
    admin = world.provider.admin
    assert admin.trust_bundle.read_bytes() == new.certificate_pem
    assert issued_by(admin.certificate.read_bytes(), new.certificate_pem)
    steps = [j["step"] for j in world.db.operation_journal(op.op_id) if j["outcome"] == "done"]
    assert steps[0] == StepName.STAGE_CA and steps[-2] == StepName.PROMOTE_CA


def test_the_rotation_waits_while_a_vm_does_not_answer(tmp_path: Path) -> None:
    world = RotationWorld(tmp_path)
    silent = world.vms.pop()  # its agent never requests
    op = world.run(OperationKind.ROTATE_CERTS, agent_cycles=6)
    assert op.status not in (SUCCEEDED, FAILED)
    assert str(op.step) == "sign_leaves:0"
    assert f"waiting for the requests of broker {silent.broker_id}" in op.message


def test_a_request_naming_another_vms_address_fails_the_rotation(tmp_path: Path) -> None:
    world = RotationWorld(tmp_path)
    op = world.db.add_operation(
        "orders", OperationKind.ROTATE_CERTS, {}, expand_steps(OperationKind.ROTATE_CERTS), "t"
    )
    world.engine.run_once()
    for vm in world.vms:
        vm.cycle()
    forged = LeafRequest("op1-round0", 0, PUBLIC, ("10.0.0.2",), RequestReason.ROTATION)
    world.znodes.write_request(0, forged.to_bytes())
    world.engine.run_once()
    found = world.db.operation(op.op_id)
    assert found is not None and found.status == FAILED
    assert "not the VM's address 10.0.0.1" in found.message
    assert world.znodes.read_signed(0) is None


def test_without_a_ca_the_rotation_is_refused(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'kaas.db'}")
    db.add_cluster("orders", "fake", "small", json.dumps(SPEC.to_json(), sort_keys=True))
    engine = Engine(db, Controller(db, FakeProvider()))
    op = db.add_operation(
        "orders", OperationKind.ROTATE_CERTS, {}, expand_steps(OperationKind.ROTATE_CERTS), "t"
    )
    engine.run_once()
    found = db.operation(op.op_id)
    assert found is not None and found.status == FAILED
    assert "keeps no cluster CA" in found.message


# -- renewal before expiry -------------------------------------------------------------------


def test_only_unanswered_expiry_requests_of_running_brokers_are_picked() -> None:
    expiry = dataclasses.replace(ROUND_REQUEST, round_id="expiry-aa", reason=RequestReason.EXPIRY)
    answered = SignedLeaf("expiry-aa", NEW_LEAF, CA.certificate_pem.decode())
    requests = {1: expiry, 2: expiry, 3: ROUND_REQUEST, 4: expiry}
    brokers = {1: "10.0.0.1", 2: "10.0.0.2", 3: "10.0.0.3"}
    # 1: answered for another key; 2: no answer; 3: a rotation's; 4: no running VM
    assert unanswered_renewals(requests, {1: answered}, brokers) == [1, 2]
    own = issue(CA, Role.NODE, ("10.0.0.1",), NOW)
    mine = dataclasses.replace(expiry, public_key_pem=public_key_pem(own.key_pem).decode())
    answer = SignedLeaf("expiry-aa", own.certificate_pem.decode(), CA.certificate_pem.decode())
    assert unanswered_renewals({1: mine}, {1: answer}, brokers) == []


def test_a_leaf_near_expiry_is_renewed_with_no_operator_action(tmp_path: Path) -> None:
    world = RotationWorld(tmp_path, days=10)  # inside the default 30-day window
    expiries = [expires_at(vm.identity.certificate.read_bytes()) for vm in world.vms]
    olds = [vm.presenting for vm in world.vms]
    # Every look is due in this test.
    signer = RenewalSigner(world.db, world.provider, lambda *_: world.znodes, interval_s=0.0)
    for _ in range(4):
        for vm in world.vms:
            vm.cycle()
        signer.check_if_due()
    assert world.db.list_operations("orders", 10) == []
    installed = world.znodes.installed()
    for vm, expiry, old in zip(world.vms, expiries, olds, strict=True):
        certificate = vm.identity.certificate.read_bytes()
        assert expires_at(certificate) > expiry + dt.timedelta(days=300)
        assert vm.presenting == serial_hex(certificate) != old
        assert vm.restarts == 1
        assert installed[vm.broker_id].round_id == expiry_round_id(old)


def test_no_renewal_is_signed_while_the_cluster_runs_an_operation(tmp_path: Path) -> None:
    world = RotationWorld(tmp_path, days=10)
    world.db.add_operation(
        "orders", OperationKind.ROTATE_CERTS, {}, expand_steps(OperationKind.ROTATE_CERTS), "t"
    )
    for vm in world.vms:
        vm.cycle()
    RenewalSigner(world.db, world.provider, lambda *_: world.znodes).check_if_due()
    assert world.znodes.signed() == {}
    assert len(world.znodes.requests()) == 3


def test_the_api_queues_a_rotation_and_refuses_a_second_one(tmp_path: Path) -> None:
    with running_api(tmp_path / "service") as api:
        status, answer = api.call("POST", "/v1/clusters/orders/rotate-certs", {"ca": True})
        assert status == 404, answer
        api.service.db.add_cluster(
            "orders", "local", "local", json.dumps(SPEC.to_json(), sort_keys=True)
        )
        status, answer = api.call("POST", "/v1/clusters/orders/rotate-certs", {"ca": "maybe"})
        assert status in (400, 422), answer
        assert api.service.db.list_operations("orders", 10) == []
        status, op = api.call("POST", "/v1/clusters/orders/rotate-certs", {"ca": True})
        assert status == 202, op
        assert op["kind"] == "rotate_ca" and op["steps"][0] == "stage_ca"
        status, answer = api.call("POST", "/v1/clusters/orders/rotate-certs", {})
        assert (status, answer["code"]) == (409, "cluster_busy"), answer
