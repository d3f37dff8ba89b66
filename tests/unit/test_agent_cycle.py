"""`Agent.run_cycle` and the start/restart procedure against fakes of every port: first
start, config changes (dynamic and restart), the restart lock and the ISR waits with their
timeouts, and ZooKeeper going away. Time is a fake clock: a 300 s wait takes milliseconds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.cycle_actions import LongAction
from agent.ports import PAUSED, RUNNING, STOPPED
from agent.zk_membership import ReconfigChange, ReconfigKind
from planner.contracts.kafka_state import PartitionState
from planner.contracts.log_limits import LogLimits
from planner.contracts.member import MemberRecord, MemberRole, MemberState
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import parse_server_properties
from planner.zookeeper_ensemble import ZkServer, ZookeeperRole
from tests.unit.agent_fakes import Rig, make_rig

pytestmark = pytest.mark.unit

SPEC = ClusterSpec(
    cluster="c", kafka_version="3.9.2", broker_count=3, zones=("zone-a",), generation=4
)


def file_properties(rig: Rig) -> dict[str, str]:
    path = rig.agent.settings.config_dir / "server.properties"
    return parse_server_properties(path.read_text())


def started(tmp_path: Path, **settings: Any) -> Rig:
    """An agent whose broker it has started, healthy at SPEC."""
    rig = make_rig(tmp_path, SPEC, **settings)
    rig.agent.run_cycle()
    assert rig.broker.process == RUNNING
    assert "healthy" in rig.agent.run_cycle()
    rig.zookeeper.journal.clear()
    rig.clock.slept = 0.0
    return rig


def test_first_start_writes_the_rendered_config_starts_without_the_lock_and_reports_healthy(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, SPEC)
    assert rig.agent.broker_id == 0
    sentence = rig.agent.run_cycle()
    assert sentence == "broker 0: broker process gone, starting it"
    assert rig.broker.starts == ["3.9.2"]
    assert rig.broker.calls == ["start"]  # nothing to stop, no safety check on a start
    props = file_properties(rig)
    assert props["broker.id"] == "0"
    assert props["broker.rack"] == "zone-a"
    # A start stops nothing: the restart lock is for restarts.
    assert rig.zookeeper.lock_acquisitions == []
    assert rig.zookeeper.lock_releases == []
    assert [(e["action"], e["result"]) for e in rig.zookeeper.journal] == [
        ("start", "started"),
        ("start", "done, ISR complete"),
    ]
    # Three checks with no under-replicated partition, two intervals apart.
    assert rig.clock.slept == pytest.approx(2 * rig.agent.settings.isr_check_interval_s)
    member = rig.zookeeper.member(0)
    assert member["sentence"] == sentence
    assert member["spec_generation"] == 4
    assert member["pending_restart"] is False

    assert rig.agent.run_cycle() == "broker 0: healthy, config at spec generation 4"
    assert rig.broker.starts == ["3.9.2"]


def test_a_dynamic_change_is_applied_without_a_restart_and_kept_in_the_file(
    tmp_path: Path,
) -> None:
    rig = started(tmp_path)
    rig.zookeeper.set_spec(replace(SPEC, broker_config={"log.cleaner.threads": "2"}, generation=5))
    sentence = rig.agent.run_cycle()
    assert "applying dynamic config (log.cleaner.threads)" in sentence
    assert [c.key for d in rig.broker.applied for c in d.dynamic] == ["log.cleaner.threads"]
    assert rig.broker.stops == []
    assert file_properties(rig)["log.cleaner.threads"] == "2"
    assert rig.zookeeper.journaled("apply_dynamic")[-1]["result"] == "done, read back"
    assert rig.agent.run_cycle() == "broker 0: healthy, config at spec generation 5"


def test_a_dynamic_change_kafka_refuses_is_journaled_and_the_file_is_left(
    tmp_path: Path,
) -> None:
    rig = started(tmp_path)
    rig.broker.apply_error = "log.cleaner.threads: Kafka refused it; nothing applied"
    rig.zookeeper.set_spec(replace(SPEC, broker_config={"log.cleaner.threads": "2"}))
    rig.agent.run_cycle()
    assert "log.cleaner.threads" not in file_properties(rig)
    assert rig.zookeeper.journaled("apply_dynamic")[-1]["result"].startswith(
        "failed: log.cleaner.threads: Kafka refused it"
    )


def test_a_read_only_change_restarts_safely_under_the_lock_and_waits_for_the_isr(
    tmp_path: Path,
) -> None:
    rig = started(tmp_path)
    rig.broker.calls.clear()
    rig.zookeeper.set_spec(replace(SPEC, broker_config={"num.partitions": "5"}, generation=5))
    sentence = rig.agent.run_cycle()
    assert sentence == "broker 0: read-only config changed (num.partitions), restarting"
    # Safety check, controlled shutdown, then the start with the new file.
    assert rig.broker.calls == ["partition_states", "stop", "start"]
    assert rig.broker.stops == [rig.agent.settings.broker_stop_timeout_s]
    assert file_properties(rig)["num.partitions"] == "5"
    assert rig.broker.running["num.partitions"].value == "5"
    assert rig.zookeeper.journaled("restart")[-1]["result"] == "done, ISR complete"
    assert rig.zookeeper.lock_holder is None
    assert rig.zookeeper.member(0)["pending_restart"] is True  # what this cycle saw
    assert rig.agent.run_cycle() == "broker 0: healthy, config at spec generation 5"
    assert rig.zookeeper.member(0)["pending_restart"] is False


def test_a_restart_that_would_take_a_partition_below_min_isr_is_blocked(
    tmp_path: Path,
) -> None:
    rig = started(tmp_path)
    rig.broker.partitions = [PartitionState("orders", 3, (0, 1, 2), (0, 1))]
    rig.zookeeper.set_spec(replace(SPEC, broker_config={"num.partitions": "5"}))
    rig.agent.run_cycle()
    assert rig.broker.stops == []
    result = rig.zookeeper.journaled("restart")[-1]["result"]
    assert result == (
        "restart blocked: stopping would take orders-3 (ISR [0, 1], min ISR 2) below min ISR"
    )
    assert rig.zookeeper.lock_holder is None  # released for the others


def test_a_start_goes_ahead_while_another_broker_holds_the_restart_lock(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, SPEC, spawn_later=True)
    rig.zookeeper.lock_holder = "broker 2"
    assert rig.agent.run_cycle() == "broker 0: broker process gone, starting it"
    seen: list[str] = []

    def meanwhile(now: float) -> None:
        # The loop's cycles run while the start waits: they report its progress.
        seen.append(rig.agent.run_cycle())

    rig.clock.on_sleep.append(meanwhile)
    rig.spawn.run_all()
    rig.clock.on_sleep.clear()
    assert not [line for line in seen if "restart lock" in line], seen
    assert "broker 0: start 2/2: waiting until every ISR is complete" in seen
    assert rig.broker.starts == ["3.9.2"]
    assert rig.zookeeper.lock_acquisitions == []
    assert rig.zookeeper.lock_holder == "broker 2"
    assert rig.agent.long_action is not None
    assert rig.agent.long_action.progress == "start 2/2 done, ISR complete"
    assert rig.agent.run_cycle() == "broker 0: healthy, config at spec generation 4"


def test_incomplete_isrs_keep_the_lock_until_the_isr_timeout(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, SPEC, isr_complete_timeout_s=20)
    rig.broker.urp = lambda url: 1
    rig.agent.run_cycle()
    journal = rig.zookeeper.journaled("start")[-1]
    assert journal["result"] == "broker up, ISR still incomplete after 20s"
    assert 20 <= rig.clock.slept <= 20 + rig.agent.settings.isr_check_interval_s
    assert rig.zookeeper.lock_holder is None


def test_the_isr_wait_defaults_to_300_seconds(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, SPEC)
    rig.broker.urp = lambda url: 4
    rig.agent.run_cycle()
    assert rig.zookeeper.journaled("start")[-1]["result"] == (
        "broker up, ISR still incomplete after 300s"
    )
    assert rig.clock.slept == pytest.approx(300, abs=2)


def test_the_isr_must_be_complete_on_consecutive_checks(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, SPEC)
    readings = iter([2, 0, 0, 1, 0, 0, 0])
    checks: list[str] = []

    def urp(url: str) -> int:
        checks.append(url)
        return next(readings)

    rig.broker.urp = urp
    rig.agent.run_cycle()
    assert len(checks) == 7
    assert rig.zookeeper.journaled("start")[-1]["result"] == "done, ISR complete"


def test_every_registered_members_broker_is_read_and_a_cold_start_counts_only_running_replicas(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, SPEC)
    for broker_id in (1, 2):
        rig.zookeeper.members[broker_id] = MemberRecord(
            broker_id=broker_id,
            vm_id=f"vm{broker_id + 1}",
            address=f"127.0.1.{broker_id + 1}",
            jolokia_url=f"http://b{broker_id}/",
            agent_version="0.1.0",
            state=MemberState.STARTING,
            sentence="",
            registered=False,
            spec_generation=-1,
            pending_restart=False,
            role=MemberRole.MEMBER,
            updated_at_ms=0,
        ).to_bytes()
    rig.zookeeper.registered = {1}  # broker 2's VM still boots
    read: list[str] = []

    def urp(url: str) -> int:
        read.append(url)
        return 3 if url == "http://b1/" else 0

    rig.broker.urp = urp
    # Broker 2's replicas are out of the ISR, but it is down: nothing running lags.
    rig.broker.partitions = [PartitionState("t", 0, (0, 1, 2), (0, 1))]
    rig.agent.run_cycle()
    assert set(read) == {"http://b1/"}  # broker 2 is not registered: not read
    assert rig.zookeeper.journaled("start")[-1]["result"] == "done, ISR complete"


def test_a_broker_that_never_answers_ends_the_start_after_the_start_timeout(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, SPEC, broker_start_timeout_s=30)
    rig.broker.answers = False
    rig.agent.run_cycle()
    assert rig.zookeeper.journaled("start")[-1]["result"] == (
        "start: broker did not answer within 30s"
    )
    assert rig.clock.slept == pytest.approx(30, abs=1)
    assert rig.zookeeper.lock_holder is None


def test_a_broker_that_exits_while_starting_is_started_again_after_a_growing_wait(
    tmp_path: Path,
) -> None:
    """The start ends as soon as the process is gone (not after the start timeout), and the
    next starts wait 10 s, then 20 s; a start that answers ends the waits."""
    rig = make_rig(tmp_path, SPEC, broker_start_timeout_s=180)
    rig.broker.exits_on_start = True
    rig.agent.run_cycle()
    assert rig.zookeeper.journaled("start")[-1]["result"] == (
        "start: broker process exited before it answered"
    )
    assert rig.clock.slept < 5
    assert rig.agent.run_cycle() == (
        "broker 0: broker exited while starting, starting it again in 10s"
    )
    assert len(rig.broker.starts) == 1
    rig.clock.advance(10)
    rig.agent.run_cycle()
    assert len(rig.broker.starts) == 2
    assert "starting it again in 20s" in rig.agent.run_cycle()
    rig.broker.exits_on_start = False
    rig.clock.advance(20)
    rig.agent.run_cycle()
    assert len(rig.broker.starts) == 3
    assert rig.zookeeper.journaled("start")[-1]["result"].startswith("done")
    rig.broker.process = STOPPED  # gone again, after a start that answered: no wait
    assert rig.agent.run_cycle() == "broker 0: broker process gone, starting it"
    assert len(rig.broker.starts) == 4


def test_zookeeper_unreachable_takes_no_action(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, SPEC)
    rig.zookeeper.up = False
    sentence = rig.agent.run_cycle()
    assert "ZooKeeper unreachable, taking no action" in sentence
    assert rig.broker.calls == []
    assert rig.zookeeper.journal == []


def test_zookeeper_lost_in_the_middle_of_a_snapshot_takes_no_action(tmp_path: Path) -> None:
    rig = started(tmp_path)
    rig.broker.calls.clear()
    rig.zookeeper.set_spec(replace(SPEC, broker_config={"num.partitions": "5"}))
    rig.zookeeper.reads_fail = True
    sentence = rig.agent.run_cycle()
    assert "ZooKeeper unreachable" in sentence
    assert rig.broker.calls == []
    rig.zookeeper.reads_fail = False
    assert "restarting" in rig.agent.run_cycle()


def test_a_paused_broker_is_restarted_only_after_the_threshold(tmp_path: Path) -> None:
    rig = started(tmp_path)
    rig.broker.process = PAUSED
    assert "not answering for 0s, watching" in rig.agent.run_cycle()
    rig.clock.advance(31)
    assert "broker paused for 31s, restarting it" in rig.agent.run_cycle()
    assert rig.broker.stops == [rig.agent.settings.broker_stop_timeout_s]
    assert rig.broker.process == RUNNING


def test_a_zookeeper_reconfig_runs_the_change_decide_returned(tmp_path: Path) -> None:
    rig = started(tmp_path, zookeeper_server_id=4)
    change = ReconfigChange(
        ReconfigKind.ADD,
        ZkServer(4, "127.0.1.1", 2888, 3888, ZookeeperRole.PARTICIPANT, 2181),
        "joining as server 4",
        from_config=0x100000003,
        before=(),
    )
    rig.ensemble.next_change = change
    assert "joining as server 4" in rig.agent.run_cycle()
    assert rig.ensemble.applied == [change]


def test_a_refused_spec_keeps_the_last_good_one(tmp_path: Path) -> None:
    rig = started(tmp_path)
    rig.zookeeper.spec_value = b'{"schema_version": 1, "cluster": "c"'
    sentence = rig.agent.run_cycle()
    assert "healthy, config at spec generation 4; refused the new spec" in sentence
    assert rig.broker.process == RUNNING


@pytest.mark.parametrize(
    ("bad_value", "reason"),
    [
        (b"{not json", "spec is not valid JSON"),
        (
            b'{"schema_version": 1, "cluster": "c", "kafka_version": "3.9.2",'
            b' "broker_count": "three", "zones": ["zone-a"]}',
            "spec.broker_count must be an integer, got str",
        ),
        (b'{"schema_version": 9}', "spec.schema_version is 9"),
    ],
)
def test_a_malformed_spec_is_refused_by_name_restarts_nothing_and_a_repair_clears_it(
    tmp_path: Path, bad_value: bytes, reason: str
) -> None:
    rig = started(tmp_path)
    rig.zookeeper.spec_value = bad_value
    for _ in range(3):  # a few cycles: the refusal stays, nothing is done about it
        sentence = rig.agent.run_cycle()
        assert f"refused the new spec: {reason}" in sentence, sentence
        assert "keeping the last good one" in sentence
    member = rig.zookeeper.member(0)
    assert reason in member["sentence"] and member["spec_generation"] == SPEC.generation
    rig.zookeeper.spec_value = SPEC.encode()  # the operator repairs it
    assert "refused" not in rig.agent.run_cycle()
    assert rig.broker.starts == ["3.9.2"] and rig.broker.stops == []
    assert [e["action"] for e in rig.zookeeper.journal] == []


def test_without_a_spec_the_broker_is_not_started(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, None)
    assert "waiting for a valid cluster spec (no spec at /kaas/c/spec)" in rig.agent.run_cycle()
    assert rig.broker.process == STOPPED


def test_a_new_identity_asks_for_a_reload_once_no_restart_runs(tmp_path: Path) -> None:
    # Kafka and TLS clients read certificate files once: the agent compares the identity
    # files with those it started with and reloads (main re-executes it) when they differ.
    rig = make_rig(tmp_path, None, spawn_later=True)
    identity = rig.agent.settings.identity
    assert not rig.agent.identity_changed()
    identity.directory.mkdir(parents=True, exist_ok=True)
    identity.trust_bundle.write_text("a CA\n")
    assert rig.agent.identity_changed()

    class Running:
        def is_alive(self) -> bool:
            return True

    rig.agent.long_action = LongAction("restart", "restart 1/3", Running())
    assert not rig.agent.identity_changed()  # the restart finishes first
    rig.agent.long_action = None
    assert rig.agent.identity_changed()


def test_a_change_of_the_specs_log_bounds_reaches_the_vms_logging_files(tmp_path: Path) -> None:
    """The cycle hands the spec's bounds to the logging files; a change rewrites them while
    the broker keeps running (no restart for a logging bound)."""
    logback = tmp_path / "zookeeper-logback.xml"
    log4j = tmp_path / "kafka-log4j.properties"
    rig = started(tmp_path, zookeeper_log_config=str(logback), broker_log_config=str(log4j))
    assert "<maxFileSize>100MB</maxFileSize>" in logback.read_text()  # the defaults
    rig.zookeeper.set_spec(replace(SPEC, logs=LogLimits(max_file_mb=5, files=2), generation=5))
    rig.agent.run_cycle()
    assert "<maxFileSize>5MB</maxFileSize>" in logback.read_text()
    assert "MaxBackupIndex=2" in log4j.read_text()
    assert rig.broker.starts == ["3.9.2"]  # the first start only
