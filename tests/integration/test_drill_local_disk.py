"""The full-disk fault's filesystem on this host: a log directory moved onto a real
size-limited tmpfs, filled until ENOSPC, moved back as it was left there (what was written
meanwhile, nothing that was deleted there); a mount left by a drill that is gone is found as
stale. No cluster: seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from management_plane.drills import local_disk

pytestmark = pytest.mark.integration


def _log_dir(tmp_path: Path) -> Path:
    data = tmp_path / "vm1" / "data" / "kafka"
    (data / "orders-0").mkdir(parents=True)
    (data / "orders-0" / "00000000000000000000.log").write_bytes(b"x" * 4096)
    (data / "meta.properties").write_text("broker.id=0\n")
    (data / ".kafka_cleanshutdown").touch()  # the broker's clean stop before the drill
    return data


def test_a_log_dir_moves_onto_a_small_tmpfs_fills_and_moves_back(tmp_path: Path) -> None:
    data = _log_dir(tmp_path)
    try:
        size = local_disk.limit(data, 2 << 20, owner_pid=1)
        assert size == (2 << 20) + 4096 + len("broker.id=0\n")
        assert data in local_disk.mounts()
        assert (data / "orders-0" / "00000000000000000000.log").read_bytes() == b"x" * 4096
        (data / "orders-0" / "00000000000000000001.log").write_bytes(b"y" * 1000)
        (data / ".kafka_cleanshutdown").unlink()  # the broker's start, before its halt
        written = local_disk.fill(data)
        assert 0 < written <= size
        with pytest.raises(OSError, match="No space left"):
            (data / "more").write_bytes(b"z" * (1 << 20))
    finally:
        assert local_disk.restore(data)
    assert data not in local_disk.mounts()
    assert not local_disk.saved_dir(data).exists()
    assert (data / "orders-0" / "00000000000000000001.log").read_bytes() == b"y" * 1000
    assert (data / "meta.properties").read_text() == "broker.id=0\n"
    assert not (data / local_disk.BALLAST).exists()
    assert not (data / local_disk.WHOLE).exists()
    assert not (data / ".kafka_cleanshutdown").exists()  # a halted broker recovers its logs
    assert not local_disk.copy_dir(data).exists()
    assert local_disk.restore(data) is False  # nothing more to undo


def test_a_mount_of_a_drill_that_is_gone_is_stale(tmp_path: Path) -> None:
    data = _log_dir(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        local_disk.limit(data, 1 << 20, owner_pid=gone.pid)
        assert local_disk.stale_mounts([data, tmp_path / "other"]) == [data]
    finally:
        local_disk.restore(data)
    assert local_disk.stale_mounts([data]) == []


def test_a_log_dir_on_a_drills_filesystem_already_is_refused(tmp_path: Path) -> None:
    data = _log_dir(tmp_path)
    try:
        local_disk.limit(data, 1 << 20, owner_pid=1)
        with pytest.raises(local_disk.DrillError, match="on a drill's filesystem already"):
            local_disk.limit(data, 1 << 20, owner_pid=1)
    finally:
        local_disk.restore(data)
