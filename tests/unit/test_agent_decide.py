from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.broker_config import ConfigChange, ConfigDiff
from agent.decide import (
    PAUSED,
    RUNNING,
    STOPPED,
    ApplyDynamicConfig,
    BrokerLaunch,
    BrokerView,
    ConfigChanges,
    RestartBroker,
    Snapshot,
    StartBroker,
    awaits_restart,
    decide,
)
from agent.identity import candidate_ids
from agent.safety import lagging_on_running_brokers, restart_blockers
from agent.settings import SettingsError, load_settings, parse_settings
from planner.contracts.kafka_state import PartitionState
from planner.contracts.spec import ClusterSpec

pytestmark = pytest.mark.unit

SPEC = ClusterSpec(
    cluster="c", kafka_version="3.9.2", broker_count=3, zones=("zone-a",), generation=4
)
HEALTHY = BrokerView(RUNNING, registered=True, responsive=True)
RENDERED = {"broker.id": "1"}


def read_only_changes(*keys: str) -> ConfigChanges:
    changes = tuple(ConfigChange(key, "old", "new") for key in keys)
    return ConfigChanges(RENDERED, ConfigDiff(read_only=changes), running_known=True)


def dynamic_changes(*keys: str) -> ConfigChanges:
    changes = tuple(ConfigChange(key, "1", "2") for key in keys)
    return ConfigChanges(RENDERED, ConfigDiff(per_broker=changes), running_known=True)


def snap(**changes: object) -> Snapshot:
    base: dict[str, object] = {
        "broker_id": 1,
        "zk_connected": True,
        "spec": SPEC,
        "broker": HEALTHY,
    }
    base.update(changes)
    return Snapshot(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("snapshot", "kind", "sentence"),
    [
        (
            snap(zk_connected=False, broker=BrokerView(STOPPED, False, False)),
            "none",
            "ZooKeeper unreachable",
        ),
        (
            snap(long_action="restart 2/3: waiting for ISR"),
            "none",
            "broker 1: restart 2/3: waiting for ISR",
        ),
        (
            snap(spec=None, spec_error="spec is not valid JSON"),
            "none",
            "waiting for a valid cluster spec (spec is not valid JSON)",
        ),
        (
            snap(broker=BrokerView(STOPPED, False, False), start_wait_s=19.6),
            "none",
            "broker 1: broker exited while starting, starting it again in 20s",
        ),
        (
            snap(broker=BrokerView(STOPPED, False, False)),
            "start",
            "broker process gone, starting it",
        ),
        (
            snap(broker=BrokerView(PAUSED, True, False, 31.0)),
            "restart",
            "broker paused for 31s, restarting it",
        ),
        (
            snap(broker=BrokerView(PAUSED, True, False, 5.0)),
            "none",
            "not answering for 5s, watching",
        ),
        (
            snap(broker=BrokerView(RUNNING, True, False, 45.0)),
            "restart",
            "not answering for 45s, restarting it",
        ),
        (snap(broker=BrokerView(RUNNING, False, True)), "none", "broker not registered, watching"),
        (
            snap(
                config=read_only_changes(
                    "log.dirs.x",
                )
            ),
            "restart",
            "read-only config changed (log.dirs.x)",
        ),
        (
            snap(
                config=dynamic_changes(
                    "log.cleaner.threads",
                )
            ),
            "apply_dynamic",
            "applying dynamic config",
        ),
        (
            snap(
                config=ConfigChanges(
                    diff=dynamic_changes("x").diff, error="unknown config key bogus.key"
                )
            ),
            "none",
            "refusing config change: unknown config key bogus.key",
        ),
        (snap(), "none", "broker 1: healthy, config at spec generation 4"),
        (snap(controller=RUNNING), "none", "broker 1: healthy, config at spec generation 4"),
        (snap(controller=STOPPED), "start_controller", "controller process gone, starting it"),
        (
            snap(controller=STOPPED, broker=BrokerView(STOPPED, False, False)),
            "start_controller",
            "controller process gone",
        ),
        (
            snap(controller=STOPPED, long_action="start 2/3: waiting for the broker to answer"),
            "start_controller",
            "controller process gone",
        ),
        (
            snap(controller=STOPPED, zk_connected=False),
            "none",
            "ZooKeeper unreachable",
        ),
        (
            snap(spec_error="spec.broker_count must be at least 1"),
            "none",
            "refused the new spec: spec.broker_count must be at least 1",
        ),
    ],
)
def test_decide_table(snapshot: Snapshot, kind: str, sentence: str) -> None:
    action = decide(snapshot)
    assert action.kind == kind
    assert sentence in action.reason


def test_controller_restarts_last() -> None:
    waiting = decide(
        snap(
            controller_id=1,
            brokers_awaiting_restart=frozenset({0, 1, 2}),
            config=read_only_changes(
                "a",
            ),
        )
    )
    assert waiting.kind == "none"
    assert "controller restarts last, waiting for brokers 0, 2" in waiting.reason
    alone = decide(
        snap(
            controller_id=1,
            brokers_awaiting_restart=frozenset({1}),
            config=read_only_changes(
                "a",
            ),
        )
    )
    assert alone.kind == "restart"
    not_controller = decide(
        snap(
            controller_id=0,
            brokers_awaiting_restart=frozenset({0, 2}),
            config=read_only_changes(
                "a",
            ),
        )
    )
    assert not_controller.kind == "restart"


def p(
    isr: tuple[int, ...], replicas: tuple[int, ...] = (0, 1, 2), topic: str = "t"
) -> PartitionState:
    return PartitionState(topic, 0, replicas, isr)


@pytest.mark.parametrize(
    ("partition", "min_isr", "blocked"),
    [
        (p((0, 1, 2)), 2, False),  # full ISR: one may go
        (p((1, 2)), 2, True),  # at min ISR and broker 1 is in it
        (p((0, 2)), 2, False),  # broker 1 is not in the ISR: stopping it changes nothing
        (p((1,), replicas=(1, 2)), 2, False),  # RF at or below min ISR: ignored
        (p((1, 2), replicas=(0, 1, 2, 3)), 1, False),  # above min ISR
        (p((1,), replicas=(0, 1, 2)), 1, True),
    ],
)
def test_restart_safety(partition: PartitionState, min_isr: int, blocked: bool) -> None:
    blockers = restart_blockers([partition], 1, {}, min_isr)
    assert bool(blockers) == blocked
    if blocked:
        assert blockers[0].startswith("t-0 (ISR ")


def test_topic_min_isr_override_wins() -> None:
    assert restart_blockers([p((1, 2))], 1, {"t": 1}, 2) == []


def test_candidate_ids_are_lowest_first() -> None:
    assert candidate_ids([0, 2], 5) == [1, 3, 4]
    assert candidate_ids([0, 1, 2], 3) == []


REQUIRED = {
    "cluster": "c1",
    "zookeeper_hosts": "127.0.0.1:2181",
    "vm_id": "vm1",
    "address": "127.0.1.1",
    "zone": "zone-a",
    "data_dir": "/data/kafka",
    "config_dir": "/etc/kaas/kafka",
}


def test_settings_defaults_and_types() -> None:
    settings = parse_settings({**REQUIRED, "loop_interval_s": 2})
    assert settings.loop_interval_s == 2.0
    assert settings.kafka_port == 9092
    assert settings.kafka_tenant_port == 9094
    assert settings.data_dir == Path("/data/kafka")
    assert settings.bootstrap == "127.0.1.1:9092"
    assert settings.local_state_dir == Path("/data")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bogus": 1}, "unknown setting(s) bogus"),
        ({"kafka_port": "9092"}, "kafka_port must be a non-negative integer"),
        ({"kafka_port": 70000}, "kafka_port must be 1-65535"),
        ({"kafka_tenant_port": 0}, "kafka_tenant_port must be 1-65535"),
        ({"loop_interval_s": 0}, "loop_interval_s must be a positive number"),
        ({"supervisor": "docker"}, 'supervisor must be "local" or "systemd"'),
        ({"cluster": "a/b"}, "cluster name 'a/b' is invalid"),
        ({"data_dir": ""}, "data_dir must be a path string"),
        ({"controller_port": 9093}, "controller_port needs controller_bootstrap"),
        (
            {"controller_port": 0, "controller_bootstrap": "a:1", "controller_data_dir": "/m"},
            "controller_port must be 1-65535",
        ),
    ],
)
def test_bad_settings_are_named(change: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError) as error:
        parse_settings({**REQUIRED, **change}, "agent.json")
    assert message in str(error.value)
    assert str(error.value).startswith("agent.json: ")


def test_missing_settings_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"missing required setting\(s\) address, zone"):
        parse_settings({k: v for k, v in REQUIRED.items() if k not in ("address", "zone")})
    bad = tmp_path / "agent.json"
    bad.write_text("{")
    with pytest.raises(SettingsError, match="not valid JSON"):
        load_settings(bad)
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "absent.json")
    bad.write_text(json.dumps(REQUIRED))
    assert load_settings(bad).vm_id == "vm1"


@pytest.mark.parametrize(
    ("replicas", "isr", "registered", "lagging"),
    [
        # Cold start: broker 0 is down, 1 and 2 are in sync: nothing can catch up.
        ((0, 1, 2), (1, 2), (1, 2), []),
        # Broker 2 runs but is not in the ISR yet: wait for it.
        ((0, 1, 2), (1,), (1, 2), ["t-0"]),
        # Everyone runs and is in sync.
        ((0, 1, 2), (0, 1, 2), (0, 1, 2), []),
        # Everyone runs, one is behind (a rolling restart's normal wait).
        ((0, 1, 2), (0, 2), (0, 1, 2), ["t-0"]),
    ],
)
def test_only_replicas_on_running_brokers_are_waited_for(
    replicas: tuple[int, ...], isr: tuple[int, ...], registered: tuple[int, ...], lagging: list[str]
) -> None:
    state = PartitionState("t", 0, replicas, isr)
    assert lagging_on_running_brokers([state], registered) == lagging


def test_actions_carry_what_running_them_needs() -> None:
    start = decide(snap(broker=BrokerView(STOPPED, False, False), config=read_only_changes()))
    assert isinstance(start, StartBroker)
    assert start.launch == BrokerLaunch("3.9.2", RENDERED)
    restart = decide(snap(config=read_only_changes("num.partitions")))
    assert isinstance(restart, RestartBroker)
    assert (restart.launch, restart.keys) == (BrokerLaunch("3.9.2", RENDERED), ("num.partitions",))
    changes = dynamic_changes("log.cleaner.threads")
    dynamic = decide(snap(config=changes))
    assert isinstance(dynamic, ApplyDynamicConfig)
    assert (dynamic.diff, dynamic.server_properties) == (changes.diff, RENDERED)
    assert dynamic.kafka_version == "3.9.2"
    bad = ConfigChanges(error="broker_config: unknown key 'bogus'")
    refused_start = decide(snap(broker=BrokerView(STOPPED, False, False), config=bad))
    assert isinstance(refused_start, StartBroker)
    assert refused_start.launch.server_properties is None
    assert refused_start.launch.config_error == "broker_config: unknown key 'bogus'"


UNANSWERED = BrokerView(RUNNING, registered=True, responsive=False)


@pytest.mark.parametrize(
    ("snapshot", "pending"),
    [
        (snap(config=ConfigChanges(rendered=RENDERED, running_known=True)), False),
        (snap(config=read_only_changes("log.dirs")), True),
        # Running but its config unread: it may still need the restart, so not done.
        (snap(broker=UNANSWERED, config=ConfigChanges(rendered=RENDERED)), True),
        # Stopped: its start writes and applies the rendered config.
        (snap(broker=BrokerView(STOPPED, False, False), config=ConfigChanges(RENDERED)), False),
        # A spec that does not render: refused, nothing to wait for.
        (snap(broker=UNANSWERED, config=ConfigChanges(error="bad key")), False),
        (snap(config=dynamic_changes("log.retention.ms")), False),
    ],
)
def test_a_member_whose_broker_did_not_answer_counts_as_awaiting_its_restart(
    snapshot: Snapshot, pending: bool
) -> None:
    assert awaits_restart(snapshot) is pending
