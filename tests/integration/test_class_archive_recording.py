"""A class archive recorded the way the image build does, with a real ZooKeeper server: the
archive is written beside the class folder, and a JVM of that class path maps it (with
-Xshare:on a JVM that cannot use the archive refuses to start)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from management_plane.local.image import load_image
from planner.contracts.vm_config.class_archive import (
    ZOOKEEPER_MAIN,
    class_path_options,
    record_archive,
    zookeeper_recording,
)

pytestmark = pytest.mark.integration


def test_a_recorded_archive_is_mapped_by_the_next_jvm(tmp_path: Path) -> None:
    java = shutil.which("java")
    assert java is not None, "make setup needs a JDK on PATH"
    # A copy: the recording writes beside the class folder, and the shared image stays as is.
    lib = tmp_path / "zookeeper" / "lib"
    shutil.copytree(load_image(verify=False).zookeeper_lib, lib)
    archive = record_archive(java, lib, zookeeper_recording, heap=("-Xmx128m",))
    assert archive == tmp_path / "zookeeper" / "classes.jsa"
    assert archive.stat().st_size > 1_000_000
    options = class_path_options(lib)
    assert options[0] == f"-XX:SharedArchiveFile={archive}"
    mapped = subprocess.run(
        [java, "-Xshare:on", "-Xlog:class+load=info", *options, ZOOKEEPER_MAIN, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # "(top)": the recorded archive, above the JDK's own.
    loaded_from_archive = [
        line for line in mapped.stdout.splitlines() if "source: shared objects file (top)" in line
    ]
    assert any("org.apache.zookeeper" in line for line in loaded_from_archive), mapped.stdout
    assert len(loaded_from_archive) > 50, mapped.stdout[-2000:] + mapped.stderr[-2000:]
