"""The adapter of ZooKeeper membership: reads the ensemble, who serves and the management
plane's repair request, asks the pure `zk_membership.decide_membership`, and runs the one
reconfig it returns, conditional on the config version it was decided from."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoNodeError,
    ReconfigInProcessError,
)

from agent.ports import StoreUnavailable
from agent.settings import AgentSettings
from agent.zk_membership import (
    MembershipView,
    ReconfigChange,
    decide_membership,
)
from planner.contracts.ensemble_repair import RepairRequestError, parse_repair_request
from planner.contracts.paths import ClusterPaths
from planner.contracts.spec import ClusterSpec
from planner.pki.files import IdentityFiles
from planner.zookeeper_client import server_mode
from planner.zookeeper_ensemble import (
    EnsembleConfigError,
    ZkServer,
    ZookeeperRole,
    parse_ensemble_config,
)

SERVING_MODES = ("leader", "follower", "observer")
CONFIG_PATH = "/zookeeper/config"
log = structlog.get_logger("kaas.agent")


class ReconfigOutcome(enum.StrEnum):
    APPLIED = "applied"
    LOST_RACE = "lost_race"  # another change landed or is landing: re-read, not an error
    FAILED = "failed"  # no answer or refused: re-read next cycle


@dataclass(frozen=True)
class ReconfigResult:
    outcome: ReconfigOutcome
    text: str  # what the journal says


class ServingLooks:
    """Whether each ZooKeeper server serves, from `srvr`. Every look is a new TLS connection,
    a handshake both the server and the agent pay for, and every agent looks at every server:
    a server seen serving is looked at again only after `recheck_s`; one that was not, or is
    new, at every call, so a recovery is seen at once and a failure within `recheck_s`."""

    def __init__(self, probe: Callable[[str], bool], recheck_s: float) -> None:
        self.probe = probe
        self.recheck_s = recheck_s
        self.serving_since_look: dict[str, float] = {}  # address -> when it was last seen serving

    def serving(self, address: str, now: float) -> bool:
        seen = self.serving_since_look.get(address)
        if seen is not None and 0 <= now - seen < self.recheck_s:
            return True
        if self.probe(address):
            self.serving_since_look[address] = now
            return True
        self.serving_since_look.pop(address, None)
        return False


class EnsembleKeeper:
    def __init__(
        self,
        zk: KazooClient,
        settings: AgentSettings,
        identity: IdentityFiles,
        journal: Callable[[str, str, str], None],
    ) -> None:
        self.zk = zk
        self.settings = settings
        self.paths = ClusterPaths(settings.cluster)
        self.identity = identity  # the nodes' identity is ZooKeeper's super user: it may reconfig
        self.journal = journal
        self.zookeeper_down_since: dict[int, float] = {}
        # Every server of a cluster serves the same secure client port.
        self.looks = ServingLooks(
            lambda address: (
                server_mode(address, settings.zookeeper_client_port, identity) in SERVING_MODES
            ),
            settings.zookeeper_probe_interval_s,
        )

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
            ZookeeperRole.PARTICIPANT,
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
        if spec is None:
            return None
        # Decide from the config the leader has now, not from what a lagging follower saw.
        self.zk.sync(CONFIG_PATH)
        raw, _ = self.zk.get(CONFIG_PATH)
        config = parse_ensemble_config(raw.decode())
        me = self._my_zookeeper_server()
        servers = dict(config.servers)
        if me is not None:
            servers.setdefault(me.server_id, me)
        serving = {}
        for server_id, server in servers.items():
            serving[server_id] = self.looks.serving(server.address, now)
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

    def serving_participants(self) -> dict[int, bool]:
        """Every participant of the ensemble's current config and whether it serves (for a
        restart that must not cost the quorum). StoreUnavailable: the config is unreadable."""
        try:
            self.zk.sync(CONFIG_PATH)
            raw, _ = self.zk.get(CONFIG_PATH)
            config = parse_ensemble_config(raw.decode())
        except (KazooException, EnsembleConfigError) as exc:
            raise StoreUnavailable(f"the ensemble's config: {exc}") from exc
        port = self.settings.zookeeper_client_port
        return {
            server_id: server_mode(server.address, port, self.identity) in SERVING_MODES
            for server_id, server in config.participants.items()
        }

    def apply(self, change: ReconfigChange) -> ReconfigResult:
        """One reconfig, conditional on the config version the change was decided from. A
        lost race (BadVersion: another agent changed the ensemble since; ReconfigInProcess:
        another agent's change is being committed) or a lost connection leaves the decision
        to the next cycle, on a fresh read; a lost race is journaled as such, not as an
        error. Returns what it journals."""
        try:
            self.zk.reconfig(
                joining=None,
                leaving=None,
                new_members=change.new_members,
                from_config=change.from_config,
            )
            result = ReconfigResult(ReconfigOutcome.APPLIED, "done")
            self.zookeeper_down_since.pop(change.server.server_id, None)
        except BadVersionError:
            result = ReconfigResult(
                ReconfigOutcome.LOST_RACE,
                f"not applied: the ensemble changed since config version "
                f"{change.from_config:x}, re-reading next cycle",
            )
        except ReconfigInProcessError:
            # Another change from the same config is being committed right now.
            result = ReconfigResult(
                ReconfigOutcome.LOST_RACE,
                f"not applied: another reconfig of config version {change.from_config:x} "
                "is under way, re-reading next cycle",
            )
        except KazooException as exc:
            result = ReconfigResult(
                ReconfigOutcome.FAILED,
                f"not applied ({type(exc).__name__}: {exc}), re-reading next cycle",
            )
        self.journal("zk_reconfig", change.reason, result.text)
        (log.warning if result.outcome is ReconfigOutcome.FAILED else log.info)(
            "zookeeper_reconfig",
            change=change.kind.value,
            server=change.server.server_id,
            outcome=result.outcome.value,
            result=result.text,
            config_version=change.from_config,
        )
        return result
