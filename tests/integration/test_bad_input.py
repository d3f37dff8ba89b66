"""Bad input to `kaas up`: one clear line, a non-zero exit, and nothing left half-started."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from management_plane.local.image import image_dir_from_env
from management_plane.local.probes import port_open
from tests.harness import SCRATCH_BASE, kaas_cli

pytestmark = pytest.mark.integration


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def _nothing_listening(base: str, nodes: int = 3) -> bool:
    return not any(
        port_open(f"{base}.{i}", port, timeout=0.2)
        for i in range(1, nodes + 1)
        for port in (2181, 9092, 8778)
    )


def test_zero_nodes(tmp_path: Path) -> None:
    result = kaas_cli("up", "--nodes", "0", "--home", str(tmp_path / "c"))
    assert result.returncode == 1
    assert _last_line(result.stderr) == "kaas: error: --nodes must be at least 1, got 0"
    assert not (tmp_path / "c" / "cluster.json").exists()


@pytest.fixture
def taken_port() -> Iterator[tuple[str, int]]:
    address = f"{SCRATCH_BASE}.2"
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind((address, 9092))
    holder.listen()
    try:
        yield address, 9092
    finally:
        holder.close()


def test_address_already_taken(tmp_path: Path, taken_port: tuple[str, int]) -> None:
    result = kaas_cli(
        "up", "--nodes", "3", "--address-base", SCRATCH_BASE, "--home", str(tmp_path / "c")
    )
    assert result.returncode == 1
    assert _last_line(result.stderr).startswith(
        f"kaas: error: address {SCRATCH_BASE}.2:9092 (kafka_internal of vm2) is already in use"
    )
    # Nothing of ours was started: only the test's own socket listens.
    assert not port_open(f"{SCRATCH_BASE}.1", 2181, timeout=0.2)
    assert not port_open(f"{SCRATCH_BASE}.1", 9092, timeout=0.2)


def test_no_java_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = dict(os.environ, PATH=str(bin_dir))
    result = kaas_cli(
        "up", "--nodes", "3", "--address-base", SCRATCH_BASE, "--home", str(tmp_path / "c"), env=env
    )
    assert result.returncode == 1
    assert _last_line(result.stderr).startswith(
        "kaas: error: java not found on PATH: install a Java 17+ runtime"
    )
    assert _nothing_listening(SCRATCH_BASE)


def test_corrupt_artifact_in_the_image(tmp_path: Path) -> None:
    image = tmp_path / "image"
    # A real copy, not hard links: the test must not damage the shared artifact cache.
    shutil.copytree(image_dir_from_env(), image, copy_function=shutil.copy)
    victim = next((image / "opt/kaas/kafka").glob("3.9.*/libs/kafka-clients-*.jar"))
    with victim.open("r+b") as jar:
        jar.seek(1000)
        jar.write(b"\x00corrupt\x00")
    env = dict(os.environ, KAAS_IMAGE=str(image))
    result = kaas_cli(
        "up", "--nodes", "3", "--address-base", SCRATCH_BASE, "--home", str(tmp_path / "c"), env=env
    )
    assert result.returncode == 1
    assert _last_line(result.stderr) == (
        f"kaas: error: image artifact {victim.resolve()} is corrupt (sha256 mismatch): "
        "run `make setup` to fetch it again"
    )
    assert _nothing_listening(SCRATCH_BASE)


def test_unknown_command_line_value_is_rejected(tmp_path: Path) -> None:
    result = kaas_cli("vm", "explode", "vm1", "--home", str(tmp_path))
    assert result.returncode == 2
    assert "invalid choice: 'explode'" in result.stderr


def test_vm_command_without_a_cluster(tmp_path: Path) -> None:
    result = kaas_cli("vm", "stop", "vm1", "--home", str(tmp_path / "none"))
    assert result.returncode == 1
    assert _last_line(result.stderr).startswith(
        f"kaas: error: no local cluster at {tmp_path / 'none'}"
    )
    assert sys.executable  # the CLI ran under this interpreter
