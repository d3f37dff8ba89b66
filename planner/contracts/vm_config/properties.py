"""The java.util.Properties text format, as Kafka's Utils.loadProps reads it (ISO-8859-1):
one key=value line each, escaped where Properties needs it; and its reader. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

_ESCAPES: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape(text: str, is_key: bool) -> str:
    out = []
    for index, char in enumerate(text):
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif (char == " " and (is_key or index == 0)) or (is_key and char in "=:#!"):
            out.append("\\" + char)
        elif not " " <= char <= "~":
            out.append(f"\\u{ord(char):04x}")  # Properties.load reads the file as ISO-8859-1
        else:
            out.append(char)
    return "".join(out)


def server_properties_text(properties: Mapping[str, str]) -> str:
    """The file text: one key=value line each, escaped where java.util.Properties needs it;
    a plain value is written as it is."""
    return "".join(
        f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}\n"
        for key, value in properties.items()
    )


def parse_server_properties(text: str) -> dict[str, str]:
    """Read a server.properties text (comments, escapes, continuation lines) into a dict."""
    properties: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()  # continuation lines lose their indentation too
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_key_value(logical)
        properties[key] = value
        logical = ""
    if logical:
        key, value = _split_key_value(logical)
        properties[key] = value
    return properties


def _split_key_value(line: str) -> tuple[str, str]:
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def _unescape(text: str) -> str:
    out = []
    index = 0
    named = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            if following == "u" and index + 6 <= len(text):
                out.append(chr(int(text[index + 2 : index + 6], 16)))
                index += 6
                continue
            out.append(named.get(following, following))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)
