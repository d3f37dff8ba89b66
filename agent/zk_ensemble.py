"""The adapter of ZooKeeper membership: reads the ensemble, who serves and the management
plane's repair request, asks the pure `zk_membership.decide_membership`, and runs the one
reconfig it returns, conditional on the config version it was decided from."""

from __future__ import annotations

from collections.abc import Callable

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

from agent.settings import AgentSettings
from agent.zk_membership import (
    MembershipView,
    ReconfigChange,
    decide_membership,
    server_mode,
)
from planner.spec import ClusterSpec
from planner.zkpaths import ClusterPaths
from planner.zookeeper_ensemble import (
    EnsembleConfigError,
    RepairRequestError,
    ServerRole,
    ZkServer,
    parse_ensemble_config,
    parse_repair_request,
)

SERVING_MODES = ("leader", "follower", "observer")
CONFIG_PATH = "/zookeeper/config"
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
        self.paths = ClusterPaths(settings.cluster)
        self.may_reconfigure = may_reconfigure  # only with the ZooKeeper super user's password
        self.journal = journal
        self.zookeeper_down_since: dict[int, float] = {}

    def change(self, spec: ClusterSpec | None, now: float) -> ReconfigChange | None:
        try:
            return self._membership_change(spec, now)
        except (KazooException, EnsembleConfigError) as exc:
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
            ServerRole.PARTICIPANT,
            s.zookeeper_client_port,
            s.address,
        )

    def _recycled_addresses(self) -> frozenset[str]:
        """The addresses the management plane's repair request names; none without a
        (readable) request: the gone threshold alone then decides removals."""
        try:
            raw, _ = self.zk.get(self.paths.ensemble_repair)
        except NoNodeError:
            return frozenset()
        try:
            return parse_repair_request(raw).recycled_addresses
        except RepairRequestError as exc:
            log.warning("ensemble_repair_request_refused", error=str(exc))
            return frozenset()

    def _membership_change(self, spec: ClusterSpec | None, now: float) -> ReconfigChange | None:
        if not self.may_reconfigure or spec is None:
            return None  # without the super user's password the agent never reconfigures
        raw, _ = self.zk.get(CONFIG_PATH)
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
            recycled_addresses=self._recycled_addresses(),
        )
        return decide_membership(view)

    def apply(self, change: ReconfigChange) -> str:
        """One reconfig, conditional on the config version the change was decided from. A
        lost race (BadVersion: another agent changed the ensemble since) or a lost
        connection leaves the decision to the next cycle, on a fresh read. Returns the
        result it journals."""
        try:
            self.zk.reconfig(
                joining=change.joining,
                leaving=change.leaving,
                new_members=None,
                from_config=change.from_config,
            )
            result = "done"
            self.zookeeper_down_since.pop(change.server.server_id, None)
        except BadVersionError:
            result = (
                f"not applied: the ensemble changed since config version "
                f"{change.from_config:x}, re-reading next cycle"
            )
        except KazooException as exc:
            result = f"not applied ({type(exc).__name__}: {exc}), re-reading next cycle"
        self.journal("zk_reconfig", change.reason, result)
        log.info(
            "zookeeper_reconfig",
            change=change.kind.value,
            server=change.server.server_id,
            result=result,
            config_version=change.from_config,
        )
        return result
