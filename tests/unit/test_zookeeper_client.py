"""The one ZooKeeper client factory and ACL policy (planner/zookeeper_client.py)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from kazoo.security import Permissions

from planner.pki.authority import Role, create_authority, issue
from planner.pki.files import IdentityFiles, write_identity
from planner.pki.tls import client_context
from planner.zookeeper_client import (
    CLUSTER_PRINCIPALS,
    ZookeeperIdentityError,
    cluster_acl,
    zookeeper_client,
)

pytestmark = pytest.mark.unit


def _identity(tmp_path: Path) -> IdentityFiles:
    now = dt.datetime.now(dt.UTC)
    authority = create_authority("c1", now)
    files = IdentityFiles(tmp_path / "client", Role.ADMIN)
    write_identity(files, issue(authority, Role.ADMIN, (), now), authority.certificate_pem)
    return files


def test_the_acl_grants_everything_to_the_cluster_principals_and_nothing_to_the_world() -> None:
    acl = cluster_acl()
    assert [(entry.id.scheme, entry.id.id) for entry in acl] == [
        ("x509", "CN=kaas-node,O=KaaS"),
        ("x509", "CN=kaas-admin,O=KaaS"),
    ]
    assert all(entry.perms == Permissions.ALL for entry in acl)
    assert CLUSTER_PRINCIPALS == ("CN=kaas-node,O=KaaS", "CN=kaas-admin,O=KaaS")
    assert not any(entry.id.scheme in ("world", "auth", "ip") for entry in acl)


def test_a_client_presents_its_certificate_over_tls_with_the_acl_as_default(
    tmp_path: Path,
) -> None:
    identity = _identity(tmp_path)
    client = zookeeper_client("127.0.0.1:2181/chroot", identity, timeout=3.0)
    assert client.use_ssl and client.verify_certs and client.check_hostname
    assert (client.certfile, client.keyfile, client.ca) == (
        str(identity.certificate),
        str(identity.key),
        str(identity.trust_bundle),
    )
    assert client.default_acl == cluster_acl()
    context = client_context(identity)
    assert context.verify_mode.name == "CERT_REQUIRED"


def test_no_client_is_made_without_the_identity_files(tmp_path: Path) -> None:
    missing = IdentityFiles(tmp_path / "nowhere", Role.NODE)
    with pytest.raises(ZookeeperIdentityError, match=r"no kaas-node identity in .*nowhere"):
        zookeeper_client("127.0.0.1:2181", missing)
