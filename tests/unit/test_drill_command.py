"""`kaas drill run`'s refusals that need no running cluster: an unknown drill, and a local
cluster other than the one named. Nothing is started and no cluster is touched."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from management_plane.drills.command import add_arguments, run_command
from management_plane.drills.errors import DrillRefused
from management_plane.local.layout import plan_layout
from management_plane.local.state import ClusterState, write_state

pytestmark = pytest.mark.unit


def drill_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kaas drill")
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The record of a stopped local cluster named `drills`: no process runs."""
    layout = plan_layout("drills", tmp_path / "home", 3, "127.0.9")
    write_state(ClusterState(layout=layout, kafka_version="3.9.2"))
    return layout.home


@pytest.mark.parametrize(
    ("argv", "refusal"),
    [
        (("run", "no-such-drill"), r"unknown drill 'no-such-drill': `kaas drill list` names"),
        (
            ("run", "broker-sigkill", "--cluster", "other"),
            r"drill broker-sigkill refused: the local cluster at .* is 'drills', not 'other'",
        ),
    ],
)
def test_a_refused_drill_names_why_and_touches_nothing(
    home: Path, argv: tuple[str, ...], refusal: str
) -> None:
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    with pytest.raises(DrillRefused, match=refusal):
        run_command(drill_args(*argv), home)
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before
