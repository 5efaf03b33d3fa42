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
through `worker.json`) is reached through its transport (wire/transport.py: a Unix socket, a
named pipe or a loopback port, with a token) instead of starting a second one; its owner's
settings govern, and what differs from ours is in `status()["conflicts"]` (the hello of
wire/protocol.py). `subscribe(listener)` hears the worker's bank events (a bank changed, a
memory was forgotten, by this client or any other).
Secrets travel on the worker's stdin only, never in its argv or environment. A worker run by
this process's own interpreter gets this process's whole import path (PyGPT's extra_packages
folder included); in a frozen PyGPT it is PyGPT's own executable started as a multiprocessing
spawn child (client/frozen.py), with the same pipes, protocol, environment and working directory.

The parts, one concern each: client/launcher.py (configuration, starting processes),
client/channel.py (a connection and its threads), client/requests.py (the request table),
client/supervisor.py (life cycle, restarts, breaker, heartbeat), client/percall.py (per-call
mode), client/discovery.py (joining another process's worker), client/state.py (what they
share); this module composes them behind the public API.
"""
from __future__ import annotations

import concurrent.futures as cf
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Literal

from memoryplus.client.discovery import Discovery
from memoryplus.client.errors import (  # noqa: F401  (the client's errors are imported from here)
    RequestTimeout, WorkerClosed, WorkerError, WorkerUnavailable, settle,
)
from memoryplus.client.launcher import Launcher
from memoryplus.client.percall import PerCall
from memoryplus.client.requests import RequestTable
from memoryplus.client.state import Shared
from memoryplus.client.supervisor import Supervisor
from memoryplus.common import redact
from memoryplus.config.schema import Settings
from memoryplus.wire import protocol as P
from memoryplus.wire.records import Credentials

log = logging.getLogger("memoryplus.client")

Mode = Literal["auto", "persistent", "subprocess", "socket"]


class WorkerClient:
    """Reach the engine in a worker process; see the module docstring for the modes.

    Public API: `start()`, `submit(op, params, timeout)`, `call(op, params, timeout)`,
    `update_settings(settings, credentials)`, `restart()`, `status()`, `subscribe(listener)`,
    `close(timeout)`. Results are JSON data (`protocol.decode_result(op, result)` gives the
    typed records).
    """

    def __init__(self, settings: Settings, data_dir: str | os.PathLike, credentials: Credentials | None = None,
                 *, mode: Mode | None = None, python: str | None = None, app: str = "PyGPT",
                 max_deaths: int = 3, death_window_s: float = 60.0, backoff_s: float = 0.5,
                 backoff_max_s: float = 10.0, retry_persistent_s: float = 60.0,
                 start_timeout_s: float = 90.0, heartbeat_s: float = 5.0, hang_timeout_s: float = 90.0,
                 reconnect_s: float = 15.0, limits: P.WorkerLimits | None = None, percall_workers: int = 4,
                 test_hooks: dict[str, Any] | None = None, launch: Literal["python", "multiprocessing"] | None = None,
                 state_settings: bool = True):
        self.launcher = Launcher(settings, Path(data_dir).expanduser().resolve(), credentials or Credentials(),
                                 app=app, mode_arg=mode, python_arg=python, launch_arg=launch,
                                 limits=limits or P.WorkerLimits(), test_hooks=dict(test_hooks or {}))
        redact.register_config(settings, self.launcher.credentials)
        self._s = Shared()
        self.requests = RequestTable(self._s)
        self.percall = PerCall(self._s, self.launcher, self.requests, percall_workers)
        # state_settings=False: a client without settings of its own (doctor) states none in the hello
        self.discovery = Discovery(self._s, self.launcher, self.requests, reconnect_s, state_settings)
        self.supervisor = Supervisor(
            self._s, self.launcher, self.requests, self.percall, self.discovery, max_deaths=max_deaths,
            death_window_s=death_window_s, backoff_s=backoff_s, backoff_max_s=backoff_max_s,
            retry_persistent_s=retry_persistent_s, start_timeout_s=start_timeout_s,
            heartbeat_s=heartbeat_s, hang_timeout_s=hang_timeout_s)
        self._threads: list = []
        self._started_at: float | None = None

    # ── configuration ──────────────────────────────────────────────────────────────────
    settings = property(lambda self: self.launcher.settings)
    credentials = property(lambda self: self.launcher.credentials)
    data_dir = property(lambda self: self.launcher.data_dir)
    app = property(lambda self: self.launcher.app)
    limits = property(lambda self: self.launcher.limits)

    @property
    def mode(self) -> Mode:
        """The configured engine mode (client/launcher.py)."""
        return self.launcher.mode  # type: ignore[return-value]

    def python(self) -> str:
        return self.launcher.python()

    def launch(self) -> str:
        return self.launcher.launch()

    # ── public API ─────────────────────────────────────────────────────────────────────
    def start(self) -> "WorkerClient":
        """Start reaching the worker in the background; returns at once."""
        s = self._s
        with s.lock:
            if s.started or s.closing:
                return self
            s.started = True
            self._started_at = time.monotonic()
            s.state = "starting"
        self._threads = self.supervisor.threads()
        return self

    def submit(self, op: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> cf.Future:
        """Send a request; the Future gets the result (JSON data) or an exception: WorkerError
        (the engine refused), RequestTimeout, WorkerUnavailable. Never blocks."""
        if op in P.CLIENT_INTERNAL:
            fut: cf.Future = cf.Future()
            fut.set_exception(ValueError(f"{op} is not sent with submit(); use the client's methods"))
            return fut
        return self._submit(op, params, timeout)

    def call(self, op: str, params: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        """submit() and wait for the result (blocking convenience; not for the GUI thread)."""
        fut = self.submit(op, params, timeout)
        return fut.result()

    def subscribe(self, listener: Callable[[str, dict[str, Any]], None]) -> Callable[[], None]:
        """Hear the worker's bank events (`P.BANK_CHANGED`, `P.FORGOTTEN` and their data, see
        wire/protocol.py), whichever client caused them. The listener runs on a reader thread:
        quick and thread-safe. Returns the function that unsubscribes it."""
        return self._s.subscribe(listener)

    def update_settings(self, settings: Settings, credentials: Credentials | None = None,
                        timeout: float | None = None) -> cf.Future:
        """Apply new settings: sent to a running worker (no restart); a change of engine mode
        or worker Python restarts the worker cleanly. The Future resolves when applied."""
        s, la = self._s, self.launcher
        with s.lock:
            old_mode, old_python = self.mode, la.python_choice()
            if settings.engine_mode != la.settings.engine_mode and la.mode_arg != "socket":
                la.mode_arg = None      # the user changed Engine Mode: it wins over the constructor's
            la.settings = settings
            if credentials is not None:
                la.credentials = credentials
            redact.register_config(settings, la.credentials)
            # auto and persistent share a worker; only a change to or from per-call mode, of the
            # interpreter, or leaving a fallback or broken state needs a restart.
            restart = s.started and self.mode != old_mode and (
                "subprocess" in (self.mode, old_mode) or s.state in ("fallback", "broken"))
            restart = restart or (s.started and la.python_choice() != old_python)
            ch = s.ch
            if restart:
                fut: cf.Future = cf.Future()
                s.restart_waiters.append(fut)
                s.restart_requested = True
                s.changed.notify_all()
                return fut
            if s.started and self.mode != "socket" and s.using in ("persistent", None) \
                    and s.state != "fallback" and (ch is None or ch.kind == "process"):
                return self._submit("update_settings", {"settings": settings.model_dump(),
                                                        "credentials": la.credentials.model_dump()},
                                    timeout)
        fut = cf.Future()
        reason = ("the worker belongs to another process" if ch is not None and ch.kind == "socket"
                  else "applies from the next worker process")
        fut.set_result({"applied": False, "reason": reason})
        return fut

    def restart(self) -> cf.Future:
        """Restart the worker (also resets an open circuit breaker). Resolves when reachable."""
        s = self._s
        with s.lock:
            fut: cf.Future = cf.Future()
            s.restart_waiters.append(fut)
            s.restart_requested = True
            self.supervisor.deaths.clear()
            self.supervisor.fallback_until = 0.0
            if s.state in ("broken", "fallback"):
                s.state = "restarting"
            s.changed.notify_all()
        self.start()
        return fut

    def status(self) -> dict[str, Any]:
        """What the UI shows: state (stopped, starting, ready, restarting, fallback, broken,
        closed), the mode in use, the worker's pid, uptime, RSS, requests in flight, restarts,
        the last error, the extraction engine, and what a worker of another process runs
        differently from our settings (`conflicts`). Never blocks."""
        s, sup = self._s, self.supervisor
        with s.lock:
            ch = s.ch
            pid = ch.pid if ch is not None and not ch.ended.is_set() else None
            now = time.monotonic()
            out = {
                "state": s.state, "mode": self.mode, "using": s.using,
                "pid": pid, "uptime_s": (round(now - ch.started, 1) if ch.kind == "process"
                                         else s.health.get("uptime_s")) if pid else None,
                "rss_mb": None, "in_flight": sum(1 for p in self.requests.pending.values() if not p.internal),
                "worker_in_flight": s.health.get("in_flight"), "restarts": sup.restarts,
                "recent_deaths": len(sup.deaths), "fallbacks": sup.fallbacks,
                "last_error": s.last_error,
                "extraction": (ch.info.get("extraction") if ch is not None and ch.info else None)
                or s.health.get("extraction")
                or (self.settings.extraction_engine if self.settings.extraction_engine != "auto" else None),
                "embedder": s.health.get("embedder"),   # from the ready event, then each health check
                "socket": ch.info.get("socket") if ch is not None else None,
                "transport": ch.info.get("transport") if ch is not None else None,
                "conflicts": list(s.conflicts) if ch is not None and ch.kind == "socket" else [],
                "late_answers_dropped": self.requests.late, "garbage_lines": self.requests.garbage,
                "startup_s": sup.startup_s, "data_dir": str(self.data_dir),
            }
            if s.state == "fallback":
                out["retry_persistent_in_s"] = round(max(0.0, sup.fallback_until - now), 1)
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
                out["rss_mb"] = s.health.get("rss_mb")
        return out

    def close(self, timeout: float = 15.0) -> None:
        """Ask the worker to finish what it holds and exit (bounded), kill it past `timeout`;
        no orphan process, no held lock. Idempotent."""
        s = self._s
        deadline = time.monotonic() + timeout
        with s.lock:
            if s.closed:
                return
            s.closing = True
            self.supervisor.close_grace = max(0.0, min(self.limits.shutdown_grace_s, timeout - 3.0))
            s.changed.notify_all()
        for t in self._threads:
            if t.name.endswith("lifecycle"):
                t.join(max(0.1, deadline - time.monotonic()))
        with s.lock:
            ch = s.ch
        if ch is not None and ch.proc is not None and ch.proc.poll() is None:
            log.warning("the worker did not stop in time; killing pid %s", ch.pid)
            ch.kill()
        self.percall.close(deadline)
        with s.lock:
            left = list(self.requests.pending.values())
            self.requests.pending.clear()
            s.closed = True
            s.state = "closed"
            s.using = None
            s.ch = None
            waiters, s.restart_waiters = s.restart_waiters, []
        for p in left:
            if not p.internal:
                settle(p.future, exc=WorkerClosed("the memory worker client was closed"))
        for w in waiters:
            settle(w, exc=WorkerClosed("the memory worker client was closed"))
        for t in self._threads:
            t.join(1.0)

    def __enter__(self) -> "WorkerClient":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ── submitting ─────────────────────────────────────────────────────────────────────
    def _submit(self, op: str, params: Any, timeout: float | None) -> cf.Future:
        s = self._s
        try:
            p = self.requests.new(op, params, timeout)
        except ValueError as exc:
            fut: cf.Future = cf.Future()
            fut.set_exception(exc)
            return fut
        fut = p.future
        start = False
        with s.lock:
            if s.closing or s.closed:
                fut.set_exception(WorkerClosed("the memory worker client is closed"))
                return fut
            if s.state == "broken":
                fut.set_exception(WorkerUnavailable(s.broken_message()))
                return fut
            self.requests.pending[p.id] = p
            if self.supervisor.percall_now():
                self.percall.submit(p)
            else:
                # Only once the supervisor chose this channel ("ready"): a new worker that lost
                # the takeover to another client's steps aside, cancelling what it was sent.
                ch = s.ch
                if s.state == "ready" and ch is not None and ch.ready and not ch.draining \
                        and not ch.ended.is_set():
                    self.requests.send(ch, p)
            if not s.started:
                start = True
        fut.add_done_callback(lambda f, p=p: self.requests.caller_cancelled(p) if f.cancelled() else None)
        if start:
            self.start()
        return fut


def connect_existing(data_dir: str | os.PathLike, *, timeout: float = 5.0,
                     app: str = "the memoryplus command", settings: Settings | None = None) -> WorkerClient | None:
    """A client connected to the worker another process (PyGPT) runs for this data directory,
    or None when there is none (a stale worker.json, whose pid is dead, counts as none).
    The client never starts a worker of its own; close() only disconnects. `settings` are
    this process's own, told to the worker in the hello: what differs is in
    `status()["conflicts"]` (the worker's owner's settings govern)."""
    if P.live_worker(data_dir) is None:
        return None
    client = WorkerClient(settings or Settings(), data_dir, None, mode="socket", app=app, reconnect_s=timeout,
                          state_settings=settings is not None)
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
