"""Starting the worker when PyGPT is a frozen (PyInstaller) build.

A frozen PyGPT has no Python interpreter for `python -m memoryplus.worker.process`: its
executable runs PyGPT, except when it is started as a multiprocessing child. PyGPT's app.py
calls `multiprocessing.freeze_support()` before anything else, and in a PyInstaller build that
turns `PyGPT --multiprocessing-fork pipe_handle=N` into multiprocessing's spawn child: it reads
the preparation data (sys.path, working directory) and then a pickled object from that pipe
and runs the object's `_bootstrap`.

We start the executable that way with `subprocess.Popen` ourselves, rather than through
`multiprocessing.Process`, so the worker gets exactly what the `python -m` worker gets: its
stdin/stdout/stderr as pipes (the same JSON-lines protocol, secrets only on stdin), the
scrubbed environment (a Process would inherit all of PyGPT's, API keys included) and the data
directory as its working directory. Only the command line differs, and it carries nothing
secret. The import path is PyGPT's own sys.path (its extra_packages folder included).
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
from multiprocessing import spawn
from pathlib import Path


class WorkerEntry:
    """What the spawn child unpickles and runs: the worker, then exit, never returning into
    PyGPT's own start-up code (which called freeze_support)."""

    def _bootstrap(self, parent_sentinel=None):  # multiprocessing.spawn calls this
        code = 1
        try:
            _std_streams()
            import importlib
            from memoryplus.wire.protocol import WORKER_MODULE
            code = importlib.import_module(WORKER_MODULE).main()
        finally:
            try:
                sys.stderr.flush()
            except Exception:
                pass
            os._exit(code)


def _std_streams() -> None:
    """A windowed frozen executable may start with sys.stdin/sys.stderr set to None; the worker's
    pipes are its descriptors 0-2 all the same."""
    if sys.stdin is None:
        sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)


def start_worker(data_dir: str | os.PathLike, import_path: list[str], **popen_kwargs) -> subprocess.Popen:
    """This process's executable as a spawn child running the worker (see the module docstring).
    `popen_kwargs` are the `python -m` worker's: pipes, cwd, env, flags."""
    prep = {"name": "memoryplus-worker", "sys_path": list(import_path), "sys_argv": [sys.argv[0] if sys.argv else ""],
            "dir": str(Path(data_dir))}
    payload = pickle.dumps(prep, pickle.HIGHEST_PROTOCOL) + pickle.dumps(WorkerEntry(), pickle.HIGHEST_PROTOCOL)
    r, w = os.pipe()
    try:
        if sys.platform == "win32":
            import msvcrt
            # The child duplicates our read handle out of this process (spawn_main's Windows
            # protocol), so it stays open until the child has ended.
            cmd = spawn.get_command_line(parent_pid=os.getpid(), pipe_handle=msvcrt.get_osfhandle(r))
            proc = subprocess.Popen(cmd, **popen_kwargs)
            threading.Thread(target=_close_after, args=(proc, r), daemon=True,
                             name="memoryplus-spawn-pipe").start()
        else:
            cmd = spawn.get_command_line(pipe_handle=r)
            proc = subprocess.Popen(cmd, pass_fds=(r,), **popen_kwargs)
            os.close(r)
        r = -1
    finally:
        if r != -1:
            os.close(r)
            os.close(w)
    try:
        with open(w, "wb", closefd=True) as pipe:
            pipe.write(payload)
    except OSError:
        pass  # it died at once: the client sees EOF and the exit status
    return proc


def _close_after(proc: subprocess.Popen, fd: int) -> None:
    try:
        proc.wait()
    finally:
        os.close(fd)
