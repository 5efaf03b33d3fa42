"""The client the plugin, the CLI and the UI use to reach the graph worker.

`WorkerClient` is thread-safe and never blocks its caller: `submit()` returns a
`concurrent.futures.Future` at once (from Qt's GUI thread or any pool thread), and everything
slow — starting the worker, restarting it, writing to its pipe, per-call processes — happens
on the client's own threads.

Engine modes (the "Engine Mode" setting):

- persistent: one long-lived worker process (`python -m memoryplus.worker.process`) speaking
  JSON lines over its stdin/stdout. If it dies, the client notices at once (EOF on its stdout,
  or the process poll), restarts it with exponential back-off and re-sends every request not
  yet answered (writes are idempotent in the engine: a replay never stores a turn twice).
  After `max_deaths` deaths within `death_window_s` a circuit breaker opens: state "broken",
  with the reason, and no restart loop.
- subprocess: every operation runs in a fresh worker process (same protocol: config line, one
  request, answer, exit) killed after the Runner Timeout; operations on one bank are
  serialized here, because Kuzu lets one process at a time open a bank.
- auto: persistent, falling back to per-call processes ("fallback") when the worker cannot
  start or keeps dying, and trying persistent again after `retry_persistent_s`.
- socket (used by `connect_existing`): only talk to a worker another process runs.

In every mode, a worker another process already runs for the same data directory (found
through `worker.json`) is reached through its Unix socket instead of starting a second one.
Secrets travel on the worker's stdin only, never in its argv or environment. A worker run by
this process's own interpreter gets this process's whole import path (PyGPT's extra_packages
folder included); in a frozen PyGPT it is PyGPT's own executable started as a multiprocessing
spawn child (client/frozen.py), with the same pipes, protocol, environment and working directory.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from memoryplus.config.schema import SECRET_OPTIONS, Settings
from memoryplus.client import frozen
from memoryplus.wire import protocol as P
from memoryplus.common import redact
from memoryplus.wire.records import Credentials

log = logging.getLogger("memoryplus.client")

Mode = Literal["auto", "persistent", "subprocess", "socket"]
DEFAULT_TIMEOUTS = {"read": 30.0, "write": 600.0, "control": 30.0}
# Environment variables a worker may need (paths, locale, certificates, proxies). Nothing else
# of the parent's environment reaches it: no API keys.
_ENV_KEEP = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "APPDATA", "LOCALAPPDATA",
    "USERPROFILE", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY",
    "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "HF_HOME",
    P.TEST_HOOKS_ENV,
)
# A frozen (PyInstaller) PyGPT's own bookkeeping, which its children need: with them a one-file
# build's child reuses the unpacked bundle instead of unpacking it again.
_FROZEN_ENV_PREFIXES = ("_PYI_", "_MEIPASS")


class WorkerError(RuntimeError):
    """The worker answered with an error; `type` is the engine's exception class name, `code`
    what the caller does about it (wire/errors.py)."""

    def __init__(self, type_: str, message: str, code: str = "internal"):
        super().__init__(message)
        self.type = type_
        self.code = code


class WorkerUnavailable(RuntimeError):
    """No worker can serve the request (circuit breaker open, start failure, gone)."""


class WorkerClosed(WorkerUnavailable):
    """The client was closed."""


class RequestTimeout(TimeoutError):
    """The request was not answered in time; a late answer is dropped."""


@dataclass(eq=False)
class _Pending:
    id: str
    op: str
    params: dict[str, Any]
    spec: P.OpSpec
    future: cf.Future
    deadline: float | None
    seq: int
    timeout: float | None
    route: str = "worker"            # "worker" or "percall"
    sent_gen: int = 0                # the channel it was last sent to
    internal: str = ""               # "", "health", "cancel", "shutdown"
    submitted: float = field(default_factory=time.monotonic)
    _line: bytes | None = None

    def line(self) -> bytes:
        """The request line, encoded once (re-sends reuse it)."""
        if self._line is None:
            self._line = P.encode(P.Request(id=self.id, op=self.op, params=self.params, lane=self.spec.lane))
        return self._line


class _Channel:
    """One live connection to a worker: a child process's pipes, or a Unix socket."""

    def __init__(self, gen: int, kind: str, *, proc: subprocess.Popen | None = None,
                 sock: socket.socket | None = None, pid: int | None = None):
        self.gen, self.kind, self.proc, self.sock = gen, kind, proc, sock
        self.pid = proc.pid if proc is not None else pid
        self.ready = False
        self.ended = threading.Event()
        self.draining = False            # recycling announced: send nothing more
        self.stopping = False            # we asked it to shut down
        self.kill_reason = ""            # we killed it, and why
        self.info: dict[str, Any] = {}
        self.fatal: dict[str, Any] | None = None
        self.started = time.monotonic()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.outq: queue.PriorityQueue = queue.PriorityQueue()
        self.threads: list[threading.Thread] = []
        self.last_ping = time.monotonic()
        if proc is not None:
            self.rfile, self.wfile = proc.stdout, proc.stdin
        else:
            self.rfile, self.wfile = sock.makefile("rb"), sock.makefile("wb")

    def put(self, prio: int, seq: int, data: bytes) -> None:
        self.outq.put((prio, seq, data))

    def close_input(self) -> None:
        self.outq.put((99, -1, None))    # after everything queued

    def describe(self) -> str:
        return f"worker pid {self.pid}" if self.kind == "process" else f"the worker at pid {self.pid} (socket)"


class _BankGate:
    """Per-call mode: one process per bank at a time (Kuzu's rule); `None` means every bank."""

    def __init__(self):
        self._cond = threading.Condition()
        self._held: collections.Counter[str] = collections.Counter()
        self._all = False

    def acquire(self, bank: str | None, give_up) -> bool:
        with self._cond:
            while True:
                if give_up():
                    return False
                if bank is None and not self._all and not self._held:
                    self._all = True
                    return True
                if bank is not None and not self._all and not self._held[bank]:
                    self._held[bank] += 1
                    return True
                self._cond.wait(0.1)

    def release(self, bank: str | None) -> None:
        with self._cond:
            if bank is None:
                self._all = False
            else:
                self._held[bank] -= 1
                if self._held[bank] <= 0:
                    del self._held[bank]
            self._cond.notify_all()


def _answer_error(msg: P.Response) -> "WorkerError":
    """The exception a failed answer stands for, its message cleared of secrets."""
    e = msg.error or P.ErrorInfo(type="Error", message="unknown error")
    return WorkerError(e.type, redact.redact(e.message), e.code)


def _settle(future: cf.Future, result: Any = None, exc: BaseException | None = None) -> None:
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except cf.InvalidStateError:  # cancelled by its caller, or settled already
        pass


def _secrets(settings: Settings, credentials: Credentials | None) -> list[str]:
    out = [str(getattr(settings, k, "") or "") for k in SECRET_OPTIONS]
    if credentials is not None:
        out += [v for k, v in credentials.model_dump().items() if "key" in k and isinstance(v, str)]
    return out


def _package_root() -> str | None:
    """The directory to put on the worker's PYTHONPATH when memoryplus was not pip-installed
    (a PyGPT add-on copied into a folder named memoryplus)."""
    import memoryplus
    pkg = Path(memoryplus.__file__).resolve().parent
    return str(pkg.parent) if pkg.name == "memoryplus" else None


def _import_path() -> list[str]:
    """The import path for a worker run by this process's own interpreter: the add-on's parent,
    then this process's sys.path as it is now. PyGPT appends its extra_packages folder there at
    start (RuntimePackages.activate), and that is where its add-on installer puts manifest.json's
    dependencies (graphiti-core, kuzu): the worker must see them as PyGPT does."""
    out: list[str] = []
    for entry in [_package_root() or "", *sys.path]:
        if not entry:
            continue   # '' is this process's working directory, not the worker's
        entry = os.path.abspath(entry)
        if entry not in out and os.path.exists(entry):
            out.append(entry)
    return out


class WorkerClient:
    """Reach the engine in a worker process; see the module docstring for the modes.

    Public API: `start()`, `submit(op, params, timeout)`, `call(op, params, timeout)`,
    `update_settings(settings, credentials)`, `restart()`, `status()`, `close(timeout)`.
    Results are JSON data (`protocol.decode_result(op, result)` gives the typed records).
    """

    def __init__(self, settings: Settings, data_dir: str | os.PathLike, credentials: Credentials | None = None,
                 *, mode: Mode | None = None, python: str | None = None, app: str = "PyGPT",
                 max_deaths: int = 3, death_window_s: float = 60.0, backoff_s: float = 0.5,
                 backoff_max_s: float = 10.0, retry_persistent_s: float = 60.0,
                 start_timeout_s: float = 90.0, heartbeat_s: float = 5.0, hang_timeout_s: float = 90.0,
                 reconnect_s: float = 15.0, recycle_after_ops: int = 5000, recycle_rss_mb: int = 2048,
                 idle_s: float = 2.0, shutdown_grace_s: float = 10.0, percall_workers: int = 4,
                 test_hooks: dict[str, Any] | None = None, launch: Literal["python", "multiprocessing"] | None = None):
        self.settings = settings
        self.credentials = credentials or Credentials()
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.app = app
        self._mode_arg = mode
        self._python_arg = python
        self._launch_arg = launch
        self.max_deaths, self.death_window_s = max_deaths, death_window_s
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.retry_persistent_s = retry_persistent_s
        self.start_timeout_s, self.heartbeat_s, self.hang_timeout_s = start_timeout_s, heartbeat_s, hang_timeout_s
        self.reconnect_s = reconnect_s
        self.limits = P.WorkerLimits(recycle_after_ops=recycle_after_ops, recycle_rss_mb=recycle_rss_mb,
                                     idle_s=idle_s, shutdown_grace_s=shutdown_grace_s)
        self._test_hooks = dict(test_hooks or {})
        redact.register(*_secrets(settings, self.credentials))

        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._pending: dict[str, _Pending] = {}
        self._seq = itertools.count(1)
        self._gen = itertools.count(1)
        self._ch: _Channel | None = None
        self._state = "stopped"
        self._using: str | None = None
        self._last_error = ""
        self._restarts = 0
        self._starts = 0
        self._deaths: collections.deque[float] = collections.deque()
        self._fallback_until = 0.0
        self._restart_requested = False
        self._restart_waiters: list[cf.Future] = []
        self._closing = False
        self._closed = False
        self._started = False
        self._late = 0
        self._garbage = 0
        self._health: dict[str, Any] = {}
        self._started_at: float | None = None
        self._startup_s: float | None = None
        self._percall = cf.ThreadPoolExecutor(max_workers=percall_workers,
                                              thread_name_prefix="memoryplus-percall")
        self._percall_procs: set[subprocess.Popen] = set()
        self._gate = _BankGate()
        self._threads: list[threading.Thread] = []
        self._own_pids: set[int] = set()
        self._had_socket = False
        self._fallbacks = 0
        self._close_grace = shutdown_grace_s

    # ── configuration ──────────────────────────────────────────────────────────────────
    @property
    def mode(self) -> Mode:
        """The configured engine mode: the constructor's, else the setting; a later change of
        the setting (update_settings) wins over the constructor's."""
        return self._mode_arg or self.settings.engine_mode  # type: ignore[return-value]

    def python(self) -> str:
        """The interpreter for worker processes: the `python` argument, the Worker Python
        setting, or the interpreter this process runs under (in a frozen build: its own
        executable, started through multiprocessing; see client/frozen.py)."""
        if self._python_arg:
            return self._python_arg
        if self.settings.worker_python.strip():
            return os.path.expanduser(self.settings.worker_python.strip())
        return sys.executable

    def _own_interpreter(self) -> bool:
        """The worker runs under this process's interpreter (no Worker Python override)."""
        return not self._python_arg and not self.settings.worker_python.strip()

    def launch(self) -> str:
        """How worker processes start: "multiprocessing" (this process's executable as a
        multiprocessing spawn child: a frozen PyGPT) or "python" (`python -m`)."""
        if self._launch_arg:
            return self._launch_arg
        return "multiprocessing" if self._own_interpreter() and getattr(sys, "frozen", False) else "python"

    def _child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k in _ENV_KEEP or k.startswith("LC_") or k.startswith(_FROZEN_ENV_PREFIXES)}
        env["GRAPHITI_TELEMETRY_ENABLED"] = "false"
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONIOENCODING"] = "utf-8"
        env["HF_HUB_OFFLINE"] = "1"
        # Our own interpreter gets our whole import path (PyGPT's extra_packages included); a
        # Worker Python is another environment: only the add-on's parent is added to its own.
        paths = _import_path() if self._own_interpreter() else [x for x in [_package_root()] if x]
        if paths:
            env["PYTHONPATH"] = os.pathsep.join([*paths, *[x for x in [env.get("PYTHONPATH", "")] if x]])
        return env

    def _config_line(self, role: str) -> bytes:
        return P.encode(P.ConfigMessage(
            settings=self.settings.model_dump(), credentials=self.credentials,
            data_dir=str(self.data_dir), app=self.app, role=role, owner_pid=os.getpid(),
            limits=self.limits, test=self._test_hooks))

    def _spawn(self) -> subprocess.Popen:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(self.data_dir, 0o700)
        except OSError:
            pass
        kwargs: dict[str, Any] = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      cwd=str(self.data_dir), env=self._child_env(), close_fds=True)
        if os.name == "nt":
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        if self.launch() == "multiprocessing":
            return frozen.start_worker(self.data_dir, _import_path(), **kwargs)
        return subprocess.Popen([self.python(), "-m", "memoryplus.worker.process"], **kwargs)

    # ── public API ─────────────────────────────────────────────────────────────────────
    def start(self) -> "WorkerClient":
        """Start reaching the worker in the background; returns at once."""
        with self._lock:
            if self._started or self._closing:
                return self
            self._started = True
            self._started_at = time.monotonic()
            self._state = "starting"
        for target, name in ((self._lifecycle, "memoryplus-worker-lifecycle"),
                             (self._timer, "memoryplus-worker-timer")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def submit(self, op: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> cf.Future:
        """Send a request; the Future gets the result (JSON data) or an exception: WorkerError
        (the engine refused), RequestTimeout, WorkerUnavailable. Never blocks."""
        if op in P.OWNER_ONLY or op in ("cancel", "ping"):
            fut: cf.Future = cf.Future()
            fut.set_exception(ValueError(f"{op} is not sent with submit(); use the client's methods"))
            return fut
        return self._submit(op, params, timeout)

    def call(self, op: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """submit() and wait for the result (blocking convenience; not for the GUI thread)."""
        fut = self.submit(op, params, timeout)
        return fut.result()

    def update_settings(self, settings: Settings, credentials: Credentials | None = None,
                        timeout: float | None = None) -> cf.Future:
        """Apply new settings: sent to a running worker (no restart); a change of engine mode
        or worker Python restarts the worker cleanly. The Future resolves when applied."""
        with self._lock:
            old_mode, old_python = self.mode, self._python_choice()
            if settings.engine_mode != self.settings.engine_mode and self._mode_arg != "socket":
                self._mode_arg = None      # the user changed Engine Mode: it wins over the constructor's
            self.settings = settings
            if credentials is not None:
                self.credentials = credentials
            redact.register(*_secrets(settings, self.credentials))
            # auto and persistent share a worker; only a change to or from per-call mode, of the
            # interpreter, or leaving a fallback or broken state needs a restart.
            restart = self._started and self.mode != old_mode and (
                "subprocess" in (self.mode, old_mode) or self._state in ("fallback", "broken"))
            restart = restart or (self._started and self._python_choice() != old_python)
            ch = self._ch
            if restart:
                fut: cf.Future = cf.Future()
                self._restart_waiters.append(fut)
                self._restart_requested = True
                self._changed.notify_all()
                return fut
            if self._started and self.mode != "socket" and self._using in ("persistent", None) \
                    and self._state != "fallback" and (ch is None or ch.kind == "process"):
                return self._submit("update_settings", {"settings": settings.model_dump(),
                                                        "credentials": self.credentials.model_dump()},
                                    timeout)
        fut = cf.Future()
        reason = ("the worker belongs to another process" if ch is not None and ch.kind == "socket"
                  else "applies from the next worker process")
        fut.set_result({"applied": False, "reason": reason})
        return fut

    def restart(self) -> cf.Future:
        """Restart the worker (also resets an open circuit breaker). Resolves when reachable."""
        with self._lock:
            fut: cf.Future = cf.Future()
            self._restart_waiters.append(fut)
            self._restart_requested = True
            self._deaths.clear()
            self._fallback_until = 0.0
            if self._state in ("broken", "fallback"):
                self._state = "restarting"
            self._changed.notify_all()
        self.start()
        return fut

    def status(self) -> dict[str, Any]:
        """What the UI shows: state (stopped, starting, ready, restarting, fallback, broken,
        closed), the mode in use, the worker's pid, uptime, RSS, requests in flight, restarts,
        the last error and the extraction engine. Never blocks."""
        with self._lock:
            ch = self._ch
            pid = ch.pid if ch is not None and not ch.ended.is_set() else None
            now = time.monotonic()
            out = {
                "state": self._state, "mode": self.mode, "using": self._using,
                "pid": pid, "uptime_s": (round(now - ch.started, 1) if ch.kind == "process"
                                         else self._health.get("uptime_s")) if pid else None,
                "rss_mb": None, "in_flight": sum(1 for p in self._pending.values() if not p.internal),
                "worker_in_flight": self._health.get("in_flight"), "restarts": self._restarts,
                "recent_deaths": len(self._deaths), "fallbacks": self._fallbacks,
                "last_error": self._last_error,
                "extraction": (ch.info.get("extraction") if ch is not None and ch.info else None)
                or self._health.get("extraction")
                or (self.settings.extraction_engine if self.settings.extraction_engine != "auto" else None),
                "embedder": self._health.get("embedder"),   # from the ready event, then each health check
                "socket": ch.info.get("socket") if ch is not None else None,
                "late_answers_dropped": self._late, "garbage_lines": self._garbage,
                "startup_s": self._startup_s, "data_dir": str(self.data_dir),
            }
            if self._state == "fallback":
                out["retry_persistent_in_s"] = round(max(0.0, self._fallback_until - now), 1)
        try:
            py = self.python()
        except WorkerUnavailable:
            py = None
        out["python"] = py
        out["launch"] = self.launch()
        if pid:
            try:
                import psutil
                out["rss_mb"] = round(psutil.Process(pid).memory_info().rss / 1048576, 1)
            except Exception:
                out["rss_mb"] = self._health.get("rss_mb")
        return out

    def close(self, timeout: float = 15.0) -> None:
        """Ask the worker to finish what it holds and exit (bounded), kill it past `timeout`;
        no orphan process, no held lock. Idempotent."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._closed:
                return
            self._closing = True
            self._close_grace = max(0.0, min(self.limits.shutdown_grace_s, timeout - 3.0))
            self._changed.notify_all()
        for t in self._threads:
            if t.name.endswith("lifecycle"):
                t.join(max(0.1, deadline - time.monotonic()))
        with self._lock:
            ch = self._ch
        if ch is not None and ch.proc is not None and ch.proc.poll() is None:
            log.warning("the worker did not stop in time; killing pid %s", ch.pid)
            self._kill(ch)
        self._percall.shutdown(wait=False, cancel_futures=True)
        while time.monotonic() < deadline:
            with self._lock:
                if not self._percall_procs:
                    break
            time.sleep(0.05)
        with self._lock:
            procs = list(self._percall_procs)
        for proc in procs:
            try:
                proc.kill()
                proc.wait(5)
            except Exception:
                pass
        with self._lock:
            left = list(self._pending.values())
            self._pending.clear()
            self._closed = True
            self._state = "closed"
            self._using = None
            self._ch = None
            waiters, self._restart_waiters = self._restart_waiters, []
        for p in left:
            if not p.internal:
                _settle(p.future, exc=WorkerClosed("the memory worker client was closed"))
        for w in waiters:
            _settle(w, exc=WorkerClosed("the memory worker client was closed"))
        for t in self._threads:
            t.join(1.0)

    def __enter__(self) -> "WorkerClient":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ── submitting ─────────────────────────────────────────────────────────────────────
    def _python_choice(self) -> str:
        try:
            return self.python()
        except WorkerUnavailable:
            return ""

    def _submit(self, op: str, params: Any, timeout: float | None, internal: str = "") -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            spec = P.op_spec(op)
            data = P.validate_params(op, params)
        except (P.ProtocolError, ValueError) as exc:
            fut.set_exception(ValueError(str(exc)))
            return fut
        if timeout is None:
            timeout = DEFAULT_TIMEOUTS[spec.lane]
        now = time.monotonic()
        p = _Pending(id=uuid.uuid4().hex, op=op, params=data, spec=spec, future=fut,
                     deadline=now + timeout if timeout and timeout > 0 else None, seq=next(self._seq),
                     timeout=timeout, internal=internal)
        try:
            p.line()            # encode outside the lock
        except (TypeError, ValueError) as exc:
            fut.set_exception(ValueError(f"{op}: parameters cannot be sent: {exc}"))
            return fut
        start = False
        with self._lock:
            if self._closing or self._closed:
                fut.set_exception(WorkerClosed("the memory worker client is closed"))
                return fut
            if self._state == "broken":
                fut.set_exception(WorkerUnavailable(self._broken_message()))
                return fut
            self._pending[p.id] = p
            if self._percall_now():
                p.route = "percall"
                self._percall.submit(self._run_percall, p)
            else:
                ch = self._ch
                if ch is not None and ch.ready and not ch.draining and not ch.ended.is_set():
                    self._send(ch, p)
            if not self._started:
                start = True
        if not internal:
            fut.add_done_callback(lambda f, p=p: self._caller_cancelled(p) if f.cancelled() else None)
        if start:
            self.start()
        return fut

    def _percall_now(self) -> bool:
        return self.mode == "subprocess" or self._state == "fallback"

    def _send(self, ch: _Channel, p: _Pending) -> None:
        """Queue a request on a channel (caller holds the lock)."""
        p.sent_gen = ch.gen
        prio = 50 if p.internal == "shutdown" else P.LANE_PRIORITY[p.spec.lane]
        ch.put(prio, p.seq, p.line())

    def _caller_cancelled(self, p: _Pending) -> None:
        with self._lock:
            if self._pending.get(p.id) is p:
                del self._pending[p.id]
                self._cancel_remote(p)

    def _cancel_remote(self, p: _Pending) -> None:
        """Ask the worker to stop a read its caller gave up on (caller holds the lock)."""
        ch = self._ch
        if (p.route == "worker" and p.spec.cancellable and ch is not None and p.sent_gen == ch.gen
                and ch.ready and not ch.ended.is_set() and not p.internal):
            c = _Pending(id=uuid.uuid4().hex, op="cancel", params={"id": p.id}, spec=P.OPS["cancel"],
                         future=cf.Future(), deadline=time.monotonic() + 10, seq=next(self._seq),
                         timeout=10, internal="cancel")
            self._pending[c.id] = c
            self._send(ch, c)

    def _broken_message(self) -> str:
        return f"the memory worker is not available: {self._last_error or 'unknown error'}"

    # ── the channel's threads ──────────────────────────────────────────────────────────
    def _start_threads(self, ch: _Channel) -> None:
        targets = [(self._reader, "reader"), (self._writer, "writer")]
        if ch.proc is not None:
            targets.append((self._stderr_reader, "stderr"))
        for target, name in targets:
            t = threading.Thread(target=target, args=(ch,), name=f"memoryplus-worker-{name}-{ch.gen}",
                                 daemon=True)
            t.start()
            ch.threads.append(t)

    def _writer(self, ch: _Channel) -> None:
        try:
            while True:
                _prio, _seq, data = ch.outq.get()
                if data is None:
                    break
                ch.wfile.write(data)
                ch.wfile.flush()
        except (OSError, ValueError):
            pass  # the worker is gone; the reader sees EOF
        finally:
            try:
                ch.wfile.close()
                if ch.sock is not None:
                    ch.sock.shutdown(socket.SHUT_WR)
            except (OSError, ValueError):
                pass

    def _stderr_reader(self, ch: _Channel) -> None:
        try:
            for raw in iter(ch.proc.stderr.readline, b""):
                text = redact.redact(raw.decode("utf-8", "replace").rstrip())
                if text:
                    ch.stderr_tail.append(text)
                    log.debug("worker %s: %s", ch.pid, text)
        except (OSError, ValueError):
            pass

    def _reader(self, ch: _Channel) -> None:
        try:
            for raw in iter(ch.rfile.readline, b""):
                try:
                    self._on_line(ch, raw)
                except Exception:  # never let one line kill the reader
                    log.exception("handling a line from the worker failed")
        except (OSError, ValueError):
            pass
        finally:
            with self._lock:
                ch.ended.set()
                self._changed.notify_all()

    def _on_line(self, ch: _Channel, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            msg = P.decode(raw)
        except P.ProtocolError as exc:
            with self._lock:
                self._garbage += 1
            log.warning("skipped a line from %s that is not protocol (%s): %r", ch.describe(), exc,
                        redact.redact(raw[:120].decode("utf-8", "replace")))
            return
        if isinstance(msg, P.Event):
            self._on_event(ch, msg)
            return
        if not isinstance(msg, P.Response):
            with self._lock:
                self._garbage += 1
            return
        with self._lock:
            p = self._pending.get(msg.id)
            if p is None or p.route != "worker" or p.sent_gen != ch.gen:
                self._late += 1
                log.debug("dropped an answer nobody waits for (%s)", msg.id)
                return
            if not msg.ok and msg.error is not None and msg.error.type == P.NOT_ACCEPTED:
                p.sent_gen = 0     # not run: goes to the next worker
                return
            del self._pending[msg.id]
            if p.internal == "health" and msg.ok and isinstance(msg.result, dict):
                self._health = msg.result
        if msg.ok:
            _settle(p.future, msg.result)
        else:
            _settle(p.future, exc=_answer_error(msg))

    def _on_event(self, ch: _Channel, ev: P.Event) -> None:
        with self._lock:
            if ev.event == "ready":
                ch.info = dict(ev.data)
                ch.ready = True
            elif ev.event == "recycling":
                ch.draining = True
                log.info("%s is recycling: %s", ch.describe(), ev.data.get("reason", ""))
            elif ev.event == "fatal":
                ch.fatal = dict(ev.data)
            self._changed.notify_all()

    # ── timeouts and heartbeat ─────────────────────────────────────────────────────────
    def _timer(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            expired: list[_Pending] = []
            hung: _Channel | None = None
            with self._lock:
                if self._closed:
                    return
                for p in list(self._pending.values()):
                    if p.deadline is not None and now >= p.deadline:
                        del self._pending[p.id]
                        expired.append(p)
                        if p.internal == "health" and self._ch is not None and p.sent_gen == self._ch.gen:
                            hung = self._ch
                        self._cancel_remote(p)
                ch = self._ch
                if (ch is not None and ch.ready and not ch.draining and not ch.stopping
                        and not ch.ended.is_set() and now - ch.last_ping >= self.heartbeat_s
                        and not any(p.internal == "health" for p in self._pending.values())):
                    ch.last_ping = now
                    self._submit_internal_health(ch)
            for p in expired:
                if not p.internal:
                    _settle(p.future, exc=RequestTimeout(
                        f"{p.op} was not answered within {p.timeout:.1f} s"))
            if hung is not None:
                with self._lock:
                    hung.kill_reason = (f"{hung.describe()} did not answer a health check within "
                                        f"{self.hang_timeout_s:.1f} s and was killed")
                    self._last_error = hung.kill_reason
                log.warning(self._last_error)
                self._kill(hung)

    def _submit_internal_health(self, ch: _Channel) -> None:
        p = _Pending(id=uuid.uuid4().hex, op="health", params={}, spec=P.OPS["health"], future=cf.Future(),
                     deadline=time.monotonic() + self.hang_timeout_s, seq=next(self._seq),
                     timeout=self.hang_timeout_s, internal="health")
        self._pending[p.id] = p
        self._send(ch, p)

    # ── life cycle (one thread owns the worker process) ────────────────────────────────
    def _set_state(self, state: str, using: str | None = ...) -> None:  # type: ignore[assignment]
        with self._lock:
            self._state = state
            if using is not ...:
                self._using = using
            self._changed.notify_all()

    def _wait(self, seconds: float, until=None) -> None:
        """Sleep, waking early when closing, a restart is asked, or `until()` holds."""
        end = time.monotonic() + seconds
        with self._lock:
            while not self._closing and not self._restart_requested and not (until and until()):
                left = end - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(min(left, 0.25))

    def _resolve_restart_waiters(self, exc: BaseException | None = None) -> None:
        with self._lock:
            waiters, self._restart_waiters = self._restart_waiters, []
            status = {"state": self._state, "using": self._using}
        for w in waiters:
            _settle(w, status if exc is None else None, exc)

    def _lifecycle(self) -> None:
        try:
            self._lifecycle_loop()
        except Exception as exc:  # a bug here must not leave callers waiting forever
            log.exception("the worker supervisor failed")
            with self._lock:
                self._last_error = f"internal error: {type(exc).__name__}: {exc}"
                self._state = "broken"
            self._fail_pending(WorkerUnavailable(self._broken_message()))
        finally:
            with self._lock:
                ch = self._ch
            if ch is not None:
                self._shutdown_channel(ch, self._close_grace)

    def _lifecycle_loop(self) -> None:
        while True:
            with self._lock:
                if self._closing:
                    return
                if self._restart_requested:
                    self._restart_requested = False
                    self._deaths.clear()
                    self._state = "restarting"
                    self._fallback_until = 0.0
                mode, state = self.mode, self._state
            if mode == "subprocess":
                self._set_state("ready", "subprocess")
                self._route_pending_percall()
                self._resolve_restart_waiters()
                self._wait(3600, until=lambda: self.mode != "subprocess")
                continue
            if state == "fallback":
                self._route_pending_percall()
                self._resolve_restart_waiters()
                self._wait(max(0.0, self._fallback_until - time.monotonic()))
                with self._lock:
                    if self._closing or self._restart_requested:
                        continue
                    self._state = "starting"   # new requests wait for the persistent worker
                log.info("trying the persistent worker again")
            if state == "broken":
                self._resolve_restart_waiters()
                if mode == "socket":
                    self._wait(1.0, until=lambda: P.live_worker(self.data_dir) is not None)
                    if P.live_worker(self.data_dir) is not None:
                        self._set_state("restarting")
                else:
                    self._wait(3600)
                continue
            ch = self._open_channel(mode)
            if ch is None:
                self._after_failure(start=True)
                continue
            with self._lock:
                if self._closing:
                    self._ch = ch
                    return
                self._ch = ch
                self._state = "ready"
                self._using = "persistent" if ch.kind == "process" else "socket"
                self._health = dict(ch.info)
                unsure = []
                for p in sorted(self._pending.values(), key=lambda p: p.seq):
                    if p.route != "worker":
                        continue
                    if p.sent_gen and not p.spec.replay:
                        unsure.append(p)    # it may have run before the worker died
                        del self._pending[p.id]
                    else:
                        self._send(ch, p)   # first sending, or re-sending after a restart
                self._changed.notify_all()
            for p in unsure:
                _settle(p.future, exc=WorkerUnavailable(
                    f"the worker stopped before answering {p.op}; it may or may not have been "
                    f"applied (not repeated, since repeating it could apply it twice)"))
            self._resolve_restart_waiters()
            self._watch(ch)
            with self._lock:
                if self._closing:
                    return
            self._after_end(ch)

    def _route_pending_percall(self) -> None:
        with self._lock:
            moved = [p for p in self._pending.values() if p.route == "worker" and not p.internal]
            unsure = [p for p in moved if p.sent_gen and not p.spec.replay]
            for p in moved:
                if p in unsure:
                    del self._pending[p.id]
                    continue
                p.route = "percall"
                self._percall.submit(self._run_percall, p)
            for p in [p for p in self._pending.values() if p.internal]:
                del self._pending[p.id]
        for p in unsure:
            _settle(p.future, exc=WorkerUnavailable(
                f"the worker stopped before answering {p.op}; it may or may not have been applied"))

    def _open_channel(self, mode: str) -> _Channel | None:
        """A ready channel: to another process's worker through its socket, else our own."""
        ch = self._other_worker(mode)
        if ch is not None or mode == "socket":
            if ch is None:
                with self._lock:
                    self._last_error = f"no running memory worker for {self.data_dir}"
            return ch
        with self._lock:
            if self._closing:
                return None
        # Per-call processes hold bank locks; let the running ones finish first.
        if not self._gate.acquire(None, lambda: self._closing):
            return None
        try:
            return self._start_process()
        finally:
            self._gate.release(None)

    def _other_worker(self, mode: str) -> _Channel | None:
        """Connect to the worker another process (or another client) runs for this data
        directory; while its owner is restarting it, wait for it (bounded by reconnect_s)."""
        deadline = time.monotonic() + self.reconnect_s
        while True:
            info = P.live_worker(self.data_dir)
            if info is not None and info.pid not in self._own_pids:
                ch = self._connect(info)
                if ch is not None:
                    return ch
            elif mode != "socket" or not self._had_socket:
                expected = P.restart_expected(self.data_dir)
                if expected is None or expected.pid in self._own_pids:
                    return None
            with self._lock:
                if self._closing or time.monotonic() >= deadline:
                    return None
                if self._state not in ("starting", "restarting"):
                    self._state = "restarting"
            self._wait(0.2)

    def _connect(self, info: P.WorkerInfo) -> _Channel | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(5.0)
            sock.connect(info.socket)
            rid = uuid.uuid4().hex
            sock.sendall(P.encode(P.Request(id=rid, op="health", lane="control")))
            reader = sock.makefile("rb")
            while True:
                raw = reader.readline()
                if not raw:
                    raise ConnectionError("the worker closed the connection")
                try:
                    msg = P.decode(raw)
                except P.ProtocolError:
                    continue
                if isinstance(msg, P.Response) and msg.id == rid:
                    break
            reader.close()
            if not msg.ok:
                raise ConnectionError(msg.error.message if msg.error else "health check failed")
            sock.settimeout(None)
        except OSError as exc:
            sock.close()
            with self._lock:
                self._last_error = f"cannot reach the worker of {info.app} (pid {info.pid}): {exc}"
            log.info(self._last_error)
            return None
        self._had_socket = True
        ch = _Channel(next(self._gen), "socket", sock=sock, pid=info.pid)
        ch.info = dict(msg.result or {})
        ch.ready = True
        self._start_threads(ch)
        log.info("using the running worker of %s (pid %d) through %s", info.app, info.pid, info.socket)
        return ch

    def _start_process(self) -> _Channel | None:
        t0 = time.monotonic()
        with self._lock:
            self._starts += 1
            if self._starts > 1:
                self._restarts += 1
        try:
            proc = self._spawn()
        except (OSError, WorkerUnavailable) as exc:
            with self._lock:
                self._last_error = (str(exc) if isinstance(exc, WorkerUnavailable) else
                                    f"cannot start the worker with {self._python_choice()!r}: {exc}")
            log.warning(self._last_error)
            return None
        ch = _Channel(next(self._gen), "process", proc=proc)
        self._own_pids.add(proc.pid)
        try:
            proc.stdin.write(self._config_line("persistent"))
            proc.stdin.flush()
        except OSError:
            pass  # it died already: the reader sees EOF
        self._start_threads(ch)
        with self._lock:
            self._ch = ch
            deadline = t0 + self.start_timeout_s
            while not ch.ready and not ch.ended.is_set() and not self._closing:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                self._changed.wait(0.1)
            ok = ch.ready
            closing = self._closing
        if closing and not ok:
            return ch
        if not ok:
            try:   # EOF comes a moment before the exit status
                proc.wait(2 if ch.ended.is_set() or proc.poll() is not None else 0.01)
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is None:
                self._kill(ch)
                why = ("closed its output before it was ready" if ch.ended.is_set()
                       else f"did not become ready within {self.start_timeout_s:.0f} s")
            else:
                why = f"exited at start (exit code {proc.returncode})"
            ch.close_input()
            for t in ch.threads:
                t.join(2)
            detail = (ch.fatal or {}).get("message") or " | ".join(list(ch.stderr_tail)[-3:])
            with self._lock:
                self._last_error = f"the worker {why}" + (f": {detail}" if detail else "")
                self._ch = None
            self._cleanup(ch)
            log.warning(self._last_error)
            return None
        self._startup_s = round(time.monotonic() - t0, 3)
        log.info("worker pid %d ready in %.2f s", proc.pid, self._startup_s)
        return ch

    def _watch(self, ch: _Channel) -> None:
        """Until the channel ends: EOF on its stdout, or the process gone (polled)."""
        with self._lock:
            while not ch.ended.is_set() and not self._closing:
                if ch.proc is not None and ch.proc.poll() is not None:
                    break
                if self._restart_requested:
                    break
                self._changed.wait(0.25)
            restart = self._restart_requested and not self._closing
        if restart:
            self._shutdown_channel(ch, self.limits.shutdown_grace_s)

    def _after_end(self, ch: _Channel) -> None:
        rc = None
        if ch.proc is not None:
            try:
                rc = ch.proc.wait(5)
            except subprocess.TimeoutExpired:
                self._kill(ch)
                rc = ch.proc.returncode
        self._cleanup(ch)
        with self._lock:
            if self._ch is ch:
                self._ch = None
            for p in [p for p in self._pending.values() if p.internal and p.sent_gen == ch.gen]:
                del self._pending[p.id]
            if self._restart_requested:
                return  # the loop starts the next one
            if ch.stopping:
                return
            if ch.draining and rc == 0:
                log.info("the worker recycled itself; starting the next one")
                self._state = "restarting"
                return
            if ch.kind == "socket":
                self._last_error = f"lost the connection to {ch.describe()}"
                self._state = "restarting"
                return
            self._last_error = ch.kill_reason or (
                f"the worker (pid {ch.pid}) died "
                + (f"(killed by signal {-rc})" if rc is not None and rc < 0 else f"(exit code {rc})")
                + (": " + " | ".join(list(ch.stderr_tail)[-2:]) if ch.stderr_tail else ""))
        log.warning(self._last_error)
        self._after_failure(start=False)

    def _after_failure(self, *, start: bool) -> None:
        now = time.monotonic()
        with self._lock:
            if self._closing:
                return
            mode = self.mode
            if mode == "socket":
                self._state = "broken"
                self._using = None
            else:
                self._deaths.append(now)
                while self._deaths and now - self._deaths[0] > self.death_window_s:
                    self._deaths.popleft()
                tripped = len(self._deaths) >= self.max_deaths
                if mode == "auto" and (start or tripped):
                    self._fallbacks += 1
                    self._state = "fallback"
                    self._using = "subprocess"
                    self._fallback_until = now + self.retry_persistent_s
                    log.warning("memory worker: falling back to one process per call (%s); trying the "
                                "persistent worker again in %.0f s", self._last_error, self.retry_persistent_s)
                    return
                if tripped:
                    self._state = "broken"
                    self._using = None
                    self._last_error = (f"the worker failed {len(self._deaths)} times within "
                                        f"{self.death_window_s:.0f} s; not restarting it (last: "
                                        f"{self._last_error})")
                    log.error(self._last_error)
                else:
                    self._state = "restarting"
                    delay = min(self.backoff_max_s, self.backoff_s * 2 ** (len(self._deaths) - 1))
            state = self._state
        if state == "broken":
            self._fail_pending(WorkerUnavailable(self._broken_message()))
            return
        if state == "restarting":
            self._wait(delay)

    def _fail_pending(self, exc: BaseException) -> None:
        with self._lock:
            failed = [p for p in self._pending.values() if p.route == "worker"]
            for p in failed:
                del self._pending[p.id]
        for p in failed:
            if not p.internal:
                _settle(p.future, exc=exc)

    def _shutdown_channel(self, ch: _Channel, grace: float) -> None:
        """Ask our own worker to finish and exit (bounded); for a socket, just disconnect."""
        if ch.ended.is_set() and (ch.proc is None or ch.proc.poll() is not None):
            self._cleanup(ch)
            return
        with self._lock:
            ch.stopping = True
            if ch.proc is not None:
                p = _Pending(id=uuid.uuid4().hex, op="shutdown", params={"grace_s": grace},
                             spec=P.OPS["shutdown"], future=cf.Future(), deadline=None,
                             seq=next(self._seq), timeout=None, internal="shutdown")
                self._pending[p.id] = p
                self._send(ch, p)
            ch.close_input()
        if ch.proc is not None:
            try:
                ch.proc.wait(grace + 10)
            except subprocess.TimeoutExpired:
                log.warning("the worker (pid %d) did not stop within %.0f s; killing it", ch.pid, grace + 10)
                self._kill(ch)
        else:
            try:
                ch.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            ch.ended.wait(2)
        self._cleanup(ch)

    def _kill(self, ch: _Channel) -> None:
        if ch.proc is not None:
            try:
                ch.proc.kill()
                ch.proc.wait(5)
            except Exception:
                pass
        elif ch.sock is not None:
            try:
                ch.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _cleanup(self, ch: _Channel) -> None:
        ch.close_input()
        for t in ch.threads:
            if t is not threading.current_thread():
                t.join(2)
        for f in (ch.rfile, ch.wfile, getattr(ch.proc, "stderr", None)):
            try:
                if f is not None:
                    f.close()
            except (OSError, ValueError):
                pass
        if ch.sock is not None:
            try:
                ch.sock.close()
            except OSError:
                pass

    # ── per-call mode ──────────────────────────────────────────────────────────────────
    def _run_percall(self, p: _Pending) -> None:
        bank = p.params.get("bank") if p.spec.bank else None
        lock_all = p.spec.all_banks
        held = False
        try:
            if p.spec.bank or lock_all:
                held = self._gate.acquire(bank if p.spec.bank else None,
                                          lambda: p.future.done() or self._closing)
                if not held:
                    return
            if p.future.done():
                return
            info = P.live_worker(self.data_dir)
            if info is not None:
                result, exc = self._socket_call(info, p)
            else:
                result, exc = self._oneshot(p)
            if exc is not None:
                _settle(p.future, exc=exc)
            else:
                _settle(p.future, result)
        except Exception as exc:  # never leave a caller waiting
            log.exception("per-call %s failed", p.op)
            _settle(p.future, exc=WorkerUnavailable(f"{p.op} failed: {type(exc).__name__}: {exc}"))
        finally:
            if held:
                self._gate.release(bank if p.spec.bank else None)
            with self._lock:
                if self._pending.get(p.id) is p:
                    del self._pending[p.id]

    def _oneshot(self, p: _Pending) -> tuple[Any, BaseException | None]:
        limit = float(self.settings.runner_timeout_s)
        try:
            proc = self._spawn()
        except (OSError, WorkerUnavailable) as exc:
            msg = str(exc) if isinstance(exc, WorkerUnavailable) else \
                f"cannot start the worker with {self._python_choice()!r}: {exc}"
            with self._lock:
                self._last_error = msg
            return None, WorkerUnavailable(msg)
        with self._lock:
            self._percall_procs.add(proc)
        try:
            data = self._config_line("oneshot") + p.line()
            try:
                out, err = proc.communicate(data, timeout=limit)
            except subprocess.TimeoutExpired:
                proc.terminate()           # the worker closes its bank cleanly on SIGTERM
                try:
                    proc.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate(timeout=10)
                return None, RequestTimeout(
                    f"{p.op} did not finish within the Runner Timeout ({limit:.0f} s); the per-call "
                    f"worker was stopped")
        finally:
            with self._lock:
                self._percall_procs.discard(proc)
        fatal = None
        for raw in out.splitlines():
            try:
                msg = P.decode(raw)
            except P.ProtocolError:
                with self._lock:
                    self._garbage += 1
                continue
            if isinstance(msg, P.Response) and msg.id == p.id:
                return (msg.result, None) if msg.ok else (None, _answer_error(msg))
            if isinstance(msg, P.Event) and msg.event == "fatal":
                fatal = msg.data.get("message")
        tail = redact.redact(err.decode("utf-8", "replace").strip().splitlines()[-1]) if err.strip() else ""
        msg_ = (f"the per-call worker exited with code {proc.returncode} without answering {p.op}"
                + (f": {fatal or tail}" if (fatal or tail) else ""))
        with self._lock:
            self._last_error = msg_
        return None, WorkerUnavailable(msg_)

    def _socket_call(self, info: P.WorkerInfo, p: _Pending) -> tuple[Any, BaseException | None]:
        """One request to another process's running worker (it owns the banks)."""
        limit = p.timeout or float(self.settings.runner_timeout_s)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(limit)
                sock.connect(info.socket)
                sock.sendall(p.line())
                with sock.makefile("rb") as reader:
                    for raw in iter(reader.readline, b""):
                        try:
                            msg = P.decode(raw)
                        except P.ProtocolError:
                            continue
                        if isinstance(msg, P.Response) and msg.id == p.id:
                            return (msg.result, None) if msg.ok else (None, _answer_error(msg))
        except socket.timeout:
            return None, RequestTimeout(f"{p.op} was not answered within {limit:.1f} s")
        except OSError as exc:
            return None, WorkerUnavailable(f"cannot reach the worker of {info.app} (pid {info.pid}): {exc}")
        return None, WorkerUnavailable(f"the worker of {info.app} (pid {info.pid}) closed the connection")


def connect_existing(data_dir: str | os.PathLike, *, timeout: float = 5.0,
                     app: str = "the memoryplus command") -> WorkerClient | None:
    """A client connected to the worker another process (PyGPT) runs for this data directory,
    or None when there is none (a stale worker.json, whose pid is dead, counts as none).
    The client never starts a worker of its own; close() only disconnects."""
    if P.live_worker(data_dir) is None:
        return None
    client = WorkerClient(Settings(), data_dir, None, mode="socket", app=app, reconnect_s=timeout)
    client.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = client.status()["state"]
        if state == "ready":
            return client
        if state == "broken":
            break
        time.sleep(0.02)
    client.close(timeout=2)
    return None
