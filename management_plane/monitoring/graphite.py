"""Reading Graphite's render API (thin adapter: no decisions)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from management_plane.errors import TemporaryError


class GraphiteUnreachable(TemporaryError):
    """The render API did not answer, or answered something that is not its JSON."""


class GraphiteReader:
    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def series(self, target: str, since: str) -> dict[str, list[float | None]]:
        """Every series of `target` from `since` (Graphite's `from`, e.g. -60s) to now."""
        return {
            name: [value for value, _ in points]
            for name, points in self.timed_series(target, since).items()
        }

    def timed_series(self, target: str, since: str) -> dict[str, list[tuple[float | None, float]]]:
        """Every series of `target` since `since` as (value, unix time) points, as Graphite
        answers them."""
        query = urllib.parse.urlencode({"target": target, "from": since, "format": "json"})
        try:
            with urllib.request.urlopen(
                f"{self.url}/render?{query}", timeout=self.timeout_s
            ) as answer:
                value = json.load(answer)
        except (OSError, urllib.error.URLError, ValueError) as exc:
            raise GraphiteUnreachable(f"Graphite at {self.url}: {exc}") from None
        if not isinstance(value, list):
            raise GraphiteUnreachable(f"Graphite at {self.url}: not a list of series")
        result: dict[str, list[tuple[float | None, float]]] = {}
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("datapoints"), list):
                result[str(item.get("target"))] = [
                    (
                        float(p[0]) if isinstance(p[0], (int, float)) else None,
                        float(p[1]) if isinstance(p[1], (int, float)) else 0.0,
                    )
                    for p in item["datapoints"]
                    if isinstance(p, list) and len(p) == 2
                ]
        return result

    def latest(self, target: str, since: str) -> dict[str, float | None]:
        """The last non-null value of every series of `target` since `since` (None: none)."""
        latest: dict[str, float | None] = {}
        for name, points in self.series(target, since).items():
            present = [p for p in points if p is not None]
            latest[name] = float(present[-1]) if present else None
        return latest
