"""How much log a VM's Kafka and ZooKeeper may keep: each process's log rolls at
`max_file_mb` and keeps `files` rolled files beside the live one, so it never holds more than
(files + 1) x max_file_mb. Part of the spec (`spec.logs`); absent: the defaults. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.contracts.fields import ContractError

MAX_FILE_MB_RANGE = (1, 10_240)
FILES_RANGE = (1, 100)


@dataclass(frozen=True)
class LogLimits:
    max_file_mb: int = 100
    files: int = 10

    @property
    def bound_bytes(self) -> int:
        """The most one process's log files hold together."""
        return (self.files + 1) * self.max_file_mb * 1024 * 1024

    def to_json(self) -> dict[str, Any]:
        return {"max_file_mb": self.max_file_mb, "files": self.files}


DEFAULT_LOG_LIMITS = LogLimits()


def _bounded(value: dict[str, Any], key: str, bounds: tuple[int, int], what: str) -> int:
    item = value.get(key, getattr(LogLimits(), key))
    low, high = bounds
    if not isinstance(item, int) or isinstance(item, bool) or not low <= item <= high:
        raise ContractError(f"{what}.{key} must be an integer {low}-{high}, got {item!r}")
    return item


def parse_log_limits(value: Any, what: str = "spec.logs") -> LogLimits:
    if not isinstance(value, dict):
        raise ContractError(f"{what} must be an object")
    unknown = set(value) - {"max_file_mb", "files"}
    if unknown:
        raise ContractError(f"{what} has unknown keys: {', '.join(sorted(unknown))}")
    return LogLimits(
        max_file_mb=_bounded(value, "max_file_mb", MAX_FILE_MB_RANGE, what),
        files=_bounded(value, "files", FILES_RANGE, what),
    )
