"""planner.pki.client_settings: one identity's settings for librdkafka, Java tools and Spark,
the files written 0600, and a tenant's SCRAM settings with the CA."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from planner.pki.authority import PkiError, Role
from planner.pki.client_settings import (
    InternalClient,
    TenantClient,
    admin_client_in,
    client_files,
    properties_text,
    write_client_properties,
)
from planner.pki.files import IdentityFiles

pytestmark = pytest.mark.unit

IDENTITY = IdentityFiles(Path("/c/client"), Role.ADMIN)
CLIENT = InternalClient("h1:9092,h2:9092", IDENTITY)


def test_librdkafka_settings_present_the_identitys_certificate() -> None:
    assert CLIENT.librdkafka() == {
        "bootstrap.servers": "h1:9092,h2:9092",
        "security.protocol": "SSL",
        "ssl.ca.location": "/c/client/ca.pem",
        "ssl.certificate.location": "/c/client/admin.crt",
        "ssl.key.location": "/c/client/admin.key",
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert CLIENT.librdkafka(**{"socket.timeout.ms": 5000})["socket.timeout.ms"] == 5000


def test_java_settings_use_pem_stores_without_passwords() -> None:
    java = CLIENT.java()
    assert java["ssl.keystore.type"] == "PEM" and java["ssl.truststore.type"] == "PEM"
    assert java["ssl.keystore.location"] == "/c/client/admin.pem"
    assert java["ssl.truststore.location"] == "/c/client/ca.pem"
    assert not any("password" in key for key in java)
    assert "bootstrap.servers" not in CLIENT.java_security()
    assert CLIENT.spark_options()["kafka.security.protocol"] == "SSL"
    assert CLIENT.spark_options()["kafka.bootstrap.servers"] == "h1:9092,h2:9092"


def test_kafka_python_settings_name_the_same_files() -> None:
    assert CLIENT.kafka_python() == {
        "bootstrap_servers": ["h1:9092", "h2:9092"],
        "security_protocol": "SSL",
        "ssl_cafile": "/c/client/ca.pem",
        "ssl_certfile": "/c/client/admin.crt",
        "ssl_keyfile": "/c/client/admin.key",
        "ssl_check_hostname": True,
    }


def test_with_servers_keeps_the_identity() -> None:
    other = CLIENT.with_servers("h3:9092")
    assert other.identity == IDENTITY and other.librdkafka()["bootstrap.servers"] == "h3:9092"


@pytest.mark.parametrize(
    ("properties", "text"),
    [
        ({"a": "b"}, "a=b\n"),
        ({"path": "C:\\x"}, "path=C:\\\\x\n"),
        ({"a": "1", "b": "2"}, "a=1\nb=2\n"),
    ],
)
def test_properties_text(properties: dict[str, str], text: str) -> None:
    assert properties_text(properties) == text


def test_a_properties_value_on_two_lines_is_refused() -> None:
    with pytest.raises(ValueError, match="one line"):
        properties_text({"a": "b\nc=d"})


def test_settings_files_are_private_and_named_by_client_files(tmp_path: Path) -> None:
    client = InternalClient("h:9092", IdentityFiles(tmp_path, Role.ADMIN))
    write_client_properties(client)
    files = client_files(client.identity)
    java = Path(files["java_properties"])
    librdkafka = Path(files["librdkafka_properties"])
    assert "security.protocol=SSL\n" in java.read_text()
    assert "ssl.keystore.type=PEM\n" in java.read_text()
    assert f"ssl.key.location={tmp_path}/admin.key\n" in librdkafka.read_text()
    for path in (java, librdkafka):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with client.java_properties_file() as temporary:
        assert temporary.read_text() == java.read_text()
        assert stat.S_IMODE(temporary.stat().st_mode) == 0o600
    assert not temporary.exists()


def test_a_missing_identity_is_named(tmp_path: Path) -> None:
    with pytest.raises(PkiError, match=f"no client identity in {tmp_path}"):
        admin_client_in(tmp_path, "h:9092")


def test_a_tenants_settings_carry_scram_and_the_ca() -> None:
    tenant = TenantClient("h:9094", "acme", "pw", "PEM")
    assert tenant.librdkafka() == {
        "bootstrap.servers": "h:9094",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "acme",
        "sasl.password": "pw",
        "ssl.ca.pem": "PEM",
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert "pw" not in repr(tenant)
