"""The brokers' listeners and their TLS and authentication settings, as the renderer writes
them. Pure.

Two named listeners, no plaintext one:

- INTERNAL (SSL, client certificate required): inter-broker traffic, the agents, the
  management plane and Kafka's own tools. A certificate's subject is mapped to its common
  name, so the cluster CA's role identities become `User:kaas-node` and `User:kaas-admin`,
  the only super users; any other subject (another CA's leaf never gets this far) keeps its
  whole distinguished name and matches no super user.
- TENANT (SASL_SSL, SCRAM-SHA-512): tenants; the server certificate is the VM's, clients
  present none, and the ACL authorizer decides what a SCRAM user may do.

Every SSL setting is listener-prefixed, so each listener says all of its own security, and
a KRaft controller listener takes the internal listener's settings from the same function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class ListenerName(StrEnum):
    INTERNAL = "INTERNAL"
    TENANT = "TENANT"


class SecurityProtocol(StrEnum):
    SSL = "SSL"
    SASL_SSL = "SASL_SSL"


LISTENER_PROTOCOLS: Final[Mapping[ListenerName, SecurityProtocol]] = MappingProxyType(
    {ListenerName.INTERNAL: SecurityProtocol.SSL, ListenerName.TENANT: SecurityProtocol.SASL_SSL}
)
TENANT_SASL_MECHANISM: Final = "SCRAM-SHA-512"
TLS_PROTOCOLS: Final = "TLSv1.3,TLSv1.2"
# The distinguished names of the role identities (planner.pki.authority's roles) become their
# common names; DEFAULT keeps every other subject whole.
PRINCIPAL_MAPPING_RULES: Final = "RULE:^CN=(kaas-node|kaas-admin),O=KaaS$/$1/,DEFAULT"
SUPER_USERS: Final = "User:kaas-node;User:kaas-admin"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


@dataclass(frozen=True)
class TlsFiles:
    """Where a VM keeps its identity, as the JVMs read it: one PEM file with the key and the
    certificate, and the trust bundle (the cluster CA)."""

    keystore: str
    truststore: str

    def problems(self) -> tuple[str, ...]:
        return tuple(
            f"{name} {path!r} must be an absolute path"
            for name, path in (("keystore", self.keystore), ("truststore", self.truststore))
            if not path.startswith("/") or any(c in path for c in ",\n")
        )


def _prefix(listener: str) -> str:
    return f"listener.name.{listener.lower()}."


def _server_tls(listener: str, tls: TlsFiles, client_auth: str) -> dict[str, str]:
    prefix = _prefix(listener)
    return {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": tls.keystore,
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": tls.truststore,
        f"{prefix}ssl.enabled.protocols": TLS_PROTOCOLS,
        f"{prefix}ssl.client.auth": client_auth,
    }


def internal_listener_security(listener: str, tls: TlsFiles) -> dict[str, str]:
    """The internal listener's security settings: mutual TLS against the cluster CA. Also what
    a KRaft controller listener (another name, the same security) renders."""
    return _server_tls(listener, tls, "required")


def tenant_listener_security(tls: TlsFiles) -> dict[str, str]:
    prefix = _prefix(ListenerName.TENANT)
    return {
        **_server_tls(ListenerName.TENANT, tls, "none"),
        f"{prefix}sasl.enabled.mechanisms": TENANT_SASL_MECHANISM,
        # A SASL listener needs a JAAS login module even when no broker logs in through it.
        f"{prefix}{TENANT_SASL_MECHANISM.lower()}.sasl.jaas.config": SCRAM_LOGIN_MODULE,
    }


# The broker-wide keys: the listeners' protocols, the authorizer and who is a super user.
BROKER_SECURITY: Final[Mapping[str, str]] = MappingProxyType(
    {
        "listener.security.protocol.map": ",".join(
            f"{name}:{protocol}" for name, protocol in LISTENER_PROTOCOLS.items()
        ),
        "inter.broker.listener.name": ListenerName.INTERNAL.value,
        "sasl.enabled.mechanisms": TENANT_SASL_MECHANISM,
        "ssl.principal.mapping.rules": PRINCIPAL_MAPPING_RULES,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": SUPER_USERS,
    }
)


def listener_security(tls: TlsFiles) -> dict[str, str]:
    """Every security key of a broker's server.properties, broker-wide first."""
    return {
        **BROKER_SECURITY,
        **internal_listener_security(ListenerName.INTERNAL, tls),
        **tenant_listener_security(tls),
    }


def listeners(address: str, internal_port: int, tenant_port: int) -> str:
    return (
        f"{ListenerName.INTERNAL}://{address}:{internal_port},"
        f"{ListenerName.TENANT}://{address}:{tenant_port}"
    )


_EXAMPLE = TlsFiles("/k", "/t")
# Rendered keys outside KafkaConfig's table (the catalog): the authorizer's super.users and
# every listener-prefixed key. A broker reports them from server.properties with their values
# hidden, as it does for every key it cannot type.
RENDERED_OUTSIDE_CATALOG: Final = frozenset(
    {"super.users"}
    | set(internal_listener_security(ListenerName.INTERNAL, _EXAMPLE))
    | set(tenant_listener_security(_EXAMPLE))
)

# The spec may not set these: they make the listeners, their authentication and isolation
# (the protocol map and the principal mapping are among validation's SECURITY_KEYS, refused
# there). security.inter.broker.protocol is Kafka's other way of naming the inter-broker
# listener, refused by Kafka beside inter.broker.listener.name.
LISTENER_SECURITY_KEYS: Final = (
    frozenset(BROKER_SECURITY) - {"listener.security.protocol.map", "ssl.principal.mapping.rules"}
) | {
    "security.inter.broker.protocol",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.enabled.protocols",
}
