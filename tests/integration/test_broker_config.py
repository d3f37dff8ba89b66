"""Broker config against the shared real cluster: the rendered config matches what `kaas up`
started, dynamic changes are applied and read back on real brokers, and bad input changes
nothing. Every test puts the cluster back as it found it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from agent.broker_config import (
    ConfigChange,
    ConfigDiff,
    ConfigLayer,
    RunningValue,
    diff_broker_config,
)
from agent.broker_config.apply import (
    ConfigCommandClusterDefaults,
    apply_config_diff,
    describe_running_config,
)
from management_plane.local import render as local_render
from management_plane.local.image import find_java, load_image
from management_plane.local.layout import ClusterLayout, VmLayout
from planner.contracts.spec import ClusterSpec
from planner.contracts.vm_config import (
    BROKER_CONFIGS,
    BrokerConfigError,
    BrokerFacts,
    UpdateMode,
    parse_server_properties,
    render_server_properties,
)
from planner.contracts.vm_config.kafka_tls import (
    RENDERED_OUTSIDE_CATALOG,
    plain_tenant_listener_security,
)
from tests.harness import ClusterHandle

pytestmark = pytest.mark.integration

# The shared cluster runs TLS only: the legacy plain tenant listener's keys are not rendered.
OUTSIDE_CATALOG_ON_TLS = RENDERED_OUTSIDE_CATALOG - set(plain_tenant_listener_security())


@pytest.fixture(scope="module")
def admin(kafka_cluster: ClusterHandle) -> AdminClient:
    return AdminClient(kafka_cluster.client_config())


@pytest.fixture(scope="module")
def cluster_defaults(kafka_cluster: ClusterHandle) -> ConfigCommandClusterDefaults:
    return ConfigCommandClusterDefaults(
        java=str(find_java()),
        kafka_libs=load_image(verify=False).kafka_libs(),
        kafka=kafka_cluster.admin,
    )


def facts_of(layout: ClusterLayout, vm: VmLayout) -> BrokerFacts:
    """The facts `kaas up` rendered the shared cluster's brokers from."""
    return local_render.broker_facts(layout, vm)


def spec_of(layout: ClusterLayout, broker_config: dict[str, str] | None = None) -> ClusterSpec:
    return replace(local_render.local_spec(layout, "3.9.2"), broker_config=broker_config or {})


def values_of(admin: AdminClient, key: str, layout: ClusterLayout) -> dict[int, RunningValue]:
    return {vm.broker_id: describe_running_config(admin, vm.broker_id)[key] for vm in layout.vms}


def settled_values_of(
    admin: AdminClient,
    key: str,
    layout: ClusterLayout,
    expected: dict[int, RunningValue],
    timeout: float = 15.0,
) -> dict[int, RunningValue]:
    """Every broker's value of `key`, once they all show `expected` or `timeout` has passed:
    the other brokers take a dynamic change from ZooKeeper a moment after the one asked."""
    deadline = time.monotonic() + timeout
    values = values_of(admin, key, layout)
    while values != expected and time.monotonic() < deadline:
        time.sleep(0.25)
        values = values_of(admin, key, layout)
    return values


def remove_per_broker(admin: AdminClient, broker_id: int, key: str) -> None:
    """Clean-up of last resort: drop this broker's dynamic value of `key`."""
    entry = ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)
    resource = ConfigResource("broker", str(broker_id), incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)


@pytest.fixture
def cleanup(
    admin: AdminClient, cluster_defaults: ConfigCommandClusterDefaults
) -> Iterator[list[tuple[int | None, str]]]:
    """(broker id, key) pairs a test may have left set; broker id None: the cluster default.
    Removed after the test only where still set, so a passing test costs nothing here."""
    touched: list[tuple[int | None, str]] = []
    yield touched
    for broker_id, key in touched:
        if broker_id is None:
            if describe_running_config(admin, 0)[key].layer is ConfigLayer.CLUSTER_DEFAULT:
                cluster_defaults.alter([ConfigChange(key, None, None)])
        elif describe_running_config(admin, broker_id)[key].layer is ConfigLayer.PER_BROKER:
            remove_per_broker(admin, broker_id, key)


def test_the_catalog_is_the_running_brokers_own_list(
    admin: AdminClient, kafka_cluster: ClusterHandle
) -> None:
    resource = ConfigResource("broker", "0")
    entries = admin.describe_configs([resource])[resource].result(timeout=15)
    # Besides the table, a broker reports the keys of its file outside it: super.users and
    # the listener-prefixed ones, each with its value hidden (a key Kafka cannot type, or a
    # password) or as the file has it.
    assert set(entries) == set(BROKER_CONFIGS) | OUTSIDE_CATALOG_ON_TLS
    vm = next(v for v in kafka_cluster.layout.vms if v.broker_id == 0)
    in_file = parse_server_properties((vm.config_dir / "server.properties").read_text())
    shown = {
        key: entries[key].value
        for key in OUTSIDE_CATALOG_ON_TLS
        if entries[key].value not in (None, in_file[key])
    }
    assert shown == {}
    assert entries["super.users"].value is None  # the authorizer's key: Kafka cannot type it
    disagree = [
        name
        for name, entry in entries.items()
        if name in BROKER_CONFIGS
        and entry.is_read_only != (BROKER_CONFIGS[name].update_mode is UpdateMode.READ_ONLY)
    ]
    assert disagree == []


def test_a_cluster_started_by_kaas_up_shows_no_config_difference(
    kafka_cluster: ClusterHandle, admin: AdminClient
) -> None:
    layout = kafka_cluster.layout
    for vm in layout.vms:
        desired = render_server_properties(spec_of(layout), facts_of(layout, vm))
        running = describe_running_config(admin, vm.broker_id)
        assert diff_broker_config(desired, running) == ConfigDiff(), f"broker {vm.broker_id}"


def test_per_broker_change_is_applied_read_back_and_converged_away(
    kafka_cluster: ClusterHandle,
    admin: AdminClient,
    cluster_defaults: ConfigCommandClusterDefaults,
    cleanup: list[tuple[int | None, str]],
) -> None:
    layout, key = kafka_cluster.layout, "log.cleaner.threads"
    vm = layout.vms[1]
    before = values_of(admin, key, layout)
    assert before[vm.broker_id] == RunningValue("1", ConfigLayer.DEFAULT)
    cleanup.append((vm.broker_id, key))

    one_broker = ConfigDiff(per_broker=(ConfigChange(key, "1", "2"),))
    result = apply_config_diff(admin, vm.broker_id, one_broker, cluster_defaults)
    assert result.ok, result.error
    assert result.verified == one_broker.per_broker
    after = values_of(admin, key, layout)
    assert after[vm.broker_id] == RunningValue("2", ConfigLayer.PER_BROKER)
    assert {b: v for b, v in after.items() if b != vm.broker_id} == {
        b: v for b, v in before.items() if b != vm.broker_id
    }

    # The spec does not ask for it: the agent's diff removes the stray override.
    desired = render_server_properties(spec_of(layout), facts_of(layout, vm))
    converge = diff_broker_config(desired, describe_running_config(admin, vm.broker_id))
    assert converge == ConfigDiff(per_broker=(ConfigChange(key, "2", None),))
    result = apply_config_diff(admin, vm.broker_id, converge, cluster_defaults)
    assert result.ok, result.error
    assert values_of(admin, key, layout) == before
    assert diff_broker_config(desired, describe_running_config(admin, vm.broker_id)).empty


def test_cluster_wide_change_from_the_spec_reaches_every_broker_and_is_removed_again(
    kafka_cluster: ClusterHandle,
    admin: AdminClient,
    cluster_defaults: ConfigCommandClusterDefaults,
    cleanup: list[tuple[int | None, str]],
) -> None:
    # How long the cleaner sleeps when it has nothing to clean: harmless for other tests.
    layout, key = kafka_cluster.layout, "log.cleaner.backoff.ms"
    vm = layout.vms[0]
    before = values_of(admin, key, layout)
    assert before[vm.broker_id] == RunningValue("15000", ConfigLayer.DEFAULT)
    cleanup.append((None, key))

    desired = render_server_properties(spec_of(layout, {key: "16000"}), facts_of(layout, vm))
    diff = diff_broker_config(desired, describe_running_config(admin, vm.broker_id))
    assert diff == ConfigDiff(cluster_wide=(ConfigChange(key, "15000", "16000"),))
    result = apply_config_diff(admin, vm.broker_id, diff, cluster_defaults)
    assert result.ok, result.error
    assert result.verified == diff.cluster_wide
    everywhere = {
        b.broker_id: RunningValue("16000", ConfigLayer.CLUSTER_DEFAULT) for b in layout.vms
    }
    assert settled_values_of(admin, key, layout, everywhere) == everywhere

    # Another broker's agent, same spec: nothing left to do.
    other = layout.vms[2]
    desired_other = render_server_properties(
        spec_of(layout, {key: "16000"}), facts_of(layout, other)
    )
    assert diff_broker_config(desired_other, describe_running_config(admin, other.broker_id)).empty

    # The key leaves the spec: the cluster-wide default is removed.
    desired = render_server_properties(spec_of(layout), facts_of(layout, vm))
    diff = diff_broker_config(desired, describe_running_config(admin, vm.broker_id))
    assert diff == ConfigDiff(cluster_wide=(ConfigChange(key, "16000", None),))
    result = apply_config_diff(admin, vm.broker_id, diff, cluster_defaults)
    assert result.ok, result.error
    assert settled_values_of(admin, key, layout, before) == before


def test_unknown_key_and_wrong_type_are_refused_before_anything_changes(
    kafka_cluster: ClusterHandle, admin: AdminClient, cluster_defaults: ConfigCommandClusterDefaults
) -> None:
    layout = kafka_cluster.layout
    vm = layout.vms[0]
    before = {b.broker_id: describe_running_config(admin, b.broker_id) for b in layout.vms}

    for bad, named in (
        ({"log.retention.dayz": "7"}, "unknown key 'log.retention.dayz'"),
        ({"num.io.threads": "abc"}, "num.io.threads='abc' is not a whole number (int)"),
    ):
        with pytest.raises(BrokerConfigError) as refused:
            render_server_properties(spec_of(layout, bad), facts_of(layout, vm))
        assert named in str(refused.value)

    # The same values handed straight to the adapter never reach Kafka either.
    diff = ConfigDiff(
        per_broker=(ConfigChange("num.io.threads", "4", "abc"),),
        cluster_wide=(ConfigChange("log.retention.dayz", None, "7"),),
    )
    result = apply_config_diff(admin, vm.broker_id, diff, cluster_defaults)
    assert result.error is not None
    assert "num.io.threads='abc'" in result.error
    assert "'log.retention.dayz'" in result.error
    assert result.error.endswith("nothing applied")
    time.sleep(1.0)  # a change made anyway would show on the brokers by now
    after = {b.broker_id: describe_running_config(admin, b.broker_id) for b in layout.vms}
    assert after == before


def test_a_value_kafka_refuses_is_named_and_nothing_is_applied(
    kafka_cluster: ClusterHandle,
    admin: AdminClient,
    cluster_defaults: ConfigCommandClusterDefaults,
    cleanup: list[tuple[int | None, str]],
) -> None:
    vm = kafka_cluster.layout.vms[2]
    before = describe_running_config(admin, vm.broker_id)
    cleanup.extend([(vm.broker_id, "num.io.threads"), (None, "log.cleaner.threads")])
    # Well-typed, but Kafka's LogCleaner refuses more than double the current threads.
    diff = ConfigDiff(
        per_broker=(ConfigChange("num.io.threads", "4", "5"),),
        cluster_wide=(ConfigChange("log.cleaner.threads", "1", "8"),),
    )
    result = apply_config_diff(admin, vm.broker_id, diff, cluster_defaults)
    assert result.error is not None
    assert result.error.startswith("Kafka refused log.cleaner.threads=8: ")
    assert "cannot be increased to more than double" in result.error
    assert result.error.endswith("nothing applied")
    time.sleep(1.0)  # a change made anyway would show on the broker by now
    assert describe_running_config(admin, vm.broker_id) == before


def test_a_failing_cluster_wide_step_undoes_the_per_broker_step(
    kafka_cluster: ClusterHandle,
    admin: AdminClient,
    cluster_defaults: ConfigCommandClusterDefaults,
    cleanup: list[tuple[int | None, str]],
) -> None:
    vm = kafka_cluster.layout.vms[1]
    before = describe_running_config(admin, vm.broker_id)
    protocol_map = before["listener.security.protocol.map"].value
    assert protocol_map is not None
    cleanup.append((vm.broker_id, "num.io.threads"))
    # Kafka accepts a per-broker key on one broker (the dry run passes) but refuses it as a
    # cluster-wide default: the per-broker change made just before must be undone.
    diff = ConfigDiff(
        per_broker=(ConfigChange("num.io.threads", "4", "5"),),
        cluster_wide=(ConfigChange("listener.security.protocol.map", protocol_map, protocol_map),),
    )
    result = apply_config_diff(admin, vm.broker_id, diff, cluster_defaults)
    assert result.error is not None
    assert result.error.startswith("cluster-wide default of listener.security.protocol.map refused")
    assert "Cannot update these configs at default cluster level" in result.error
    assert result.error.endswith("the per-broker changes were undone")
    assert describe_running_config(admin, vm.broker_id) == before


def test_kafka_updates_keystore_configs_only_with_a_listener_prefix(admin: AdminClient) -> None:
    """Why classify.py restarts for ssl.keystore.* and ssl.truststore.* (validate only)."""
    entry = ConfigEntry("ssl.keystore.type", "PKCS12", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("broker", "0", incremental_configs=[entry])
    future = admin.incremental_alter_configs([resource], validate_only=True)[resource]
    with pytest.raises(Exception, match="only per-listener using the listener prefix"):
        future.result(timeout=15)
