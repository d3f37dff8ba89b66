"""Which agent plans: a ZooKeeper election (kazoo's Lock recipe on
/kaas/<cluster>/election/planner). The holder's lock node is ephemeral, so when its agent
or its session dies the next contender takes over."""

from __future__ import annotations

import contextlib
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.recipe.lock import Lock

from planner.contracts.paths import ClusterPaths


class PlannerRole:
    def __init__(self, zk: KazooClient, paths: ClusterPaths, identifier: str) -> None:
        self.zk = zk
        self.lock = Lock(zk, paths.planner_election, identifier=identifier)
        self.elected = threading.Event()
        zk.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:  # the session, and the lock node with it, is gone
            self.elected.clear()

    @property
    def is_planner(self) -> bool:
        return self.elected.is_set()

    def start(self, stop: threading.Event) -> threading.Thread:
        def contend() -> None:
            while not stop.is_set():
                if self.elected.is_set():
                    stop.wait(1.0)
                    continue
                try:
                    if self.lock.acquire(timeout=5):
                        self.elected.set()
                except LockTimeout:
                    continue
                except KazooException:
                    stop.wait(2.0)  # no session now: try again when it is back
            if self.elected.is_set():
                with contextlib.suppress(KazooException):
                    self.lock.release()

        thread = threading.Thread(target=contend, name="agent-planner-election", daemon=True)
        thread.start()
        return thread

    def holder(self) -> str | None:
        try:
            contenders = self.lock.contenders()
        except KazooException:
            return None
        return contenders[0] if contenders else None
