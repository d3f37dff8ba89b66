"""The migration renderer (planner/contracts/vm_config/migration.py): each phase's controller
and broker config, table-tested against what Kafka 3.9's migration asks of each node."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agent.broker_config import rendering as agent_rendering
from agent.settings import parse_settings
from management_plane.local import render as local_render
from management_plane.local.layout import plan_layout
from planner.contracts.kraft_migration import KraftMigration, MigrationPhase
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import render_server_properties
from planner.contracts.vm_config.kraft import KRAFT_AUTHORIZER, ControllerFacts, KraftConfigError
from planner.contracts.vm_config.migration import (
    MIGRATION_FLAG,
    QuorumVoter,
    render_migration_broker_properties,
    render_migration_controller_properties,
)
from tests.unit.kraft_render_facts import CONTROLLER, CONTROLLER_ENDPOINTS, ZOOKEEPER_BROKER

pytestmark = pytest.mark.unit

P = MigrationPhase
FACTS = ZOOKEEPER_BROKER
VOTERS = tuple(QuorumVoter(3000 + i, CONTROLLER_ENDPOINTS[i]) for i in (2, 0, 1))
VOTERS_TEXT = "3000@127.0.9.1:9093,3001@127.0.9.2:9093,3002@127.0.9.3:9093"


def _spec(
    phase: MigrationPhase | None,
    version: str = "3.9.2",
    voters: tuple[QuorumVoter, ...] = VOTERS,
    config: dict[str, str] | None = None,
) -> ClusterSpec:
    migration = KraftMigration(phase, "ZkId", tuple(v.entry for v in voters)) if phase else None
    return ClusterSpec(
        "k1", version, 3, ("a", "b", "c"), broker_config=config or {}, migration=migration
    )


ZK_MODE = render_server_properties(_spec(None), FACTS)


def test_brokers_stay_unchanged_while_only_the_controllers_start() -> None:
    assert render_migration_broker_properties(_spec(P.CONTROLLERS), FACTS) == ZK_MODE


@pytest.mark.parametrize("phase", [P.BROKERS_MIGRATING, P.ROLLBACK_CONTROLLERS_STOPPED])
def test_a_migrating_broker_is_a_zookeeper_broker_that_knows_the_quorum(
    phase: MigrationPhase,
) -> None:
    found = render_migration_broker_properties(_spec(phase), FACTS)
    assert found["broker.id"] == "1" and found["zookeeper.connect"] == FACTS.zookeeper_connect
    assert found[MIGRATION_FLAG] == "true"
    assert found["inter.broker.protocol.version"] == "3.9"
    assert found["controller.quorum.voters"] == VOTERS_TEXT
    assert found["controller.listener.names"] == "CONTROLLER"
    assert found["listener.security.protocol.map"].endswith(",CONTROLLER:SSL")
    assert found["listener.name.controller.ssl.keystore.location"] == "/tls/node.pem"
    assert "process.roles" not in found
    # ACLs stay with ZooKeeper's authorizer until the brokers leave it.
    assert found["authorizer.class.name"] == ZK_MODE["authorizer.class.name"]
    assert {
        k: v for k, v in found.items() if k in ZK_MODE and k != "listener.security.protocol.map"
    } == {k: v for k, v in ZK_MODE.items() if k != "listener.security.protocol.map"}


@pytest.mark.parametrize("phase", [P.BROKERS_KRAFT, P.FINALIZED])
def test_a_kraft_broker_has_left_zookeeper(phase: MigrationPhase) -> None:
    found = render_migration_broker_properties(_spec(phase), FACTS)
    assert list(found)[:2] == ["node.id", "process.roles"]
    assert found["node.id"] == "1" and found["process.roles"] == "broker"
    assert not [k for k in found if k.startswith("zookeeper.")]
    assert "broker.id" not in found and "inter.broker.protocol.version" not in found
    assert found["controller.quorum.voters"] == VOTERS_TEXT
    assert found["authorizer.class.name"] == KRAFT_AUTHORIZER
    assert found["broker.rack"] == "b" and found["min.insync.replicas"] == "2"


@pytest.mark.parametrize(
    ("phase", "with_zookeeper"),
    [
        (P.CONTROLLERS, True),
        (P.BROKERS_MIGRATING, True),
        (P.BROKERS_KRAFT, True),
        (P.FINALIZED, False),
    ],
)
def test_the_controller_runs_in_migration_mode_until_finalised(
    phase: MigrationPhase, with_zookeeper: bool
) -> None:
    found = render_migration_controller_properties(_spec(phase), FACTS, CONTROLLER)
    assert found is not None
    assert found["process.roles"] == "controller" and found["node.id"] == "3001"
    assert found["listeners"] == "CONTROLLER://127.0.9.2:9093"
    assert found["controller.quorum.voters"] == VOTERS_TEXT
    assert found["inter.broker.listener.name"] == "INTERNAL"
    assert found["authorizer.class.name"] == KRAFT_AUTHORIZER
    assert found["log.dirs"] == "/data/kraft-controller"
    assert found["default.replication.factor"] == "3"
    zookeeper_keys = {k for k in found if k.startswith("zookeeper.")}
    # In migration mode it reaches the ZooKeeper-mode brokers' internal listener as a client.
    internal_client = found.get("listener.name.internal.ssl.keystore.location")
    assert internal_client == ("/tls/node.pem" if with_zookeeper else None)
    if with_zookeeper:
        assert found[MIGRATION_FLAG] == "true"
        assert found["zookeeper.connect"] == FACTS.zookeeper_connect
        # The same TLS identity toward ZooKeeper as the VM's broker.
        assert {k: ZK_MODE[k] for k in zookeeper_keys - {MIGRATION_FLAG}} == {
            k: v for k, v in ZK_MODE.items() if k.startswith("zookeeper.")
        }
    else:
        assert zookeeper_keys == set()


def test_no_controller_runs_once_a_rollback_stopped_them() -> None:
    spec = _spec(P.ROLLBACK_CONTROLLERS_STOPPED)
    assert render_migration_controller_properties(spec, FACTS, CONTROLLER) is None


@pytest.mark.parametrize(
    ("spec", "controller", "message"),
    [
        (_spec(None), CONTROLLER, "asks for no migration"),
        (_spec(P.CONTROLLERS, "3.8.1"), CONTROLLER, "only 3.9 can"),
        (_spec(P.CONTROLLERS, voters=()), CONTROLLER, "no controller given"),
        (_spec(P.CONTROLLERS, voters=(*VOTERS, VOTERS[0])), CONTROLLER, "node ids repeat"),
        (_spec(P.CONTROLLERS, voters=(QuorumVoter(3000, "nohost"),)), CONTROLLER, "host:port"),
        (_spec(P.CONTROLLERS, config={MIGRATION_FLAG: "false"}), CONTROLLER, "set by KaaS"),
        (_spec(P.CONTROLLERS), ControllerFacts(3007, "h", 9093, "/d"), "not among"),
    ],
)
def test_a_config_that_cannot_be_rendered_is_refused_naming_the_problem(
    spec: ClusterSpec, controller: ControllerFacts, message: str
) -> None:
    with pytest.raises(KraftConfigError, match=message):
        render_migration_controller_properties(spec, FACTS, controller)
    if "among" not in message:
        with pytest.raises(KraftConfigError, match=message):
            render_migration_broker_properties(spec, FACTS)


def test_the_agent_renders_its_brokers_config_for_the_migration_phase(tmp_path: Path) -> None:
    layout = plan_layout("c1", tmp_path / "home", 3)
    plain = local_render.local_spec(layout, "3.9.2")
    voters = tuple(f"{3000 + vm.broker_id}@{vm.address}:9093" for vm in layout.vms)
    for vm in layout.vms:
        settings = parse_settings(
            local_render.agent_settings(layout, vm, "/image", "java"), "agent.json"
        )
        facts = local_render.broker_facts(layout, vm)
        assert agent_rendering.desired_server_properties(
            settings, vm.broker_id, plain
        ) == render_server_properties(plain, facts)
        for phase in P:
            spec = replace(plain, migration=KraftMigration(phase, "ZkId", voters))
            by_agent = agent_rendering.desired_server_properties(settings, vm.broker_id, spec)
            assert by_agent == render_migration_broker_properties(spec, facts)
            assert ("process.roles" in by_agent) is phase.brokers_in_kraft
