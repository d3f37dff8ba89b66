"""The management plane's API as unit tests run it: the real app (`create_app`) on a real
uvicorn server in a thread, on a loopback port, over a database in the test's folder, with
the operations engine paused (requests are validated and stored, never run)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from management_plane.service.api import API_KEY_HEADER, create_app
from management_plane.service.main import ServeSettings, build_service
from management_plane.service.service import Service


@dataclass(frozen=True)
class RunningApi:
    url: str
    key: str
    service: Service

    def call(
        self, method: str, path: str, body: Any = None, key: str | None = "admin", raw: bytes = b""
    ) -> tuple[int, Any]:
        """(status, JSON body or text). `raw`: send these bytes as the JSON body."""
        data = raw or (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if key is not None:
            request.add_header(API_KEY_HEADER, self.key if key == "admin" else key)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text


@contextmanager
def running_api(home: Path) -> Iterator[RunningApi]:
    service, key = build_service(ServeSettings(home=home, run_engine=False))
    assert key is not None
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(service), log_level="warning", access_log=False, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API did not start"
        time.sleep(0.02)
    try:
        yield RunningApi(f"http://127.0.0.1:{port}", key, service)
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()
        service.db.close()
