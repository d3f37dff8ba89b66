"""The one way KaaS talks to a cluster's ZooKeeper: a kazoo client over TLS that presents an
identity's certificate (the x509 provider makes its subject the ZooKeeper identity), and the
one ACL policy every znode KaaS creates gets.

Every caller (the agent, the management plane, the plan store, the local provider, the
tests) makes its client here, so none can forget the certificate or the ACL: the ACL is the
client's default, which kazoo applies to every create without an explicit ACL, recipes'
lock and election nodes included. Also here: ZooKeeper's four-letter diagnostics (`srvr`)
over the same TLS port, since a secured ensemble has no plaintext port to send them to.

A cluster made before TLS (`TransportSecurity.PLAINTEXT_LEGACY`, and a conversion's first
phase) is reached as such clusters were: in plaintext, anonymously, creating open znodes.
"""

from __future__ import annotations

import socket
from typing import Any, Final

from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions

from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.contracts.vm_config.zookeeper_security import X509_SCHEME
from planner.errors import PlannerError
from planner.pki.authority import Role, role_distinguished_name
from planner.pki.files import IdentityFiles
from planner.pki.tls import client_context

# The identities a cluster's ZooKeeper knows: its VMs' (brokers, agents, servers) and
# KaaS's own clients'. Both are per cluster, since each cluster has its own CA.
CLUSTER_PRINCIPALS: Final = (
    role_distinguished_name(Role.NODE),
    role_distinguished_name(Role.ADMIN),
)


class ZookeeperIdentityError(PlannerError):
    """An identity whose files are missing: no client is made without its certificate."""


def cluster_acl() -> list[ACL]:
    """The ACL of every znode KaaS creates: the cluster's own principals may do everything,
    nobody else anything (no `world` entry)."""
    return [ACL(Permissions.ALL, Id(X509_SCHEME, principal)) for principal in CLUSTER_PRINCIPALS]


def zookeeper_client(
    hosts: str,
    identity: IdentityFiles,
    *,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
    **options: Any,
) -> KazooClient:
    """A kazoo client of `hosts` (host:port list, optionally with a chroot) over TLS as
    `identity`; the servers' certificates are checked against the identity's trust bundle
    and their addresses. `options`: KazooClient's own (timeout, connection_retry, ...).
    A `transport` whose clients do not use TLS yet: plaintext and anonymous."""
    if not transport.clients_use_tls:
        return KazooClient(hosts=hosts, **options)
    if not identity.exists():
        raise ZookeeperIdentityError(
            f"no {identity.role.value} identity in {identity.directory}: "
            "a ZooKeeper client needs its certificate, key and trust bundle"
        )
    return KazooClient(
        hosts=hosts,
        use_ssl=True,
        ca=str(identity.trust_bundle),
        certfile=str(identity.certificate),
        keyfile=str(identity.key),
        verify_certs=True,
        check_hostname=True,
        default_acl=cluster_acl(),
        **options,
    )


def _read_all(connection: socket.socket) -> str:
    chunks = []
    while chunk := connection.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def four_letter_word(
    address: str,
    port: int,
    identity: IdentityFiles,
    word: bytes = b"srvr",
    timeout: float = 2.0,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
) -> str:
    """A four-letter command's answer, over TLS (in plaintext where the clients of
    `transport` use none): a session-less read, where a kazoo session per probe would be a
    write to the ensemble. Raises OSError (ssl.SSLError among them)."""
    with socket.create_connection((address, port), timeout=timeout) as raw:
        if not transport.clients_use_tls:
            raw.sendall(word)
            return _read_all(raw)
        with client_context(identity).wrap_socket(raw, server_hostname=address) as connection:
            connection.sendall(word)
            return _read_all(connection)


def server_mode(
    address: str,
    port: int,
    identity: IdentityFiles,
    timeout: float = 2.0,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
) -> str | None:
    """The server's mode (leader, follower, observer, standalone) from `srvr`, None if it
    does not answer."""
    try:
        answer = four_letter_word(address, port, identity, b"srvr", timeout, transport)
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None
