"""What Kafka says about one broker config: its type, how it may be updated (KIP-226), and
which values it accepts. Pure.

A value is checked the way Kafka's ConfigDef parses it (types and the "Valid Values" of
Kafka's own reference table), so a value Kafka would refuse is refused here, before anything
reaches a broker. For read-only keys this matters most: a bad value there would not be
refused by an API call but would stop the broker from starting after the restart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum


class ConfigType(StrEnum):
    """Kafka's ConfigDef.Type, in the words of Kafka's reference table."""

    BOOLEAN = "boolean"
    STRING = "string"
    INT = "int"
    SHORT = "short"
    LONG = "long"
    DOUBLE = "double"
    LIST = "list"
    CLASS = "class"
    PASSWORD = "password"


class UpdateMode(StrEnum):
    """KIP-226's update modes (the "Update Mode" column of Kafka's broker config table)."""

    READ_ONLY = "read-only"  # needs a broker restart
    PER_BROKER = "per-broker"  # dynamic, only on one broker's resource
    CLUSTER_WIDE = "cluster-wide"  # dynamic, as the cluster-wide default (or per broker)


_INTEGER_BITS = {ConfigType.SHORT: 16, ConfigType.INT: 32, ConfigType.LONG: 64}
# ASCII digits only: Python's \d also matches other scripts' digits, which Java's parser refuses.
_INTEGER = re.compile(r"[+-]?[0-9]+")
# No 64-bit value has more digits; longer ones are refused before int() (which would refuse
# strings past 4300 digits with its own error).
_MAX_INTEGER_DIGITS = 20
# Java's Double.valueOf accepts more (NaN, Infinity, hex, a trailing d): no config wants those.
_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_SHOWN_CHARS = 60
_JAVA_CLASS = re.compile(r"[A-Za-z_$][\w$]*(\.[A-Za-z_$][\w$]*)*")
_RANGE = re.compile(r"\[(-?\d+)?,\.\.\.(?:,(-?\d+))?\](?: or (-?\d+))?")
_CHOICES = re.compile(r"\[([^\[\],]+(?:, [^\[\],]+)*)\]")
_PATCH_VERSION = re.compile(r"(\d+\.\d+)\.\d+")


@dataclass(frozen=True)
class ValidValues:
    """Kafka's "Valid Values" text, parsed into the checks it stands for."""

    text: str
    minimum: int | None = None
    maximum: int | None = None
    also_allowed: int | None = None  # "[1,...,9] or -1"
    choices: tuple[str, ...] = ()
    non_empty: bool = False
    understood: bool = True  # False: Kafka's words are prose; only the type is checked

    @staticmethod
    def parse(text: str) -> ValidValues:
        text = text.strip()
        if text in ("", "non-null string"):  # a properties value is never null
            return ValidValues(text)
        if text in ("non-empty string", "non-empty list"):
            return ValidValues(text, non_empty=True)
        if match := _RANGE.fullmatch(text):
            low, high, extra = (None if g is None else int(g) for g in match.groups())
            return ValidValues(text, minimum=low, maximum=high, also_allowed=extra)
        if match := _CHOICES.fullmatch(text):
            return ValidValues(text, choices=tuple(c.strip() for c in match.group(1).split(",")))
        return ValidValues(text, understood=False)

    @property
    def is_metadata_version_list(self) -> bool:
        return any("-IV" in choice for choice in self.choices)


@dataclass(frozen=True)
class ConfigDefinition:
    name: str
    type: ConfigType
    update_mode: UpdateMode
    valid_values: ValidValues

    @property
    def dynamic(self) -> bool:
        return self.update_mode is not UpdateMode.READ_ONLY

    def problem(self, value: str) -> str | None:
        """Why Kafka would refuse `value` for this config, or None when it is acceptable."""
        shown = f"{self.name}={_abridged(value)}"
        stripped = value.strip()  # ConfigDef trims every value before parsing it
        kind = self.type
        if kind is ConfigType.BOOLEAN:
            if stripped.lower() not in ("true", "false"):
                return f"{shown} is not a boolean (true or false)"
        elif kind in _INTEGER_BITS:
            if not _INTEGER.fullmatch(stripped):
                return f"{shown} is not a whole number ({kind})"
            bits = _INTEGER_BITS[kind]
            if len(stripped.lstrip("+-")) > _MAX_INTEGER_DIGITS:
                return f"{shown} does not fit in a {bits}-bit {kind}"
            if not -(2 ** (bits - 1)) <= int(stripped) < 2 ** (bits - 1):
                return f"{shown} does not fit in a {bits}-bit {kind}"
            return self._range_problem(shown, int(stripped))
        elif kind is ConfigType.DOUBLE:
            if not _DOUBLE.fullmatch(stripped):
                return f"{shown} is not a number (double)"
            return self._range_problem(shown, float(stripped))
        elif kind is ConfigType.CLASS:
            if not _JAVA_CLASS.fullmatch(stripped):
                return f"{shown} is not a Java class name"
        elif kind is ConfigType.LIST:
            items = split_list(stripped)
            if any(item == "" for item in items):
                return f"{shown} has an empty item in its comma-separated list"
            if self.valid_values.non_empty and not items:
                return f"{shown} must not be an empty list"
            unknown = [item for item in items if not self._is_choice(item)]
            if unknown:
                return f"{shown} has {', '.join(map(repr, unknown))}; valid values: {self.valid_values.text}"
            return None
        if self.valid_values.non_empty and not stripped:
            return f"{shown} must not be empty"
        if kind is ConfigType.STRING and not self._is_choice(stripped):
            return f"{shown} is not one of the valid values {self.valid_values.text}"
        return None

    def canonical(self, value: str) -> str:
        """The form the broker itself reports (describe_configs), for a value that has no
        problem: 'TRUE' -> 'true', '+08' -> '8', 'a , b' -> 'a,b'."""
        stripped = value.strip()
        if self.type is ConfigType.BOOLEAN:
            return stripped.lower()
        if self.type in _INTEGER_BITS:
            return str(int(stripped))
        if self.type is ConfigType.LIST:
            return ",".join(split_list(stripped))
        return stripped

    def same_value(self, left: str | None, right: str | None) -> bool:
        """Whether two values mean the same to Kafka (doubles compare as numbers)."""
        if left is None or right is None:
            return left is right
        if self.problem(left) is not None or self.problem(right) is not None:
            return left == right
        if self.type is ConfigType.DOUBLE:
            return math.isclose(float(left), float(right), rel_tol=1e-12, abs_tol=0.0)
        return self.canonical(left) == self.canonical(right)

    def _range_problem(self, shown: str, number: float) -> str | None:
        valid = self.valid_values
        if valid.also_allowed is not None and number == valid.also_allowed:
            return None
        too_low = valid.minimum is not None and number < valid.minimum
        too_high = valid.maximum is not None and number > valid.maximum
        if too_low or too_high:
            return f"{shown} is out of range; valid values: {valid.text}"
        return None

    def _is_choice(self, value: str) -> bool:
        choices = self.valid_values.choices
        if not choices or value in choices:
            return True
        if self.valid_values.is_metadata_version_list:
            # Kafka's MetadataVersion accepts "3.9" (its latest IV) and "3.9.2" (patch ignored).
            short = _PATCH_VERSION.fullmatch(value)
            version = short.group(1) if short else value
            return version in choices or any(c.startswith(f"{version}-IV") for c in choices)
        return False


def _abridged(value: str) -> str:
    """A value as an error message shows it: repr, cut short when long."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"


def split_list(value: str) -> list[str]:
    """A LIST value as Kafka's ConfigDef splits it: commas with optional spaces; '' is []."""
    stripped = value.strip()
    if not stripped:
        return []
    return [item.strip() for item in stripped.split(",")]
