"""The source cluster's ACLs for a flow, through confluent-kafka's admin client as the
management plane's admin identity (a super user of the source's internal listener)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from management_plane.errors import TemporaryError
from management_plane.mirror.acls import PatternKind, SourceGrant, SourceOperation, SourceResource
from planner.client_logs import client_logger
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles

TIMEOUT_S = 15.0
_RESOURCES = {SourceResource.TOPIC: ResourceType.TOPIC, SourceResource.GROUP: ResourceType.GROUP}
_OPERATIONS = {
    SourceOperation.READ: AclOperation.READ,
    SourceOperation.DESCRIBE: AclOperation.DESCRIBE,
    SourceOperation.DESCRIBE_CONFIGS: AclOperation.DESCRIBE_CONFIGS,
}
_PATTERNS = {
    PatternKind.LITERAL: ResourcePatternType.LITERAL,
    PatternKind.PREFIXED: ResourcePatternType.PREFIXED,
}


class SourceAclError(TemporaryError):
    """The source did not take or drop a binding; the step runs again."""


def _binding(grant: SourceGrant) -> AclBinding:
    return AclBinding(
        _RESOURCES[grant.resource],
        grant.name,
        _PATTERNS[grant.pattern],
        grant.principal,
        "*",
        _OPERATIONS[grant.operation],
        AclPermissionType.ALLOW,
    )


def _filter(grant: SourceGrant) -> AclBindingFilter:
    return AclBindingFilter(
        _RESOURCES[grant.resource],
        grant.name,
        _PATTERNS[grant.pattern],
        grant.principal,
        "*",
        _OPERATIONS[grant.operation],
        AclPermissionType.ALLOW,
    )


class KafkaSourceAcls:
    def __init__(self, bootstrap_servers: str, identity: IdentityFiles) -> None:
        self.admin = AdminClient(
            InternalClient(bootstrap_servers, identity).librdkafka(), logger=client_logger
        )

    def _settle(self, what: str, futures: dict[Any, Future[Any]]) -> None:
        failures = []
        for key, future in futures.items():
            try:
                future.result(timeout=TIMEOUT_S)
            except KafkaException as exc:
                failures.append(f"{key}: {exc.args[0].str() if exc.args else exc}")
        if failures:
            raise SourceAclError(f"{what}: {'; '.join(failures)}")

    def grant(self, grants: Sequence[SourceGrant]) -> None:
        if grants:
            bindings = [_binding(g) for g in grants]
            self._settle("granting", self.admin.create_acls(bindings, request_timeout=TIMEOUT_S))

    def revoke(self, grants: Sequence[SourceGrant]) -> None:
        if grants:
            filters = [_filter(g) for g in grants]
            self._settle("revoking", self.admin.delete_acls(filters, request_timeout=TIMEOUT_S))
