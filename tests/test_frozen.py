"""MemoryPlus's worker in a frozen (PyInstaller) PyGPT, built here.

testing/frozen_launcher.py, frozen with PyInstaller (testing/frozen_build.py, once per test
session), stands in for a frozen PyGPT: `sys.frozen`, `multiprocessing.freeze_support()`
first, the add-on (from the README's ZIP) and an extra-packages folder on sys.path, no Python
interpreter to start. Its MemoryPlus client must start the worker through the executable itself
(multiprocessing's spawn child), persistent and per call, with the same protocol as the
`python -m` worker: secrets on the pipe only (not in the command line or environment), the
data directory as working directory; a stored turn is found by a search in both. Linux only
here: Windows (and macOS) builds are not tested (README).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-frozen-SECRETsecret0123456789abcdef"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the frozen build is tested on Linux")


@pytest.fixture(scope="session")
def frozen_exe(tmp_path_factory):
    pytest.importorskip("PyInstaller", reason="pyinstaller (requirements.txt) is not installed")
    from memoryplus.testing.frozen_build import build
    started = time.monotonic()
    exe = build(tmp_path_factory.mktemp("frozen"))
    print(f"\n[timing] frozen launcher build (PyInstaller, one folder): {time.monotonic() - started:.1f} s")
    return exe


@pytest.fixture
def addon_and_extra(tmp_path):
    """The add-on unpacked from the README's ZIP, and an extra-packages folder holding every
    installed distribution but memoryplus itself (so the add-on's copy is the one that runs)."""
    from memoryplus.testing.hostenv import installed_distributions, link_distributions
    archive = tmp_path / "addon.zip"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_addon_zip.py"), "--out", str(archive)],
                   check=True, capture_output=True)
    plugins = tmp_path / "addons" / "plugins"
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(plugins)
    extra = tmp_path / "extra_packages" / f"{sys.version_info.major}.{sys.version_info.minor}"
    link_distributions(extra, installed_distributions() - {"memoryplus", "pyinstaller", "pyinstaller-hooks-contrib",
                                                           "altgraph"})
    return plugins, extra


def run_frozen(exe: Path, plugins: Path, extra: Path, data: Path, *more: str) -> dict:
    report = data.parent / "frozen-report.json"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(data.parent),
           "GRAPHITI_TELEMETRY_ENABLED": "false", "MEMORYPLUS_TEST_SECRET": SECRET, "OPENAI_API_KEY": SECRET}
    started = time.monotonic()
    out = subprocess.run([str(exe), str(plugins), str(extra), str(data), str(report), *more],
                         capture_output=True, text=True, env=env, timeout=300, cwd=str(data.parent))
    assert report.exists(), f"no report (exit {out.returncode})\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    rep = json.loads(report.read_text())
    rep["_wall_s"] = round(time.monotonic() - started, 2)
    assert rep.get("ok"), f"{rep.get('error')}\n{rep.get('traceback')}\n{out.stderr[-3000:]}"
    return rep


def frozen_workers(exe: Path) -> list[int]:
    import psutil
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if cmd and cmd[0] == str(exe) and "--multiprocessing-fork" in cmd:
            out.append(p.info["pid"])
    return out


def test_frozen_pygpt_runs_the_worker_through_its_own_executable(frozen_exe, addon_and_extra, tmp_path):
    plugins, extra = addon_and_extra
    data = tmp_path / "data"
    rep = run_frozen(frozen_exe, plugins, extra, data, sys.executable)
    assert rep["frozen"] is True and rep["executable"] == str(frozen_exe)
    assert rep["memoryplus_file"].startswith(str(plugins / "memoryplus")), rep["memoryplus_file"]

    per = rep["persistent"]
    assert per["launch"] == "multiprocessing" and per["using"] == "persistent", per
    proc = per["proc"]
    assert proc["cmdline"][:2] == [str(frozen_exe), "--multiprocessing-fork"], proc["cmdline"]
    assert Path(proc["cwd"]) == data.resolve(), proc["cwd"]
    assert proc["secret_in_cmdline"] is False and proc["secret_in_environ"] is False, proc
    assert "OPENAI_API_KEY" not in proc["environ_keys"] and "MEMORYPLUS_TEST_SECRET" not in proc["environ_keys"]
    assert per["stored"]["stored"] == ["t1"], per["stored"]
    assert any("Okafor" in t for t in per["found"]), per["found"]

    assert rep["percall"]["launch"] == "multiprocessing"
    assert any("Okafor" in t for t in rep["percall"]["found"]), rep["percall"]

    # the Worker Python setting still wins: `python -m` with that interpreter
    over = rep["override"]
    assert over["launch"] == "python" and over["python"] == sys.executable, over
    assert over["proc"]["cmdline"][1:3] == ["-m", "memoryplus.worker.process"], over["proc"]["cmdline"]
    assert over["proc"]["secret_in_environ"] is False and over["proc"]["secret_in_cmdline"] is False
    assert any("Okafor" in t for t in over["found"]), over

    deadline = time.monotonic() + 10
    while frozen_workers(frozen_exe) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not frozen_workers(frozen_exe), "a frozen worker outlived its launcher"
    print(f"\n[timing] frozen: worker ready {per['startup_s']} s (multiprocessing), per-call search "
          f"{rep['percall']['search_s']} s, Worker Python override ready {over['startup_s']} s; "
          f"launcher run {rep['_wall_s']} s")


MAKE_LOG = r'''
import os, sys, kuzu
db = kuzu.Database(sys.argv[1])
conn = kuzu.Connection(db)
conn.execute("CREATE NODE TABLE Item(id INT64, PRIMARY KEY(id))")
for i in range(3):
    conn.execute(f"CREATE (:Item {{id: {i}}})")
os._exit(0)     # killed, in effect: the writes are in the log only
'''


def test_a_frozen_pygpt_runs_kuzus_repairs_in_children_of_its_own_executable(frozen_exe, addon_and_extra, tmp_path):
    """A bank's log replay (which can crash Kuzu) and its export and import (compaction,
    rebuild) run in child processes. A frozen PyGPT's executable started with `-c` starts PyGPT:
    the children must be its spawn children, which do the work and report a crash."""
    plugins, extra = addon_and_extra
    bank = tmp_path / "bank"
    bank.mkdir()
    subprocess.run([sys.executable, "-c", MAKE_LOG, str(bank / "graph.kuzu")], check=True, timeout=120)
    assert (bank / "graph.kuzu.wal").exists()
    rep = run_frozen(frozen_exe, plugins, extra, tmp_path / "data", "--kuzu-children", str(bank))
    assert rep["frozen"] is True
    assert rep["replay_exit"] == 0 and rep["log_left"] is False, rep      # replayed and checkpointed
    assert rep["crash_exit"] < 0, rep                                     # a crash is seen as one
    before, after = rep["counts"]
    assert before == after == {"Item": 3}, rep
    assert rep["rebuilt"] is True, rep
