"""Class-data-sharing archives: which option a JVM of the image gets, and the recording
tool's errors (the recording itself runs a real server: tests/integration)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from planner.contracts.vm_config.__main__ import main
from planner.contracts.vm_config.class_archive import (
    ArchiveError,
    Recording,
    archive_path,
    class_path_options,
    record_archive,
)

pytestmark = pytest.mark.unit


def test_the_archive_lives_beside_the_class_folder() -> None:
    assert archive_path(Path("/opt/kaas/kafka/4.3.1/libs")) == Path(
        "/opt/kaas/kafka/4.3.1/classes.jsa"
    )


def test_a_jvm_names_the_archive_only_when_the_image_has_one(tmp_path: Path) -> None:
    libs = tmp_path / "kafka" / "4.3.1" / "libs"
    libs.mkdir(parents=True)
    assert class_path_options(libs) == ["-cp", f"{libs}/*"]
    (libs.parent / "classes.jsa").write_bytes(b"archive")
    assert class_path_options(str(libs)) == [
        f"-XX:SharedArchiveFile={libs.parent / 'classes.jsa'}",
        "-cp",
        f"{libs}/*",
    ]


@pytest.mark.parametrize(
    "manifest",
    ["not json", json.dumps({"kafka_versions": {}}), json.dumps(["a list"])],
    ids=["not-json", "no-zookeeper-lib", "not-an-object"],
)
def test_a_malformed_manifest_is_named(
    tmp_path: Path, manifest: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "opt" / "kaas" / "image.json"
    path.parent.mkdir(parents=True)
    path.write_text(manifest)
    assert main(["class-archives", "--root", str(tmp_path), "--java", "java"]) == 1
    assert f"cannot read {path}" in capsys.readouterr().err


def test_no_java_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["class-archives", "--root", str(tmp_path), "--java", ""]) == 1
    assert "no java" in capsys.readouterr().err


def test_a_server_that_exits_at_once_is_an_error_and_leaves_no_archive(tmp_path: Path) -> None:
    """A real JVM whose main class does not exist: the error quotes its output."""
    classes = tmp_path / "lib"
    classes.mkdir()
    java = shutil.which("java")
    assert java is not None, "make setup needs a JDK on PATH"
    with pytest.raises(ArchiveError, match=r"exited early.*NoSuchMain"):
        record_archive(java, classes, lambda work: Recording("NoSuchMain", (), 1))
    assert not archive_path(classes).exists()
