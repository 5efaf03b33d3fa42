"""A child process that runs Python, in a plain or a frozen (PyInstaller) host.

A plain host starts `sys.executable -c CODE ARGS`. A frozen PyGPT has no Python interpreter to
start: its executable runs PyGPT, except when it is started as a multiprocessing child. PyGPT's
app.py calls `multiprocessing.freeze_support()` before anything else, and in a PyInstaller build
that turns `PyGPT --multiprocessing-fork pipe_handle=N` into multiprocessing's spawn child: it
reads the preparation data (sys.path, working directory) and then a pickled object from that
pipe and runs the object's `_bootstrap`.

We start the executable that way with `subprocess.Popen` ourselves, rather than through
`multiprocessing.Process`, so the child gets what a `python` child gets: its stdin, stdout and
stderr as the pipes we choose, the environment we choose (a Process would inherit the whole of
PyGPT's, API keys included) and a working directory. Only the command line differs, and it
carries nothing: the code and its arguments go on the pipe.

Tested on Linux with a one-folder build (tests/test_frozen.py); not tested: Windows, macOS,
one-file builds (whose executable is a bootloader that starts the Python process as its child).
"""
from __future__ import annotations

import builtins
import os
import pickle
import subprocess
import sys
import threading
import traceback
from multiprocessing import spawn
from pathlib import Path


def frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def spawn_frozen(entry: object, import_path: list[str], name: str, **popen_kwargs) -> subprocess.Popen:
    """This process's executable as a spawn child that runs `entry._bootstrap()` (see the module
    docstring); `popen_kwargs` are Popen's: pipes, cwd, env, flags."""
    prep = {"name": name, "sys_path": list(import_path), "sys_argv": [sys.argv[0] if sys.argv else ""],
            "dir": str(Path(popen_kwargs.get("cwd") or os.getcwd()))}
    payload = pickle.dumps(prep, pickle.HIGHEST_PROTOCOL) + pickle.dumps(entry, pickle.HIGHEST_PROTOCOL)
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
        pass  # it died at once: the caller sees EOF and the exit status
    return proc


def _close_after(proc: subprocess.Popen, fd: int) -> None:
    try:
        proc.wait()
    finally:
        os.close(fd)


def std_streams() -> None:
    """A windowed frozen executable may start with sys.stdin/stdout/stderr set to None; a
    spawn child's pipes are its descriptors 0-2 all the same."""
    if sys.stdin is None:
        sys.stdin = open(0, "r", encoding="utf-8", closefd=False)
    if sys.stdout is None:
        sys.stdout = open(1, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", encoding="utf-8", errors="replace", buffering=1, closefd=False)


class PythonCode:
    """What a frozen spawn child unpickles to do what `python -c CODE ARGS` does: sys.argv is
    ["-c", *ARGS], the code runs as __main__, an uncaught exception is printed to stderr and
    exits 1, SystemExit exits with its code. It never returns into the host's start-up code
    (PyGPT's, which called freeze_support)."""

    def __init__(self, code: str, argv: list[str]):
        self.code, self.argv = code, list(argv)

    def _bootstrap(self, parent_sentinel=None):  # multiprocessing.spawn calls this
        status = 1
        try:
            std_streams()
            sys.argv = ["-c", *self.argv]
            try:
                exec(compile(self.code, "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
                status = 0
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            os._exit(status)


def run_python(code: str, args: list[str], *, env: dict[str, str], timeout: float,
               input: bytes | None = None) -> subprocess.CompletedProcess:
    """`python -c code *args` with this process's Python (its executable, frozen or not):
    its stdout and stderr captured, `input` on its stdin (none: an empty stdin, never ours,
    which may be a protocol pipe). TimeoutExpired after `timeout` s, the child killed."""
    stdin = subprocess.PIPE if input is not None else subprocess.DEVNULL
    if not frozen():
        feed = {"input": input} if input is not None else {"stdin": stdin}
        return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                              timeout=timeout, **feed)
    proc = spawn_frozen(PythonCode(code, args), sys.path, "memoryplus-child", stdin=stdin,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
