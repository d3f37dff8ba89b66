"""The install extras in setup.cfg: one per plane, `all` their union, every pin exact and
the same as constraints.txt."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest

from management_plane.cli import EXTRA_OF_PACKAGE, missing_extra_message

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==(\S+)$")
PLANE_EXTRAS = ("agent", "service", "analytics")


def _lines(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip()]


def _setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    return parser


def _extras() -> dict[str, list[str]]:
    section = _setup_cfg()["options.extras_require"]
    return {name: _lines(section[name]) for name in section}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_normal(name)] = version.strip()
    return pins


def _all_requirements() -> list[str]:
    base = _lines(_setup_cfg()["options"]["install_requires"])
    return base + [req for reqs in _extras().values() for req in reqs]


def test_all_is_exactly_the_union_of_the_plane_extras() -> None:
    extras = _extras()
    assert set(PLANE_EXTRAS) <= set(extras)
    union = {req for name in PLANE_EXTRAS for req in extras[name]}
    assert sorted(set(extras["all"])) == sorted(union)


@pytest.mark.parametrize("requirement", _all_requirements())
def test_every_requirement_is_an_exact_pin_matching_constraints(requirement: str) -> None:
    match = PIN.match(requirement)
    assert match is not None, f"{requirement!r} is not pinned with =="
    name, _, version = match.groups()
    assert _constraints().get(_normal(name)) == version, f"{requirement} differs from constraints"


def test_a_broker_vm_gets_neither_spark_nor_the_web_stack() -> None:
    base = _lines(_setup_cfg()["options"]["install_requires"])
    agent = {_normal(PIN.match(req).group(1)) for req in base + _extras()["agent"]}  # type: ignore[union-attr]
    assert not agent & {"pyspark", "fastapi", "uvicorn", "boto3", "sqlalchemy", "matplotlib"}


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("pyspark.sql", "analytics"),
        ("fastapi", "service"),
        ("boto3", "service"),
        ("statsd", "agent"),
    ],
)
def test_a_command_missing_its_extra_names_the_extra(module: str, extra: str) -> None:
    assert missing_extra_message(module) == (
        f"this command needs the {extra} extra, which is not installed (no module "
        f"{module!r}): pip install 'kaas[{extra}]'"
    )


@pytest.mark.parametrize("module", ["no_such_module", None, "kazoo"])
def test_other_missing_modules_are_not_blamed_on_an_extra(module: str | None) -> None:
    assert missing_extra_message(module) is None


def test_every_package_mapped_to_an_extra_is_in_that_extra() -> None:
    extras = _extras()
    import_names = {"sqlalchemy": "SQLAlchemy", "botocore": "boto3", "starlette": "fastapi"}
    import_names |= {"pydantic": "fastapi"}
    for module, extra in EXTRA_OF_PACKAGE.items():
        requirement = import_names.get(module, module)
        names = {_normal(PIN.match(req).group(1)) for req in extras[extra]}  # type: ignore[union-attr]
        assert _normal(requirement) in names, (module, extra)
