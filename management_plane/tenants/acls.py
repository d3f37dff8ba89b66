"""The exact ACL bindings a tenant gets. Pure.

Every binding is PREFIXED on the tenant's prefix, ALLOW, for the tenant's principal from any
host. With AclAuthorizer and no ACL allowing it, anything else is denied.

- topics: READ (consume), WRITE (produce, also idempotent producers since Kafka 3.0),
  DESCRIBE (metadata, offsets), DESCRIBE_CONFIGS (clients and tools reading topic configs);
- consumer groups: READ (join, commit), DESCRIBE (lag tools);
- transactional ids: WRITE, DESCRIBE (transactional producers with ids under the prefix).

Not CREATE, DELETE, ALTER or ALTER_CONFIGS on topics: a tenant's topics are created and
deleted through the management plane, which checks them against the plan's limits and the
topic config whitelist first. A CREATE grant would let a client skip both.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from management_plane.tenants.model import Tenant


class AclResource(StrEnum):
    TOPIC = "topic"
    GROUP = "group"
    TRANSACTIONAL_ID = "transactional_id"


class AclOperation(StrEnum):
    READ = "read"
    WRITE = "write"
    DESCRIBE = "describe"
    DESCRIBE_CONFIGS = "describe_configs"


TENANT_OPERATIONS: Final[dict[AclResource, tuple[AclOperation, ...]]] = {
    AclResource.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
    ),
    AclResource.GROUP: (AclOperation.READ, AclOperation.DESCRIBE),
    AclResource.TRANSACTIONAL_ID: (AclOperation.WRITE, AclOperation.DESCRIBE),
}


@dataclass(frozen=True, order=True)
class AclGrant:
    """One ALLOW binding on resources whose names start with `prefix` (PREFIXED pattern)."""

    resource: AclResource
    prefix: str
    operation: AclOperation
    principal: str
    host: str = "*"

    def __str__(self) -> str:
        return (
            f"ALLOW {self.principal} {self.operation} on {self.resource}s "
            f"prefixed {self.prefix!r} from {self.host}"
        )


def tenant_acl_grants(tenant: Tenant) -> tuple[AclGrant, ...]:
    """Every binding the tenant gets, sorted."""
    return tuple(
        sorted(
            AclGrant(resource, tenant.prefix, operation, tenant.principal)
            for resource, operations in TENANT_OPERATIONS.items()
            for operation in operations
        )
    )
