"""The supervisor: one thread owns the worker process (start, watch, restart with back-off,
the circuit breaker, the fallback to per-call processes), another checks deadlines and sends
the heartbeat (a worker that does not answer its health check in time is killed)."""
from __future__ import annotations

import collections
import logging
import subprocess
import threading
import time

from memoryplus.client.channel import Channel, ProcessChannel
from memoryplus.client.discovery import Discovery
from memoryplus.client.errors import WorkerUnavailable, settle
from memoryplus.client.launcher import Launcher
from memoryplus.client.percall import PerCall
from memoryplus.client.requests import RequestTable
from memoryplus.client.state import Shared
from memoryplus.wire import protocol as P

log = logging.getLogger("memoryplus.client")


class Supervisor:
    def __init__(self, shared: Shared, launcher: Launcher, table: RequestTable, percall: PerCall,
                 discovery: Discovery, *, max_deaths: int, death_window_s: float, backoff_s: float,
                 backoff_max_s: float, retry_persistent_s: float, start_timeout_s: float,
                 heartbeat_s: float, hang_timeout_s: float):
        self.s, self.launcher, self.table, self.percall, self.discovery = shared, launcher, table, percall, discovery
        self.max_deaths, self.death_window_s = max_deaths, death_window_s
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.retry_persistent_s = retry_persistent_s
        self.start_timeout_s, self.heartbeat_s, self.hang_timeout_s = start_timeout_s, heartbeat_s, hang_timeout_s
        self.deaths: collections.deque[float] = collections.deque()
        self.fallback_until = 0.0
        self.fallbacks = 0
        self.restarts = 0
        self.starts = 0
        self.startup_s: float | None = None
        self.close_grace = launcher.limits.shutdown_grace_s

    def percall_now(self) -> bool:
        return self.launcher.mode == "subprocess" or self.s.state == "fallback"

    # ── timeouts and heartbeat ─────────────────────────────────────────────────────────
    def timer(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            with self.s.lock:
                if self.s.closed:
                    return
                expired, hung_now = self.table.expire(now)
                hung = self.s.ch if hung_now else None
                ch = self.s.ch
                if (ch is not None and ch.ready and not ch.draining and not ch.stopping
                        and not ch.ended.is_set() and now - ch.last_ping >= self.heartbeat_s
                        and not any(p.internal == "health" for p in self.table.pending.values())):
                    ch.last_ping = now
                    self.table.send(ch, self.table.internal("health", {}, "health", self.hang_timeout_s))
            self.table.time_out(expired)
            if hung is not None:
                with self.s.lock:
                    hung.kill_reason = (f"{hung.describe()} did not answer a health check within "
                                        f"{self.hang_timeout_s:.1f} s and was killed")
                    self.s.last_error = hung.kill_reason
                log.warning(self.s.last_error)
                hung.kill()

    # ── life cycle ─────────────────────────────────────────────────────────────────────
    def lifecycle(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # a bug here must not leave callers waiting forever
            log.exception("the worker supervisor failed")
            with self.s.lock:
                self.s.last_error = f"internal error: {type(exc).__name__}: {exc}"
                self.s.state = "broken"
            self.table.fail_worker_requests(WorkerUnavailable(self.s.broken_message()))
        finally:
            with self.s.lock:
                ch = self.s.ch
            if ch is not None:
                self.shutdown_channel(ch, self.close_grace)

    def _loop(self) -> None:
        s = self.s
        while True:
            with s.lock:
                if s.closing:
                    return
                if s.restart_requested:
                    s.restart_requested = False
                    self.deaths.clear()
                    s.state = "restarting"
                    self.fallback_until = 0.0
                mode, state = self.launcher.mode, s.state
            if mode == "subprocess":
                s.set_state("ready", "subprocess")
                self._route_pending_percall()
                s.resolve_restart_waiters()
                s.wait(3600, until=lambda: self.launcher.mode != "subprocess")
                continue
            if state == "fallback":
                self._route_pending_percall()
                s.resolve_restart_waiters()
                s.wait(max(0.0, self.fallback_until - time.monotonic()))
                with s.lock:
                    if s.closing or s.restart_requested:
                        continue
                    s.state = "starting"   # new requests wait for the persistent worker
                log.info("trying the persistent worker again")
            if state == "broken":
                s.resolve_restart_waiters()
                if mode == "socket":
                    data_dir = self.launcher.data_dir
                    s.wait(1.0, until=lambda: P.live_worker(data_dir) is not None)
                    if P.live_worker(data_dir) is not None:
                        s.set_state("restarting")
                else:
                    s.wait(3600)
                continue
            ch = self._open_channel(mode)
            if ch is None:
                self.after_failure(start=True)
                continue
            with s.lock:
                if s.closing:
                    s.ch = ch
                    return
                s.ch = ch
                s.state = "ready"
                s.using = "persistent" if ch.kind == "process" else "socket"
                s.health = dict(ch.info)
                unsure = []
                for p in sorted(self.table.pending.values(), key=lambda p: p.seq):
                    if p.route != "worker":
                        continue
                    if p.sent_gen and not p.spec.replay:
                        unsure.append(p)    # it may have run before the worker died
                        del self.table.pending[p.id]
                    else:
                        self.table.send(ch, p)   # first sending, or re-sending after a restart
                s.changed.notify_all()
            for p in unsure:
                settle(p.future, exc=WorkerUnavailable(
                    f"the worker stopped before answering {p.op}; it may or may not have been "
                    f"applied (not repeated, since repeating it could apply it twice)"))
            s.resolve_restart_waiters()
            self._watch(ch)
            with s.lock:
                if s.closing:
                    return
            self._after_end(ch)

    def _route_pending_percall(self) -> None:
        with self.s.lock:
            moved = [p for p in self.table.pending.values() if p.route == "worker" and not p.internal]
            unsure = [p for p in moved if p.sent_gen and not p.spec.replay]
            for p in moved:
                if p in unsure:
                    del self.table.pending[p.id]
                    continue
                self.percall.submit(p)
            self.table.forget_internal()
        for p in unsure:
            settle(p.future, exc=WorkerUnavailable(
                f"the worker stopped before answering {p.op}; it may or may not have been applied"))

    def _open_channel(self, mode: str) -> Channel | None:
        """A ready channel: to another process's worker through its transport, else our own."""
        ch = self.discovery.other_worker(mode)
        if ch is not None or mode == "socket":
            if ch is None:
                with self.s.lock:
                    self.s.last_error = f"no running memory worker for {self.launcher.data_dir}"
            return ch
        with self.s.lock:
            if self.s.closing:
                return None
        # Per-call processes hold bank locks; let the running ones finish first.
        if not self.percall.gate.acquire(None, lambda: self.s.closing):
            return None
        try:
            ch = self._start_process()
        finally:
            self.percall.gate.release(None)
        return self._unless_another_won(ch, mode)

    def _unless_another_won(self, ch: Channel | None, mode: str) -> Channel | None:
        """When an owner exits, each of its clients takes over and starts a worker; only one of
        them takes worker.lock and listens (worker/listener.py). A worker that does not listen
        would hold banks nobody else can reach (Kuzu's lock): it stops before its first request,
        and this client joins the one that won."""
        if ch is None or ch.info.get("socket"):
            return ch
        deadline = time.monotonic() + 5.0      # the winner writes worker.json just after its lock
        while time.monotonic() < deadline and not self.s.closing:
            info = P.live_worker(self.launcher.data_dir)
            if info is not None and info.pid != ch.pid:
                log.info("the worker of %s (pid %d) serves %s already; joining it", info.app, info.pid,
                         self.launcher.data_dir)
                self.shutdown_channel(ch, 0.0)
                with self.s.lock:
                    if self.s.ch is ch:
                        self.s.ch = None
                return self.discovery.other_worker(mode)
            time.sleep(0.1)
        return ch

    def _start_process(self) -> Channel | None:
        s = self.s
        t0 = time.monotonic()
        with s.lock:
            self.starts += 1
            if self.starts > 1:
                self.restarts += 1
        try:
            proc = self.launcher.spawn()
        except (OSError, WorkerUnavailable) as exc:
            with s.lock:
                s.last_error = self.launcher.start_failure(exc)
            log.warning(s.last_error)
            return None
        ch = ProcessChannel(next(s.gens), proc)
        s.own_pids.add(proc.pid)
        try:
            proc.stdin.write(self.launcher.config_line("persistent"))
            proc.stdin.flush()
        except OSError:
            pass  # it died already: the reader sees EOF
        ch.start(self.table.on_line, self.table.channel_ended)
        with s.lock:
            s.ch = ch
            deadline = t0 + self.start_timeout_s
            while not ch.ready and not ch.ended.is_set() and not s.closing:
                if proc.poll() is not None or time.monotonic() > deadline:
                    break
                s.changed.wait(0.1)
            ok = ch.ready
            closing = s.closing
        if closing and not ok:
            return ch
        if not ok:
            try:   # EOF comes a moment before the exit status
                proc.wait(2 if ch.ended.is_set() or proc.poll() is not None else 0.01)
            except subprocess.TimeoutExpired:
                pass
            if proc.poll() is None:
                ch.kill()
                why = ("closed its output before it was ready" if ch.ended.is_set()
                       else f"did not become ready within {self.start_timeout_s:.0f} s")
            else:
                why = f"exited at start (exit code {proc.returncode})"
            ch.close_input()
            for t in ch.threads:
                t.join(2)
            detail = (ch.fatal or {}).get("message") or " | ".join(list(ch.stderr_tail)[-3:])
            with s.lock:
                s.last_error = f"the worker {why}" + (f": {detail}" if detail else "")
                s.ch = None
            ch.cleanup()
            log.warning(s.last_error)
            return None
        self.startup_s = round(time.monotonic() - t0, 3)
        log.info("worker pid %d ready in %.2f s", proc.pid, self.startup_s)
        return ch

    def _watch(self, ch: Channel) -> None:
        """Until the channel ends: EOF on its stdout, or the process gone (polled)."""
        with self.s.lock:
            while not ch.ended.is_set() and not self.s.closing:
                if ch.proc is not None and ch.proc.poll() is not None:
                    break
                if self.s.restart_requested:
                    break
                self.s.changed.wait(0.25)
            restart = self.s.restart_requested and not self.s.closing
        if restart:
            self.shutdown_channel(ch, self.launcher.limits.shutdown_grace_s)

    def _after_end(self, ch: Channel) -> None:
        s = self.s
        rc = None
        if ch.proc is not None:
            try:
                rc = ch.proc.wait(5)
            except subprocess.TimeoutExpired:
                ch.kill()
                rc = ch.proc.returncode
        ch.cleanup()
        with s.lock:
            if s.ch is ch:
                s.ch = None
            self.table.forget_internal(ch.gen)
            if s.restart_requested:
                return  # the loop starts the next one
            if ch.stopping:
                return
            if ch.draining and rc == 0:
                log.info("the worker recycled itself; starting the next one")
                s.state = "restarting"
                return
            if ch.kind == "socket":
                s.last_error = f"lost the connection to {ch.describe()}"
                s.state = "restarting"
                return
            s.last_error = ch.kill_reason or (
                f"the worker (pid {ch.pid}) died "
                + (f"(killed by signal {-rc})" if rc is not None and rc < 0 else f"(exit code {rc})")
                + (": " + " | ".join(list(ch.stderr_tail)[-2:]) if ch.stderr_tail else ""))
        log.warning(s.last_error)
        self.after_failure(start=False)

    def after_failure(self, *, start: bool) -> None:
        """Count a death: back off and restart, fall back to per-call processes (auto), or open
        the circuit breaker (too many deaths in the window)."""
        s = self.s
        now = time.monotonic()
        with s.lock:
            if s.closing:
                return
            mode = self.launcher.mode
            if mode == "socket":
                s.state = "broken"
                s.using = None
            else:
                self.deaths.append(now)
                while self.deaths and now - self.deaths[0] > self.death_window_s:
                    self.deaths.popleft()
                tripped = len(self.deaths) >= self.max_deaths
                if mode == "auto" and (start or tripped):
                    self.fallbacks += 1
                    s.state = "fallback"
                    s.using = "subprocess"
                    self.fallback_until = now + self.retry_persistent_s
                    log.warning("memory worker: falling back to one process per call (%s); trying the "
                                "persistent worker again in %.0f s", s.last_error, self.retry_persistent_s)
                    return
                if tripped:
                    s.state = "broken"
                    s.using = None
                    s.last_error = (f"the worker failed {len(self.deaths)} times within "
                                    f"{self.death_window_s:.0f} s; not restarting it (last: "
                                    f"{s.last_error})")
                    log.error(s.last_error)
                else:
                    s.state = "restarting"
                    delay = min(self.backoff_max_s, self.backoff_s * 2 ** (len(self.deaths) - 1))
            state = s.state
        if state == "broken":
            self.table.fail_worker_requests(WorkerUnavailable(s.broken_message()))
            return
        if state == "restarting":
            s.wait(delay)

    def shutdown_channel(self, ch: Channel, grace: float) -> None:
        """Ask our own worker to finish and exit (bounded); for a socket, just disconnect."""
        if ch.ended.is_set() and (ch.proc is None or ch.proc.poll() is not None):
            ch.cleanup()
            return
        with self.s.lock:
            ch.stopping = True
            if ch.proc is not None:
                self.table.send(ch, self.table.internal("shutdown", {"grace_s": grace}, "shutdown", None))
            ch.close_input()
        if ch.proc is not None:
            try:
                ch.proc.wait(grace + 10)
            except subprocess.TimeoutExpired:
                log.warning("the worker (pid %d) did not stop within %.0f s; killing it", ch.pid, grace + 10)
                ch.kill()
        else:
            ch.hang_up()
            ch.ended.wait(2)
        ch.cleanup()

    def threads(self) -> list[threading.Thread]:
        out = []
        for target, name in ((self.lifecycle, "memoryplus-worker-lifecycle"),
                             (self.timer, "memoryplus-worker-timer")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            out.append(t)
        return out
