"""The agent's MirrorMaker supervision: which flows run on a VM, and the pure decision
(desired properties vs the running process -> start, restart, stop, back off), table-tested;
then the keeper's whole ticks against fakes of ZooKeeper, the VM's files and the process."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from kazoo.client import KazooClient

from agent.mirror_decide import (
    BACKOFF_FIRST_S,
    BACKOFF_MAX_S,
    STABLE_AFTER_S,
    MirrorActionKind,
    MirrorMemory,
    MirrorObservation,
    backoff_s,
    decide_mirror,
    select_flows,
)
from agent.mirror_keeper import MirrorKeeper
from agent.mirror_maker import (
    MIRROR_MAKER_ENV,
    MIRROR_MAKER_UNIT_USER,
    SOURCE_CA,
    SOURCE_CLIENT,
    LocalMirrorProcess,
    MirrorMakerFiles,
    SystemdMirrorProcess,
    VmMirrorCredentials,
    mirror_dir,
    mirror_maker_command,
    mirror_maker_env,
    source_dir,
)
from agent.ports import StoreUnavailable
from agent.settings import AgentSettings
from agent.supervisor import KafkaProcess, SystemdSupervisor
from agent.wiring import mirror_keeper
from management_plane.providers.aws_userdata import KAFKA_CONFIG_DIR
from planner.contracts.mirror_flow import FlowState, MirrorFlow, MirrorSource, SourceKind
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.mirror import MirrorEndpoint, RestStores
from planner.contracts.vm_config.properties import server_properties_text

pytestmark = pytest.mark.unit

A = MirrorActionKind


def _flow(name: str = "orders-dr", alias: str = "primary", **changes: Any) -> MirrorFlow:
    flow = MirrorFlow(
        name=name,
        source=MirrorSource(SourceKind.KAAS, alias, "127.0.1.1:9092"),
        target_cluster="backup",
        topics="orders\\..*",
        groups=".*",
    )
    return replace(flow, **changes)


@pytest.mark.parametrize(
    ("flows", "broker_id", "live", "held", "chosen", "skipped"),
    [
        ([_flow()], 0, {0, 1, 2}, {"orders-dr"}, ["orders-dr"], []),
        ([_flow()], 2, {0, 1, 2}, {"orders-dr"}, [], []),  # not among the first two
        ([_flow()], 2, {1, 2}, {"orders-dr"}, ["orders-dr"], []),  # broker 0 is gone
        ([_flow(placement=(2,))], 2, {0, 1, 2}, {"orders-dr"}, ["orders-dr"], []),
        ([_flow(state=FlowState.DELETING)], 0, {0, 1}, {"orders-dr"}, [], []),
        ([_flow()], 0, {0, 1}, set(), [], ["orders-dr"]),  # no source credentials here
        (
            [_flow("b", "src-b"), _flow("a", "src-a", placement=(1,))],
            1,
            {0, 1},
            {"a", "b"},
            ["a", "b"],
            [],
        ),
    ],
)
def test_select_flows(
    flows: list[MirrorFlow],
    broker_id: int,
    live: set[int],
    held: set[str],
    chosen: list[str],
    skipped: list[str],
) -> None:
    selection = select_flows(
        {f.name: f for f in flows}, broker_id, frozenset(live), frozenset(held)
    )
    assert [f.name for f in selection.flows] == chosen
    assert list(selection.skipped) == skipped


NOW = 1000.0
RUNNING = MirrorMemory(expect_running=True, started_at=NOW - 10)


def _seen(
    desired: str | None = "p1", running: bool = False, running_properties: str | None = None
) -> MirrorObservation:
    return MirrorObservation(
        desired, ("orders-dr",) if desired else (), running, running_properties, NOW
    )


@pytest.mark.parametrize(
    ("seen", "memory", "kind", "crashes", "expect_running", "says"),
    [
        # nothing placed here
        (_seen(None), MirrorMemory(), A.NOTHING, 0, False, ""),
        (_seen(None, True, "p1"), RUNNING, A.STOP, 0, False, "no flow runs on this VM"),
        # a flow appears
        (_seen(), MirrorMemory(), A.START, 0, True, "starting flows orders-dr"),
        # running with the same properties
        (_seen("p1", True, "p1"), RUNNING, A.NOTHING, 0, True, "runs flows orders-dr"),
        # the flows changed (a flow added, removed, or its filter changed)
        (_seen("p2", True, "p1"), RUNNING, A.RESTART, 0, True, "the flows changed"),
        # found running after the agent restarted: adopted, and kept when it matches
        (_seen("p1", True, "p1"), MirrorMemory(), A.NOTHING, 0, True, "runs flows"),
        # it died: the first exit waits BACKOFF_FIRST_S
        (_seen("p1", False, "p1"), RUNNING, A.WAIT, 1, False, "starting it again in 5 s"),
        # after the backoff it starts again
        (
            _seen("p1", False, "p1"),
            MirrorMemory(crashes=1, last_exit_at=NOW - BACKOFF_FIRST_S),
            A.START,
            1,
            True,
            "after 1 exits",
        ),
        # the third exit in a row waits four times as long
        (
            _seen("p1", False, "p1"),
            MirrorMemory(True, NOW - 3, crashes=2, last_exit_at=NOW - 20),
            A.WAIT,
            3,
            False,
            "3 in a row",
        ),
        # a long healthy run clears the count
        (
            _seen("p1", True, "p1"),
            MirrorMemory(True, NOW - STABLE_AFTER_S, crashes=4, last_exit_at=NOW - 500),
            A.NOTHING,
            0,
            True,
            "runs flows",
        ),
        # dead and no flow left: nothing to start, the exit still counted
        (_seen(None, False, "p1"), RUNNING, A.NOTHING, 1, False, ""),
    ],
)
def test_decide_mirror(
    seen: MirrorObservation,
    memory: MirrorMemory,
    kind: MirrorActionKind,
    crashes: int,
    expect_running: bool,
    says: str,
) -> None:
    decision = decide_mirror(seen, memory)
    assert decision.kind is kind
    assert says in decision.reason
    assert decision.memory.crashes == crashes
    assert decision.memory.expect_running is expect_running


def test_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_s(n) for n in range(5)] == [0.0, 5.0, 10.0, 20.0, 40.0]
    assert backoff_s(30) == BACKOFF_MAX_S


# -- the keeper's whole ticks against fakes ----------------------------------------------------


class FakeFlows:
    def __init__(self) -> None:
        self.flows: dict[str, MirrorFlow] = {}
        self.live = frozenset({0, 1, 2})
        self.reachable = True

    def read_flows(self) -> dict[str, bytes]:
        if not self.reachable:
            raise StoreUnavailable("connection loss")
        return {name: flow.encode() for name, flow in self.flows.items()}

    def live_broker_ids(self) -> frozenset[int]:
        return self.live


class FakeProcess:
    def __init__(self) -> None:
        self.alive = False
        self.properties: str | None = None
        self.calls: list[str] = []

    def running(self) -> bool:
        return self.alive

    def started_properties(self) -> str | None:
        return self.properties

    def start(self, properties: Mapping[str, str], kafka_version: str) -> None:
        self.calls.append(f"start {kafka_version}")
        self.properties = server_properties_text(properties)
        self.alive = True

    def stop(self, timeout: float) -> None:
        self.calls.append("stop")
        self.alive = False


class FakeCredentials:
    def __init__(self) -> None:
        self.held = frozenset({"orders-dr"})

    def target(self) -> MirrorEndpoint:
        return MirrorEndpoint("127.0.2.1:9092", TlsFiles("/vm/tls/node.pem", "/vm/tls/ca.pem"))

    def sources_held(self) -> frozenset[str]:
        return self.held

    def source(self, flow: MirrorFlow) -> MirrorEndpoint:
        folder = f"/vm/mirror/sources/{flow.name}"
        return MirrorEndpoint(
            flow.source.bootstrap_servers, TlsFiles(f"{folder}/client.pem", f"{folder}/ca.pem")
        )

    def rest_stores(self) -> RestStores:
        return RestStores("/vm/rest/keystore.p12", "/vm/rest/truststore.p12", "secret")


class KeeperWorld:
    def __init__(self) -> None:
        self.flows = FakeFlows()
        self.process = FakeProcess()
        self.credentials = FakeCredentials()
        self.now = 100.0
        self.journal: list[tuple[str, str, str]] = []
        self.keeper = MirrorKeeper(
            "backup",
            self.flows,
            self.process,
            self.credentials,
            "127.0.2.1",
            8083,
            lambda: self.now,
            lambda action, reason, result: self.journal.append((action, reason, result)),
        )

    def tick(self, broker_id: int = 0) -> str:
        self.now += 2
        return self.keeper.tick(broker_id, "3.9.2")


@pytest.fixture
def keeper() -> KeeperWorld:
    return KeeperWorld()


def test_a_flow_is_started_once_and_left_running(keeper: KeeperWorld) -> None:
    assert keeper.tick() == ""  # no flow: nothing runs, nothing said
    keeper.flows.flows["orders-dr"] = _flow()
    assert "starting flows orders-dr" in keeper.tick()
    assert keeper.process.calls == ["start 3.9.2"]
    assert "primary->backup.topics=orders\\\\..*" in (keeper.process.properties or "")
    assert keeper.tick() == "MirrorMaker runs flows orders-dr"
    assert keeper.process.calls == ["start 3.9.2"]
    assert [(a, r) for a, _, r in keeper.journal] == [("mirror_maker", "done")]


def test_a_changed_flow_restarts_it_and_a_deleted_one_stops_it(keeper: KeeperWorld) -> None:
    keeper.flows.flows["orders-dr"] = _flow()
    keeper.tick()
    keeper.flows.flows["orders-dr"] = _flow(topics="orders\\..*|billing")
    assert "the flows changed" in keeper.tick()
    assert keeper.process.calls == ["start 3.9.2", "stop", "start 3.9.2"]
    assert "billing" in (keeper.process.properties or "")
    keeper.flows.flows["orders-dr"] = _flow().deleting()
    assert "no flow runs on this VM" in keeper.tick()
    assert keeper.process.calls[-1] == "stop" and not keeper.process.alive
    assert keeper.tick() == ""


def test_only_the_vms_the_flow_is_placed_on_run_it(keeper: KeeperWorld) -> None:
    keeper.flows.flows["orders-dr"] = _flow()
    keeper.tick(broker_id=2)
    assert keeper.process.calls == []  # brokers 0 and 1 run it
    keeper.flows.live = frozenset({1, 2})  # broker 0's agent is gone
    keeper.tick(broker_id=2)
    assert keeper.process.calls == ["start 3.9.2"]


def test_a_crashed_process_is_started_again_after_the_backoff(keeper: KeeperWorld) -> None:
    keeper.flows.flows["orders-dr"] = _flow()
    keeper.tick()
    keeper.process.alive = False  # it died on its own
    assert "starting it again in" in keeper.tick()
    assert keeper.process.calls == ["start 3.9.2"]
    keeper.now += BACKOFF_FIRST_S
    assert "after 1 exits" in keeper.tick()
    assert keeper.process.calls == ["start 3.9.2", "start 3.9.2"]


def test_unreadable_zookeeper_leaves_the_process_as_it_is(keeper: KeeperWorld) -> None:
    keeper.flows.flows["orders-dr"] = _flow()
    keeper.tick()
    keeper.flows.reachable = False
    assert "flows unreadable" in keeper.tick()
    assert keeper.process.calls == ["start 3.9.2"] and keeper.process.alive


def test_a_flow_without_source_credentials_is_not_started_and_says_so(
    keeper: KeeperWorld,
) -> None:
    keeper.credentials.held = frozenset()
    keeper.flows.flows["orders-dr"] = _flow()
    assert "flow orders-dr: no credentials for its source" in keeper.tick()
    assert keeper.process.calls == []


def _settings(tmp_path: Path) -> AgentSettings:
    return AgentSettings(
        cluster="backup",
        zookeeper_hosts="127.0.2.1:2181",
        vm_id="vm1",
        address="127.0.2.1",
        zone="a",
        data_dir=tmp_path / "data",
        config_dir=tmp_path / "config",
        state_dir=tmp_path,
    )


def test_the_vm_reads_a_flows_source_credentials_from_its_folder(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    credentials = VmMirrorCredentials(settings)
    assert credentials.sources_held() == frozenset()
    folder = source_dir(settings, "orders-dr")
    folder.mkdir(parents=True)
    (folder / SOURCE_CLIENT).write_text("key and certificate")
    assert credentials.sources_held() == frozenset(), "the CA is missing still"
    (folder / SOURCE_CA).write_text("ca")
    assert credentials.sources_held() == frozenset({"orders-dr"})
    endpoint = credentials.source(_flow())
    assert endpoint.bootstrap_servers == "127.0.1.1:9092"
    assert endpoint.tls == TlsFiles(str(folder / SOURCE_CLIENT), str(folder / SOURCE_CA))


# -- MirrorMaker under systemd on a real VM ---------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def _exec_start(unit: str, env: str) -> list[str]:
    """The unit's ExecStart as systemd runs it: `${VAR}` one word, `$VAR` split at spaces."""
    command = unit.split("ExecStart=", 1)[1].split("\n")
    joined = ""
    for line in command:
        joined += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            break
    values = dict(line.split("=", 1) for line in env.splitlines())
    words: list[str] = []
    for word in shlex.split(joined):
        if word.startswith("$") and not word.startswith("${"):
            words += values[word[1:]].split()
            continue
        for name, value in values.items():
            word = word.replace("${" + name + "}", value)
        words.append(word)
    return words


def test_the_mirror_maker_unit_runs_the_jvm_the_local_supervisor_runs(tmp_path: Path) -> None:
    unit = (REPO / "systemd" / "kaas-mirror-maker.service").read_text()
    assert f"EnvironmentFile={KAFKA_CONFIG_DIR}/{MIRROR_MAKER_ENV}" in unit
    assert f"User={MIRROR_MAKER_UNIT_USER}" in unit and "Restart=no" in unit
    # The agent starts it (after its backoff), never systemd at boot.
    assert "kaas-mirror-maker" not in (REPO / "packer/scripts/provision.sh").read_text()
    assert SystemdSupervisor(_settings(tmp_path), KafkaProcess.MIRROR_MAKER).unit == (
        "kaas-mirror-maker.service"
    )
    image = tmp_path / "image"
    (image / "opt" / "kaas").mkdir(parents=True)
    (image / "opt" / "kaas" / "image.json").write_text(
        json.dumps({"mirror_versions": {"3.9.2": "opt/kaas/mirror/3.9.2/libs"}})
    )
    settings = replace(_settings(tmp_path), image_root=image, java="/usr/bin/java")
    files = MirrorMakerFiles(mirror_dir(settings))
    env = mirror_maker_env(settings, files, "3.9.2")
    libs = image / "opt/kaas/mirror/3.9.2/libs"
    assert _exec_start(unit, env) == mirror_maker_command(
        "/usr/bin/java", libs, files, settings.mirror_heap
    )


def test_a_systemd_vm_supervises_mirror_maker_through_its_unit(tmp_path: Path) -> None:
    settings = replace(_settings(tmp_path), supervisor="systemd")
    keeper = mirror_keeper(settings, cast(KazooClient, object()), lambda a, r, o: None)
    assert isinstance(keeper.process, SystemdMirrorProcess)
    assert keeper.process.unit.unit == "kaas-mirror-maker.service"
    local = mirror_keeper(_settings(tmp_path), cast(KazooClient, object()), lambda a, r, o: None)
    assert isinstance(local.process, LocalMirrorProcess)
