"""ZooKeeper's security settings, as the renderer writes them: TLS on the client port and
between the servers, clients authenticated by their certificate, and the brokers' ZooKeeper
client over TLS with ACLs on Kafka's znodes. Pure.

- Clients connect to `secureClientPort` (Netty, TLS, a client certificate required), the
  only client port: no `clientPort`, and no server line names one (vm_config.zookeeper).
  `enforce.auth` still requires every session to be authenticated by the x509 provider, so
  a server line naming a plaintext port (a converted cluster's, until its servers restart)
  serves no session there (AuthFailed).
- The quorum (peer and election ports) runs over TLS too (`sslQuorum`) with hostname
  verification both ways: ZooKeeper 3.8 checks the connecting server's source address
  against its certificate too, so a VM's certificate names every address it connects from.
- The x509 provider makes a client's certificate subject its ZooKeeper identity; the nodes'
  identity is the super user, which is what lets an agent run a dynamic reconfig. Client
  hostname verification is off because identities are roles, not machines: the admin's
  certificate names no host.
- Key and trust stores are the PEM files of the VM's identity (`planner.pki.files`): no Java
  key store to convert, no store password.

A pre-TLS cluster (`TransportSecurity.PLAINTEXT_LEGACY`) has the plain `clientPort`, a plain
quorum and no authentication. Its conversion keeps the one port: first TLS beside plaintext
on the client port and the quorum (ZooKeeper's port unification), then the quorum on TLS,
then the secure port alone with authentication enforced.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Final

from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity

TLS_PROTOCOLS: Final = "TLSv1.3,TLSv1.2"
NETTY_SERVER = "org.apache.zookeeper.server.NettyServerCnxnFactory"
NETTY_CLIENT = "org.apache.zookeeper.ClientCnxnSocketNetty"
X509_PROVIDER = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"
X509_SCHEME: Final = "x509"


@dataclass(frozen=True)
class ZookeeperTlsFiles:
    """A VM's identity as the JVMs read it: key and certificate in one PEM file, and the
    trust bundle (the cluster's CA certificates)."""

    keystore: PurePath
    trust_bundle: PurePath


@dataclass(frozen=True)
class ZookeeperSecurity:
    """What a ZooKeeper server needs to know to run secured: its identity's files and the
    subject (RFC 2253, as Java prints it) of the identity that may bypass ACLs and reconfig."""

    tls: ZookeeperTlsFiles
    super_user: str


def _stores(prefix: str, tls: ZookeeperTlsFiles) -> list[str]:
    return [
        f"{prefix}.keyStore.location={tls.keystore}",
        f"{prefix}.keyStore.type=PEM",
        f"{prefix}.trustStore.location={tls.trust_bundle}",
        f"{prefix}.trustStore.type=PEM",
        f"{prefix}.enabledProtocols={TLS_PROTOCOLS}",
    ]


def zoo_cfg_security_lines(
    security: ZookeeperSecurity,
    client_port: int,
    client_address: str | None,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
) -> list[str]:
    """zoo.cfg's security lines. `client_address`: the address the secure client port binds
    (None: every interface, as the image's identity-free file says)."""
    if not 0 < client_port < 65536:
        raise ValueError(f"secure client port must be 1-65535, got {client_port}")
    if "\n" in security.super_user or not security.super_user.strip():
        raise ValueError(f"super user must be one distinguished name, got {security.super_user!r}")
    plain_port = [
        f"clientPort={client_port}",
        *([f"clientPortAddress={client_address}"] if client_address else []),
    ]
    if transport is TransportSecurity.PLAINTEXT_LEGACY:
        return plain_port
    if transport.zookeeper_plain_port:
        # Both on the one port, and the quorum accepting both, while clients and servers
        # move; TLS sessions are still authenticated by their certificate, plain ones are
        # anonymous, so authentication cannot be enforced yet.
        return [
            *plain_port,
            "client.portUnification=true",
            f"serverCnxnFactory={NETTY_SERVER}",
            f"authProvider.{X509_SCHEME}={X509_PROVIDER}",
            f"ssl.authProvider={X509_SCHEME}",
            "ssl.clientAuth=need",
            "ssl.clientHostnameVerification=false",
            *_stores("ssl", security.tls),
            f"sslQuorum={'true' if transport.clients_use_tls else 'false'}",
            "portUnification=true",
            "ssl.quorum.hostnameVerification=true",
            *_stores("ssl.quorum", security.tls),
            f"X509AuthenticationProvider.superUser={security.super_user}",
        ]
    return [
        f"secureClientPort={client_port}",
        *([f"secureClientPortAddress={client_address}"] if client_address else []),
        f"serverCnxnFactory={NETTY_SERVER}",
        f"authProvider.{X509_SCHEME}={X509_PROVIDER}",
        f"ssl.authProvider={X509_SCHEME}",
        "ssl.clientAuth=need",
        "ssl.clientHostnameVerification=false",
        *_stores("ssl", security.tls),
        "sslQuorum=true",
        "ssl.quorum.hostnameVerification=true",
        *_stores("ssl.quorum", security.tls),
        f"X509AuthenticationProvider.superUser={security.super_user}",
        "enforce.auth.enabled=true",
        f"enforce.auth.schemes={X509_SCHEME}",
    ]


def broker_zookeeper_client_properties(
    tls: ZookeeperTlsFiles, transport: TransportSecurity = DEFAULT_TRANSPORT
) -> dict[str, str]:
    """A ZooKeeper-mode broker's client of ZooKeeper: Netty over TLS with the VM's identity
    (the server's certificate checked against its address), and ACLs on every znode Kafka
    creates (its creator, the nodes' identity, may write; sensitive ones only it may read).
    Before a conversion's clients phase: plaintext, anonymous, no ACLs (as before TLS)."""
    if not transport.clients_use_tls:
        return {"zookeeper.set.acl": "false"}
    return {
        "zookeeper.clientCnxnSocket": NETTY_CLIENT,
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.ssl.keystore.location": str(tls.keystore),
        "zookeeper.ssl.keystore.type": "PEM",
        "zookeeper.ssl.truststore.location": str(tls.trust_bundle),
        "zookeeper.ssl.truststore.type": "PEM",
        "zookeeper.ssl.enabled.protocols": TLS_PROTOCOLS,
        "zookeeper.ssl.endpoint.identification.algorithm": "HTTPS",
        "zookeeper.set.acl": "true",
    }


# The spec may not set these: they make the brokers' ZooKeeper client secure.
ZOOKEEPER_CLIENT_SECURITY_KEYS: Final = frozenset(
    broker_zookeeper_client_properties(ZookeeperTlsFiles(PurePath("k"), PurePath("t")))
) | {
    "zookeeper.ssl.protocol",
    "zookeeper.ssl.cipher.suites",
    "zookeeper.ssl.keystore.password",
    "zookeeper.ssl.truststore.password",
    "zookeeper.ssl.crl.enable",
    "zookeeper.ssl.ocsp.enable",
}
