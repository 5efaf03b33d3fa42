"""A Python environment with PyGPT and its dependencies only, as a PyGPT user has it.

Built in a second from the environment this process runs in: a `venv` of the same base
interpreter whose site-packages holds symlinks to the installed distributions pygpt-net
depends on (its requirement closure, read from the installed metadata), and nothing else. So
graphiti-core, kuzu, neo4j and memoryplus (which are installed here but are no dependency of
pygpt-net) cannot be imported there; PyGPT's add-on installer must provide them.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT_DISTRIBUTION = "pygpt-net"


def requirement_closure(root: str = ROOT_DISTRIBUTION) -> set[str]:
    """Canonical names of `root` and every installed distribution it needs, recursively
    (environment markers evaluated here, extras followed where a requirement asks for them)."""
    seen: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(root, ())]
    while todo:
        name, extras = todo.pop()
        key = (canonicalize_name(name), extras)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for line in dist.requires or []:
            req = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in envs):
                todo.append((req.name, tuple(sorted(req.extras))))
    return {name for name, _ in seen}


def _top_level_entries(dist: md.Distribution) -> set[str]:
    """The names a distribution occupies directly inside site-packages."""
    out = set()
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if parts and parts[0] != ".." and parts[0] != "__pycache__":
            out.add(parts[0])
    if not out:   # no RECORD: its metadata folder and top_level.txt
        meta = getattr(dist, "_path", None)
        if meta is not None:
            out.add(Path(meta).name)
        out |= set((dist.read_text("top_level.txt") or "").split())
    return out


def link_distributions(site: str | os.PathLike, names: set[str]) -> None:
    """Symlink into `site` what the installed distributions `names` (canonical names) of this
    process's site-packages occupy there."""
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    here = Path(sysconfig.get_paths()["purelib"]).resolve()
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if not name or canonicalize_name(name) not in names:
            continue
        located = Path(dist.locate_file(""))
        if located.resolve() != here:
            continue
        for entry in _top_level_entries(dist):
            src = located / entry
            if src.exists() and not (site / entry).exists():
                (site / entry).symlink_to(src, target_is_directory=src.is_dir())


def installed_distributions() -> set[str]:
    return {canonicalize_name(d.metadata["Name"]) for d in md.distributions() if d.metadata["Name"]}


def make_env(dest: str | os.PathLike, root: str, tools: tuple[str, ...] = ()) -> Path:
    """A venv at `dest` (of this process's base interpreter) holding the installed
    distribution `root` and its requirement closure only, and the console scripts `tools` of
    this environment; returns its python executable."""
    dest = Path(dest)
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(dest)], check=True)
    python = dest / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    link_distributions(site, requirement_closure(root))
    for tool in tools:
        src = Path(sys.executable).parent / tool
        if src.exists() and not (python.parent / tool).exists():
            (python.parent / tool).symlink_to(src)
    return python


def make_pygpt_env(dest: str | os.PathLike) -> Path:
    """PyGPT's environment: pygpt-net and its dependencies, and uv (which PyGPT's add-on
    installer looks up next to its interpreter)."""
    return make_env(dest, ROOT_DISTRIBUTION, tools=("uv",))
