"""Reading one JSON value that crossed ZooKeeper: the checks every contract parser shares.

Each check names the field it refuses (`member.broker_id must be ...`), so a refusal in a
log or a sentence says which writer to look at.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from enum import Enum
from typing import Any, TypeVar

from planner.errors import PlannerError

E = TypeVar("E", bound=Enum)


class ContractError(PlannerError, ValueError):
    """A value crossing ZooKeeper that must not be used; the message names the field."""


def load_object(raw: bytes | str, what: str) -> dict[str, Any]:
    """The JSON object in `raw`, or ContractError saying why it is none."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContractError(f"{what} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ContractError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def schema_version(value: Mapping[str, Any], what: str, readable: Collection[int]) -> int:
    """The value's schema version, refused unless this reader knows it."""
    version = value.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ContractError(f"{what}.schema_version must be an integer, got {version!r}")
    if version not in readable:
        newest = max(readable)
        age = "newer" if version > newest else "older"
        raise ContractError(
            f"{what}.schema_version is {version}, {age} than this reader knows "
            f"(it reads {', '.join(map(str, sorted(readable)))})"
        )
    return version


def dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _is_int(item: Any) -> bool:
    return isinstance(item, int) and not isinstance(item, bool)


def _present(value: Mapping[str, Any], key: str, what: str) -> Any:
    if key not in value:
        raise ContractError(f"{what}.{key} is missing")
    return value[key]


def integer(value: Mapping[str, Any], key: str, what: str, minimum: int | None = None) -> int:
    item = _present(value, key, what)
    if not _is_int(item):
        raise ContractError(f"{what}.{key} must be an integer, got {item!r}")
    if minimum is not None and item < minimum:
        raise ContractError(f"{what}.{key} must be at least {minimum}, got {item}")
    return int(item)


def text(value: Mapping[str, Any], key: str, what: str, allow_empty: bool = False) -> str:
    item = _present(value, key, what)
    if not isinstance(item, str):
        raise ContractError(f"{what}.{key} must be a string, got {type(item).__name__}")
    if not item and not allow_empty:
        raise ContractError(f"{what}.{key} must not be empty")
    return item


def boolean(value: Mapping[str, Any], key: str, what: str) -> bool:
    item = _present(value, key, what)
    if not isinstance(item, bool):
        raise ContractError(f"{what}.{key} must be true or false, got {item!r}")
    return item


def choice(value: Mapping[str, Any], key: str, what: str, kind: type[E]) -> E:
    item = _present(value, key, what)
    try:
        return kind(item)
    except ValueError:
        allowed = ", ".join(str(member.value) for member in kind)
        raise ContractError(f"{what}.{key} must be one of {allowed}; got {item!r}") from None
