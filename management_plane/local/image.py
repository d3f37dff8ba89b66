"""The local image: the folder `make setup` lays out with packer/scripts/provision.sh.

It holds the same /opt/kaas tree a real VM image holds. Every jar is checked against the
image's SHA256SUMS before a VM starts from it, so a corrupt artifact stops `kaas up` with a
clear message instead of a JVM dying half-way through start-up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from management_plane.errors import KaasError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_IMAGE_DIR = REPO_ROOT / "build" / "image"
MINIMUM_JAVA_MAJOR = 17


@dataclass(frozen=True)
class LocalImage:
    root: Path
    kafka_libs_by_version: dict[str, Path]
    default_kafka_version: str
    zookeeper_lib: Path
    jolokia_agent: Path
    spark_jars: Path

    def kafka_libs(self, version: str | None = None) -> Path:
        wanted = version or self.default_kafka_version
        try:
            return self.kafka_libs_by_version[wanted]
        except KeyError:
            known = ", ".join(sorted(self.kafka_libs_by_version))
            raise KaasError(
                f"Kafka version {wanted} is not in the image at {self.root} (it has {known})"
            ) from None


def image_dir_from_env() -> Path:
    return Path(os.environ.get("KAAS_IMAGE", str(DEFAULT_IMAGE_DIR)))


def load_image(root: Path | None = None, verify: bool = True) -> LocalImage:
    root = (root or image_dir_from_env()).resolve()
    manifest_path = root / "opt" / "kaas" / "image.json"
    if not manifest_path.is_file():
        raise KaasError(f"no KaaS image at {root} (missing {manifest_path}): run `make setup`")
    try:
        manifest = json.loads(manifest_path.read_text())
        image = LocalImage(
            root=root,
            kafka_libs_by_version={v: root / p for v, p in manifest["kafka_versions"].items()},
            default_kafka_version=manifest["default_kafka_version"],
            zookeeper_lib=root / manifest["zookeeper_lib"],
            jolokia_agent=root / manifest["jolokia_agent"],
            spark_jars=root / manifest["spark_jars"],
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise KaasError(
            f"image manifest {manifest_path} is malformed ({exc}): run `make setup`"
        ) from None
    if verify:
        verify_image(root)
    return image


def verify_image(root: Path) -> None:
    """Check every jar against SHA256SUMS: a missing, truncated or altered jar is named."""
    sums = root / "opt" / "kaas" / "SHA256SUMS"
    if not sums.is_file():
        raise KaasError(f"image at {root} has no SHA256SUMS: run `make setup`")
    for line_number, line in enumerate(sums.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        expected, _, relative = line.partition("  ")
        if not relative:
            raise KaasError(f"{sums}:{line_number} is malformed: run `make setup`")
        path = root / relative
        if not path.is_file():
            raise KaasError(f"image artifact {path} is missing: run `make setup`")
        digest = hashlib.sha256()
        with path.open("rb") as jar:
            for block in iter(lambda: jar.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
            raise KaasError(
                f"image artifact {path} is corrupt (sha256 mismatch): run `make setup` to fetch it again"
            )


def find_java() -> Path:
    """The java on PATH, if it is Java 17 or newer."""
    java = shutil.which("java")
    if java is None:
        raise KaasError(
            "java not found on PATH: install a Java 17+ runtime (e.g. openjdk-17-jre-headless)"
        )
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=True
        ).stderr
    except (OSError, subprocess.SubprocessError) as exc:
        raise KaasError(f"{java} -version failed ({exc}): install a Java 17+ runtime") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        raise KaasError(f"cannot read the Java version from `{java} -version`: {out.strip()[:120]}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < MINIMUM_JAVA_MAJOR:
        raise KaasError(f"{java} is Java {major}; KaaS needs Java {MINIMUM_JAVA_MAJOR} or newer")
    return Path(java)
