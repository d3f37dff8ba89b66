"""server.properties of one broker, rendered from the cluster spec and this VM's facts. Pure.

The rendered keys and values are those of the local provider's
management_plane/local/render.py (durable_defaults and render_server_properties), in the
same order, so that a cluster started by `kaas up` and converged later by the agent shows
no difference (tests/unit/test_broker_config_render.py holds the two to each other; agent
and management_plane never import each other, hence the copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from agent.broker_config.listeners import (
    INTERNAL_LISTENER,
    TENANT_LISTENER,
    TENANT_LISTENER_SECURITY,
)
from agent.broker_config.validation import (
    BROKER_CONFIGS,
    BrokerConfigError,
    ConfigProblem,
    broker_config_problems,
)
from planner.contracts.spec import ClusterSpec, durable_defaults

ZOOKEEPER_SESSION: Final[Mapping[str, str]] = MappingProxyType(
    {
        "zookeeper.session.timeout.ms": "18000",
        "zookeeper.connection.timeout.ms": "30000",
    }
)

# Sizing of the local provider: six JVMs share two cores. A provider with bigger hosts passes
# its own sizing in BrokerFacts.host_sizing.
LOCAL_HOST_SIZING: Final[Mapping[str, str]] = MappingProxyType(
    {
        "num.partitions": "3",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.replica.fetchers": "1",
        "background.threads": "4",
        "offsets.topic.num.partitions": "12",
        "transaction.state.log.num.partitions": "6",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.hours": "24",
    }
)


@dataclass(frozen=True)
class BrokerFacts:
    """What only this VM knows: the agent-owned keys are rendered from these."""

    broker_id: int  # claimed in ZooKeeper by the agent
    rack: str  # the VM's availability zone
    listener_address: str  # the address the broker binds
    port: int  # the internal PLAINTEXT listener
    tenant_port: int  # the tenants' SASL_PLAINTEXT listener
    advertised_address: str  # the address clients are told (the same on local VMs)
    log_dirs: tuple[str, ...]
    zookeeper_connect: str  # host:port list with Kafka's chroot, e.g. "h1:2181,h2:2181/kafka/c1"
    host_sizing: Mapping[str, str] = field(default_factory=lambda: LOCAL_HOST_SIZING)

    def problems(self) -> tuple[ConfigProblem, ...]:
        found = []
        if self.broker_id < 0:
            found.append(
                ConfigProblem("broker.id", f"broker id must be >= 0, got {self.broker_id}")
            )
        for port in (self.port, self.tenant_port):
            if not 0 < port < 65536:
                found.append(ConfigProblem("listeners", f"port must be 1-65535, got {port}"))
        if self.port == self.tenant_port:
            found.append(
                ConfigProblem(
                    "listeners",
                    f"the internal and the tenant listener share port {self.port}",
                )
            )
        if not self.rack.strip():
            found.append(ConfigProblem("broker.rack", "rack (zone) must not be empty"))
        for name, address in (
            ("listeners", self.listener_address),
            ("advertised.listeners", self.advertised_address),
        ):
            if not address.strip() or any(c in address for c in ",/ "):
                found.append(ConfigProblem(name, f"{address!r} is not a host name or address"))
        if not self.log_dirs or any(not d.strip() or "," in d for d in self.log_dirs):
            found.append(
                ConfigProblem("log.dirs", f"log dirs must be paths without commas: {self.log_dirs}")
            )
        hosts, slash, chroot = self.zookeeper_connect.partition("/")
        if not hosts or not slash or not chroot:
            found.append(
                ConfigProblem(
                    "zookeeper.connect",
                    f"{self.zookeeper_connect!r} has no chroot: Kafka's data must live under "
                    "/kafka/<cluster>",
                )
            )
        found.extend(broker_config_problems(self.host_sizing, "host sizing"))
        return tuple(found)


def agent_owned_properties(facts: BrokerFacts) -> dict[str, str]:
    return {
        "broker.id": str(facts.broker_id),
        "broker.rack": facts.rack,
        "listeners": _listeners(facts.listener_address, facts),
        "advertised.listeners": _listeners(facts.advertised_address, facts),
        "log.dirs": ",".join(facts.log_dirs),
        "zookeeper.connect": facts.zookeeper_connect,
    }


def _listeners(address: str, facts: BrokerFacts) -> str:
    return (
        f"{INTERNAL_LISTENER}://{address}:{facts.port},"
        f"{TENANT_LISTENER}://{address}:{facts.tenant_port}"
    )


def render_server_properties(spec: ClusterSpec, facts: BrokerFacts) -> dict[str, str]:
    """Every key of this broker's server.properties, in file order.

    Agent-owned keys, the tenant listener's security, then the durable defaults and host
    sizing; spec.broker_config replaces a default in place and appends new keys in name
    order. A spec key that is unknown, wrongly typed, out of range, agent-owned or part of
    the tenant listener's security raises BrokerConfigError naming it.
    """
    problems = facts.problems() + broker_config_problems(spec.broker_config)
    if problems:
        raise BrokerConfigError(problems)
    properties = {
        **agent_owned_properties(facts),
        **ZOOKEEPER_SESSION,
        **TENANT_LISTENER_SECURITY,
        **durable_defaults(spec.broker_count),
        **facts.host_sizing,
    }
    for key in sorted(spec.broker_config):
        properties[key] = BROKER_CONFIGS[key].canonical(spec.broker_config[key])
    return properties


# -- the file format: java.util.Properties as Kafka's Utils.loadProps reads it (ISO-8859-1) --

_ESCAPES: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _escape(text: str, is_key: bool) -> str:
    out = []
    for index, char in enumerate(text):
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif (char == " " and (is_key or index == 0)) or (is_key and char in "=:#!"):
            out.append("\\" + char)
        elif not " " <= char <= "~":
            out.append(f"\\u{ord(char):04x}")  # Properties.load reads the file as ISO-8859-1
        else:
            out.append(char)
    return "".join(out)


def server_properties_text(properties: Mapping[str, str]) -> str:
    """The file text: one key=value line each, escaped where java.util.Properties needs it.
    Plain values come out exactly as the local provider writes them."""
    return "".join(
        f"{_escape(key, is_key=True)}={_escape(value, is_key=False)}\n"
        for key, value in properties.items()
    )


def parse_server_properties(text: str) -> dict[str, str]:
    """Read a server.properties text (comments, escapes, continuation lines) into a dict."""
    properties: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()  # continuation lines lose their indentation too
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes continues the line
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_key_value(logical)
        properties[key] = value
        logical = ""
    if logical:
        key, value = _split_key_value(logical)
        properties[key] = value
    return properties


def _split_key_value(line: str) -> tuple[str, str]:
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def _unescape(text: str) -> str:
    out = []
    index = 0
    named = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            following = text[index + 1]
            if following == "u" and index + 6 <= len(text):
                out.append(chr(int(text[index + 2 : index + 6], 16)))
                index += 6
                continue
            out.append(named.get(following, following))
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)
