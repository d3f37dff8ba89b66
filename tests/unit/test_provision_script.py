"""packer/scripts/provision.sh writes the image's configuration files through the renderer
(the same call the Packer build makes with --system), and none without a Python."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.contracts.vm_config.image import image_config_files
from planner.pki.authority import Role, role_distinguished_name

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
JARS = {
    "kafka": "kafka_2.13-3.9.2.jar",
    "kafka-previous": "kafka_2.13-3.8.1.jar",
    "kafka-kraft": "kafka_2.13-4.3.1.jar",
    "mirror": "connect-mirror-3.9.2.jar",
    "mirror-kraft": "connect-mirror-4.3.1.jar",
    "zookeeper": "zookeeper-3.8.4.jar",
    "jolokia": "jolokia-agent-jvm-2.6.0-javaagent.jar",
    "spark-kafka": "spark-sql-kafka-0-10_2.13-4.0.0.jar",
}


def fake_artifacts(folder: Path) -> Path:
    """An artifact cache of one tiny jar per set, with its SHA256SUMS."""
    for artifact_set, jar in JARS.items():
        target = folder / artifact_set
        target.mkdir(parents=True)
        content = f"not really {jar}".encode()
        (target / jar).write_bytes(content)
        (target / "SHA256SUMS").write_text(f"{hashlib.sha256(content).hexdigest()}  {jar}\n")
    return folder


def provision(root: Path, artifacts: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    script = REPO / "packer" / "scripts" / "provision.sh"
    return subprocess.run(
        ["bash", str(script), "--root", str(root), "--artifacts", str(artifacts), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_image_build_writes_the_renderers_files(tmp_path: Path) -> None:
    root = tmp_path / "image"
    root.mkdir()
    done = provision(root, fake_artifacts(tmp_path / "cache"), "--python", sys.executable)
    assert done.returncode == 0, done.stderr
    for path, text in image_config_files(role_distinguished_name(Role.NODE)).items():
        assert (root / path.relative_to("/")).read_text() == text
    manifest = json.loads((root / "opt/kaas/image.json").read_text())
    assert sorted(manifest["kafka_versions"]) == ["3.8.1", "3.9.2", "4.3.1"]
    assert (root / manifest["kafka_versions"]["4.3.1"] / "kafka_2.13-4.3.1.jar").is_file()
    # These jars hold no classes: no server starts, so no archive, and the image is still made.
    assert "class archives not recorded" in done.stderr, done.stderr
    assert not list(root.glob("opt/kaas/**/classes.jsa"))


def test_without_a_python_the_image_build_writes_no_configuration(tmp_path: Path) -> None:
    root = tmp_path / "image"
    root.mkdir()
    done = provision(root, fake_artifacts(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr
    assert not (root / "etc" / "kaas").exists()
    assert (root / "opt/kaas/image.json").exists()
