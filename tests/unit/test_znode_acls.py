"""Which znodes the ACL migration of a converted cluster changes (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from management_plane.security.znode_acls import (
    ZnodeAcl,
    acl_changes,
    kafka_migration_command,
    kafka_tls_config,
)
from planner.pki.authority import Role
from planner.pki.files import IdentityFiles
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


def test_kafkas_migration_runs_secure_against_the_chroot_as_the_node_identity(
    tmp_path: Path,
) -> None:
    node = IdentityFiles(tmp_path / "tls", Role.NODE)
    command = kafka_migration_command(
        "/usr/bin/java", Path("/opt/kafka/libs"), "10.0.0.1:2181/kafka/c", Path("/t/zk.properties")
    )
    assert command[command.index("-cp") + 1] == "/opt/kafka/libs/*"
    assert command[command.index("-cp") + 2 :] == [
        "kafka.admin.ZkSecurityMigrator",
        "--zookeeper.acl",
        "secure",
        "--zookeeper.connect",
        "10.0.0.1:2181/kafka/c",
        "--zk-tls-config-file",
        "/t/zk.properties",
    ]
    settings = dict(line.split("=", 1) for line in kafka_tls_config(node).splitlines())
    assert settings["zookeeper.ssl.client.enable"] == "true"
    assert settings["zookeeper.ssl.keystore.location"] == str(node.keystore)
    assert settings["zookeeper.ssl.truststore.location"] == str(node.trust_bundle)
