"""Build testing/frozen_launcher.py into a frozen (PyInstaller, one-folder) executable.

The build runs in an environment holding PyInstaller and its own dependencies only
(testing/hostenv.py), so nothing but the standard library can end up in the bundle: about 50 MB
and ten seconds, where PyInstaller in the full environment follows optional imports into
PySide6, torch-size packages and minutes of analysis. The bundle gets the standard-library
modules MemoryPlus's client and worker import (found by running them once here; ctypes, which
kuzu_repair's children load, too), as a frozen PyGPT's bundle holds the standard library its
own code uses; everything else comes from an extra-packages folder at run time.

    python -m memoryplus.testing.frozen_build DEST      prints the executable's path
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parent / "frozen_launcher.py"
NAME = "frozen_launcher"

_PROBE = r"""
import asyncio, importlib.util, sys, tempfile
import ctypes, memoryplus.worker.process, memoryplus.client.frozen, memoryplus.engine.kuzu_repair
from memoryplus.config.schema import Settings
from memoryplus.client.worker_client import WorkerClient
from memoryplus.engine.memory_engine import MemoryEngine
from memoryplus.wire.records import Turn

async def run(d):
    eng = MemoryEngine(Settings(extraction_engine="local", embedding_provider="local"), d)
    try:
        await eng.ingest("b", [Turn(id="1", user="My dentist is Dr Okafor and I live in Lisbon.")])
        await eng.search("b", "Who is my dentist?")
    finally:
        await eng.close()

with tempfile.TemporaryDirectory() as d:
    asyncio.run(run(d))

def real(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False

print(" ".join(sorted(m for m in list(sys.modules)
                      if m.split(".")[0] in sys.stdlib_module_names and real(m))))
"""


def stdlib_modules() -> list[str]:
    """The standard-library modules loaded by MemoryPlus's client, worker and one engine
    round (store, search) in this environment."""
    env = dict(os.environ, GRAPHITI_TELEMETRY_ENABLED="false", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"the standard-library probe failed: {out.stderr[-2000:]}")
    return out.stdout.split()


def build(dest: str | os.PathLike) -> Path:
    """Build the launcher under `dest`; returns the executable."""
    from memoryplus.testing.hostenv import make_env
    dest = Path(dest)
    python = make_env(dest / "pyinstaller-env", "pyinstaller")
    cmd = [str(python), "-m", "PyInstaller", "--noconfirm", "--onedir", "--name", NAME,
           "--distpath", str(dest / "dist"), "--workpath", str(dest / "work"), "--specpath", str(dest / "work"),
           "--log-level", "WARN"]
    for module in stdlib_modules():
        cmd += ["--hidden-import", module]
    out = subprocess.run([*cmd, str(LAUNCHER)], capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    exe = dest / "dist" / NAME / (NAME + (".exe" if os.name == "nt" else ""))
    if out.returncode != 0 or not exe.is_file():
        raise RuntimeError(f"PyInstaller failed (exit {out.returncode}): {out.stderr[-3000:]}")
    return exe


if __name__ == "__main__":
    print(build(sys.argv[1]))
