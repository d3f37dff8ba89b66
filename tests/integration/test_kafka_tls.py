"""The brokers' listeners on a real cluster: tenants on SASL_SSL with SCRAM, KaaS on mutual
TLS against the cluster CA, and every other way in refused (a wrong password, no TLS, the
wrong listener, no certificate, a certificate of another CA, plaintext); and the security
check that finds them."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, ANYONE_ID_UNSAFE, OPEN_ACL_UNSAFE, Id, Permissions

from management_plane.local.image import find_java, load_image
from management_plane.local.state import require_state
from management_plane.security.probes import negotiate, probe_tls
from management_plane.security.scan import listening_ports
from management_plane.security.verdict import TlsOutcome
from management_plane.security.znode_acls import migrate_kafka_znodes
from management_plane.tenants.kafka import KafkaTenants
from management_plane.tenants.model import PLANS, ConnectionDetails, new_tenant
from management_plane.tenants.quotas import UserQuotaTool
from management_plane.tenants.topics import TopicRequest
from management_plane.workload import (
    consume_group,
    durable_producer,
    produce_keyed,
    verify_per_key_order,
)
from planner.pki.authority import Role, create_authority, issue, role_distinguished_name
from planner.pki.client_settings import ClientConfig, InternalClient
from planner.pki.files import IdentityFiles, write_identity
from planner.zookeeper_client import zookeeper_client
from tests.harness import ClusterHandle, kaas_cli

pytestmark = pytest.mark.integration

REFUSAL_TIMEOUT_S = 8.0
TLS_RECORD_TYPES = (0x15, 0x16)  # alert, handshake


def answers(config: ClientConfig) -> bool:
    """Whether a metadata request with these settings gets an answer."""
    try:
        AdminClient({**config, "log_level": 0}).list_topics(timeout=REFUSAL_TIMEOUT_S)
    except KafkaException:
        return False
    return True


@pytest.fixture(scope="module")
def tenant(kafka_cluster: ClusterHandle) -> Iterator[tuple[KafkaTenants, ConnectionDetails, str]]:
    tenants = KafkaTenants(
        internal=kafka_cluster.admin,
        tenant_bootstrap=kafka_cluster.layout.tenant_bootstrap_servers,
        quotas=UserQuotaTool(
            java=str(find_java()),
            kafka_libs=load_image(verify=False).kafka_libs(),
            kafka=kafka_cluster.admin,
        ),
    )
    acme = new_tenant(f"tls-{uuid.uuid4().hex[:8]}", PLANS["small"])
    details = tenants.create_tenant(acme)
    topic = tenants.create_topic(acme, TopicRequest(f"{acme.prefix}orders", 3)).name
    yield tenants, details, topic
    tenants.delete_tenant(acme)


def test_a_tenant_produces_and_consumes_its_topic_over_sasl_ssl(
    tenant: tuple[KafkaTenants, ConnectionDetails, str],
) -> None:
    _, details, topic = tenant
    config = details.client_config()
    assert config["security.protocol"] == "SASL_SSL"
    assert str(config["ssl.ca.pem"]).startswith("-----BEGIN CERTIFICATE-----")
    produced = produce_keyed(durable_producer(config), topic, messages=500, keys=5)
    assert produced.errors == []
    consumed = consume_group(config, topic, f"{details.topic_prefix}readers", 1, expected=500)
    check = verify_per_key_order(
        {f"key-{i:05d}": 100 for i in range(5)}, consumed.records_by_consumer
    )
    assert check.exactly_once_in_order, check


def test_a_tenant_with_a_wrong_password_is_refused(
    tenant: tuple[KafkaTenants, ConnectionDetails, str],
) -> None:
    _, details, _ = tenant
    assert answers(details.client_config())  # the control: the right password gets in
    assert not answers(details.client_config("not-the-password"))


def test_the_tenant_listener_refuses_a_client_without_tls(
    tenant: tuple[KafkaTenants, ConnectionDetails, str],
) -> None:
    _, details, _ = tenant
    config = details.client_config()
    del config["ssl.ca.pem"], config["ssl.endpoint.identification.algorithm"]
    assert not answers({**config, "security.protocol": "SASL_PLAINTEXT"})


def test_the_internal_listener_refuses_a_tenant_and_a_client_without_a_certificate(
    kafka_cluster: ClusterHandle, tenant: tuple[KafkaTenants, ConnectionDetails, str]
) -> None:
    _, details, _ = tenant
    internal = kafka_cluster.bootstrap_servers
    assert answers(kafka_cluster.client_config())  # the control: the admin certificate
    assert not answers({**details.client_config(), "bootstrap.servers": internal})
    ca = str(kafka_cluster.admin.identity.trust_bundle)
    assert not answers(
        {"bootstrap.servers": internal, "security.protocol": "SSL", "ssl.ca.location": ca}
    )
    assert not answers({"bootstrap.servers": internal, "security.protocol": "PLAINTEXT"})


def test_a_certificate_of_another_ca_is_refused_on_the_internal_listener(
    kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    """The same subject (CN=kaas-admin,O=KaaS) from a CA the cluster does not trust; the
    client trusts the cluster's CA, so only the broker's check can refuse it."""
    now = dt.datetime.now(dt.UTC)
    other = create_authority("impostor", now)
    files = IdentityFiles(tmp_path / "impostor", Role.ADMIN)
    cluster_ca = kafka_cluster.admin.identity.trust_bundle.read_bytes()
    write_identity(files, issue(other, Role.ADMIN, (), now), cluster_ca)
    impostor = InternalClient(kafka_cluster.bootstrap_servers, files)
    assert not answers(impostor.librdkafka())


def test_the_listeners_speak_tls_1_3_and_1_2_and_the_internal_one_wants_a_certificate(
    kafka_cluster: ClusterHandle,
) -> None:
    vm = kafka_cluster.layout.vms[0]
    ca = kafka_cluster.admin.identity.trust_bundle.read_text()
    session = negotiate(vm.address, vm.ports.kafka_tenant, ca)
    assert session.version == "TLSv1.3"
    capped = negotiate(
        vm.address, vm.ports.kafka_tenant, ca, maximum_version=ssl.TLSVersion.TLSv1_2
    )
    assert capped.version == "TLSv1.2"
    assert probe_tls(vm.address, vm.ports.kafka_internal) is (
        TlsOutcome.CLIENT_CERTIFICATE_REQUIRED
    )
    assert probe_tls(vm.address, vm.ports.kafka_tenant) is (
        TlsOutcome.TLS_WITHOUT_CLIENT_CERTIFICATE
    )


def _plaintext_refused(address: str, port: int) -> bool:
    """Bytes in clear (a four-letter word, an HTTP request) get no answer in clear: the
    connection closes, or the reply is a TLS record (an alert)."""
    for request in (b"srvr", b"GET /jolokia/version HTTP/1.0\r\n\r\n"):
        try:
            with socket.create_connection((address, port), timeout=5) as raw:
                raw.sendall(request)
                raw.settimeout(5)
                reply = raw.recv(4096)
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            continue
        if reply and reply[0] not in TLS_RECORD_TYPES:
            return False
    return True


def test_the_security_check_passes_every_port_of_every_vm(kafka_cluster: ClusterHandle) -> None:
    result = kaas_cli(
        "security", "check", "--home", str(kafka_cluster.home), kafka_cluster.layout.name
    )
    print(result.stdout)  # the report, for the run's log
    lines = result.stdout.splitlines()
    for vm in kafka_cluster.layout.vms:
        secured = (
            vm.ports.kafka_internal,
            vm.ports.kafka_tenant,
            vm.ports.zookeeper_client,
            vm.ports.jolokia,
        )
        for port in secured:
            [line] = [line for line in lines if f"{vm.address}:{port} " in line]
            assert " ok: " in line, line
        [jolokia] = [line for line in lines if f"{vm.address}:{vm.ports.jolokia} " in line]
        assert "a request without credentials is refused" in jolokia, jolokia
    # Every port, ZooKeeper's included (it has no plaintext client port), requires TLS and
    # authentication: TLS "yes", authentication "yes", and the check exits 0.
    for line in lines[1:-1]:
        assert " yes  yes   ok: " in line, line
    assert result.returncode == 0, result.stdout + result.stderr
    ports = listening_ports(require_state(kafka_cluster.home))
    assert {p.vm for p in ports} == {vm.name for vm in kafka_cluster.layout.vms}
    # At once: a TLS server may wait for the rest of a record until the read times out.
    with ThreadPoolExecutor(max_workers=len(ports)) as pool:
        answers = pool.map(lambda p: _plaintext_refused(p.address, p.port), ports)
        refused = dict(zip(((p.address, p.port) for p in ports), answers, strict=True))
    assert all(refused.values()), refused
    assert lines[-1].startswith(f"{len(lines) - 2} ports on 3 VMs")


def test_kafka_znodes_an_older_release_left_open_get_kafkas_secure_acls(
    kafka_cluster: ClusterHandle,
) -> None:
    """Kafka's own migration, run as the nodes' identity, on a scratch chroot shaped as a
    converted cluster's: the creator may do everything, the world only reads, and SCRAM
    credentials are the creator's alone."""
    chroot = f"/acl-migration-{uuid.uuid4().hex[:8]}"
    # The nodes' identity: ZooKeeper's super user, which reads the creator-only znodes too.
    admin = zookeeper_client(kafka_cluster.zookeeper_hosts, kafka_cluster.node_identity)
    admin.start(timeout=15)
    operator = kafka_cluster.zookeeper(timeout=10)
    operator.start(timeout=15)
    try:
        for path in ("brokers/ids/0", "config/users/tenant"):
            admin.create(f"{chroot}/{path}", b"{}", acl=OPEN_ACL_UNSAFE, makepath=True)
        migrate_kafka_znodes(
            str(find_java()),
            load_image(verify=False).kafka_libs(),
            f"{kafka_cluster.zookeeper_hosts}{chroot}",
            kafka_cluster.node_identity,
        )
        node = Id("x509", role_distinguished_name(Role.NODE))
        broker_acl = set(admin.get_acls(f"{chroot}/brokers/ids/0")[0])
        assert broker_acl == {ACL(Permissions.ALL, node), ACL(Permissions.READ, ANYONE_ID_UNSAFE)}
        assert set(admin.get_acls(f"{chroot}/config/users/tenant")[0]) == {
            ACL(Permissions.ALL, node)
        }
        operator.get(f"{chroot}/brokers/ids/0")  # the world reads it
        with pytest.raises(NoAuthError):  # the admin identity is not the creator
            operator.get(f"{chroot}/config/users/tenant")
    finally:
        operator.stop()
        operator.close()
        admin.delete(chroot, recursive=True)
        admin.stop()
        admin.close()
