"""The ZooKeeper half of the renderer, the sizing profiles, and the image's configuration
files as the image build writes them (`python -m planner.contracts.vm_config image-files`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from agent.settings import SettingsError, parse_settings
from planner.contracts.vm_config import (
    EnsembleServer,
    SizingError,
    SizingProfile,
    ZookeeperConfigError,
    ZookeeperRole,
    render_kafka_log4j,
    render_zoo_cfg,
    render_zookeeper_dynamic,
    render_zookeeper_logback,
    render_zookeeper_myid,
    sizing_profile,
    voting_roles,
)
from planner.contracts.vm_config.image import image_config_files
from planner.contracts.vm_config.zookeeper_security import ZookeeperSecurity, ZookeeperTlsFiles
from planner.pki.authority import Role, role_distinguished_name

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def server(server_id: int, role: ZookeeperRole = ZookeeperRole.PARTICIPANT) -> EnsembleServer:
    return EnsembleServer(server_id, f"10.0.0.{server_id}", 2888, 3888, 2181, role)


def test_a_server_line_names_its_role_and_client_endpoint() -> None:
    assert server(2).line() == "server.2=10.0.0.2:2888:3888:participant;10.0.0.2:2181"
    assert server(4, ZookeeperRole.OBSERVER).line().endswith(":observer;10.0.0.4:2181")


@pytest.mark.parametrize(
    ("ids", "participants", "observers"),
    [([1], 1, []), ([1, 2], 1, [2]), ([3, 1, 2, 4], 3, [4]), ([1, 2, 3, 4, 5, 6], 5, [6])],
)
def test_the_lowest_ids_vote_and_the_rest_observe(
    ids: list[int], participants: int, observers: list[int]
) -> None:
    roles = voting_roles(ids, participants)
    assert sorted(i for i, role in roles.items() if role is ZookeeperRole.OBSERVER) == observers
    assert sum(role is ZookeeperRole.PARTICIPANT for role in roles.values()) == participants


def test_the_dynamic_file_lists_live_lines_first_then_the_new_servers() -> None:
    live = ["server.1=10.0.0.1:2888:3888:participant;0.0.0.0:2181"]
    assert render_zookeeper_dynamic([server(2)], live) == (f"{live[0]}\n{server(2).line()}\n")
    assert render_zookeeper_dynamic([server(1), server(2)]).splitlines() == [
        server(1).line(),
        server(2).line(),
    ]


@pytest.mark.parametrize(
    ("servers", "live", "says"),
    [
        ([], [], "at least one server"),
        ([server(1), server(1)], [], "server ids repeat"),
        ([server(0)], [], "server id must be 1-255, got 0"),
        ([EnsembleServer(1, "a:b", 2888, 3888, 2181)], [], "'a:b' is not a host"),
        ([EnsembleServer(1, "h", 2888, 2888, 2181)], [], "ports must differ"),
        ([EnsembleServer(1, "h", 0, 3888, 2181)], [], "ports must be 1-65535"),
        ([server(1)], ["tickTime=2000"], "live ensemble lines must be server lines"),
    ],
)
def test_a_bad_ensemble_is_refused_naming_the_problem(
    servers: list[EnsembleServer], live: list[str], says: str
) -> None:
    with pytest.raises(ZookeeperConfigError, match=says):
        render_zookeeper_dynamic(servers, live)


SECURITY = ZookeeperSecurity(
    ZookeeperTlsFiles(PurePosixPath("/t/node.pem"), PurePosixPath("/t/ca.pem")),
    "CN=kaas-node,O=KaaS",
)


def test_zoo_cfg_names_its_paths_and_keeps_reconfig_on() -> None:
    lines = render_zoo_cfg(
        PurePosixPath("/d"), PurePosixPath("/c/zoo.cfg.dynamic"), SECURITY, 2181
    ).splitlines()
    assert "dataDir=/d" in lines
    assert "dynamicConfigFile=/c/zoo.cfg.dynamic" in lines
    assert {"reconfigEnabled=true", "standaloneEnabled=false"} <= set(lines)
    assert not any(line.startswith("clientPort") for line in lines)
    assert render_zookeeper_myid(3) == "3\n"


def test_zoo_cfg_serves_clients_and_peers_over_tls_only() -> None:
    lines = render_zoo_cfg(
        PurePosixPath("/d"), PurePosixPath("/c/dyn"), SECURITY, 2281, "127.0.1.4"
    ).splitlines()
    settings = dict(line.split("=", 1) for line in lines)
    assert settings["secureClientPort"] == "2281"
    assert settings["secureClientPortAddress"] == "127.0.1.4"
    assert settings["serverCnxnFactory"] == "org.apache.zookeeper.server.NettyServerCnxnFactory"
    assert settings["ssl.clientAuth"] == "need"
    assert settings["ssl.authProvider"] == "x509"
    assert settings["sslQuorum"] == "true"
    for prefix in ("ssl", "ssl.quorum"):
        assert settings[f"{prefix}.keyStore.location"] == "/t/node.pem"
        assert settings[f"{prefix}.trustStore.location"] == "/t/ca.pem"
        assert settings[f"{prefix}.keyStore.type"] == settings[f"{prefix}.trustStore.type"] == "PEM"
    assert settings["X509AuthenticationProvider.superUser"] == "CN=kaas-node,O=KaaS"
    # The plaintext port reconfig needs serves no session: every one must present a certificate.
    assert settings["enforce.auth.enabled"] == "true"
    assert settings["enforce.auth.schemes"] == "x509"
    assert "clientPort" not in settings and "clientPortAddress" not in settings
    # The image's identity-free file binds every interface.
    image_lines = render_zoo_cfg(PurePosixPath("/d"), PurePosixPath("/c/dyn"), SECURITY, 2181)
    assert "secureClientPortAddress" not in image_lines


@pytest.mark.parametrize(
    ("port", "super_user", "says"),
    [
        (0, "CN=kaas-node,O=KaaS", "secure client port must be 1-65535, got 0"),
        (2181, " ", "super user must be one distinguished name"),
        (2181, "CN=a\nserverCnxnFactory=x", "super user must be one distinguished name"),
    ],
)
def test_zoo_cfg_refuses_a_bad_port_or_super_user(port: int, super_user: str, says: str) -> None:
    security = ZookeeperSecurity(SECURITY.tls, super_user)
    with pytest.raises(ValueError, match=says):
        render_zoo_cfg(PurePosixPath("/d"), PurePosixPath("/c/dyn"), security, port)


def test_sizing_profiles_are_named_and_an_unknown_one_is_refused() -> None:
    assert sizing_profile("local") is SizingProfile.LOCAL
    with pytest.raises(SizingError, match=r"unknown host sizing 'huge' \(known: local, standard\)"):
        sizing_profile("huge")
    required = {
        "cluster": "c1",
        "zookeeper_hosts": "h:2181",
        "vm_id": "vm1",
        "address": "127.0.0.1",
        "zone": "z",
        "data_dir": "/d",
        "config_dir": "/c",
    }
    assert parse_settings(required).host_sizing is SizingProfile.STANDARD
    with pytest.raises(
        SettingsError, match=r"agent\.json: host_sizing: unknown host sizing 'huge'"
    ):
        parse_settings({**required, "host_sizing": "huge"}, "agent.json")


def test_the_image_files_are_written_by_the_renderer(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "planner.contracts.vm_config", "image-files", "--root", tmp_path],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    expected = {
        "etc/kaas/kafka/log4j.properties": render_kafka_log4j(),
        "etc/kaas/zookeeper/zoo.cfg": render_zoo_cfg(
            PurePosixPath("/var/lib/kaas/zookeeper"),
            PurePosixPath("/etc/kaas/zookeeper/zoo.cfg.dynamic"),
            ZookeeperSecurity(
                ZookeeperTlsFiles(
                    PurePosixPath("/etc/kaas/tls/node.pem"), PurePosixPath("/etc/kaas/tls/ca.pem")
                ),
                role_distinguished_name(Role.NODE),
            ),
            2181,
        ),
        "etc/kaas/zookeeper/logback.xml": render_zookeeper_logback(),
    }
    written = {
        str(path.relative_to(tmp_path)): path.read_text()
        for path in tmp_path.rglob("*")
        if path.is_file()
    }
    assert written == expected
    assert {str(p) for p in image_config_files(role_distinguished_name(Role.NODE))} == {
        "/" + name for name in expected
    }


def test_the_image_files_need_an_existing_root(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "planner.contracts.vm_config",
            "image-files",
            "--root",
            tmp_path / "absent",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 1
    assert "is not a folder" in done.stderr


def test_the_systemd_units_read_the_files_the_image_carries() -> None:
    kafka_unit = (REPO / "systemd" / "kaas-kafka.service").read_text()
    zookeeper_unit = (REPO / "systemd" / "kaas-zookeeper.service").read_text()
    assert "-Dlog4j.configuration=file:/etc/kaas/kafka/log4j.properties" in kafka_unit
    assert "QuorumPeerMain /etc/kaas/zookeeper/zoo.cfg" in zookeeper_unit
    assert "-Dlogback.configurationFile=/etc/kaas/zookeeper/logback.xml" in zookeeper_unit
