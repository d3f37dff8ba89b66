"""The source cluster's ACLs for a flow, through confluent-kafka's admin client as the
management plane's admin identity (a super user of the source's internal listener), and a
group's committed offsets for a failover, through kafka-python's."""

from __future__ import annotations

import contextlib
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
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

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
    """The group's committed offsets on the cluster, by topic and partition (none: {}).

    Read through kafka-python's admin client, not librdkafka's: librdkafka's group-offset
    request aborts the whole process on an assertion (`eonce->refcnt > 0`) when the group's
    coordinator moves under it, and a failover is when coordinators move; here the process
    is the management plane."""
    settings: dict[str, Any] = {
        **InternalClient(bootstrap_servers, identity).kafka_python(),
        "client_id": "kaas-mirror-failover",
        "request_timeout_ms": int(TIMEOUT_S * 1000),
        "bootstrap_timeout_ms": int(TIMEOUT_S * 1000),
    }
    try:
        admin = KafkaAdminClient(**settings)
    except (KafkaError, OSError) as exc:
        raise GroupOffsetsError(f"{bootstrap_servers}: offsets of group {group!r}: {exc}") from None
    try:
        answer = admin.list_group_offsets({group: None}).get(group, {})
    except (KafkaError, OSError) as exc:
        raise GroupOffsetsError(f"{bootstrap_servers}: offsets of group {group!r}: {exc}") from None
    finally:
        # Closing a client whose connection broke: nothing is left to release.
        with contextlib.suppress(KafkaError, OSError):
            admin.close()
    return {
        (tp.topic, tp.partition): int(meta.offset)
        for tp, meta in answer.items()
        if meta.offset is not None and int(meta.offset) >= 0
    }
