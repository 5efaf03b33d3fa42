#!/usr/bin/env python3
"""Build the ZIP to pick in PyGPT's Config → Install Add-on… → ZIP.

    python3 scripts/make_addon_zip.py [--out FILE]      (default: dist/memoryplus-addon-VERSION.zip)

PyGPT copies an add-on directory as it is and refuses symlinks and anything over 256 MB, so a
checkout that has run scripts/install.sh (its .venv) cannot be picked directly. The ZIP holds
the package only, in a folder named `memoryplus`: no virtual environment, no .git, no tests,
docs or CI files, no caches or build output. Standard library only; any Python 3 runs it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "memoryplus"          # the folder name PyGPT gives the add-on (its manifest id)
SKIP_DIRS = {".venv", "venv", ".git", ".ci", "tests", "docs", "scripts", "build", "dist", "__pycache__",
             ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "test-output", "node_modules"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info", ".zip")
# PyGPT's own limits (pygpt_net.core.extensions.Extensions)
MAX_BYTES = 256 * 1024 * 1024
MAX_FILES = 10000


def addon_files(root: Path = REPO) -> list[Path]:
    """The files the add-on is made of, relative to `root`, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")
                             and not d.endswith(SKIP_SUFFIXES) and not (here / d).is_symlink())
        for name in sorted(filenames):
            path = here / name
            if name.startswith(".") or name.endswith(SKIP_SUFFIXES) or path.is_symlink():
                continue
            out.append(path.relative_to(root))
    return out


def build(out: Path | None = None, root: Path = REPO) -> Path:
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("id") != PACKAGE:
        raise SystemExit(f"make_addon_zip: manifest.json's id is {manifest.get('id')!r}, expected {PACKAGE!r}")
    out = Path(out) if out else root / "dist" / f"memoryplus-addon-{manifest['version']}.zip"
    files = addon_files(root)
    size = sum((root / f).stat().st_size for f in files)
    if len(files) > MAX_FILES or size > MAX_BYTES:
        raise SystemExit(f"make_addon_zip: {len(files)} files, {size / 1e6:.0f} MB: over PyGPT's limits "
                         f"({MAX_FILES} files, 256 MB)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, strict_timestamps=False) as zf:
        for rel in files:
            zf.write(root / rel, f"{PACKAGE}/{rel.as_posix()}")
    tmp.replace(out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    p.add_argument("--out", type=Path, help="where to write the ZIP (default: dist/memoryplus-addon-VERSION.zip)")
    args = p.parse_args(argv)
    path = build(args.out)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
