"""The ACL bindings a flow's MirrorMaker gets on a KaaS source. Pure.

MirrorMaker presents a `kaas-mirror` certificate of the source's CA: not a super user (the
principal mapping leaves its whole subject), so it may do only what these bindings allow:
read and describe the mirrored topics and their configs (the source connector copies data
and topic configs), describe the synced consumer groups (the checkpoint connector reads
their offsets). Nothing is written to the source: offset syncs, checkpoints and Connect's own
topics are on the target, heartbeats are off.

Kafka's ACLs name a resource literally or by prefix, not by regular expression: a filter is
covered by the prefix of its literal start (`orders\\..*` -> prefix `orders.`), an exact name
literally, and a filter with no literal start (or an alternation) by every name. The grant is
never narrower than the filter; it may be wider, and stays read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

from management_plane.tenants.acls import AclOperation, AclResource
from planner.contracts.mirror_flow import MirrorFlow
from planner.pki.authority import Role, role_distinguished_name

MIRROR_PRINCIPAL: Final = f"User:{role_distinguished_name(Role.MIRROR)}"
EVERY_NAME: Final = "*"
_METACHARACTERS: Final = frozenset(".^$*+?{}[]()|\\")
_QUANTIFIERS: Final = frozenset("*?{")


class PatternKind(StrEnum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


OPERATIONS: Final[dict[AclResource, tuple[AclOperation, ...]]] = {
    AclResource.TOPIC: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
    ),
    AclResource.GROUP: (AclOperation.DESCRIBE,),
}


@dataclass(frozen=True, order=True)
class SourceGrant:
    resource: AclResource
    pattern: PatternKind
    name: str
    operation: AclOperation
    principal: str = MIRROR_PRINCIPAL

    def __str__(self) -> str:
        return f"ALLOW {self.principal} {self.operation} on {self.resource} {self.pattern} {self.name!r}"


def filter_scope(regex: str) -> tuple[PatternKind, str]:
    """The narrowest literal name or prefix that covers every name `regex` fully matches."""
    if "|" in regex:
        return PatternKind.LITERAL, EVERY_NAME
    literal: list[str] = []
    index = 0
    while index < len(regex):
        char = regex[index]
        if char == "\\" and index + 1 < len(regex) and not regex[index + 1].isalnum():
            literal.append(regex[index + 1])  # an escaped metacharacter is itself
            index += 2
            continue
        if char in _METACHARACTERS:
            if char in _QUANTIFIERS and literal:
                literal.pop()  # the character before `?`, `*` or `{0,` may be absent
            prefix = "".join(literal)
            return (PatternKind.PREFIXED, prefix) if prefix else (PatternKind.LITERAL, EVERY_NAME)
        literal.append(char)
        index += 1
    return PatternKind.LITERAL, "".join(literal)


def mirror_source_grants(flow: MirrorFlow) -> tuple[SourceGrant, ...]:
    """Every binding the flow's MirrorMaker needs on its source, sorted."""
    scopes = {
        AclResource.TOPIC: filter_scope(flow.topics),
        AclResource.GROUP: filter_scope(flow.groups),
    }
    return tuple(
        sorted(
            SourceGrant(resource, *scopes[resource], operation)
            for resource, operations in OPERATIONS.items()
            for operation in operations
        )
    )


class SourceAclPort(Protocol):
    """The source cluster's ACLs, as the management plane's admin identity changes them."""

    def grant(self, grants: Sequence[SourceGrant]) -> None: ...

    def revoke(self, grants: Sequence[SourceGrant]) -> None: ...
