"""A look at a KRaft controller quorum every second, on a thread of its own, through the Admin
API's DescribeQuorum (kafka-python; a broker forwards it to the active controller): who leads,
who votes, who observes, and whether the voters that have caught up lately make a majority.
For tests that change the quorum's membership and must show it never lost its majority."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient

from agent.kafka_client_settings import kafka_python_admin_settings
from planner.pki.client_settings import InternalClient

# A voter counts as live when it caught up with the leader this recently (the controllers'
# fetch timeout is 2 s; a follower fetches every few hundred ms).
LIVE_WITHIN_MS = 5_000


@dataclass(frozen=True)
class QuorumSample:
    at: float  # time.monotonic() of the answer
    leader_id: int
    high_watermark: int
    voters: dict[int, int]  # node id -> log end offset
    live_voters: frozenset[int]
    observers: dict[int, int]  # node id -> log end offset (controllers and brokers)

    @property
    def has_majority(self) -> bool:
        return self.leader_id >= 0 and len(self.live_voters) > len(self.voters) // 2


def parse_describe_quorum(answer: dict[str, Any], at: float, now_ms: int) -> QuorumSample:
    """One sample from kafka-python's `describe_metadata_quorum()` answer."""
    (partition,) = answer["topics"][0]["partitions"]
    if partition.get("error"):
        raise ValueError(partition["error"])
    leader = int(partition["leader_id"])
    voters = {int(v["replica_id"]): int(v["log_end_offset"]) for v in partition["current_voters"]}
    live = frozenset(
        int(v["replica_id"])
        for v in partition["current_voters"]
        if int(v["replica_id"]) == leader
        or now_ms - int(v.get("last_caught_up_timestamp", -1)) <= LIVE_WITHIN_MS
    )
    return QuorumSample(
        at=at,
        leader_id=leader,
        high_watermark=int(partition["high_watermark"]),
        voters=voters,
        live_voters=live,
        observers={int(o["replica_id"]): int(o["log_end_offset"]) for o in partition["observers"]},
    )


class QuorumWatch:
    """Samples the quorum every `interval_s` until stopped; unanswered looks are counted with
    their times, so a test can bound how long the quorum gave no answer."""

    def __init__(self, kafka: InternalClient, interval_s: float = 1.0) -> None:
        self.admin = KafkaAdminClient(**kafka_python_admin_settings(kafka))
        self.interval_s = interval_s
        self.samples: list[QuorumSample] = []
        self.unanswered: list[tuple[float, str]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True, name="quorum-watch")

    def sample(self) -> QuorumSample:
        answer = self.admin.describe_metadata_quorum()
        return parse_describe_quorum(answer, time.monotonic(), int(time.time() * 1000))

    def _watch(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                self.samples.append(self.sample())
            except Exception as exc:  # a look that got no answer is a finding, not a crash
                self.unanswered.append((started, f"{type(exc).__name__}: {exc}"))
            self.stopping.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def start(self) -> QuorumWatch:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.admin.close()

    def longest_silence_s(self) -> float:
        """The longest run of time between two answered looks."""
        times = [s.at for s in self.samples]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)
