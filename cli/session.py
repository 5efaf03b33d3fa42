"""What every data command of `memoryplus` shares: its settings, its MemoryService, its errors.

The service: when a running worker serves the data directory (PyGPT's, recorded in its
worker.json, reached by its local socket), the command goes through it: that worker holds the
banks' Kuzu locks, and a second process cannot open them. The operations then run with that
worker's settings (PyGPT's), not the command's flags or saved settings: the command says so on
stderr. Without a running worker the command runs the engine in its own process.
"""
from __future__ import annotations

import sys
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
    `doing`: what the note on stderr says the command does through a running worker."""
    from memoryplus.engine.providers import credentials_from_env
    from memoryplus.service import RemoteMemoryService, open_service
    service = open_service(settings, banks_dir, credentials_from_env(), app=APP)
    if isinstance(service, RemoteMemoryService):
        st = service.status()
        ignored = [f"--{flag}" for flag, _ in _FLAGS if getattr(args, flag, None)]
        print(f"memoryplus: PyGPT's worker (pid {st.get('pid') or '?'}) holds {banks_dir}: {doing} through it, "
              f"with its settings" + (f" ({', '.join(ignored)} ignored)" if ignored else ""), file=sys.stderr)
        for line in st.get("conflicts") or ():    # a setting of ours PyGPT's worker does not share
            print(f"memoryplus: {line}", file=sys.stderr)
    return service


def progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        width = 30
        filled = int(width * done / max(total, 1))
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr,
              flush=True)
        if done >= total:
            print(file=sys.stderr)
