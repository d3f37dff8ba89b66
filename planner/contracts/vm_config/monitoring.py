"""The monitoring host's config files: the statsd daemon, carbon (with its whisper schemas)
and the Graphite render API (graphite-web's settings module). Pure: the caller passes every
address, port and folder.

On a real deployment these run on the management plane's host; locally on one loopback
address of the cluster's range.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Whisper keeps 10 s points for a day and 1 min points for 30 days (the SLO's window).
RETENTIONS = "10s:1d,1m:30d"


@dataclass(frozen=True)
class MonitoringHost:
    address: str
    statsd_port: int
    statsd_admin_port: int
    carbon_line_port: int
    carbon_pickle_port: int
    carbon_query_port: int
    render_port: int
    storage_dir: str  # whisper files, carbon's and graphite-web's own state
    log_dir: str
    flush_interval_s: int = 5  # half the agents' interval: a sample waits at most 5 s to be written


def render_statsd_config(host: MonitoringHost) -> str:
    """Etsy statsd's config (it reads a JavaScript object literal; JSON is one). Gauges are
    written under their own names (no `stats.gauges.` prefix), so the agents' `kaas.<cluster>`
    names are Graphite's; a gauge nobody sent in a flush interval is dropped, so a silent
    agent shows as missing data rather than as its last value forever."""
    config = {
        "address": host.address,
        "port": host.statsd_port,
        "mgmt_address": host.address,
        "mgmt_port": host.statsd_admin_port,
        "graphiteHost": host.address,
        "graphitePort": host.carbon_line_port,
        "flushInterval": host.flush_interval_s * 1000,
        "deleteGauges": True,
        "backends": ["./backends/graphite"],
        "graphite": {
            "legacyNamespace": False,
            "globalPrefix": "",
            "prefixGauge": "",
            "prefixCounter": "counters",
            "prefixTimer": "timers",
            "prefixSet": "sets",
        },
    }
    return json.dumps(config, indent=2) + "\n"


def render_carbon_conf(host: MonitoringHost) -> str:
    storage = host.storage_dir
    lines = [
        "[cache]",
        f"STORAGE_DIR = {storage}",
        f"LOCAL_DATA_DIR = {storage}/whisper",
        f"WHITELISTS_DIR = {storage}/lists",
        f"CONF_DIR = {storage}/conf",
        f"LOG_DIR = {host.log_dir}",
        f"PID_DIR = {storage}",
        "USER =",
        "MAX_CACHE_SIZE = inf",
        "MAX_UPDATES_PER_SECOND = 500",
        # New series must appear at once: a broker's first points are what alerts read.
        "MAX_CREATES_PER_MINUTE = inf",
        f"LINE_RECEIVER_INTERFACE = {host.address}",
        f"LINE_RECEIVER_PORT = {host.carbon_line_port}",
        "ENABLE_UDP_LISTENER = False",
        f"PICKLE_RECEIVER_INTERFACE = {host.address}",
        f"PICKLE_RECEIVER_PORT = {host.carbon_pickle_port}",
        f"CACHE_QUERY_INTERFACE = {host.address}",
        f"CACHE_QUERY_PORT = {host.carbon_query_port}",
        "LOG_LISTENER_CONN_SUCCESS = False",
        "LOG_UPDATES = False",
        "LOG_CREATES = False",
        "LOG_CACHE_HITS = False",
        "",
    ]
    return "\n".join(lines)


def render_storage_schemas() -> str:
    return f"[everything]\npattern = .*\nretentions = {RETENTIONS}\n"


def render_storage_aggregation() -> str:
    # Counts of bad things keep their worst value when rolled up, so a short outage is not
    # averaged away in the 1-minute archive.
    return (
        "[worst_counts]\n"
        "pattern = (under_replicated|offline|under_min_isr|read_errors)\n"
        "xFilesFactor = 0\n"
        "aggregationMethod = max\n"
        "\n"
        "[default]\n"
        "pattern = .*\n"
        "xFilesFactor = 0\n"
        "aggregationMethod = average\n"
    )


def render_graphite_web_settings(host: MonitoringHost, secret_key: str) -> str:
    """graphite-web's local settings module (named by GRAPHITE_SETTINGS_MODULE)."""
    storage = host.storage_dir
    values: dict[str, object] = {
        "SECRET_KEY": secret_key,
        "GRAPHITE_ROOT": "/usr/share/graphite-web",
        "STATIC_ROOT": "/usr/share/graphite-web/static",
        "CONF_DIR": f"{storage}/conf",
        "STORAGE_DIR": storage,
        "WHISPER_DIR": f"{storage}/whisper",
        "STANDARD_DIRS": [f"{storage}/whisper"],
        "LOG_DIR": host.log_dir,
        "INDEX_FILE": f"{storage}/search_index",
        # Points carbon holds but has not written yet are read from its cache.
        "CARBONLINK_HOSTS": [f"{host.address}:{host.carbon_query_port}:a"],
        "DATABASES": {
            "default": {"NAME": f"{storage}/graphite.db", "ENGINE": "django.db.backends.sqlite3"}
        },
        "LOG_ROTATION": False,
        "DEFAULT_XFILES_FACTOR": 0,
        "FUNCTION_PLUGINS": [],
        "ALLOWED_HOSTS": ["*"],
    }
    body = "".join(f"{name} = {value!r}\n" for name, value in values.items())
    return '"""graphite-web settings of a KaaS monitoring host (rendered by KaaS)."""\n' + body
