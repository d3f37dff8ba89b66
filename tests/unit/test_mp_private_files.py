"""The service's private files: modes from creation, narrowing of older wide ones, atomic
replacement (real files in the test's folder, under a permissive umask)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from planner.private_files import create_private_file, private_dir, write_private

pytestmark = pytest.mark.unit


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """Umask 0: the modes must come from the code, not from a careful environment."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_a_new_home_is_0700_and_an_older_wide_one_is_narrowed(tmp_path: Path) -> None:
    made = private_dir(tmp_path / "a" / "home")
    assert _mode(made) == 0o700
    wide = tmp_path / "wide"
    wide.mkdir(mode=0o755)
    assert _mode(private_dir(wide)) == 0o700


def test_a_secret_file_is_0600_with_its_content_and_no_temporary_left(tmp_path: Path) -> None:
    path = write_private(tmp_path / "admin-key", "kaas_1_secret\n")
    assert _mode(path) == 0o600 and path.read_text() == "kaas_1_secret\n"
    stale = tmp_path / f".admin-key.{os.getpid()}.tmp"
    stale.write_text("left by a dead process")
    os.chmod(path, 0o644)  # an older file, readable by others: replaced, not reused
    write_private(path, "kaas_2_secret\n")
    assert _mode(path) == 0o600 and path.read_text() == "kaas_2_secret\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["admin-key"]


def test_a_database_file_is_made_0600_and_an_existing_one_is_kept(tmp_path: Path) -> None:
    path = create_private_file(tmp_path / "kaas.db")
    assert _mode(path) == 0o600 and path.read_bytes() == b""
    path.write_bytes(b"rows")
    os.chmod(path, 0o644)
    assert create_private_file(path).read_bytes() == b"rows"
    assert _mode(path) == 0o600
