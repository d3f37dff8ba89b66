"""The agent runs from an environment holding only the `agent` extra, built the way a VM
image gets it: a wheel of the repository, installed by packer/scripts/provision.sh."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from planner.contracts.paths import ClusterPaths
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("agent", "planner", "management_plane", "analytics")
PROJECT_FILES = ("setup.cfg", "pyproject.toml", "README.md")
# What the other planes need and a broker VM must not carry.
OTHER_PLANES_ONLY = ("pyspark", "fastapi", "uvicorn", "boto3", "sqlalchemy", "matplotlib", "pandas")

# Run inside the agent's environment: every agent module imports, and none of them pulls
# in another plane's package or a dependency the agent extra leaves out.
IMPORT_EVERY_AGENT_MODULE = """
import importlib, importlib.util, json, pkgutil, sys
import agent
modules = [m.name for m in pkgutil.walk_packages(agent.__path__, "agent.")]
for name in modules:
    importlib.import_module(name)
print(json.dumps({
    "modules": modules,
    "absent": [n for n in sys.argv[1:] if importlib.util.find_spec(n) is None],
    "loaded": sorted({m.split(".")[0] for m in sys.modules}),
}))
"""


def _artifact_cache() -> Path:
    return Path(os.environ.get("KAAS_CACHE", str(Path.home() / ".cache" / "kaas"))) / "jvm"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def agent_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image root whose opt/kaas/venv holds the kaas wheel with its agent extra only."""
    work = tmp_path_factory.mktemp("agent-extra")
    source = work / "src"
    for package in SOURCES:
        shutil.copytree(
            REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    for name in PROJECT_FILES:
        shutil.copy(REPO / name, source / name)
    built = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
            *("-w", str(work / "dist"), str(source)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (work / "dist").glob("kaas-*.whl")
    root = work / "root"
    provisioned = subprocess.run(
        [
            *(str(REPO / "packer" / "scripts" / "provision.sh"), "--root", str(root)),
            *("--artifacts", str(_artifact_cache()), "--agent-wheel", str(wheel)),
            *("--constraints", str(REPO / "constraints.txt")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=work,  # not the repository: the image's Python must render from what it installed
    )
    assert provisioned.returncode == 0, provisioned.stdout + provisioned.stderr
    # The agent's environment also rendered the image's configuration files.
    assert (root / "etc" / "kaas").is_dir()
    return root


def test_the_agent_environment_has_the_agent_and_nothing_of_the_other_planes(
    agent_image: Path,
) -> None:
    venv = agent_image / "opt" / "kaas" / "venv"
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", IMPORT_EVERY_AGENT_MODULE, *OTHER_PLANES_ONLY],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=agent_image,  # not the repository, whose packages would shadow the installed ones
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert "agent.main" in report["modules"] and "agent.cycle" in report["modules"]
    assert report["absent"] == list(OTHER_PLANES_ONLY)
    assert not {"management_plane", "analytics"} & set(report["loaded"])

    help_text = subprocess.run(
        [str(venv / "bin" / "kaas-agent"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=agent_image,
    )
    assert help_text.returncode == 0, help_text.stderr
    assert "usage: kaas-agent" in help_text.stdout

    # Another plane's command says which extra it lacks.
    for command, extra in (
        (("analytics", "audit", "--help"), "analytics"),
        (("serve",), "service"),
    ):
        refused = subprocess.run(
            [str(venv / "bin" / "kaas"), *command],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=agent_image,
        )
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"kaas: error: this command needs the {extra} extra" in refused.stderr
        assert f"pip install 'kaas[{extra}]'" in refused.stderr


def test_the_agent_from_its_extra_runs_a_cycle_against_real_zookeeper(
    agent_image: Path, zk_hosts: str, kafka_cluster: ClusterHandle, tmp_path: Path
) -> None:
    cluster = f"extra-{uuid.uuid4().hex[:8]}"
    settings = tmp_path / "agent.json"
    settings.write_text(
        json.dumps(
            {
                "cluster": cluster,
                "zookeeper_hosts": zk_hosts,
                "vm_id": "vm-extra",
                "address": "127.0.0.1",
                "zone": "zone-a",
                "data_dir": str(tmp_path / "data"),
                "config_dir": str(tmp_path / "config"),
                "logs_dir": str(tmp_path / "logs"),
                "image_root": str(agent_image),
                "kafka_port": _free_port(),
                "kafka_tenant_port": _free_port(),
                "jolokia_port": _free_port(),
                "tls_dir": str(kafka_cluster.node_identity.directory),
            }
        )
    )
    (tmp_path / "config").mkdir()
    agent = agent_image / "opt" / "kaas" / "venv" / "bin" / "kaas-agent"
    result = subprocess.run(
        [str(agent), "--config", str(settings), "--once"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    # No spec was ever written under this cluster name: the agent says it waits for one.
    assert "broker 0: waiting for a valid cluster spec" in result.stdout, result.stdout
    client = kafka_cluster.zookeeper()
    client.start(timeout=15)
    try:
        claim, _ = client.get(ClusterPaths(cluster).broker_id_claim(0))
        assert json.loads(claim)["vm_id"] == "vm-extra"
        client.delete(ClusterPaths(cluster).root, recursive=True)
    finally:
        client.stop()
        client.close()
