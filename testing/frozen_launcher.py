"""A stand-in for a frozen (PyInstaller) PyGPT, to run MemoryPlus's worker the way one would.

tests/test_frozen.py builds it with PyInstaller from this file alone: standard library only,
so the build stays small and quick; the heavy packages come from an extra-packages folder at
run time, as they do for a frozen PyGPT's add-ons. At run time it does what a frozen PyGPT
does for an add-on: `multiprocessing.freeze_support()` first (PyGPT's app.py), the
extra-packages folder added as a site directory at the end of sys.path
(`RuntimePackages.activate`), the add-on's parent folder on sys.path (MemoryPlus's addon.py).
Then it starts MemoryPlus's worker client, persistent and then per call, stores a turn,
searches it, and writes a JSON report.

    frozen_launcher ADDON_PARENT EXTRA_PACKAGES DATA_DIR REPORT.json [WORKER_PYTHON]

    frozen_launcher ADDON_PARENT EXTRA_PACKAGES DATA_DIR REPORT.json --kuzu-children BANK_DIR

With --kuzu-children it runs, in itself (frozen, as a frozen PyGPT's worker is), what
kuzu_repair runs in child processes: a log's replay in BANK_DIR/graph.kuzu, a replay that
crashes, and the bank's export and import (with the in-process one made to fail), and reports
their exit codes and counts.

With WORKER_PYTHON it also starts a persistent worker with that Worker Python setting (the
override: `python -m`, that interpreter's own environment).

The environment variable MEMORYPLUS_TEST_SECRET is handed to the client as an API key (and
stays in this process's environment, as a user's OPENAI_API_KEY would); the report says
whether it showed up in a worker's command line or environment (it must not).
"""
import json
import multiprocessing
import os
import site
import sys
import time


def activate(extra: str) -> None:
    """What PyGPT's RuntimePackages.activate does with its extra_packages folder."""
    before = list(sys.path)
    site.addsitedir(extra)
    sys.path[:] = before + [p for p in sys.path if p not in before]


def proc_view(pid: int, secret: str) -> dict:
    """What /proc shows of a worker process (Linux)."""
    out = {"pid": pid}
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        environ = open(f"/proc/{pid}/environ", "rb").read()
        out["cmdline"] = [a.decode("utf-8", "replace") for a in cmdline.split(b"\0") if a]
        out["cwd"] = os.readlink(f"/proc/{pid}/cwd")
        out["secret_in_cmdline"] = secret.encode() in cmdline
        out["secret_in_environ"] = secret.encode() in environ
        out["environ_keys"] = sorted(e.split(b"=", 1)[0].decode() for e in environ.split(b"\0") if e)
    except OSError as exc:
        out["error"] = repr(exc)
    return out


def run_workers(data_dir: str, worker_python: str, secret: str, rep: dict) -> None:
    from memoryplus.config.schema import Settings
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service.remote import RemoteMemoryService
    from memoryplus.wire.protocol import IngestParams, SearchParams
    from memoryplus.wire.records import Credentials, Turn
    settings = Settings(extraction_engine="local", embedding_provider="local")
    creds = Credentials(openai_api_key=secret)
    turn = Turn(id="t1", user="My dentist is Dr Okafor and I live in Lisbon.", assistant="Noted.")
    query = SearchParams(bank="current.chat", query="Who is my dentist?")

    def texts(service: RemoteMemoryService, timeout: float) -> list[str]:
        return [r.text for r in service.search(query, timeout=timeout).result()]

    with WorkerClient(settings, data_dir, creds, mode="persistent", app="frozen-test") as c:
        service = RemoteMemoryService(c)
        t = time.monotonic()
        health = service.health(timeout=120).result()
        status = c.status()
        rep["persistent"] = {"first_answer_s": round(time.monotonic() - t, 3), "startup_s": status["startup_s"],
                             "launch": status["launch"], "using": status["using"],
                             "proc": proc_view(health.pid, secret)}
        stored = service.ingest(IngestParams(bank="current.chat", turns=[turn]), timeout=120).result()
        rep["persistent"]["stored"] = stored.model_dump(mode="json")
        rep["persistent"]["found"] = texts(service, 60)
    with WorkerClient(settings, data_dir, creds, mode="subprocess", app="frozen-test") as c:
        t = time.monotonic()
        found = texts(RemoteMemoryService(c), 120)
        rep["percall"] = {"search_s": round(time.monotonic() - t, 3), "launch": c.status()["launch"],
                          "found": found}
    if worker_python:
        override = Settings(extraction_engine="local", embedding_provider="local", worker_python=worker_python)
        with WorkerClient(override, data_dir, creds, mode="persistent", app="frozen-test") as c:
            service = RemoteMemoryService(c)
            health = service.health(timeout=120).result()
            rep["override"] = {"launch": c.status()["launch"], "startup_s": c.status()["startup_s"],
                               "python": health.python, "proc": proc_view(health.pid, secret),
                               "found": texts(service, 60)}


def run_kuzu_children(bank_dir: str, rep: dict) -> None:
    from pathlib import Path
    from memoryplus.engine import kuzu_repair
    bank = Path(bank_dir)
    rep["replay_exit"] = kuzu_repair._replay_child(bank / "graph.kuzu", 64)
    rep["log_left"] = (bank / "graph.kuzu.wal").exists()
    rep["crash_exit"] = kuzu_repair._replay_child(bank / "graph.kuzu", 64, crash=True)

    def not_here(*args):
        raise RuntimeError("the export and import ran in the launcher's own process")
    kuzu_repair._export_import_here = not_here
    rep["counts"] = list(kuzu_repair._export_import(bank, 64, compacting=True))
    rep["rebuilt"] = (bank / kuzu_repair.REBUILD_DIR / "graph.kuzu").exists()


def main() -> None:
    multiprocessing.freeze_support()          # a worker child never gets past this line
    addon_parent, extra, data_dir, report_path = sys.argv[1:5]
    worker_python = sys.argv[5] if len(sys.argv) > 5 else ""
    kuzu_children = sys.argv[6] if worker_python == "--kuzu-children" else ""
    t0 = time.monotonic()
    activate(extra)
    sys.path.insert(0, addon_parent)
    secret = os.environ.get("MEMORYPLUS_TEST_SECRET", "")
    rep = {"frozen": bool(getattr(sys, "frozen", False)), "executable": sys.executable, "pid": os.getpid(),
           "ok": False}
    try:
        import memoryplus
        rep["memoryplus_file"] = memoryplus.__file__
        rep["imports_s"] = round(time.monotonic() - t0, 3)
        if kuzu_children:
            run_kuzu_children(kuzu_children, rep)
        else:
            run_workers(data_dir, worker_python, secret, rep)
        rep["ok"] = True
    except BaseException as exc:  # the report says what failed
        import traceback
        rep["error"] = f"{type(exc).__name__}: {exc}"
        rep["traceback"] = traceback.format_exc()[-4000:]
    rep["total_s"] = round(time.monotonic() - t0, 3)
    with open(report_path, "w", encoding="utf-8") as f:
        json.dump(rep, f, indent=1)


if __name__ == "__main__":
    main()
