"""What every data command of `memoryplus` shares: its settings, its MemoryService, its errors.

The service: the data directory's one shared worker (service.open_service(share=True), as for
PyGPT's plugin and the MCP server; docs/RELIABILITY.md, "One worker per data directory"). When
another process's worker serves the data directory (PyGPT's, recorded in its worker.json,
reached by its local socket), the command goes through it: that worker holds the banks' Kuzu
locks, and a second process cannot open them. The operations then run with that worker's
settings (PyGPT's), not the command's flags or saved settings: the command says so on stderr.
Without one, the command starts the worker itself, with its own settings and flags, and
listens on the socket: a PyGPT or MCP server starting meanwhile joins it instead of finding
the bank in use, and takes the data directory over when the command exits.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from memoryplus.config.paths import data_dir, default_data_dir, load_settings
from memoryplus.config.schema import validate

APP = "the memoryplus command"
# The flags a worker of another process does not take (its own settings apply).
_FLAGS = (("backend", "backend"), ("extraction", "extraction_engine"), ("mode", "memory_mode"))


class CliError(Exception):
    pass


def settings_for(args):
    """The saved settings with the command's flags applied, and the data directory."""
    directory = data_dir(override=args.data_dir) if args.data_dir else default_data_dir()
    settings, problems = load_settings(directory)
    for p in problems:
        print(f"memoryplus: warning: {p}", file=sys.stderr)
    values = settings.model_dump()
    for flag, key in _FLAGS:
        if getattr(args, flag, None):
            values[key] = getattr(args, flag)
    settings = validate(values)
    banks_dir = Path(args.data_dir).expanduser() if args.data_dir else data_dir(settings)
    return settings, banks_dir


def open_for(args, settings, banks_dir, doing: str = "going"):
    """The MemoryService of the data directory (see the module's note); the caller closes it.
    `doing`: what the note on stderr says the command does through another process's worker."""
    from memoryplus.wire.records import Credentials
    from memoryplus.service import open_service
    service = open_service(settings, banks_dir, Credentials.from_env(), app=APP, share=True)
    st = _started(service)
    if st.get("using") == "socket":     # joined another process's worker: its settings govern
        from memoryplus.wire.protocol import live_worker
        info = live_worker(banks_dir)
        owner = "PyGPT's worker" if info is None or info.app == "PyGPT" else f"the worker of {info.app}"
        ignored = [f"--{flag}" for flag, _ in _FLAGS if getattr(args, flag, None)]
        print(f"memoryplus: {owner} (pid {st.get('pid') or '?'}) holds {banks_dir}: {doing} through it, "
              f"with its settings" + (f" ({', '.join(ignored)} ignored)" if ignored else ""), file=sys.stderr)
        for line in st.get("conflicts") or ():    # a setting of ours PyGPT's worker does not share
            print(f"memoryplus: {line}", file=sys.stderr)
    return service


def _started(service, timeout: float = 120.0) -> dict:
    """The service's status once its client has joined or started the worker (or given up:
    the first operation then says why), so that the note above knows which it did."""
    end = time.monotonic() + timeout
    while True:
        st = service.status()
        if st.get("state") not in ("stopped", "starting", "restarting") or time.monotonic() >= end:
            return st
        time.sleep(0.01)


def progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        width = 30
        filled = int(width * done / max(total, 1))
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr,
              flush=True)
        if done >= total:
            print(file=sys.stderr)
