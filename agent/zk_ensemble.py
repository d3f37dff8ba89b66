"""The adapter of ZooKeeper membership: reads the ensemble and who serves, asks the pure
`zk_membership.decide_membership`, and runs the one reconfig it returns."""

from __future__ import annotations

from collections.abc import Callable

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from agent.settings import AgentSettings
from agent.zk_membership import (
    PARTICIPANT,
    ConfigParseError,
    MembershipView,
    ReconfigChange,
    ZkServer,
    decide_membership,
    parse_ensemble_config,
    server_mode,
)
from planner.contracts.spec import ClusterSpec

SERVING_MODES = ("leader", "follower", "observer")
log = structlog.get_logger("kaas.agent")


class EnsembleKeeper:
    def __init__(
        self,
        zk: KazooClient,
        settings: AgentSettings,
        may_reconfigure: bool,
        journal: Callable[[str, str, str], None],
    ) -> None:
        self.zk = zk
        self.settings = settings
        self.may_reconfigure = may_reconfigure  # only with the ZooKeeper super user's password
        self.journal = journal
        self.zookeeper_down_since: dict[int, float] = {}

    def change(self, spec: ClusterSpec | None, now: float) -> ReconfigChange | None:
        try:
            return self._membership_change(spec, now)
        except (KazooException, ConfigParseError) as exc:
            log.warning("zookeeper_membership_unreadable", error=str(exc))
            return None

    def _my_zookeeper_server(self) -> ZkServer | None:
        s = self.settings
        if s.zookeeper_server_id is None:
            return None
        return ZkServer(
            s.zookeeper_server_id,
            s.address,
            s.zookeeper_peer_port,
            s.zookeeper_election_port,
            PARTICIPANT,
            s.zookeeper_client_port,
        )

    def _membership_change(self, spec: ClusterSpec | None, now: float) -> ReconfigChange | None:
        if not self.may_reconfigure or spec is None:
            return None  # without the super user's password the agent never reconfigures
        raw, _ = self.zk.get("/zookeeper/config")
        config = parse_ensemble_config(raw.decode())
        me = self._my_zookeeper_server()
        servers = dict(config.servers)
        if me is not None:
            servers.setdefault(me.server_id, me)
        serving = {}
        for server_id, server in servers.items():
            serving[server_id] = server_mode(server.address, server.client_port) in SERVING_MODES
            if serving[server_id]:
                self.zookeeper_down_since.pop(server_id, None)
            else:
                self.zookeeper_down_since.setdefault(server_id, now)
        view = MembershipView(
            config=config,
            serving=serving,
            down_for_s={i: now - since for i, since in self.zookeeper_down_since.items()},
            me=me,
            desired_participants=spec.zookeeper_participants,
            gone_threshold_s=self.settings.zookeeper_gone_s,
        )
        return decide_membership(view)

    def apply(self, change: ReconfigChange) -> None:
        """One reconfig, conditional on the config version it was decided from; a lost race
        or a lost connection leaves the decision to the next cycle, on a fresh read."""
        _, stat = self.zk.get("/zookeeper/config")
        try:
            if change.kind == "add":
                self.zk.reconfig(joining=change.server.line(), leaving=None, new_members=None)
            else:
                self.zk.reconfig(
                    joining=None, leaving=str(change.server.server_id), new_members=None
                )
            result = "done"
            self.zookeeper_down_since.pop(change.server.server_id, None)
        except KazooException as exc:
            result = f"not applied ({type(exc).__name__}: {exc}), re-reading next cycle"
        self.journal("zk_reconfig", change.reason, result)
        log.info(
            "zookeeper_reconfig",
            change=change.kind,
            server=change.server.server_id,
            result=result,
            config_version=stat.version,
        )
