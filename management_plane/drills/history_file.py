"""Histories on disk: one JSON-lines file per drill (the format is `history.py`'s)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from management_plane.drills.history import (
    History,
    HistoryError,
    HistoryRecord,
    encode_record,
    header_line,
    parse_history,
)


def write_history(path: Path, history: History) -> Path:
    return write_records(path, history.records())


def write_records(path: Path, records: Iterable[HistoryRecord]) -> Path:
    """Write records as a new history file (replacing one that is there)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        handle.write(header_line() + "\n")
        for record in records:
            handle.write(encode_record(record) + "\n")
    return path


def read_history(path: Path) -> History:
    try:
        with path.open(encoding="utf-8") as handle:
            return parse_history(handle)
    except OSError as exc:
        raise HistoryError(f"cannot read history {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise HistoryError(f"history {path} is not UTF-8 text: {exc.reason}") from None
