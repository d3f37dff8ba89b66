"""The source cluster's ACLs for a flow, through confluent-kafka's admin client as the
management plane's admin identity (a super user of the source's internal listener)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from management_plane.errors import KaasError, TemporaryError
from management_plane.mirror.acls import PatternKind, SourceGrant
from planner.client_logs import client_logger
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles

TIMEOUT_S = 15.0
_PATTERNS = {
    PatternKind.LITERAL: ResourcePatternType.LITERAL,
    PatternKind.PREFIXED: ResourcePatternType.PREFIXED,
}


class SourceAclError(TemporaryError):
    """The source did not take or drop a binding; the step runs again."""


def _fields(grant: SourceGrant) -> tuple[Any, ...]:
    """What a binding and the filter that finds exactly it both take, in their order."""
    return (
        ResourceType[grant.resource.name],
        grant.name,
        _PATTERNS[grant.pattern],
        grant.principal,
        "*",
        AclOperation[grant.operation.name],
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
            bindings = [AclBinding(*_fields(g)) for g in grants]
            self._settle("granting", self.admin.create_acls(bindings, request_timeout=TIMEOUT_S))

    def revoke(self, grants: Sequence[SourceGrant]) -> None:
        if grants:
            filters = [AclBindingFilter(*_fields(g)) for g in grants]
            self._settle("revoking", self.admin.delete_acls(filters, request_timeout=TIMEOUT_S))


class GroupOffsetsError(KaasError):
    """A cluster did not answer for a group's committed offsets."""


def committed_offsets(
    bootstrap_servers: str, identity: IdentityFiles, group: str
) -> dict[tuple[str, int], int]:
    """The group's committed offsets on the cluster, by topic and partition (none: {})."""
    admin = AdminClient(
        InternalClient(bootstrap_servers, identity).librdkafka(), logger=client_logger
    )
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
    )
    try:
        answer = futures[group].result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise GroupOffsetsError(
            f"{bootstrap_servers}: offsets of group {group!r}: "
            f"{exc.args[0].str() if exc.args else exc}"
        ) from None
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in answer.topic_partitions or []
        if tp.offset >= 0 and tp.error is None
    }
