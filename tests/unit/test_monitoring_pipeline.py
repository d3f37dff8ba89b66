"""The monitoring pipeline's pure parts: the spec's targets, the rendered daemon configs,
the local layout; and the agent's publisher following a new statsd target."""

from __future__ import annotations

import configparser
import json
import socket
from pathlib import Path

import pytest

from agent.metrics import MetricsPublisher
from agent.metrics.record import MetricsSample
from management_plane.monitoring.pipeline import (
    Daemon,
    commands,
    plan_pipeline,
    plan_service_pipeline,
    port_clash,
)
from planner.contracts.monitoring import MonitoringTargets
from planner.contracts.spec import ClusterSpec, SpecError, parse_spec
from planner.contracts.vm_config.monitoring import (
    render_carbon_conf,
    render_graphite_web_settings,
    render_statsd_config,
    render_storage_aggregation,
    render_storage_schemas,
)

pytestmark = pytest.mark.unit

SPEC = {
    "schema_version": 1,
    "cluster": "c1",
    "kafka_version": "3.9.2",
    "broker_count": 3,
    "zones": ["zone-a"],
}


def test_spec_round_trips_the_monitoring_targets() -> None:
    targets = MonitoringTargets("127.0.1.253", 8125, "http://127.0.1.253:8080")
    spec = ClusterSpec("c1", "3.9.2", 3, ("zone-a",), monitoring=targets)
    assert parse_spec(spec.encode()) == spec
    assert json.loads(spec.encode())["monitoring"] == {
        "statsd": "127.0.1.253:8125",
        "graphite_url": "http://127.0.1.253:8080",
    }


def test_spec_without_monitoring_has_none() -> None:
    assert parse_spec(json.dumps(SPEC)).monitoring is None
    assert "monitoring" not in json.loads(ClusterSpec("c1", "3.9.2", 3, ("a",)).encode())


@pytest.mark.parametrize(
    ("monitoring", "message"),
    [
        ("x", "spec.monitoring must be an object"),
        ({"statsd": "h:1", "graphite_url": "http://g", "extra": 1}, "unknown keys: extra"),
        ({"graphite_url": "http://g"}, "spec.monitoring.statsd must be a HOST:PORT string"),
        ({"statsd": "nohost", "graphite_url": "http://g"}, "must be HOST:PORT, got 'nohost'"),
        ({"statsd": "h:0", "graphite_url": "http://g"}, "port must be 1-65535, got 0"),
        ({"statsd": "h:٣", "graphite_url": "http://g"}, "must be HOST:PORT"),
        ({"statsd": "h:1", "graphite_url": "ftp://g"}, "graphite_url must be an http(s) URL"),
    ],
)
def test_spec_refuses_bad_monitoring(monitoring: object, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(json.dumps({**SPEC, "monitoring": monitoring}))


def test_layout_puts_every_daemon_on_the_monitoring_address(tmp_path: Path) -> None:
    layout = plan_pipeline(tmp_path, "127.0.5")
    assert layout.host.address == "127.0.5.253"
    assert layout.targets() == MonitoringTargets("127.0.5.253", 8125, "http://127.0.5.253:8080")
    assert layout.home == tmp_path.resolve() / "monitoring"
    render = commands(layout)[Daemon.RENDER]
    assert "127.0.5.253:8080" in render


def test_statsd_config_writes_gauges_under_their_own_names(tmp_path: Path) -> None:
    host = plan_pipeline(tmp_path, "127.0.5").host
    config = json.loads(render_statsd_config(host))
    assert (config["address"], config["port"]) == ("127.0.5.253", 8125)
    assert (config["graphiteHost"], config["graphitePort"]) == ("127.0.5.253", 2003)
    assert config["graphite"]["legacyNamespace"] is False
    assert config["graphite"]["globalPrefix"] == config["graphite"]["prefixGauge"] == ""
    assert config["deleteGauges"] is True
    assert config["flushInterval"] == 5_000


def test_carbon_conf_listens_on_the_monitoring_address(tmp_path: Path) -> None:
    host = plan_pipeline(tmp_path, "127.0.5").host
    parser = configparser.ConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(render_carbon_conf(host))
    cache = parser["cache"]
    assert cache["LINE_RECEIVER_INTERFACE"] == "127.0.5.253"
    assert cache["LINE_RECEIVER_PORT"] == "2003"
    assert cache["CACHE_QUERY_PORT"] == "7002"
    assert cache["MAX_CREATES_PER_MINUTE"] == "inf"
    assert cache["LOCAL_DATA_DIR"] == f"{host.storage_dir}/whisper"
    schemas = configparser.ConfigParser()
    schemas.read_string(render_storage_schemas())
    assert schemas["everything"]["retentions"] == "10s:1d,1m:30d"
    aggregation = configparser.ConfigParser()
    aggregation.read_string(render_storage_aggregation())
    assert aggregation["worst_counts"]["aggregationMethod"] == "max"


def test_graphite_web_settings_are_python_naming_the_storage(tmp_path: Path) -> None:
    host = plan_pipeline(tmp_path, "127.0.5").host
    namespace: dict[str, object] = {}
    exec(render_graphite_web_settings(host, "k3y"), namespace)
    assert namespace["SECRET_KEY"] == "k3y"
    assert namespace["WHISPER_DIR"] == f"{host.storage_dir}/whisper"
    assert namespace["CARBONLINK_HOSTS"] == ["127.0.5.253:7002:a"]


def _sample() -> MetricsSample:
    record = {
        "cluster": "c1",
        "broker_id": 2,
        "broker": {"under_replicated_partitions": 0},
        "host": {},
        "topics": [],
        "partitions": [],
        "errors": [],
    }
    return MetricsSample(record=record, errors=())


def test_publisher_sends_to_a_new_statsd_target() -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as first,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as second,
    ):
        for receiver in (first, second):
            receiver.bind(("127.0.0.1", 0))
            receiver.settimeout(5)
        publisher = MetricsPublisher("127.0.0.1", first.getsockname()[1], "kaas", None)
        try:
            publisher.publish(_sample())
            assert b"kaas.c1.brokers.2.under_replicated_partitions:0.0|g" in first.recv(4096)
            publisher.set_statsd_target("127.0.0.1", second.getsockname()[1])
            publisher.publish(_sample())
            assert b"under_replicated_partitions:0.0|g" in second.recv(4096)
        finally:
            publisher.close()


def test_the_service_pipeline_lives_in_the_service_home_on_the_given_address(
    tmp_path: Path,
) -> None:
    layout = plan_service_pipeline(tmp_path, "10.20.0.5")
    assert layout.home == tmp_path.resolve() / "monitoring"
    assert layout.targets() == MonitoringTargets("10.20.0.5", 8125, "http://10.20.0.5:8080")
    render = commands(layout)[Daemon.RENDER]
    assert render[render.index("--bind") + 1] == "10.20.0.5:8080"


@pytest.mark.parametrize(
    ("host", "port", "clash"),
    [
        ("0.0.0.0", 8080, "monitoring render port on 10.20.0.5"),
        ("10.20.0.5", 2003, "monitoring carbon_line port"),
        ("10.20.0.5", 8443, None),
        ("127.0.0.1", 8080, None),  # another address: both bind
        ("10.20.0.5", 8125, None),  # statsd's port is UDP; the API's is TCP
    ],
)
def test_an_api_port_the_pipeline_needs_is_named(host: str, port: int, clash: str | None) -> None:
    found = port_clash(plan_service_pipeline(Path("/srv/kaas"), "10.20.0.5"), host, port)
    assert (found is None) if clash is None else (found is not None and clash in found)
