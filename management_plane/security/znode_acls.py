"""Existing znodes of a cluster made before ZooKeeper had ACLs, given the one ACL policy
(`planner.zookeeper_client.cluster_acl`: the cluster's own principals, nobody else), as
Kafka's zookeeper-security-migration does for Kafka's znodes.

New znodes get the policy at creation (it is every KaaS client's default ACL); this is for
the ones an older release created open to `world:anyone`. The walk is breadth-first from a
root, the parent secured before its children are read. Each change is conditional on the
ACL version read, so a concurrent ACL change is read again rather than overwritten; a
znode deleted meanwhile is skipped. `acl_changes` (which znodes to change) is pure."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.security import ACL

from planner.zookeeper_client import cluster_acl


@dataclass(frozen=True)
class ZnodeAcl:
    path: str
    acl: tuple[ACL, ...]
    acl_version: int  # the znode's aversion, which a conditional set_acls names


@dataclass(frozen=True)
class AclMigration:
    checked: int  # znodes read
    changed: int  # znodes whose ACL was set


def acl_changes(found: Iterable[ZnodeAcl], wanted: Sequence[ACL]) -> list[ZnodeAcl]:
    """The znodes whose ACL is not `wanted` (as a set: ZooKeeper keeps the order given)."""
    target = frozenset(wanted)
    return [znode for znode in found if frozenset(znode.acl) != target]


def _read(zk: KazooClient, path: str) -> ZnodeAcl:
    acl, stat = zk.get_acls(path)
    return ZnodeAcl(path, tuple(acl), stat.aversion)


def _secure(zk: KazooClient, path: str, wanted: list[ACL]) -> bool:
    """Whether `path` needed the change; two tries: a concurrent ACL change is re-read."""
    for _ in range(2):
        current = _read(zk, path)
        if not acl_changes([current], wanted):
            return False
        try:
            zk.set_acls(path, wanted, version=current.acl_version)
            return True
        except BadVersionError:
            continue
    raise BadVersionError(f"the ACL of {path} keeps changing under the migration")


def secure_tree(zk: KazooClient, root: str, wanted: list[ACL] | None = None) -> AclMigration:
    """Every znode under `root` (itself included) gets `wanted` (default: the cluster's
    policy). `zk` must be allowed to change them: on an open znode anyone is."""
    acl = wanted if wanted is not None else cluster_acl()
    checked = changed = 0
    pending = deque([root])
    while pending:
        path = pending.popleft()
        try:
            changed += _secure(zk, path, acl)
            children = zk.get_children(path)
        except NoNodeError:
            continue  # deleted since its parent was listed
        checked += 1
        pending.extend(f"{path.rstrip('/')}/{child}" for child in sorted(children))
    return AclMigration(checked, changed)
