"""Kafka client settings for an identity: the one place every KaaS client takes them from.

`InternalClient` is a role identity of the cluster CA (a VM's kaas-node, the operator's and
the management plane's kaas-admin) on the internal listener (mutual TLS). It gives the same
settings in the forms its readers need: librdkafka's keys (confluent-kafka), kafka-python's
arguments, the Java client's (Kafka's command-line tools through --command-config, Spark's
Kafka source with a "kafka." prefix), each file by path so a renewed certificate needs no
new settings.

`TenantClient` is a tenant's SCRAM user on the tenant listener (SASL_SSL), trusting the
cluster CA given as PEM text, as the tenant's connection details carry it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from planner.contracts.transport_security import DEFAULT_TRANSPORT, TransportSecurity
from planner.pki.authority import PkiError, Role
from planner.pki.files import IdentityFiles
from planner.private_files import write_private

ClientConfig = dict[str, str | int | float | bool]

SSL = "SSL"
PLAINTEXT = "PLAINTEXT"
SASL_SSL = "SASL_SSL"
TENANT_SASL_MECHANISM = "SCRAM-SHA-512"


def properties_text(properties: Mapping[str, str]) -> str:
    """Java properties, one key a line; backslashes doubled so Windows-free paths stay as they
    are and a value can never continue onto the next line."""
    lines = []
    for key, value in properties.items():
        if "\n" in value or "\r" in value:
            raise ValueError(f"{key}: a properties value must be one line")
        lines.append(f"{key}={value.replace(chr(92), chr(92) * 2)}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class InternalClient:
    """A client of the internal listener presenting `identity`'s certificate (of a cluster
    made before TLS, whose clients do not use it yet: its PLAINTEXT listener, anonymous)."""

    bootstrap_servers: str
    identity: IdentityFiles
    transport: TransportSecurity = DEFAULT_TRANSPORT

    def with_servers(self, bootstrap_servers: str) -> InternalClient:
        return replace(self, bootstrap_servers=bootstrap_servers)

    def librdkafka(self, **overrides: str | int | float | bool) -> ClientConfig:
        """confluent-kafka's settings; `overrides` adds or replaces keys (timeouts, acks)."""
        if not self.transport.clients_use_tls:
            return {
                "bootstrap.servers": self.bootstrap_servers,
                "security.protocol": PLAINTEXT,
                **overrides,
            }
        config: ClientConfig = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": SSL,
            "ssl.ca.location": str(self.identity.trust_bundle),
            "ssl.certificate.location": str(self.identity.certificate),
            "ssl.key.location": str(self.identity.key),
            "ssl.endpoint.identification.algorithm": "https",
        }
        config.update(overrides)
        return config

    def kafka_python(self) -> dict[str, object]:
        """kafka-python's keyword arguments (KafkaAdminClient, KafkaConsumer, ...)."""
        if not self.transport.clients_use_tls:
            return {
                "bootstrap_servers": self.bootstrap_servers.split(","),
                "security_protocol": PLAINTEXT,
            }
        return {
            "bootstrap_servers": self.bootstrap_servers.split(","),
            "security_protocol": SSL,
            "ssl_cafile": str(self.identity.trust_bundle),
            "ssl_certfile": str(self.identity.certificate),
            "ssl_keyfile": str(self.identity.key),
            "ssl_check_hostname": True,
        }

    def java(self) -> dict[str, str]:
        """The Java client's settings (PEM stores: no JKS, no store password)."""
        if not self.transport.clients_use_tls:
            return {"bootstrap.servers": self.bootstrap_servers, "security.protocol": PLAINTEXT}
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": SSL,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.identity.keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.identity.trust_bundle),
            "ssl.endpoint.identification.algorithm": "https",
        }

    def java_security(self) -> dict[str, str]:
        """The Java settings without bootstrap.servers: a tool's --command-config, whose
        servers come from --bootstrap-server."""
        return {k: v for k, v in self.java().items() if k != "bootstrap.servers"}

    def spark_options(self) -> dict[str, str]:
        """Spark's Kafka source passes "kafka."-prefixed options to its Java consumer."""
        return {f"kafka.{key}": value for key, value in self.java().items()}

    def write_java_properties(self, path: Path) -> Path:
        """A properties file for Kafka's tools (--command-config), written 0600."""
        write_private(path, properties_text(self.java()))
        return path

    def write_librdkafka_properties(self, path: Path) -> Path:
        """The same connection in librdkafka's keys (kcat -F, confluent-kafka's examples)."""
        write_private(path, properties_text({k: str(v) for k, v in self.librdkafka().items()}))
        return path

    @contextmanager
    def java_properties_file(self) -> Iterator[Path]:
        """A private temporary --command-config file for one tool run, removed afterwards."""
        with tempfile.TemporaryDirectory(prefix="kaas-client-") as directory:
            os.chmod(directory, 0o700)
            yield self.write_java_properties(Path(directory) / "client.properties")

    @contextmanager
    def java_security_file(self, preceding: str = "") -> Iterator[Path]:
        """A private temporary --command-config file without bootstrap.servers, for tools
        that take their servers from an option and refuse a second kind of bootstrap
        (kafka-metadata-quorum's --bootstrap-controller). `preceding`: properties text the
        security settings follow (add-controller reads its controller's own file too)."""
        with tempfile.TemporaryDirectory(prefix="kaas-client-") as directory:
            os.chmod(directory, 0o700)
            path = Path(directory) / "client.properties"
            prefix = preceding if not preceding or preceding.endswith("\n") else preceding + "\n"
            write_private(path, prefix + properties_text(self.java_security()))
            yield path


@dataclass(frozen=True)
class TenantClient:
    """A tenant's SCRAM user on the tenant listener."""

    bootstrap_servers: str
    username: str
    password: str = field(repr=False)  # never in a log line
    ca_pem: str = field(repr=False)  # the cluster CA the brokers' certificates chain to

    def librdkafka(self, **overrides: str | int | float | bool) -> ClientConfig:
        config: ClientConfig = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": SASL_SSL,
            "sasl.mechanism": TENANT_SASL_MECHANISM,
            "sasl.username": self.username,
            "sasl.password": self.password,
            "ssl.ca.pem": self.ca_pem,
            "ssl.endpoint.identification.algorithm": "https",
        }
        config.update(overrides)
        return config


JAVA_PROPERTIES = "admin.properties"
LIBRDKAFKA_PROPERTIES = "admin-librdkafka.properties"


def client_files(identity: IdentityFiles) -> dict[str, str]:
    """What a cluster's record (cluster.json, the API's cluster view) names for clients: the
    CA, the identity's files and its ready-made settings for Java tools and librdkafka."""
    return {
        "directory": str(identity.directory),
        "ca_file": str(identity.trust_bundle),
        "certificate_file": str(identity.certificate),
        "key_file": str(identity.key),
        "keystore_file": str(identity.keystore),
        "java_properties": str(identity.directory / JAVA_PROPERTIES),
        "librdkafka_properties": str(identity.directory / LIBRDKAFKA_PROPERTIES),
    }


def write_client_properties(client: InternalClient) -> None:
    """Both settings files beside the identity, with the client's bootstrap servers."""
    client.write_java_properties(client.identity.directory / JAVA_PROPERTIES)
    client.write_librdkafka_properties(client.identity.directory / LIBRDKAFKA_PROPERTIES)


def admin_client_in(directory: Path, bootstrap_servers: str) -> InternalClient:
    """The admin identity kept in `directory` (a cluster's client folder, as cluster.json
    names it), for the given brokers."""
    identity = IdentityFiles(directory, Role.ADMIN)
    if not identity.exists():
        raise PkiError(
            f"no client identity in {directory}: expected {identity.trust_bundle.name}, "
            f"{identity.key.name}, {identity.certificate.name} and {identity.keystore.name} "
            "(the client folder `kaas up` writes and cluster.json names)"
        )
    return InternalClient(bootstrap_servers, identity)
