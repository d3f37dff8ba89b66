"""Which znodes the ACL migration of a converted cluster changes (pure)."""

from __future__ import annotations

import pytest
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from management_plane.security.znode_acls import ZnodeAcl, acl_changes
from planner.zookeeper_client import cluster_acl

pytestmark = pytest.mark.unit

WANTED = cluster_acl()
NODE_ONLY = [ACL(Permissions.ALL, Id("x509", "CN=kaas-node,O=KaaS"))]


@pytest.mark.parametrize(
    ("acl", "changes"),
    [
        (OPEN_ACL_UNSAFE, True),  # what an older release created
        (NODE_ONLY, True),  # a narrower ACL is not the policy either
        ([*WANTED, *OPEN_ACL_UNSAFE], True),  # the policy plus world access still opens it
        (WANTED, False),
        (list(reversed(WANTED)), False),  # the same entries in another order
    ],
)
def test_a_znode_changes_unless_its_acl_is_the_clusters_policy(
    acl: list[ACL], changes: bool
) -> None:
    found = [ZnodeAcl("/kaas/c/spec", tuple(acl), 3)]
    assert acl_changes(found, WANTED) == (found if changes else [])


def test_the_changes_keep_the_walk_order_and_the_acl_version_read() -> None:
    found = [
        ZnodeAcl("/kaas/c", tuple(OPEN_ACL_UNSAFE), 0),
        ZnodeAcl("/kaas/c/ids", tuple(WANTED), 1),
        ZnodeAcl("/kaas/c/spec", tuple(OPEN_ACL_UNSAFE), 7),
    ]
    assert [(z.path, z.acl_version) for z in acl_changes(found, WANTED)] == [
        ("/kaas/c", 0),
        ("/kaas/c/spec", 7),
    ]
