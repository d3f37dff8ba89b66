"""ZooKeeper's own metrics: the local server's `mntr` answer over its TLS client port (the
one ZooKeeper serves; the four-letter words are read session-less, so a probe is no write
to the ensemble). `zookeeper_gauges` is pure; `ZookeeperProbe` is the thin reader."""

from __future__ import annotations

from collections.abc import Mapping

from planner.pki.files import IdentityFiles
from planner.zookeeper_client import four_letter_word

# mntr key -> gauge name under <cluster>.brokers.<id>.zookeeper.
MNTR_GAUGES: Mapping[str, str] = {
    "zk_avg_latency": "avg_latency_ms",
    "zk_max_latency": "max_latency_ms",
    "zk_outstanding_requests": "outstanding_requests",
    "zk_znode_count": "znode_count",
    "zk_watch_count": "watch_count",
    "zk_num_alive_connections": "alive_connections",
    "zk_approximate_data_size": "data_size_bytes",
    "zk_synced_followers": "synced_followers",
}
# The quorum role as one 0/1 gauge per role: Graphite sums and alerts on numbers.
ROLES = ("leader", "follower", "observer", "standalone")


def zookeeper_gauges(mntr: str) -> dict[str, float]:
    """The gauges of one `mntr` answer (tab-separated `key value` lines); keys it does not
    know, and values that are not numbers, are left out. `up` is 1 for any answer."""
    values: dict[str, str] = {}
    for line in mntr.splitlines():
        key, _, value = line.partition("\t")
        if value:
            values[key.strip()] = value.strip()
    gauges: dict[str, float] = {}
    for key, name in MNTR_GAUGES.items():
        try:
            gauges[name] = float(values[key])
        except (KeyError, ValueError):
            continue
    state = values.get("zk_server_state")
    if state is not None:
        for role in ROLES:
            gauges[f"is_{role}"] = 1.0 if state == role else 0.0
    gauges["up"] = 1.0
    return gauges


class ZookeeperProbe:
    """Reads the VM's own ZooKeeper server; never raises: a server that does not answer
    gives `up` 0 and the problem."""

    def __init__(
        self, address: str, port: int, identity: IdentityFiles, timeout_s: float = 2.0
    ) -> None:
        self.address = address
        self.port = port
        self.identity = identity
        self.timeout_s = timeout_s

    def read(self) -> tuple[dict[str, float], str | None]:
        try:
            answer = four_letter_word(
                self.address, self.port, self.identity, b"mntr", self.timeout_s
            )
        except OSError as exc:
            return {"up": 0.0}, f"zookeeper mntr at {self.address}:{self.port}: {exc}"
        if not answer.strip() or "not executed" in answer:
            return {"up": 0.0}, f"zookeeper at {self.address}:{self.port} refused mntr"
        return zookeeper_gauges(answer), None
