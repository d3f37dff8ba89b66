"""The local provider's broker disks, for the disk faults: a log directory deleted while its
broker runs, or moved onto a size-limited tmpfs (mounted when a drill asks, the data copied
onto it) and filled to the last byte. Every function here runs with the VM's broker and agent
stopped, but `destroy` and `fill`.

Moved back, the log directory is the tmpfs's exactly: what the broker deleted there stays
deleted. Merged over the copy made before the move, the clean-shutdown marker Kafka deletes at
startup came back, and a broker the full disk had halted started again skipping the recovery
of its logs: their indexes still as the halt left them, a partition it then had to truncate
could fail to append, its replica out of the ISR until the partition's next leader change.

A tmpfs mounted here is named `kaas_drill_<pid>` after the drill that mounted it, so that a
drill killed outright leaves a mount the next drill recognises and takes down
(`stale_mounts`), as the network rules are.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import psutil

from management_plane.drills.errors import DrillError

SAVED_SUFFIX = ".drill-saved"  # the log directory as the drill found it
COPY_SUFFIX = ".drill-copy"  # the tmpfs's content, whole once the tmpfs is unmounted
BALLAST = "kaas-drill-ballast"
WHOLE = "kaas-drill-whole"  # on the tmpfs once the whole log directory was copied onto it
MOUNT_PREFIX = "kaas_drill_"
CHUNK = 1 << 20


def mount_source(owner_pid: int) -> str:
    return f"{MOUNT_PREFIX}{owner_pid}"


def saved_dir(data_dir: Path) -> Path:
    return data_dir.with_name(data_dir.name + SAVED_SUFFIX)


def copy_dir(data_dir: Path) -> Path:
    return data_dir.with_name(data_dir.name + COPY_SUFFIX)


def mounts() -> dict[Path, str]:
    """Mount point -> source, of every tmpfs a drill mounted."""
    found: dict[Path, str] = {}
    for part in psutil.disk_partitions(all=True):
        if part.device.startswith(MOUNT_PREFIX):
            found[Path(part.mountpoint)] = part.device
    return found


def owner_of(source: str) -> int | None:
    suffix = source.removeprefix(MOUNT_PREFIX)
    return int(suffix) if suffix.isdigit() else None


def destroy(data_dir: Path) -> str:
    """The volume gone from under the running broker: its log directory deleted."""
    if not data_dir.is_dir():
        raise DrillError(f"no log directory at {data_dir}")
    # Moved away first, in one step: the broker keeps writing while the tree is deleted.
    doomed = data_dir.with_name(data_dir.name + ".destroyed")
    os.rename(data_dir, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
    return f"{data_dir} deleted"


def used_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def limit(data_dir: Path, headroom_bytes: int, owner_pid: int) -> int:
    """Move the log directory onto a tmpfs of its size plus `headroom_bytes`; returns the
    filesystem's size."""
    saved = saved_dir(data_dir)
    if saved.exists() or copy_dir(data_dir).exists() or data_dir in mounts():
        raise DrillError(f"{data_dir} is on a drill's filesystem already ({saved} exists)")
    size = used_bytes(data_dir) + headroom_bytes
    data_dir.rename(saved)
    data_dir.mkdir(mode=0o700)
    try:
        options = f"size={size},mode=0700"
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, mount_source(owner_pid), str(data_dir)],
            check=True,
            capture_output=True,
            text=True,
        )
        shutil.copytree(saved, data_dir, dirs_exist_ok=True, symlinks=True)
        (data_dir / WHOLE).touch()
    except (OSError, subprocess.CalledProcessError) as exc:
        restore(data_dir)
        detail = getattr(exc, "stderr", "") or str(exc)
        raise DrillError(f"cannot mount a {size}-byte tmpfs on {data_dir}: {detail}") from None
    return size


def fill(data_dir: Path) -> int:
    """Write a ballast file until the filesystem has no byte left; returns its size."""
    written = 0
    block = b"\0" * CHUNK
    descriptor = os.open(data_dir / BALLAST, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                count = os.write(descriptor, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
            if count == 0:
                break
            written += count
    finally:
        os.close(descriptor)
    return written


def _unmount(data_dir: Path) -> None:
    subprocess.run(["umount", str(data_dir)], check=True, capture_output=True)


def restore(data_dir: Path) -> bool:
    """Back onto the VM's own disk, as the broker left it on the tmpfs (the ballast aside):
    what it wrote there, and nothing it deleted there; the directory as it was before when
    the move onto the tmpfs never finished. False when the directory is not on a drill's
    filesystem. Safe to run again after an interruption: the copy is whole once the tmpfs is
    unmounted, and from then on it, not the directory saved before, is the log directory."""
    saved, copy = saved_dir(data_dir), copy_dir(data_dir)
    if data_dir in mounts():
        if (data_dir / WHOLE).exists():
            if copy.exists():  # an interrupted restore's, maybe partial
                shutil.rmtree(copy)
            drill_files = shutil.ignore_patterns(BALLAST, WHOLE)
            shutil.copytree(data_dir, copy, symlinks=True, ignore=drill_files)
        _unmount(data_dir)
    source = copy if copy.exists() else saved
    if not source.exists():
        return False
    if source == copy and saved.exists():
        shutil.rmtree(saved)
    if data_dir.exists():
        shutil.rmtree(data_dir)
    os.replace(source, data_dir)
    return True


def stale_mounts(data_dirs: list[Path]) -> list[Path]:
    """The log directories among `data_dirs` left on the filesystem of a drill that no longer
    runs (or moved aside by one)."""
    current = mounts()
    stale = []
    for data_dir in data_dirs:
        source = current.get(data_dir)
        if source is not None:
            owner = owner_of(source)
            if owner is None or not psutil.pid_exists(owner):
                stale.append(data_dir)
        elif saved_dir(data_dir).exists() or copy_dir(data_dir).exists():
            stale.append(data_dir)
    return stale
