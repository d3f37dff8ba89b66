"""MirrorMaker 2 on a VM of a target cluster: its files, its command line, and the adapters
the keeper (agent/mirror_keeper.py) runs it through.

The process runs Kafka's own MirrorMaker driver (dedicated mode) from the image's mirror
libraries of the cluster's Kafka version, with the properties the single renderer produced
(planner.contracts.vm_config.mirror). The properties carry the REST stores' password, so
they are written 0600 and passed by path, never on the command line. On a local VM the
process is the agent's child JVM (`LocalMirrorProcess`), on a real VM the image's unit
systemd/kaas-mirror-maker.service (`SystemdMirrorProcess`), the same JVM and files.

A flow's source credentials are files the management plane delivers to the VM
(`planner.contracts.mirror_flow.source_credentials_dir`); a flow without them is not started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from agent.errors import AgentError
from agent.ports import STOPPED, StoreUnavailable
from agent.settings import AgentSettings
from agent.supervisor import KafkaProcess, LocalProcessSupervisor, SystemdSupervisor
from planner.contracts.mirror_flow import (
    SOURCE_CA_FILE,
    SOURCE_CLIENT_FILE,
    SOURCE_CREDENTIALS_DIR,
    MirrorFlow,
    source_credentials_dir,
)
from planner.contracts.paths import ClusterPaths
from planner.contracts.vm_config.class_archive import class_path_options
from planner.contracts.vm_config.kafka_tls import TlsFiles
from planner.contracts.vm_config.mirror import (
    MirrorEndpoint,
    RestStores,
    render_mirror_maker_log4j,
)
from planner.contracts.vm_config.properties import server_properties_text
from planner.pki.pkcs12 import write_pkcs12_stores
from planner.private_files import private_dir, write_private

MIRROR_MAKER_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
DEFAULT_HEAP = "-Xms256m -Xmx512m"


class MirrorImageError(AgentError):
    """The image lacks what MirrorMaker needs."""


def mirror_libs(image_root: Path, kafka_version: str) -> Path:
    """The image's MirrorMaker class path folder for `kafka_version`."""
    manifest = image_root / "opt" / "kaas" / "image.json"
    try:
        libs = json.loads(manifest.read_text())["mirror_versions"][kafka_version]
    except OSError as exc:
        raise MirrorImageError(
            f"cannot read the image manifest {manifest} ({exc.strerror})"
        ) from None
    except (ValueError, KeyError, TypeError):
        raise MirrorImageError(
            f"MirrorMaker for Kafka {kafka_version} is not in the image manifest {manifest}"
        ) from None
    return image_root / libs


@dataclass(frozen=True)
class MirrorMakerFiles:
    directory: Path

    @property
    def properties(self) -> Path:
        return self.directory / "mm2.properties"

    @property
    def log4j(self) -> Path:
        return self.directory / "mm2-log4j.properties"

    def written_properties(self) -> str | None:
        """The properties file as the last start wrote it (None: none written)."""
        try:
            return self.properties.read_text()
        except OSError:
            return None

    def write(self, properties: Mapping[str, str]) -> bool:
        """Write both files; True when the properties changed (the process must restart)."""
        private_dir(self.directory)
        text = server_properties_text(properties)
        changed = not self.properties.exists() or self.properties.read_text() != text
        if changed:
            write_private(self.properties, text)
        write_private(self.log4j, render_mirror_maker_log4j())
        return changed


def mirror_maker_command(
    java: str, libs: Path, files: MirrorMakerFiles, heap: str = DEFAULT_HEAP
) -> list[str]:
    return [
        java,
        *heap.split(),
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j.configuration=file:{files.log4j}",
        *class_path_options(libs),
        MIRROR_MAKER_MAIN,
        str(files.properties),
    ]


SOURCE_CLIENT = SOURCE_CLIENT_FILE
SOURCE_CA = SOURCE_CA_FILE


def mirror_dir(settings: AgentSettings) -> Path:
    return settings.local_state_dir / "mirror"


def source_dir(settings: AgentSettings, flow: str) -> Path:
    """Where the management plane puts a flow's source credentials on this VM."""
    return source_credentials_dir(settings.local_state_dir, flow)


class KazooMirrorFlows:
    """The flows into this cluster and its live agents, read from ZooKeeper."""

    def __init__(self, client: KazooClient, paths: ClusterPaths) -> None:
        self.client = client
        self.paths = paths

    def read_flows(self) -> dict[str, bytes]:
        values: dict[str, bytes] = {}
        try:
            children = self.client.get_children(self.paths.mirror_flows)
        except NoNodeError:
            return values
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        for child in children:
            try:
                values[child] = self.client.get(self.paths.mirror_flow(child))[0]
            except NoNodeError:
                continue  # removed between the listing and the read
            except KazooException as exc:
                raise StoreUnavailable(str(exc)) from exc
        return values

    def live_broker_ids(self) -> frozenset[int]:
        try:
            children = self.client.get_children(self.paths.members)
        except NoNodeError:
            return frozenset()
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc
        return frozenset(int(c) for c in children if c.isdigit())

    def write_lag(self, flow: str, value: bytes) -> None:
        path = self.paths.mirror_lag(flow)
        try:
            try:
                self.client.set(path, value)
            except NoNodeError:
                self.client.create(path, value, makepath=True)
        except NodeExistsError:
            self.client.set(path, value)  # another reporter made it in between
        except KazooException as exc:
            raise StoreUnavailable(str(exc)) from exc


class VmMirrorCredentials:
    """This VM's identity towards its own cluster and the REST server; each flow's source
    credentials from the files the management plane delivered."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings

    def target(self) -> MirrorEndpoint:
        identity = self.settings.identity
        return MirrorEndpoint(
            self.settings.bootstrap, TlsFiles(str(identity.keystore), str(identity.trust_bundle))
        )

    def sources_held(self) -> frozenset[str]:
        sources = self.settings.local_state_dir.joinpath(*SOURCE_CREDENTIALS_DIR)
        if not sources.is_dir():
            return frozenset()
        return frozenset(
            d.name
            for d in sources.iterdir()
            if (d / SOURCE_CLIENT).is_file() and (d / SOURCE_CA).is_file()
        )

    def source(self, flow: MirrorFlow) -> MirrorEndpoint:
        folder = source_dir(self.settings, flow.name)
        return MirrorEndpoint(
            flow.source.bootstrap_servers,
            TlsFiles(str(folder / SOURCE_CLIENT), str(folder / SOURCE_CA)),
        )

    def rest_stores(self) -> RestStores:
        # The password kept beside the stores is reused: the properties stay the same.
        stores = write_pkcs12_stores(self.settings.identity, mirror_dir(self.settings) / "rest")
        return RestStores(str(stores.keystore), str(stores.truststore), stores.password)


class _MirrorMakerJvm(LocalProcessSupervisor):
    """The local supervisor's pid-file handling, with MirrorMaker's command line."""

    def __init__(self, settings: AgentSettings, files: MirrorMakerFiles) -> None:
        super().__init__(settings, KafkaProcess.MIRROR_MAKER)
        self.files = files

    def command(self, kafka_version: str) -> list[str]:
        s = self.settings
        return mirror_maker_command(
            s.java, mirror_libs(s.image_root, kafka_version), self.files, s.mirror_heap
        )


MIRROR_MAKER_UNIT_USER = "kafka"
"""The user systemd/kaas-mirror-maker.service runs MirrorMaker as."""
MIRROR_MAKER_ENV = "mirror-maker.env"
"""The unit's EnvironmentFile, in the agent's config folder (/etc/kaas/kafka on a VM)."""


def mirror_maker_env(settings: AgentSettings, files: MirrorMakerFiles, kafka_version: str) -> str:
    """What systemd/kaas-mirror-maker.service reads: the same JVM as `mirror_maker_command`."""
    return (
        f"MIRROR_LIBS={mirror_libs(settings.image_root, kafka_version)}\n"
        f"MIRROR_HEAP={settings.mirror_heap}\n"
        f"MIRROR_LOG4J={files.log4j}\n"
        f"MIRROR_PROPERTIES={files.properties}\n"
    )


class _MirrorMakerUnit(SystemdSupervisor):
    """systemd's view of kaas-mirror-maker.service (state, stop), started with its env file."""

    def __init__(self, settings: AgentSettings, files: MirrorMakerFiles) -> None:
        super().__init__(settings, KafkaProcess.MIRROR_MAKER)
        self.files = files

    def start(self, kafka_version: str) -> None:
        env = mirror_maker_env(self.settings, self.files, kafka_version)
        (self.settings.config_dir / MIRROR_MAKER_ENV).write_text(env)
        subprocess.run(["systemctl", "start", self.unit], check=True, timeout=60)


def hand_to_unit_user(folder: Path, user: str = MIRROR_MAKER_UNIT_USER) -> None:
    """Give the unit's user the mirror folder (the properties, the REST stores, the sources'
    credentials), keeping the modes: only an agent running as root can, and must."""
    if os.geteuid() != 0:
        return
    for path in [folder, *folder.rglob("*")]:
        shutil.chown(path, user, user)


class SystemdMirrorProcess:
    """MirrorMaker as systemd/kaas-mirror-maker.service (a real VM)."""

    def __init__(self, settings: AgentSettings) -> None:
        self.directory = mirror_dir(settings)
        self.files = MirrorMakerFiles(self.directory)
        self.unit = _MirrorMakerUnit(settings, self.files)

    def running(self) -> bool:
        return self.unit.state() != STOPPED

    def started_properties(self) -> str | None:
        return self.files.written_properties()

    def start(self, properties: Mapping[str, str], kafka_version: str) -> None:
        self.files.write(properties)
        hand_to_unit_user(self.directory)
        self.unit.start(kafka_version)

    def stop(self, timeout: float) -> None:
        self.unit.stop(timeout)


class LocalMirrorProcess:
    """MirrorMaker as a child JVM of the agent (the local provider), known by its pid file."""

    def __init__(self, settings: AgentSettings) -> None:
        self.files = MirrorMakerFiles(mirror_dir(settings))
        self.jvm = _MirrorMakerJvm(settings, self.files)

    def running(self) -> bool:
        return self.jvm.state() != STOPPED

    def started_properties(self) -> str | None:
        return self.files.written_properties()

    def start(self, properties: Mapping[str, str], kafka_version: str) -> None:
        self.files.write(properties)
        self.jvm.start(kafka_version)

    def stop(self, timeout: float) -> None:
        self.jvm.stop(timeout)
