"""`python -m planner.contracts.vm_config image-files --root ROOT`: write the image's
configuration files (image.py) under ROOT, as the image build does; the files come from the
same renderer the agent and `kaas up` use, never from a copy in shell.

`python -m planner.contracts.vm_config class-archives --root ROOT [--java JAVA]`: record
the class-data-sharing archive of every Kafka version and of ZooKeeper in the image at ROOT
(class_archive.py), with the Java that will run them."""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from planner.contracts.vm_config.class_archive import (
    ArchiveError,
    Recording,
    kafka_recording,
    record_archive,
    zookeeper_recording,
)
from planner.contracts.vm_config.image import image_config_files
from planner.pki.authority import Role, role_distinguished_name


def write_image_config_files(root: Path) -> list[Path]:
    written = []
    for path, text in image_config_files(role_distinguished_name(Role.NODE)).items():
        target = root / path.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m planner.contracts.vm_config",
        description="Render KaaS VM configuration files.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    image = commands.add_parser(
        "image-files", help="write the configuration files every VM image carries"
    )
    image.add_argument("--root", type=Path, required=True, help="the image's root folder")
    archives = commands.add_parser(
        "class-archives", help="record the image's class-data-sharing archives"
    )
    archives.add_argument("--root", type=Path, required=True, help="the image's root folder")
    archives.add_argument("--java", default=shutil.which("java"), help="the Java to record with")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"vm_config: error: --root {args.root} is not a folder", file=sys.stderr)
        return 1
    if args.command == "class-archives":
        return record_class_archives(args.root, args.java)
    for target in write_image_config_files(args.root):
        print(f"vm_config: wrote {target}")
    return 0


def record_class_archives(root: Path, java: str | None) -> int:
    if not java:
        print("vm_config: error: no java on PATH (name one with --java)", file=sys.stderr)
        return 1
    manifest_path = root / "opt" / "kaas" / "image.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        kafka = {version: root / libs for version, libs in manifest["kafka_versions"].items()}
        zookeeper = root / manifest["zookeeper_lib"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        print(f"vm_config: error: cannot read {manifest_path}: {exc}", file=sys.stderr)
        return 1
    # The image's absolute paths: a JVM uses the archive only under the recorded class path.
    runs: list[tuple[str, Path, Callable[[Path], Recording]]] = [
        (f"Kafka {version}", libs.resolve(), functools.partial(kafka_recording, libs.resolve()))
        for version, libs in sorted(kafka.items())
    ]
    runs.append(("ZooKeeper", zookeeper.resolve(), zookeeper_recording))
    # Side by side: most of a run is the wait for a server to stop (Kafka 4 takes most of a
    # minute), not CPU.
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = [
            (what, pool.submit(record_archive, java, class_dir, recording))
            for what, class_dir, recording in runs
        ]
        failed = False
        for what, future in futures:
            try:
                print(f"vm_config: wrote {future.result()}")
            except (ArchiveError, OSError, subprocess.SubprocessError) as exc:
                print(f"vm_config: error: class archive of {what}: {exc}", file=sys.stderr)
                failed = True
    if failed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
