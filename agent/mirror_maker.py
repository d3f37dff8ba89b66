"""MirrorMaker 2 on a VM of a target cluster: its files and its command line.

The process runs Kafka's own MirrorMaker driver (dedicated mode) from the image's mirror
libraries of the cluster's Kafka version, with the properties the single renderer produced
(planner.contracts.vm_config.mirror). The properties carry the REST stores' password, so
they are written 0600 and passed by path, never on the command line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.errors import AgentError
from planner.contracts.vm_config.mirror import render_mirror_maker_log4j
from planner.contracts.vm_config.properties import server_properties_text
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
        "-cp",
        f"{libs}/*",
        MIRROR_MAKER_MAIN,
        str(files.properties),
    ]
