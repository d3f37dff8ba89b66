"""Existing znodes of a cluster made before ZooKeeper had ACLs, given the one ACL policy
(`planner.zookeeper_client.cluster_acl`: the cluster's own principals, nobody else), as
Kafka's zookeeper-security-migration does for Kafka's znodes (which it runs, below).

New znodes get the policy at creation (it is every KaaS client's default ACL); this is for
the ones an older release created open to `world:anyone`. The walk is breadth-first from a
root, the parent secured before its children are read. Each change is conditional on the
ACL version read, so a concurrent ACL change is read again rather than overwritten; a
znode deleted meanwhile is skipped. `acl_changes` (which znodes to change) is pure."""

from __future__ import annotations

import subprocess
import tempfile
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.security import ACL

from management_plane.errors import KaasError
from planner.contracts.vm_config.class_archive import class_path_options
from planner.contracts.vm_config.zookeeper_security import (
    ZookeeperTlsFiles,
    broker_zookeeper_client_properties,
)
from planner.pki.files import IdentityFiles
from planner.private_files import write_private
from planner.zookeeper_client import cluster_acl

KAFKA_SECURITY_MIGRATOR: Final = "kafka.admin.ZkSecurityMigrator"


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


class KafkaAclMigrationError(KaasError, RuntimeError):
    """Kafka's zookeeper-security-migration did not run or refused; its last line says why."""


def kafka_migration_command(
    java: str, kafka_libs: Path, zookeeper_connect: str, tls_config: Path
) -> list[str]:
    """Kafka's own migration (kafka.admin.ZkSecurityMigrator, Kafka 3.x) to its secure ACLs
    under `zookeeper_connect`'s chroot: the creator (the identity it runs as) may do
    everything, everyone may read, except the sensitive paths (SCRAM credentials, broker
    configs, delegation tokens), which only the creator reads."""
    return [
        java,
        "-Xmx128m",
        "-XX:TieredStopAtLevel=1",  # a short-lived JVM: start fast rather than run fast
        *class_path_options(kafka_libs),
        KAFKA_SECURITY_MIGRATOR,
        "--zookeeper.acl",
        "secure",
        "--zookeeper.connect",
        zookeeper_connect,
        "--zk-tls-config-file",
        str(tls_config),
    ]


def kafka_tls_config(node: IdentityFiles) -> str:
    """The migration's ZooKeeper client settings: the brokers' own (TLS, the node identity),
    since the creator its ACLs name must be the identity the brokers run as."""
    settings = broker_zookeeper_client_properties(
        ZookeeperTlsFiles(keystore=node.keystore, trust_bundle=node.trust_bundle)
    )
    return "".join(f"{key}={value}\n" for key, value in sorted(settings.items()))


def migrate_kafka_znodes(
    java: str,
    kafka_libs: Path,
    zookeeper_connect: str,
    node: IdentityFiles,
    timeout_s: float = 180.0,
) -> None:
    """Run Kafka's migration as the node identity (ZooKeeper's super user)."""
    with tempfile.TemporaryDirectory(prefix="kaas-acl-") as scratch:
        config = write_private(Path(scratch) / "zookeeper-tls.properties", kafka_tls_config(node))
        command = kafka_migration_command(java, kafka_libs, zookeeper_connect, config)
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise KafkaAclMigrationError(
                f"zookeeper-security-migration did not run ({exc})"
            ) from None
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise KafkaAclMigrationError(
            f"zookeeper-security-migration refused: {(lines or ['no output'])[-1][:300]}"
        )
