"""The one HTTP call of a collect: a Jolokia bulk read (a POST of a JSON list of requests).

Jolokia's JSON protocol directly, with the standard library, and not the `jolokia` PyPI
client (0.4.0): that client sends requests without a timeout, so a broker JVM that accepts
connections but does not answer (SIGSTOP, a long GC pause, a deadlock) blocks the caller
forever, and its bulk read covers several attributes of one MBean only, not a list of
MBeans. See docs/agent-metrics.md.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from agent.metrics.jmx import JmxRead, JmxResult, bulk_request, parse_bulk_response

_CHUNK_BYTES = 64 * 1024


class JolokiaBulkReader:
    """Reads every JmxRead in one POST to a Jolokia agent; never raises."""

    def __init__(self, url: str, timeout_s: float, context: ssl.SSLContext | None = None) -> None:
        """`context`: the TLS client context that presents the node's certificate."""
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Jolokia URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.timeout_s = timeout_s
        self.context = context

    def read(self, reads: Sequence[JmxRead]) -> JmxResult:
        try:
            body = self._post(json.dumps(bulk_request(reads)).encode())
        except urllib.error.HTTPError as exc:
            return JmxResult.failed(f"Jolokia at {self.url} answered HTTP {exc.code} {exc.reason}")
        except urllib.error.URLError as exc:
            return JmxResult.failed(f"Jolokia at {self.url} unreachable: {_reason(exc.reason)}")
        except TimeoutError:
            return JmxResult.failed(
                f"Jolokia at {self.url} did not answer within {self.timeout_s:g} s"
            )
        except OSError as exc:
            return JmxResult.failed(f"Jolokia at {self.url} unreachable: {_reason(exc)}")
        try:
            decoded = json.loads(body)
        except ValueError as exc:
            return JmxResult.failed(f"Jolokia at {self.url} answered invalid JSON ({exc})")
        return parse_bulk_response(reads, decoded)

    def _post(self, payload: bytes) -> bytes:
        """POST and read the whole answer within `timeout_s` in total: urllib's own timeout
        bounds each socket operation only, and a trickling answer could outlast it."""
        deadline = time.monotonic() + self.timeout_s
        request = urllib.request.Request(
            self.url, data=payload, headers={"Content-Type": "application/json"}, method="POST"
        )
        chunks = []
        with urllib.request.urlopen(
            request, timeout=self.timeout_s, context=self.context
        ) as response:
            while chunk := response.read(_CHUNK_BYTES):
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError
        return b"".join(chunks)


def _reason(reason: object) -> str:
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason)
