"""A VM's ZooKeeper and Jolokia secured, on a real cluster with agents: TLS only, clients
authenticated by their certificate, KaaS's and Kafka's znodes closed to anyone but the
cluster's own principals, Jolokia for the nodes' identity only and read-only."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from management_plane.local.state import require_state
from management_plane.local.tls import authority_dir
from management_plane.security.scan import listening_ports
from management_plane.security.znode_acls import AclMigration, secure_tree
from planner.contracts.paths import ClusterPaths
from planner.pki.authority import Authority, Role, create_authority, issue, new_key_pem
from planner.pki.files import IdentityFiles, load_authority, write_identity
from planner.pki.tls import client_context
from planner.zookeeper_client import (
    CLUSTER_PRINCIPALS,
    cluster_acl,
    server_mode,
    zookeeper_client,
)
from planner.zookeeper_ensemble import parse_ensemble_config
from tests import harness
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """A 3-VM cluster whose agents have written their znodes (ids, members, journal)."""
    handle = harness.start_cluster(
        tmp_path_factory.mktemp("zksec"),
        nodes=3,
        name="zksec",
        address_base=harness.FRESH_CLUSTER_BASE,
        agents=True,
    )
    try:
        client = handle.zookeeper(timeout=10)
        client.start(timeout=15)
        try:
            harness.wait_for_healthy_agents(client, handle.layout.name, 3)
        finally:
            client.stop()
            client.close()
        yield handle
    finally:
        harness.stop_cluster(handle)


def _stranger(authority: Authority, directory: Path) -> IdentityFiles:
    """A certificate the cluster's own CA signed for a principal that is not the cluster's:
    it gets through TLS, so what stops it is the ACL."""
    key_pem = new_key_pem()
    key = serialization.load_pem_private_key(key_pem, None)
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "stranger")]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(serialization.load_pem_private_key(authority.key_pem, None), hashes.SHA256())  # type: ignore[arg-type]
    )
    files = IdentityFiles(directory, Role.ADMIN)  # the file names only: the subject is "stranger"
    directory.mkdir(mode=0o700)
    files.key.write_text(key_pem.decode())
    files.certificate.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    files.trust_bundle.write_bytes(authority.certificate_pem)
    files.keystore.write_text(key_pem.decode() + files.certificate.read_text())
    return files


@pytest.fixture
def stranger(secured: ClusterHandle, tmp_path: Path) -> Iterator[KazooClient]:
    authority = load_authority(authority_dir(secured.layout))
    client = zookeeper_client(
        secured.zookeeper_hosts, _stranger(authority, tmp_path / "stranger"), timeout=10
    )
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _refused(client: KazooClient) -> bool:
    try:
        client.start(timeout=6)
    except KazooTimeoutError:
        return True
    finally:
        client.stop()
        client.close()
    return False


def test_a_plaintext_client_cannot_connect_to_any_server(secured: ClusterHandle) -> None:
    for vm in secured.layout.vms:
        plain = KazooClient(hosts=vm.zookeeper_endpoint, timeout=3, connection_retry=None)
        assert _refused(plain), f"{vm.zookeeper_endpoint} took a plaintext session"
        # The four-letter words are refused in clear too: the port speaks TLS only.
        with socket.create_connection((vm.address, vm.ports.zookeeper_client), timeout=5) as s:
            s.sendall(b"srvr")
            s.settimeout(5)
            try:
                answer = s.recv(4096)
            except (ConnectionResetError, TimeoutError):
                answer = b""
        assert b"Mode:" not in answer


def test_zookeeper_has_no_plaintext_client_port_and_its_lines_name_none(
    secured: ClusterHandle,
) -> None:
    """No server line names a client port, so no server binds a plaintext one: each
    ZooKeeper listens on its secure client port and its quorum ports only. The agents'
    reconfigs (the cluster's servers joined by them) keep it so."""
    zk = secured.zookeeper(timeout=10)
    zk.start(timeout=15)
    try:
        zk.sync("/zookeeper/config")
        config = parse_ensemble_config(zk.get("/zookeeper/config")[0].decode())
    finally:
        zk.stop()
        zk.close()
    assert len(config.servers) == 3
    assert all(server.client_port is None for server in config.servers.values()), config
    state = require_state(secured.home)
    ports = listening_ports(state)
    for vm in secured.layout.vms:
        zookeeper_ports = {p.port for p in ports if (p.vm, p.process) == (vm.name, "zookeeper")}
        allowed = {vm.ports.zookeeper_client, vm.ports.zookeeper_peer, vm.ports.zookeeper_election}
        assert vm.ports.zookeeper_client in zookeeper_ports
        assert zookeeper_ports <= allowed, (vm.name, zookeeper_ports)


def test_a_tls_client_without_a_certificate_or_of_another_ca_is_refused(
    secured: ClusterHandle, tmp_path: Path
) -> None:
    trust = secured.admin_identity.trust_bundle
    anonymous = KazooClient(
        hosts=secured.zookeeper_hosts,
        timeout=3,
        connection_retry=None,
        use_ssl=True,
        ca=str(trust),
    )
    assert _refused(anonymous)

    now = dt.datetime.now(dt.UTC)
    other = create_authority("another-cluster", now)
    foreign = IdentityFiles(tmp_path / "foreign", Role.ADMIN)
    write_identity(foreign, issue(other, Role.ADMIN, (), now), other.certificate_pem)
    # It trusts the right CA, but its certificate is signed by another one.
    impostor = KazooClient(
        hosts=secured.zookeeper_hosts,
        timeout=3,
        connection_retry=None,
        use_ssl=True,
        ca=str(trust),
        certfile=str(foreign.certificate),
        keyfile=str(foreign.key),
    )
    assert _refused(impostor)
    vm = secured.layout.vms[0]
    context = ssl.create_default_context(cafile=str(trust))
    context.load_cert_chain(str(foreign.certificate), str(foreign.key))
    with (
        pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)),
        socket.create_connection((vm.address, vm.ports.zookeeper_client), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=vm.address) as connection,
    ):
        connection.sendall(b"srvr")
        assert connection.recv(4096) == b""  # refused after the handshake at the latest
        raise ConnectionResetError("closed without an answer")


def test_a_principal_not_of_the_cluster_gets_no_auth_on_kaas_and_kafka_znodes(
    secured: ClusterHandle, stranger: KazooClient
) -> None:
    paths = ClusterPaths(secured.layout.name)
    chroot = secured.kafka_chroot
    for path in (paths.spec, paths.members, f"{chroot}/config/users"):
        with pytest.raises(NoAuthError):
            stranger.get(path)
    for path in (paths.spec, f"{chroot}/brokers/ids/0", f"{chroot}/controller_epoch"):
        with pytest.raises(NoAuthError):
            stranger.set(path, b"{}")
    with pytest.raises(NoAuthError):
        stranger.create(f"{paths.root}/intruder", b"x")
    with pytest.raises(NoAuthError):
        stranger.create(f"{chroot}/config/users/intruder", b"x")
    with pytest.raises(NoAuthError):
        stranger.reconfig(joining=None, leaving="1", new_members=None)


def _tree(client: KazooClient, root: str) -> Iterator[str]:
    yield root
    for child in client.get_children(root):
        yield from _tree(client, f"{root}/{child}")


def test_every_kaas_znode_is_closed_to_the_world_and_kafkas_are_written_only_by_nodes(
    secured: ClusterHandle,
) -> None:
    client = secured.zookeeper(timeout=10)
    client.start(timeout=15)
    try:
        kaas_root = ClusterPaths(secured.layout.name).root
        checked = 0
        for path in _tree(client, kaas_root):
            acl, _ = client.get_acls(path)
            assert {(e.id.scheme, e.id.id) for e in acl} == {
                ("x509", principal) for principal in CLUSTER_PRINCIPALS
            }, path
            checked += 1
        assert checked >= 2  # the root and the spec at least
        # Kafka's secrets (SCRAM credentials) are the brokers' alone: not even the admin reads
        # them, nor their ACL.
        chroot = secured.kafka_chroot
        with pytest.raises(NoAuthError):
            client.get_acls(f"{chroot}/config/users")
    finally:
        client.stop()
        client.close()
    # Kafka sets its own ACLs (zookeeper.set.acl): its creator, the brokers' identity, may
    # write; nobody else may write anything, and its secrets are not world-readable.
    node = zookeeper_client(secured.zookeeper_hosts, secured.node_identity, timeout=10)
    node.start(timeout=15)
    try:
        for path in (f"{chroot}/brokers/ids/0", f"{chroot}/config/users", chroot):
            acl, _ = node.get_acls(path)
            writers = {(e.id.scheme, e.id.id) for e in acl if e.perms & Permissions.WRITE}
            assert writers == {("x509", CLUSTER_PRINCIPALS[0])}, (path, acl)
        users_acl, _ = node.get_acls(f"{chroot}/config/users")
        assert not any(e.id.scheme == "world" for e in users_acl), users_acl
    finally:
        node.stop()
        node.close()


def test_the_admin_and_the_nodes_read_and_write_and_the_nodes_serve_their_mode(
    secured: ClusterHandle,
) -> None:
    paths = ClusterPaths(secured.layout.name)
    for identity in (secured.admin_identity, secured.node_identity):
        client = zookeeper_client(secured.zookeeper_hosts, identity, timeout=10)
        client.start(timeout=15)
        try:
            assert client.get(paths.spec)[0]
            probe = client.create(f"{paths.root}/probe-", b"x", sequence=True, ephemeral=True)
            assert client.get(probe)[0] == b"x"
            client.delete(probe)
        finally:
            client.stop()
            client.close()
    modes = {
        server_mode(vm.address, vm.ports.zookeeper_client, secured.admin_identity)
        for vm in secured.layout.vms
    }
    assert modes <= {"leader", "follower", "observer"} and "leader" in modes


# -- Jolokia -------------------------------------------------------------------------------

URP = "read/kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions"


def _jolokia(url: str, context: ssl.SSLContext | None) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        body: dict[str, object] = json.load(response)
    return body


def test_jolokia_reads_for_a_node_certificate(secured: ClusterHandle) -> None:
    vm = secured.layout.vms[0]
    assert vm.jolokia_url.startswith("https://")
    body = _jolokia(vm.jolokia_url + URP, client_context(secured.node_identity))
    assert body["status"] == 200
    assert body["value"] == {"Value": 0}


def test_jolokia_refuses_no_certificate_another_ca_another_principal_and_plain_http(
    secured: ClusterHandle, tmp_path: Path
) -> None:
    vm = secured.layout.vms[0]
    trust_only = ssl.create_default_context(cafile=str(secured.node_identity.trust_bundle))
    now = dt.datetime.now(dt.UTC)
    other = create_authority("another-cluster", now)
    foreign = IdentityFiles(tmp_path / "foreign", Role.NODE)
    write_identity(foreign, issue(other, Role.NODE, (vm.address,), now), other.certificate_pem)
    foreign_context = ssl.create_default_context(cafile=str(secured.node_identity.trust_bundle))
    foreign_context.load_cert_chain(str(foreign.certificate), str(foreign.key))
    for context in (
        trust_only,  # no client certificate
        foreign_context,  # the right CA trusted, a certificate of another
        client_context(secured.admin_identity),  # this CA, but not the nodes' principal
    ):
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            _jolokia(vm.jolokia_url + URP, context)
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        _jolokia(vm.jolokia_url.replace("https://", "http://") + URP, None)


def test_jolokia_refuses_write_and_exec_even_to_a_node(secured: ClusterHandle) -> None:
    vm = secured.layout.vms[0]
    context = client_context(secured.node_identity)
    write = _jolokia(vm.jolokia_url + "write/java.lang:type=Memory/Verbose/true", context)
    assert write["status"] == 403, write
    execute = _jolokia(vm.jolokia_url + "exec/java.lang:type=Memory/gc", context)
    assert execute["status"] == 403, execute
    # Nothing changed: the attribute the write named is still off.
    verbose = _jolokia(vm.jolokia_url + "read/java.lang:type=Memory/Verbose", context)
    assert verbose["status"] == 200 and verbose["value"] is False


def test_znodes_an_older_release_left_open_are_closed_by_the_acl_migration(
    secured: ClusterHandle, stranger: KazooClient
) -> None:
    """As a converted cluster's: znodes open to world:anyone get the cluster's policy, after
    which a principal not of the cluster gets NoAuth; a second run changes nothing."""
    root = f"{ClusterPaths(secured.layout.name).root}/converted-{uuid.uuid4().hex[:8]}"
    admin = secured.zookeeper(timeout=10)
    admin.start(timeout=15)
    try:
        for path in (root, f"{root}/spec", f"{root}/ids", f"{root}/ids/0"):
            admin.create(path, b"{}", acl=OPEN_ACL_UNSAFE)
        stranger.sync(f"{root}/ids/0")  # it may be connected to a server not yet caught up
        assert stranger.get(f"{root}/ids/0")[0] == b"{}"  # open, as an older release left it
        first = secure_tree(admin, root)
        assert (first.checked, first.changed) == (4, 4)
        for path in (root, f"{root}/ids/0"):
            assert set(admin.get_acls(path)[0]) == set(cluster_acl())
            with pytest.raises(NoAuthError):
                stranger.get(path)
        with pytest.raises(NoAuthError):
            stranger.create(f"{root}/ids/1", b"x")
        assert secure_tree(admin, root) == AclMigration(checked=4, changed=0)
    finally:
        admin.delete(root, recursive=True)
        admin.stop()
        admin.close()
