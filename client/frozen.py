"""Starting the worker when PyGPT is a frozen (PyInstaller) build.

A frozen PyGPT has no Python interpreter for `python -m memoryplus.worker.process`: its
executable runs PyGPT, except when it is started as a multiprocessing child. PyGPT's app.py
calls `multiprocessing.freeze_support()` before anything else, and in a PyInstaller build that
turns `PyGPT --multiprocessing-fork pipe_handle=N` into multiprocessing's spawn child: it reads
the preparation data (sys.path, working directory) and then a pickled object from that pipe
and runs the object's `_bootstrap`.

The spawn itself is common/python_child.py's, which kuzu_repair's children use too. The worker
gets exactly what the `python -m` worker gets: its stdin/stdout/stderr as pipes (the same
JSON-lines protocol, secrets only on stdin), the scrubbed environment and the data directory as
its working directory. The import path is PyGPT's own sys.path (its extra_packages folder
included).
"""
from __future__ import annotations

import os
import subprocess
import sys

from memoryplus.common.python_child import spawn_frozen, std_streams


class WorkerEntry:
    """What the spawn child unpickles and runs: the worker, then exit, never returning into
    PyGPT's own start-up code (which called freeze_support)."""

    def _bootstrap(self, parent_sentinel=None):  # multiprocessing.spawn calls this
        code = 1
        try:
            std_streams()
            import importlib
            from memoryplus.wire.protocol import WORKER_MODULE
            code = importlib.import_module(WORKER_MODULE).main()
        finally:
            try:
                sys.stderr.flush()
            except Exception:
                pass
            os._exit(code)


def start_worker(data_dir: str | os.PathLike, import_path: list[str], **popen_kwargs) -> subprocess.Popen:
    """This process's executable as a spawn child running the worker (see the module docstring).
    `popen_kwargs` are the `python -m` worker's: pipes, cwd, env, flags."""
    return spawn_frozen(WorkerEntry(), import_path, "memoryplus-worker", **{"cwd": str(data_dir), **popen_kwargs})
