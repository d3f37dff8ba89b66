"""Private files: folders 0700, and secret files 0600 from the moment they exist (created
with that mode, never widened then narrowed, so no other user can open one in between).
Shared by the service, the local provider and the agent (its keys)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Make `path` (and missing parents) with mode 0700; an existing one made by an older
    version with a wider mode is narrowed to 0700."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) & ~PRIVATE_DIR_MODE:
        path.chmod(PRIVATE_DIR_MODE)
    return path


def create_private_file(path: Path) -> Path:
    """Create `path` empty with mode 0600 unless it exists (e.g. a SQLite database file
    before SQLite opens it: SQLite gives its -wal and -shm files the database's mode)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
    if stat.S_IMODE(path.stat().st_mode) & ~PRIVATE_FILE_MODE:
        path.chmod(PRIVATE_FILE_MODE)  # made by an older version
    return path


def write_private(path: Path, text: str | bytes) -> Path:
    """Write `text` to `path` atomically, mode 0600: a new file of its own mode, then renamed
    over `path`, so a reader sees the old content or the new, never a part."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)  # left by a process of the same id that died
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(descriptor, "wb" if isinstance(text, bytes) else "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path
