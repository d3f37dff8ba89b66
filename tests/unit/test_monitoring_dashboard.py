"""The dashboard: its pure content (broker rows, totals, chart series, the time range) and
its routes on the real app (sign-in, the session cookie, refusals), without a cluster."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from management_plane.errors import ApiError
from management_plane.monitoring.dashboard import (
    BROKER_GAUGES,
    BrokerVm,
    TimeRange,
    broker_rows,
    chart_panel,
    chart_series,
    gauge_target,
    panel_targets,
    parse_time_range,
    totals,
)
from management_plane.monitoring.dashboard_routes import SESSION_COOKIE, DashboardSessions
from management_plane.monitoring.grafana import PANELS
from planner.contracts.member import MemberRecord, MemberRole, MemberState
from tests.unit.api_server import running_api

pytestmark = pytest.mark.unit


def _member(broker_id: int, state: MemberState) -> MemberRecord:
    return MemberRecord(
        broker_id=broker_id,
        vm_id=f"c/vm{broker_id + 1}",
        address=f"127.0.1.{broker_id + 1}",
        jolokia_url="https://x:8778/jolokia",
        agent_version="1",
        state=state,
        sentence=f"broker {broker_id}: {state.value}",
        registered=state is MemberState.HEALTHY,
        spec_generation=1,
        pending_restart=False,
        role=MemberRole.MEMBER,
        updated_at_ms=0,
    )


VMS = [
    BrokerVm("c/vm1", "127.0.1.1", 0, "running"),
    BrokerVm("c/vm2", "127.0.1.2", 1, "running"),
    BrokerVm("c/vm3", "127.0.1.3", None, "creating"),
]


@pytest.mark.parametrize(
    ("members", "latest", "expected"),
    [
        # no agent anywhere, no data: every VM listed, every figure unknown
        (
            {},
            {},
            [
                (0, "no agent", None, None),
                (1, "no agent", None, None),
                (None, "no agent", None, None),
            ],
        ),
        # agents and gauges joined by broker id
        (
            {0: _member(0, MemberState.HEALTHY), 1: _member(1, MemberState.RESTARTING)},
            {"under_replicated": {"0": 0.0, "1": 4.0}, "partitions": {"0": 10.0}},
            [
                (0, "healthy", 0.0, 10.0),
                (1, "restarting", 4.0, None),
                (None, "no agent", None, None),
            ],
        ),
        # a member whose VM the service does not list still gets a row
        (
            {7: _member(7, MemberState.HEALTHY)},
            {"under_replicated": {"7": 1.0}},
            [
                (0, "no agent", None, None),
                (1, "no agent", None, None),
                (7, "healthy", 1.0, None),
                (None, "no agent", None, None),
            ],
        ),
    ],
)
def test_broker_rows_join_vms_members_and_gauges(
    members: dict[int, MemberRecord],
    latest: dict[str, dict[str, float | None]],
    expected: list[tuple[int | None, str, float | None, float | None]],
) -> None:
    rows = broker_rows(VMS, members, latest)
    assert [
        (r["broker_id"], r["state"], r["under_replicated"], r["partitions"]) for r in rows
    ] == expected
    assert all(g.key in rows[0] for g in BROKER_GAUGES)


def test_totals_sum_what_was_reported_and_say_unknown_otherwise() -> None:
    assert totals(
        [{"under_replicated": 2.0, "offline": None}, {"under_replicated": 1.0, "offline": None}]
    ) == {
        "under_replicated": 3.0,
        "offline": None,
    }


def test_time_range_is_one_of_the_list() -> None:
    assert parse_time_range("-6h") is TimeRange.HOUR_6
    with pytest.raises(ApiError, match=r"range must be one of -15min, -1h.*got '-1y'"):
        parse_time_range("-1y")


def test_chart_series_drop_nulls_and_keep_time_order() -> None:
    raw: dict[str, list[tuple[float | None, float]]] = {
        "1": [(None, 10.0), (3.0, 20.0)],
        "0": [(1.0, 10.0), (2.0, 20.0)],
    }
    assert chart_series(raw) == [
        {"name": "0", "points": [[10.0, 1.0], [20.0, 2.0]]},
        {"name": "1", "points": [[20.0, 3.0]]},
    ]


def test_chart_targets_name_the_clusters_segment_and_unknown_charts_are_404() -> None:
    targets = panel_targets("my.cluster", chart_panel(0))
    assert targets == ["aliasByNode(kaas.my_cluster.brokers.*.under_replicated_partitions, 3)"]
    with pytest.raises(ApiError) as refused:
        chart_panel(len(PANELS))
    assert refused.value.status == 404
    assert gauge_target("c", BROKER_GAUGES[0]) == (
        "aliasByNode(kaas.c.brokers.*.under_replicated_partitions, 3)"
    )


def test_sessions_expire() -> None:
    now = [1000.0]
    sessions = DashboardSessions(clock=lambda: now[0])
    token = sessions.open("admin")
    assert sessions.who(token) == "admin"
    assert sessions.who("forged") is None
    now[0] += 13 * 3600
    assert sessions.who(token) is None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _fetch(
    url: str, data: bytes | None = None, cookie: str | None = None
) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if cookie:
        request.add_header("Cookie", f"{SESSION_COOKIE}={cookie}")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def test_dashboard_needs_the_admin_key_and_signs_in_with_a_session_cookie(tmp_path: Path) -> None:
    with running_api(tmp_path) as api:
        status, headers, _ = _fetch(f"{api.url}/dashboard")
        assert (status, headers["location"]) == (303, "/dashboard/login")
        status, _, body = _fetch(f"{api.url}/dashboard/login", data=b"api_key=kaas_nope_nope")
        assert status == 401 and "not a valid API key" in body
        status, _, body = _fetch(f"{api.url}/dashboard/login", data=b"x" * 5000)
        assert status == 400

        status, headers, _ = _fetch(
            f"{api.url}/dashboard/login", data=f"api_key={api.key}".encode()
        )
        assert status == 303 and headers["location"] == "/dashboard"
        cookie = headers["set-cookie"]
        assert api.key not in cookie
        for attribute in ("HttpOnly", "Secure", "SameSite=strict"):
            assert attribute.lower() in cookie.lower()
        token = cookie.split(";")[0].split("=", 1)[1]

        status, headers, body = _fetch(f"{api.url}/dashboard", cookie=token)
        assert status == 200 and 'id="brokers"' in body
        assert "default-src 'self'" in headers["content-security-policy"]
        assert _fetch(f"{api.url}/dashboard/static/dashboard.js")[0] == 200
        assert _fetch(f"{api.url}/dashboard/static/other.py")[0] == 404

        assert _fetch(f"{api.url}/v1/dashboard/clusters")[0] == 401
        assert _fetch(f"{api.url}/v1/dashboard/clusters", cookie="forged")[0] == 401
        status, _, body = _fetch(f"{api.url}/v1/dashboard/clusters", cookie=token)
        assert (status, body) == (200, "[]")
        assert api.call("GET", "/v1/dashboard/clusters") == (200, [])
        status, body = api.call("GET", "/v1/dashboard/clusters/nosuch")
        assert status == 404 and "nosuch" in body["message"]
        status, body = api.call("GET", "/v1/dashboard/clusters/nosuch/charts/0?range=-1y")
        assert status == 400 and "range must be one of" in body["message"]

        status, _, _ = _fetch(f"{api.url}/dashboard/logout", data=b"", cookie=token)
        assert status == 303
        assert _fetch(f"{api.url}/v1/dashboard/clusters", cookie=token)[0] == 401
