"""The Jolokia JVM agent's configuration, rendered beside the broker's: HTTPS with client
certificates required, only the nodes' identity accepted (the agents; a restart reads every
member's broker), and an access policy that allows reading and nothing else. Pure.

The agent's options go in a properties file (`-javaagent:jolokia.jar=config=FILE`) rather
than on the command line: a distinguished name holds commas, the command line's separator.
Key and certificates are the VM identity's PEM files (planner.pki.files), which Jolokia reads
directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Final

from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity

JOLOKIA_PROPERTIES: Final = "jolokia.properties"
CONTROLLER_JOLOKIA_PROPERTIES: Final = "jolokia-controller.properties"
"""A KRaft controller's own Jolokia (its own port): the controller-only MBeans
(ActiveControllerCount, OfflinePartitionsCount) live in the controller process, not the
broker."""
JOLOKIA_POLICY: Final = "jolokia-access.xml"
# Reads only: no write of an attribute, no exec of an operation, no notification set-up.
ALLOWED_COMMANDS: Final = ("read", "list", "search", "version")


@dataclass(frozen=True)
class JolokiaTls:
    trust_bundle: PurePath  # the CA certificates a client's certificate must chain to
    certificate: PurePath  # the server's, the VM identity's
    key: PurePath


def jolokia_agent_option(
    agent_jar: PurePath, config_dir: PurePath, properties: str = JOLOKIA_PROPERTIES
) -> str:
    """The JVM option that attaches Jolokia with the rendered properties file (the broker's,
    or CONTROLLER_JOLOKIA_PROPERTIES for a KRaft controller)."""
    return f"-javaagent:{agent_jar}=config={config_dir / properties}"


def render_jolokia_properties(
    address: str,
    port: int,
    tls: JolokiaTls,
    policy_file: PurePath,
    client_principal: str,
    transport: TransportSecurity = DEFAULT_TRANSPORT,
) -> str:
    """HTTPS with client certificates, or, on a pre-TLS cluster until its conversion moves
    the agents to TLS, plain HTTP (as such clusters ran); read-only by policy either way."""
    if not 0 < port < 65536:
        raise ValueError(f"Jolokia port must be 1-65535, got {port}")
    values = (address, client_principal, *map(str, (tls.trust_bundle, tls.certificate)))
    if any("\n" in value or not value.strip() for value in values):
        raise ValueError(f"Jolokia settings must be single non-empty lines: {values}")
    if not transport.clients_use_tls:
        return "\n".join(
            [
                f"host={address}",
                f"port={port}",
                "discoveryEnabled=false",
                "protocol=http",
                f"policyLocation=file://{policy_file}",
                "",
            ]
        )
    return "\n".join(
        [
            f"host={address}",
            f"port={port}",
            "discoveryEnabled=false",
            "protocol=https",
            "useSslClientAuthentication=true",
            f"caCert={tls.trust_bundle}",
            f"serverCert={tls.certificate}",
            f"serverKey={tls.key}",
            "serverKeyAlgorithm=RSA",
            f"clientPrincipal={client_principal}",
            f"policyLocation=file://{policy_file}",
            "",
        ]
    )


def render_jolokia_access_policy() -> str:
    commands = "".join(f"    <command>{c}</command>\n" for c in ALLOWED_COMMANDS)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        "<!-- Read-only: a command not listed (write, exec, notification) is refused. -->\n"
        "<restrict>\n"
        "  <commands>\n"
        f"{commands}"
        "  </commands>\n"
        "</restrict>\n"
    )
