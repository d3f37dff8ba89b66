"""The brokers' two listeners and the tenants' security settings, as the renderer writes them.
Pure constants (docs/tenants.md).

PLAINTEXT stays the internal listener: inter-broker traffic, the agents, the management
plane. Tenants connect to SASL_PLAINTEXT with SCRAM-SHA-512 on a port of its own, and the
brokers authorize every request with ACLs kept in ZooKeeper (AclAuthorizer). The PLAINTEXT
listener's principal, ANONYMOUS, is the super user, so everything internal works as it did
without an authorizer. A SASL listener needs a JAAS login module even when no broker logs
in through it, hence the listener-prefixed sasl.jaas.config.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

INTERNAL_LISTENER: Final = "PLAINTEXT"
TENANT_LISTENER: Final = "SASL_PLAINTEXT"
TENANT_SASL_MECHANISM: Final = "SCRAM-SHA-512"
INTERNAL_PRINCIPAL: Final = "User:ANONYMOUS"  # what Kafka calls a PLAINTEXT client
TENANT_JAAS_CONFIG_KEY: Final = (
    f"listener.name.{TENANT_LISTENER.lower()}.{TENANT_SASL_MECHANISM.lower()}.sasl.jaas.config"
)

TENANT_LISTENER_SECURITY: Final[Mapping[str, str]] = MappingProxyType(
    {
        "inter.broker.listener.name": INTERNAL_LISTENER,
        "sasl.enabled.mechanisms": TENANT_SASL_MECHANISM,
        TENANT_JAAS_CONFIG_KEY: "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": INTERNAL_PRINCIPAL,
    }
)

# Rendered keys outside KafkaConfig's table (the catalog): the authorizer's own super.users
# and the listener-prefixed JAAS config. A broker reports both from server.properties with
# their values hidden, as it does for every key it cannot type.
RENDERED_OUTSIDE_CATALOG: Final = frozenset({"super.users", TENANT_JAAS_CONFIG_KEY})

# The spec may not set these: they make the tenant listener and its isolation.
# security.inter.broker.protocol is Kafka's other way of naming the inter-broker listener,
# refused by Kafka beside inter.broker.listener.name.
TENANT_SECURITY_KEYS: Final = frozenset(TENANT_LISTENER_SECURITY) | {
    "security.inter.broker.protocol"
}
