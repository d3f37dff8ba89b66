"""The agent's Admin clients live as long as the agent: librdkafka can crash the process
(SIGSEGV in its main thread, seen in the drills while a broker was down) when a client is
destroyed with a request still in flight, so no call may make one and drop it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from agent.adapters import ConfluentClusterAdmin
from planner.live_layout import LiveLayoutError, read_live_layout
from planner.pki.authority import Role, create_authority, issue
from planner.pki.client_settings import InternalClient
from planner.pki.files import IdentityFiles, write_identity

pytestmark = pytest.mark.unit


def _client(tmp_path: Path) -> InternalClient:
    files = IdentityFiles(tmp_path / "client", Role.ADMIN)
    now = dt.datetime.now(dt.UTC)
    authority = create_authority("orders", now)
    write_identity(files, issue(authority, Role.ADMIN, (), now), authority.certificate_pem)
    return InternalClient("127.0.0.1:1", files)


def test_the_planners_cluster_admin_keeps_one_client(tmp_path: Path) -> None:
    admin = ConfluentClusterAdmin(_client(tmp_path), jolokia_port=8778)
    first = admin._client()
    assert admin._client() is first


class _UnansweredAdmin:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def describe_cluster(self, request_timeout: float) -> object:
        self.calls.append("describe_cluster")
        raise TimeoutError("no broker answered")


def test_the_live_layout_reads_through_the_callers_client(tmp_path: Path) -> None:
    admin = _UnansweredAdmin()
    with pytest.raises(LiveLayoutError, match="unreadable: no broker answered"):
        read_live_layout(_client(tmp_path), admin=admin)  # type: ignore[arg-type]
    assert admin.calls == ["describe_cluster"]
