"""The agent's call of the renderer (planner.contracts.vm_config): this VM's facts from the
agent's settings and the broker id it claimed, and the server.properties they and the spec
give. Pure."""

from __future__ import annotations

from pathlib import Path

from agent.settings import AgentSettings
from planner.contracts.kraft_migration import CONTROLLER_PORT
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import BrokerFacts, render_server_properties, sizing_properties
from planner.contracts.vm_config.jolokia import (
    CONTROLLER_JOLOKIA_PROPERTIES,
    JOLOKIA_POLICY,
    JOLOKIA_PROPERTIES,
    JolokiaTls,
    render_jolokia_access_policy,
    render_jolokia_properties,
)
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.kraft import (
    ControllerFacts,
    controller_node_id,
    render_controller_properties,
    render_kraft_broker_properties,
)
from planner.contracts.vm_config.migration import (
    render_migration_broker_properties,
    render_migration_controller_properties,
)
from planner.pki.authority import Role, role_distinguished_name

# Beside the broker's log dir, as a KRaft cluster's local VMs keep it.
MIGRATION_METADATA_DIR = "kraft-controller"


def migration_metadata_dir(settings: AgentSettings) -> Path:
    return settings.controller_data_dir or settings.data_dir.parent / MIGRATION_METADATA_DIR


def broker_facts(settings: AgentSettings, broker_id: int) -> BrokerFacts:
    identity = settings.identity
    return BrokerFacts(
        broker_id=broker_id,
        rack=settings.zone,
        listener_address=settings.address,
        port=settings.kafka_port,
        tenant_port=settings.kafka_tenant_port,
        advertised_address=settings.address,
        log_dirs=(str(settings.data_dir),),
        zookeeper_connect=settings.zookeeper_hosts + ClusterPaths(settings.cluster).kafka_chroot,
        host_sizing=sizing_properties(settings.host_sizing),
        tls=TlsFiles(str(identity.keystore), str(identity.trust_bundle)),
    )


def desired_server_properties(
    settings: AgentSettings, broker_id: int, spec: ClusterSpec
) -> dict[str, str]:
    """server.properties as the spec and this VM's facts say; BrokerConfigError names a bad key.
    A KRaft cluster's broker (settings name the controllers) gets the KRaft rendering; a
    cluster migrating to KRaft renders its phase's broker config."""
    if settings.controller_bootstrap is not None:
        return render_kraft_broker_properties(
            spec, broker_facts(settings, broker_id), controller_bootstrap(settings)
        )
    if spec.migration is not None:
        return render_migration_broker_properties(spec, broker_facts(settings, broker_id))
    return render_server_properties(spec, broker_facts(settings, broker_id))


def controller_bootstrap(settings: AgentSettings) -> tuple[str, ...]:
    servers = settings.controller_bootstrap or ""
    return tuple(server.strip() for server in servers.split(",") if server.strip())


def controller_facts(settings: AgentSettings, broker_id: int) -> ControllerFacts | None:
    """This VM's controller (its node id follows the broker id it claimed); None: it runs none."""
    if settings.controller_port is None or settings.controller_data_dir is None:
        return None
    return ControllerFacts(
        node_id=controller_node_id(broker_id),
        listener_address=settings.address,
        port=settings.controller_port,
        metadata_dir=str(settings.controller_data_dir),
    )


def desired_controller_properties(
    settings: AgentSettings, broker_id: int, spec: ClusterSpec
) -> dict[str, str] | None:
    """controller.properties of this VM's controller; None when the VM runs none (in a
    migration: when the phase runs none here)."""
    if settings.controller_bootstrap is None:
        return _migration_controller_properties(settings, broker_id, spec)
    controller = controller_facts(settings, broker_id)
    if controller is None:
        return None
    return render_controller_properties(
        spec, broker_facts(settings, broker_id), controller, controller_bootstrap(settings)
    )


def _migration_controller_properties(
    settings: AgentSettings, broker_id: int, spec: ClusterSpec
) -> dict[str, str] | None:
    """A ZooKeeper-mode VM's controller while a migration runs one on it (the voters are
    the VMs of the lowest broker ids, on the migration's controller port)."""
    migration = spec.migration
    if migration is None or broker_id not in migration.voter_broker_ids():
        return None
    controller = ControllerFacts(
        node_id=controller_node_id(broker_id),
        listener_address=settings.address,
        port=CONTROLLER_PORT,
        metadata_dir=str(migration_metadata_dir(settings)),
    )
    return render_migration_controller_properties(
        spec, broker_facts(settings, broker_id), controller
    )


def jolokia_files(settings: AgentSettings, controller: bool = False) -> dict[str, str]:
    """The Jolokia agent's properties and access policy, by file name in the config folder:
    HTTPS with the VM's certificate, the nodes' certificates only, reads only; the
    controller's too where the VM runs one (`controller`: a migration's)."""
    identity = settings.identity
    tls = JolokiaTls(identity.trust_bundle, identity.certificate, identity.key)
    policy = settings.config_dir / JOLOKIA_POLICY
    node = role_distinguished_name(Role.NODE)
    files = {
        JOLOKIA_PROPERTIES: render_jolokia_properties(
            settings.address, settings.jolokia_port, tls, policy, node
        ),
        JOLOKIA_POLICY: render_jolokia_access_policy(),
    }
    if settings.runs_controller or controller:
        files[CONTROLLER_JOLOKIA_PROPERTIES] = render_jolokia_properties(
            settings.address, settings.controller_jolokia_port, tls, policy, node
        )
    return files
