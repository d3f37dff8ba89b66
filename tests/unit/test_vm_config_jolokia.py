"""The Jolokia agent's rendered configuration (planner/contracts/vm_config/jolokia.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from agent.broker_config.rendering import jolokia_files
from agent.settings import parse_settings
from agent.supervisor import LocalProcessSupervisor
from management_plane.local import kraft
from management_plane.local import render as local_render
from management_plane.local.layout import plan_layout
from planner.contracts.vm_config.jolokia import (
    ALLOWED_COMMANDS,
    JOLOKIA_POLICY,
    JOLOKIA_PROPERTIES,
    JolokiaTls,
    jolokia_agent_option,
    render_jolokia_access_policy,
    render_jolokia_properties,
)

pytestmark = pytest.mark.unit

TLS = JolokiaTls(
    PurePosixPath("/t/ca.pem"), PurePosixPath("/t/node.crt"), PurePosixPath("/t/node.key")
)


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_jolokia_serves_https_to_the_nodes_certificate_only() -> None:
    settings = _properties(
        render_jolokia_properties(
            "10.0.0.3", 8778, TLS, PurePosixPath("/c/jolokia-access.xml"), "CN=kaas-node,O=KaaS"
        )
    )
    assert settings["protocol"] == "https"
    assert settings["useSslClientAuthentication"] == "true"
    assert (settings["caCert"], settings["serverCert"], settings["serverKey"]) == (
        "/t/ca.pem",
        "/t/node.crt",
        "/t/node.key",
    )
    assert settings["clientPrincipal"] == "CN=kaas-node,O=KaaS"
    assert settings["policyLocation"] == "file:///c/jolokia-access.xml"
    assert (settings["host"], settings["port"]) == ("10.0.0.3", "8778")


@pytest.mark.parametrize(
    ("port", "principal", "says"),
    [(0, "CN=a", "port must be 1-65535"), (8778, "CN=a\nprotocol=http", "single non-empty")],
)
def test_bad_jolokia_settings_are_refused(port: int, principal: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        render_jolokia_properties("h", port, TLS, PurePosixPath("/p"), principal)


def test_the_policy_allows_reads_only() -> None:
    root = ET.fromstring(render_jolokia_access_policy())
    commands = [c.text for c in root.iter("command")]
    assert commands == list(ALLOWED_COMMANDS)
    assert not {"write", "exec", "notification"} & set(commands)


def test_the_agent_and_kaas_up_write_the_same_jolokia_files_and_the_jvm_reads_them(
    tmp_path: Path,
) -> None:
    layout = plan_layout("c1", tmp_path, 3)
    vm = layout.vms[1]
    settings = parse_settings(local_render.agent_settings(layout, vm, "/image", "java"))
    assert jolokia_files(settings) == local_render.jolokia_files(vm)
    assert set(local_render.config_files(layout, vm, "3.9.2")) >= {
        JOLOKIA_PROPERTIES,
        JOLOKIA_POLICY,
    }
    option = jolokia_agent_option(PurePosixPath("/img/jolokia.jar"), vm.config_dir)
    assert option == f"-javaagent:/img/jolokia.jar=config={vm.config_dir / JOLOKIA_PROPERTIES}"
    image = Path(__file__).resolve().parents[2] / "build" / "image"
    with_image = replace(settings, image_root=image)
    command = LocalProcessSupervisor(with_image).command("3.9.2")
    assert any(arg.endswith(f"=config={vm.config_dir / JOLOKIA_PROPERTIES}") for arg in command)
    assert settings.jolokia_url == f"https://{vm.address}:{vm.ports.jolokia}/jolokia/"
    assert settings.controller_jolokia_url is None  # a ZooKeeper-mode VM runs no controller
    # A KRaft controller VM: both write the controller's own Jolokia file too.
    kraft_settings = parse_settings(
        local_render.agent_settings(
            layout, vm, "/image", "java", kraft.bootstrap_endpoints(layout), runs_controller=True
        )
    )
    assert jolokia_files(kraft_settings) == local_render.jolokia_files(vm, controller=True)
    assert kraft_settings.controller_jolokia_url == (
        f"https://{vm.address}:{vm.ports.controller_jolokia}/jolokia/"
    )
