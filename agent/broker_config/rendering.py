"""The agent's call of the renderer (planner.contracts.vm_config): this VM's facts from the
agent's settings and the broker id it claimed, and the server.properties they and the spec
give. Pure."""

from __future__ import annotations

from agent.settings import AgentSettings
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import BrokerFacts, render_server_properties, sizing_properties
from planner.contracts.vm_config.jolokia import (
    JOLOKIA_POLICY,
    JOLOKIA_PROPERTIES,
    JolokiaTls,
    render_jolokia_access_policy,
    render_jolokia_properties,
)
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.migration import render_migration_broker_properties
from planner.pki.authority import Role, role_distinguished_name


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
    A cluster migrating to KRaft renders its phase's broker config."""
    if spec.migration is not None:
        return render_migration_broker_properties(spec, broker_facts(settings, broker_id))
    return render_server_properties(spec, broker_facts(settings, broker_id))


def jolokia_files(settings: AgentSettings) -> dict[str, str]:
    """The Jolokia agent's properties and access policy, by file name in the config folder:
    HTTPS with the VM's certificate, the nodes' certificates only, reads only."""
    identity = settings.identity
    tls = JolokiaTls(identity.trust_bundle, identity.certificate, identity.key)
    policy = settings.config_dir / JOLOKIA_POLICY
    return {
        JOLOKIA_PROPERTIES: render_jolokia_properties(
            settings.address,
            settings.jolokia_port,
            tls,
            policy,
            role_distinguished_name(Role.NODE),
        ),
        JOLOKIA_POLICY: render_jolokia_access_policy(),
    }
