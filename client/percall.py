"""Per-call mode: every operation in a fresh worker process (config line, one request, the
answer, exit) killed after the Runner Timeout, or, when another process runs the worker of
the data directory, one request through its transport. Operations on one bank are
serialized, because Kuzu lets one process at a time open a bank."""
from __future__ import annotations

import collections
import concurrent.futures as cf
import logging
import subprocess
import threading
from typing import Any

from memoryplus.client.errors import RequestTimeout, WorkerUnavailable, answer_error, settle
from memoryplus.client.launcher import Launcher
from memoryplus.client.requests import Pending, RequestTable
from memoryplus.client.state import Shared
from memoryplus.common import redact
from memoryplus.wire import protocol as P
from memoryplus.wire import transport as T

log = logging.getLogger("memoryplus.client")


class BankGate:
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


class PerCall:
    def __init__(self, shared: Shared, launcher: Launcher, table: RequestTable, workers: int):
        self.s, self.launcher, self.table = shared, launcher, table
        self.pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memoryplus-percall")
        self.procs: set[subprocess.Popen] = set()
        self.gate = BankGate()

    @property
    def settings(self):
        return self.launcher.settings

    def submit(self, p: Pending) -> None:
        p.route = "percall"
        self.pool.submit(self._run, p)

    def _run(self, p: Pending) -> None:
        bank = p.params.get("bank") if p.spec.bank else None
        lock_all = p.spec.all_banks
        held = False
        try:
            if p.spec.bank or lock_all:
                held = self.gate.acquire(bank if p.spec.bank else None,
                                         lambda: p.future.done() or self.s.closing)
                if not held:
                    return
            if p.future.done():
                return
            info = P.live_worker(self.launcher.data_dir)
            if info is not None:
                result, exc = self._peer_call(info, p)
            else:
                result, exc = self._oneshot(p)
            if exc is not None:
                settle(p.future, exc=exc)
            else:
                settle(p.future, result)
        except Exception as exc:  # never leave a caller waiting
            log.exception("per-call %s failed", p.op)
            settle(p.future, exc=WorkerUnavailable(f"{p.op} failed: {type(exc).__name__}: {exc}"))
        finally:
            if held:
                self.gate.release(bank if p.spec.bank else None)
            with self.s.lock:
                if self.table.pending.get(p.id) is p:
                    del self.table.pending[p.id]

    def _runner_timeout(self) -> float:
        return float(self.settings.runner_timeout_s)

    def _oneshot(self, p: Pending) -> tuple[Any, BaseException | None]:
        limit = self._runner_timeout()
        try:
            proc = self.launcher.spawn()
        except (OSError, WorkerUnavailable) as exc:
            msg = self.launcher.start_failure(exc)
            with self.s.lock:
                self.s.last_error = msg
            return None, WorkerUnavailable(msg)
        with self.s.lock:
            self.procs.add(proc)
        try:
            data = self.launcher.config_line("oneshot") + p.line()
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
            with self.s.lock:
                self.procs.discard(proc)
        fatal = None
        answer: tuple[Any, BaseException | None] | None = None
        for raw in out.splitlines():
            try:
                msg = P.decode(raw)
            except P.ProtocolError:
                with self.s.lock:
                    self.table.garbage += 1
                continue
            if isinstance(msg, P.Response) and msg.id == p.id:
                answer = (msg.result, None) if msg.ok else (None, answer_error(msg))
            elif isinstance(msg, P.Event) and msg.event in P.BANK_EVENTS:
                self.s.deliver(msg.event, msg.data)
            elif isinstance(msg, P.Event) and msg.event == "fatal":
                fatal = msg.data.get("message")
        if answer is not None:
            return answer
        tail = redact.redact(err.decode("utf-8", "replace").strip().splitlines()[-1]) if err.strip() else ""
        msg_ = (f"the per-call worker exited with code {proc.returncode} without answering {p.op}"
                + (f": {fatal or tail}" if (fatal or tail) else ""))
        with self.s.lock:
            self.s.last_error = msg_
        return None, WorkerUnavailable(msg_)

    def _peer_call(self, info: P.WorkerInfo, p: Pending) -> tuple[Any, BaseException | None]:
        """One request to another process's running worker (it owns the banks)."""
        limit = p.timeout or self._runner_timeout()
        try:
            conn = T.connect(info.family, info.socket, info.token, timeout=min(limit, T.AUTH_TIMEOUT_S))
        except OSError as exc:
            return None, WorkerUnavailable(f"cannot reach the worker of {info.app} (pid {info.pid}): {exc}")
        try:
            conn.send_bytes(p.line())
            while True:
                if not conn.poll(limit):
                    return None, RequestTimeout(f"{p.op} was not answered within {limit:.1f} s")
                try:
                    msg = P.decode(conn.recv_bytes())
                except P.ProtocolError:
                    continue
                if isinstance(msg, P.Response) and msg.id == p.id:
                    return (msg.result, None) if msg.ok else (None, answer_error(msg))
                if isinstance(msg, P.Event) and msg.event in P.BANK_EVENTS:
                    self.s.deliver(msg.event, msg.data)
        except EOFError:
            return None, WorkerUnavailable(f"the worker of {info.app} (pid {info.pid}) closed the connection")
        except OSError as exc:
            return None, WorkerUnavailable(f"cannot reach the worker of {info.app} (pid {info.pid}): {exc}")
        finally:
            conn.close()

    def close(self, deadline: float) -> None:
        """Stop taking calls; the running processes get until `deadline`, then are killed."""
        import time
        self.pool.shutdown(wait=False, cancel_futures=True)
        while time.monotonic() < deadline:
            with self.s.lock:
                if not self.procs:
                    break
            time.sleep(0.05)
        with self.s.lock:
            procs = list(self.procs)
        for proc in procs:
            try:
                proc.kill()
                proc.wait(5)
            except Exception:
                pass
