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

A cluster made before TLS (`TransportSecurity.PLAINTEXT_LEGACY`, kept to rehearse its
conversion) has the plain listeners instead, on ports of their own: INTERNAL_PLAIN
(PLAINTEXT, every client `User:ANONYMOUS`, a super user, as such clusters ran) and
TENANT_PLAIN (SASL_PLAINTEXT, SCRAM). A conversion's phases open the TLS listeners beside
them, move inter-broker traffic to INTERNAL, and drop the plain ones last
(planner.contracts.transport_security).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity


class ListenerName(StrEnum):
    INTERNAL = "INTERNAL"
    TENANT = "TENANT"
    # A pre-TLS cluster's listeners, until its conversion's last phase.
    INTERNAL_PLAIN = "INTERNAL_PLAIN"
    TENANT_PLAIN = "TENANT_PLAIN"


class SecurityProtocol(StrEnum):
    SSL = "SSL"
    SASL_SSL = "SASL_SSL"
    PLAINTEXT = "PLAINTEXT"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"


LISTENER_PROTOCOLS: Final[Mapping[ListenerName, SecurityProtocol]] = MappingProxyType(
    {ListenerName.INTERNAL: SecurityProtocol.SSL, ListenerName.TENANT: SecurityProtocol.SASL_SSL}
)
PLAIN_LISTENER_PROTOCOLS: Final[Mapping[ListenerName, SecurityProtocol]] = MappingProxyType(
    {
        ListenerName.INTERNAL_PLAIN: SecurityProtocol.PLAINTEXT,
        ListenerName.TENANT_PLAIN: SecurityProtocol.SASL_PLAINTEXT,
    }
)
# The plain listeners' ports: apart from the TLS listeners', so that both serve during a
# conversion and a converted cluster ends on the ports a new one has.
PLAIN_INTERNAL_PORT: Final = 9091
PLAIN_TENANT_PORT: Final = 9095
# A PLAINTEXT listener's clients have no identity: a pre-TLS cluster trusted them all.
ANONYMOUS_SUPER_USER: Final = "User:ANONYMOUS"
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


def plain_tenant_listener_security() -> dict[str, str]:
    prefix = _prefix(ListenerName.TENANT_PLAIN)
    return {
        f"{prefix}sasl.enabled.mechanisms": TENANT_SASL_MECHANISM,
        f"{prefix}{TENANT_SASL_MECHANISM.lower()}.sasl.jaas.config": SCRAM_LOGIN_MODULE,
    }


def open_listeners(transport: TransportSecurity) -> dict[ListenerName, SecurityProtocol]:
    """The listeners a broker opens under `transport`, TLS ones first."""
    return {
        **(LISTENER_PROTOCOLS if transport.tls_listeners else {}),
        **(PLAIN_LISTENER_PROTOCOLS if transport.plain_listeners else {}),
    }


def inter_broker_listener(transport: TransportSecurity) -> ListenerName:
    return ListenerName.INTERNAL if transport.clients_use_tls else ListenerName.INTERNAL_PLAIN


def listener_security(
    tls: TlsFiles, transport: TransportSecurity = DEFAULT_TRANSPORT
) -> dict[str, str]:
    """Every security key of a broker's server.properties, broker-wide first."""
    if transport is DEFAULT_TRANSPORT:
        return {
            **BROKER_SECURITY,
            **internal_listener_security(ListenerName.INTERNAL, tls),
            **tenant_listener_security(tls),
        }
    protocols = open_listeners(transport)
    return {
        **BROKER_SECURITY,
        "listener.security.protocol.map": ",".join(
            f"{name}:{protocol}" for name, protocol in protocols.items()
        ),
        "inter.broker.listener.name": inter_broker_listener(transport).value,
        "super.users": f"{SUPER_USERS};{ANONYMOUS_SUPER_USER}",
        **(
            {
                **internal_listener_security(ListenerName.INTERNAL, tls),
                **tenant_listener_security(tls),
            }
            if transport.tls_listeners
            else {}
        ),
        **plain_tenant_listener_security(),
    }


def listeners(
    address: str,
    internal_port: int,
    tenant_port: int,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
    plain_ports: tuple[int, int] = (PLAIN_INTERNAL_PORT, PLAIN_TENANT_PORT),
) -> str:
    ports = {
        ListenerName.INTERNAL: internal_port,
        ListenerName.TENANT: tenant_port,
        ListenerName.INTERNAL_PLAIN: plain_ports[0],
        ListenerName.TENANT_PLAIN: plain_ports[1],
    }
    return ",".join(f"{name}://{address}:{ports[name]}" for name in open_listeners(transport))


_EXAMPLE = TlsFiles("/k", "/t")
# Rendered keys outside KafkaConfig's table (the catalog): the authorizer's super.users and
# every listener-prefixed key. A broker reports them from server.properties with their values
# hidden, as it does for every key it cannot type.
RENDERED_OUTSIDE_CATALOG: Final = frozenset(
    {"super.users"}
    | set(internal_listener_security(ListenerName.INTERNAL, _EXAMPLE))
    | set(tenant_listener_security(_EXAMPLE))
    | set(plain_tenant_listener_security())
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
