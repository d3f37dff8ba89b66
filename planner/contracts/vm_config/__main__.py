"""`python -m planner.contracts.vm_config image-files --root ROOT`: write the image's
configuration files (image.py) under ROOT, as the image build does; the files come from the
same renderer the agent and `kaas up` use, never from a copy in shell."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(f"vm_config: error: --root {args.root} is not a folder", file=sys.stderr)
        return 1
    for target in write_image_config_files(args.root):
        print(f"vm_config: wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
