"""The produced-messages ledger the audit job checks Kafka against.

Producers in the demo and the drills count every acknowledged message per topic,
partition and time window, and write the counts as JSON lines, one object per line:

    {"schema_version": 1, "producer": "demo", "topic": "orders", "partition": 0,
     "window_start_ms": 1767225600000, "window_s": 60, "count": 1200}

The window is taken from the message's own timestamp (the one Kafka stores with
CreateTime), so the audit job can put Kafka's copy of each message in the same window.
Pure Python, no Spark: producers import it without starting a JVM.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

LEDGER_SCHEMA_VERSION = 1
DEFAULT_LEDGER_WINDOW_S = 60


class ProducedLedger:
    """Counts acknowledged messages per (topic, partition, window). Thread-safe, since
    delivery callbacks may run on another thread than the one that writes the file."""

    def __init__(self, producer: str, window_s: int = DEFAULT_LEDGER_WINDOW_S) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be a positive number of seconds; got {window_s}")
        self.producer = producer
        self.window_s = window_s
        self._counts: Counter[tuple[str, int, int]] = Counter()
        self._lock = threading.Lock()

    def record(self, topic: str, partition: int, timestamp_ms: int) -> None:
        """Count one acknowledged message (call it from the delivery callback)."""
        window_ms = self.window_s * 1000
        window_start_ms = timestamp_ms - timestamp_ms % window_ms
        with self._lock:
            self._counts[(topic, partition, window_start_ms)] += 1

    def entries(self) -> list[dict[str, object]]:
        with self._lock:
            items = sorted(self._counts.items())
        return [
            {
                "schema_version": LEDGER_SCHEMA_VERSION,
                "producer": self.producer,
                "topic": topic,
                "partition": partition,
                "window_start_ms": window_start_ms,
                "window_s": self.window_s,
                "count": count,
            }
            for (topic, partition, window_start_ms), count in items
        ]

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def write(self, path: Path) -> Path:
        """Write the ledger as JSON lines (a new file, or replacing this producer's file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for entry in self.entries():
                handle.write(json.dumps(entry, sort_keys=True) + "\n")
        return path
