"""The dashboard page of `kaas serve`, behind the admin API key. No `from __future__ import
annotations`: FastAPI reads the handlers' annotations.

A browser cannot send the X-API-Key header on a page load, so the page signs in once: the
key is posted to /dashboard/login, checked like any API call, and answered with a session
cookie (random, HttpOnly, Secure, SameSite=Strict, kept in memory for 12 hours: a restart of
the service signs everybody out). The key itself is never stored in the browser. The data
routes take the cookie or the header, so scripts can read them too.
"""

import html
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from importlib.resources import files
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import APIKeyCookie, APIKeyHeader

from management_plane.errors import ApiError
from management_plane.monitoring.dashboard import parse_time_range
from management_plane.monitoring.dashboard_source import DashboardSource
from management_plane.service.auth import Caller, authenticate
from management_plane.service.db import Database

SESSION_COOKIE = "kaas_dashboard"
SESSION_TTL_S = 12 * 3600
MAX_LOGIN_BODY = 4096
# Everything the page loads comes from the service itself; no inline script.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATIC_TYPES = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}


class DashboardSessions:
    """Signed-in browsers: session token -> (the key's name, expiry)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._sessions: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def open(self, name: str) -> str:
        token = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            self._sessions = {t: s for t, s in self._sessions.items() if s[1] > now}
            self._sessions[token] = (name, now + SESSION_TTL_S)
        return token

    def who(self, token: str | None) -> str | None:
        if not token:
            return None
        with self._lock:
            found = self._sessions.get(token)
        if found is None or found[1] <= self.clock():
            return None
        return found[0]

    def close(self, token: str | None) -> None:
        with self._lock:
            self._sessions.pop(token or "", None)


def _asset(name: str) -> str:
    return files("management_plane.monitoring").joinpath(name).read_text()


def login_page(problem: str | None = None) -> str:
    message = f'<p class="problem">{html.escape(problem)}</p>' if problem else ""
    return _asset("dashboard_login.html").replace("<!--problem-->", message)


def add_dashboard_routes(
    app: FastAPI,
    db: Database,
    source: DashboardSource,
    sessions: DashboardSessions,
    errors: dict[int | str, Any],
) -> None:
    header = APIKeyHeader(name="X-API-Key", auto_error=False)
    cookie = APIKeyCookie(name=SESSION_COOKIE, auto_error=False)

    def viewer(
        key: Annotated[str | None, Depends(header)],
        token: Annotated[str | None, Depends(cookie)],
    ) -> str:
        name = sessions.who(token)
        if name is not None:
            return name
        found: Caller | None = authenticate(db, key)
        if found is None:
            raise ApiError(401, "unauthorized", "sign in at /dashboard or send X-API-Key")
        if found.role != "admin":
            raise ApiError(403, "forbidden", "the dashboard needs the admin key")
        return found.name

    Viewer = Annotated[str, Depends(viewer)]

    def page(body: str, status: int = 200) -> HTMLResponse:
        return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)

    @app.get("/dashboard", include_in_schema=False)
    def dashboard(
        token: Annotated[str | None, Depends(cookie)],
    ) -> Response:
        if sessions.who(token) is None:
            return RedirectResponse("/dashboard/login", status_code=303)
        return page(_asset("dashboard.html"))

    @app.get("/dashboard/login", include_in_schema=False)
    def login_form() -> HTMLResponse:
        return page(login_page())

    @app.post("/dashboard/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        body = await request.body()
        if len(body) > MAX_LOGIN_BODY:
            return page(login_page("the form is too large"), 400)
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        key = (form.get("api_key") or [""])[0].strip()
        found = authenticate(db, key)
        if found is None:
            return page(login_page("that is not a valid API key"), 401)
        if found.role != "admin":
            return page(login_page("the dashboard needs the admin key"), 403)
        answer = RedirectResponse("/dashboard", status_code=303)
        answer.set_cookie(
            SESSION_COOKIE,
            sessions.open(found.name),
            max_age=SESSION_TTL_S,
            httponly=True,
            secure=True,
            samesite="strict",
            path="/",
        )
        return answer

    @app.post("/dashboard/logout", include_in_schema=False)
    def logout(token: Annotated[str | None, Depends(cookie)]) -> Response:
        sessions.close(token)
        answer = RedirectResponse("/dashboard/login", status_code=303)
        answer.delete_cookie(SESSION_COOKIE, path="/")
        return answer

    @app.get("/dashboard/static/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        media = STATIC_TYPES.get(name)
        if media is None:
            raise ApiError(404, "not_found", f"no dashboard file {name}")
        return Response(_asset(name), media_type=media, headers=SECURITY_HEADERS)

    @app.get("/v1/dashboard/clusters", responses=errors)
    def dashboard_clusters(_who: Viewer) -> list[str]:
        """The clusters the dashboard can show."""
        return source.cluster_names()

    @app.get("/v1/dashboard/clusters/{name}", responses=errors)
    def dashboard_cluster(name: str, _who: Viewer) -> dict[str, Any]:
        """One cluster as the dashboard shows it: brokers with their state and latest gauges,
        the plan, running operations, alerts, and the charts there are."""
        return source.document(name)

    @app.get("/v1/dashboard/clusters/{name}/charts/{index}", responses=errors)
    def dashboard_chart(
        name: str,
        index: int,
        _who: Viewer,
        time_range: Annotated[str, Query(alias="range", max_length=16)] = "-1h",
    ) -> dict[str, Any]:
        """One chart's series from Graphite over the range (-15min, -1h, -6h, -24h, -7d)."""
        return source.chart(name, index, parse_time_range(time_range))
