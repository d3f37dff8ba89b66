"""Which directory the full-disk fault's restore makes the broker's log directory, from every
state a drill (or one killed on the way) leaves: the tmpfs's content exactly when the whole
directory had been moved onto it (what the broker deleted there, such as the clean-shutdown
marker Kafka removes at startup, must not come back from the copy saved before), the saved
directory when the move never finished. The tmpfs is a fake: a mount table and an unmount
that leaves the empty mount point, as umount does."""

from __future__ import annotations

from pathlib import Path

import pytest

from management_plane.drills import local_disk

pytestmark = pytest.mark.unit

Tree = dict[str, str]

BEFORE: Tree = {  # the log directory the drill saved: a broker stopped cleanly
    ".kafka_cleanshutdown": "",
    "meta.properties": "broker.id=2\n",
    "orders-0/00000000000000000000.log": "0-119",  # 116-119: not replicated, divergent
    "orders-0/00000000000000000120.snapshot": "producers at 120",
}
BROKERS: Tree = {  # the tmpfs as the broker left it: marker gone, tail truncated, then halted
    "meta.properties": "broker.id=2\n",
    "orders-0/00000000000000000000.log": "0-115, 116-130 of epoch 1",
    "orders-0/00000000000000000116.snapshot": "producers at 116",
}
DRILLS = {local_disk.BALLAST: "\0" * 64, local_disk.WHOLE: ""}


def _write(root: Path, tree: Tree) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _read(root: Path) -> Tree:
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


class FakeTmpfs:
    def __init__(self, data_dir: Path, mounted: bool) -> None:
        self.data_dir = data_dir
        self.mounted = mounted
        self.unmounts = 0

    def mounts(self) -> dict[Path, str]:
        return {self.data_dir: "kaas_drill_1"} if self.mounted else {}

    def unmount(self, data_dir: Path) -> None:
        assert self.mounted and data_dir == self.data_dir
        self.mounted = False
        self.unmounts += 1
        for path in sorted(data_dir.rglob("*"), reverse=True):  # the empty mount point
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink()


@pytest.mark.parametrize(
    ("state", "mounted", "tmpfs", "saved", "copy", "expected"),
    [
        # The heal: the broker's directory exactly, nothing of the one saved before.
        ("healed", True, BROKERS | DRILLS, BEFORE, None, BROKERS),
        # A restore interrupted while copying: the partial copy is made again.
        ("copy-interrupted", True, BROKERS | DRILLS, BEFORE, {"meta.properties": ""}, BROKERS),
        # Killed while the directory was being copied onto the tmpfs: the broker never ran
        # on it, the saved directory is the log directory.
        ("move-interrupted", True, {"meta.properties": ""}, BEFORE, None, BEFORE),
        # Killed after the unmount: the copy is whole and is the log directory...
        ("after-unmount", False, {}, BEFORE, BROKERS, BROKERS),
        # ... also once the saved directory is (partly) gone.
        ("saved-dropped", False, {}, None, BROKERS, BROKERS),
        # Killed before the tmpfs was mounted.
        ("before-mount", False, {}, BEFORE, None, BEFORE),
    ],
)
def test_restore_makes_the_brokers_last_directory_the_log_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    state: str,
    mounted: bool,
    tmpfs: Tree,
    saved: Tree | None,
    copy: Tree | None,
    expected: Tree,
) -> None:
    data_dir = tmp_path / "vm3" / "data" / "kafka"
    _write(data_dir, tmpfs)
    if saved is not None:
        _write(local_disk.saved_dir(data_dir), saved)
    if copy is not None:
        _write(local_disk.copy_dir(data_dir), copy)
    fake = FakeTmpfs(data_dir, mounted)
    monkeypatch.setattr(local_disk, "mounts", fake.mounts)
    monkeypatch.setattr(local_disk, "_unmount", fake.unmount)

    assert local_disk.restore(data_dir)

    assert _read(data_dir) == expected, state
    assert fake.unmounts == int(mounted) and not fake.mounted
    assert not local_disk.saved_dir(data_dir).exists()
    assert not local_disk.copy_dir(data_dir).exists()
    assert local_disk.restore(data_dir) is False  # nothing more to undo
    assert _read(data_dir) == expected


def test_a_log_directory_no_drill_moved_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "kafka"
    _write(data_dir, BEFORE)
    fake = FakeTmpfs(data_dir, mounted=False)
    monkeypatch.setattr(local_disk, "mounts", fake.mounts)
    assert local_disk.restore(data_dir) is False
    assert _read(data_dir) == BEFORE
    assert local_disk.stale_mounts([data_dir]) == []


@pytest.mark.parametrize("left", ["saved", "copy"])
def test_a_directory_moved_aside_by_a_drill_that_is_gone_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, left: str
) -> None:
    data_dir = tmp_path / "kafka"
    aside = local_disk.saved_dir(data_dir) if left == "saved" else local_disk.copy_dir(data_dir)
    _write(aside, BEFORE)
    monkeypatch.setattr(local_disk, "mounts", lambda: {})
    assert local_disk.stale_mounts([data_dir]) == [data_dir]
