"""The graph worker process: `python -m memoryplus.worker.process`.

Started by `memoryplus.client.worker_client.WorkerClient` with its working directory set to the data
directory (graphiti loads any .env in the working directory: that one is ours) and a minimal
environment without secrets. The first line on stdin is the config message (settings,
credentials, data directory): secrets travel only that way, never on the command line or in
the environment.

The worker builds one `MemoryEngine` and runs one asyncio loop. Every request runs as its own
task, so a search never waits behind an ingest (the engine serializes writes per bank and
takes no lock for searches). Its stdout carries only protocol lines: the real stdout file
descriptor is kept for the protocol and descriptor 1 is pointed at stderr, so a stray print,
from Python or native code, cannot corrupt the stream. Logs go to `logs/worker.log` in the
data directory (and warnings to stderr), secrets masked.

Roles:
- persistent: serves requests until stdin reaches EOF or a shutdown request, also listens on
  a Unix socket recorded in `worker.json` (so the CLI or another window reaches it instead of
  fighting for the Kuzu lock); when idle, runs the engine's maintenance and exits cleanly for
  recycling after a number of operations or past a memory bound (its client starts the next).
- oneshot: one request (per-call mode), then EOF: finishes it, closes the bank, exits.

At the end it answers (or cancels, after a bounded grace time) what is in flight, closes the
engine (releasing every Kuzu lock) and exits 0.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import logging.handlers
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"

from pydantic import ValidationError  # noqa: E402

from memoryplus.wire import errors  # noqa: E402
from memoryplus.wire import protocol as P  # noqa: E402
from memoryplus.common import redact  # noqa: E402

log = logging.getLogger("memoryplus.worker")
EXIT_OK, EXIT_BAD_CONFIG, EXIT_TEST_START_FAILURE = 0, 2, 3


class LineWriter:
    """Protocol lines to a file descriptor, written by a thread so that the event loop never
    blocks on a full pipe."""

    def __init__(self, fd: int):
        self._file = os.fdopen(fd, "wb", buffering=0)
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.broken = False
        self._thread = threading.Thread(target=self._run, name="protocol-out", daemon=True)
        self._thread.start()

    def send(self, data: bytes) -> None:
        self._queue.put(data)

    def _run(self) -> None:
        while True:
            data = self._queue.get()
            if data is None:
                break
            if self.broken:
                continue
            try:
                self._file.write(data)
            except OSError:  # the client is gone; stdin EOF ends the worker
                self.broken = True

    def close(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)
        try:
            self._file.close()
        except OSError:
            pass


class Conn:
    """One client connection: the starter's stdin/stdout or a socket peer."""
    _next = 0

    def __init__(self, name: str, owner: bool):
        Conn._next += 1
        self.key = Conn._next
        self.name = name
        self.owner = owner
        self.closed = False

    def send(self, data: bytes) -> None:
        raise NotImplementedError


class StdioConn(Conn):
    def __init__(self, writer: LineWriter):
        super().__init__("stdio", owner=True)
        self.writer = writer

    def send(self, data: bytes) -> None:
        self.writer.send(data)


class SocketConn(Conn):
    def __init__(self, writer: asyncio.StreamWriter, n: int):
        super().__init__(f"socket#{n}", owner=False)
        self.writer = writer

    def send(self, data: bytes) -> None:
        if self.closed or self.writer.is_closing():
            return
        try:
            self.writer.write(data)
        except (ConnectionError, RuntimeError):
            self.closed = True


class Gate:
    """Requests share the engine; an exclusive one (settings change, maintenance) waits for
    the running ones to finish and holds new ones back until it is done."""

    def __init__(self):
        self._cond = asyncio.Condition()
        self._active = 0
        self._exclusive = False

    async def enter(self, exclusive: bool) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive)
            if exclusive:
                self._exclusive = True
                await self._cond.wait_for(lambda: self._active == 0)
            else:
                self._active += 1

    async def leave(self, exclusive: bool) -> None:
        async with self._cond:
            if exclusive:
                self._exclusive = False
            else:
                self._active -= 1
            self._cond.notify_all()


def _secrets_of(settings: dict[str, Any], credentials: Any) -> list[str]:
    from memoryplus.config.schema import SECRET_OPTIONS
    out = [str(settings.get(k) or "") for k in SECRET_OPTIONS]
    if credentials is not None:
        out += [v for k, v in credentials.model_dump().items() if "key" in k and isinstance(v, str)]
    return out


class RedactingFormatter(logging.Formatter):
    """Masks secrets in the whole formatted record, tracebacks included."""

    def format(self, record: logging.LogRecord) -> str:
        return redact.redact(super().format(record))


def setup_logging(data_dir: Path) -> Path:
    log_dir = data_dir / P.LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / P.LOG_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    fmt = RedactingFormatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    file_handler = logging.handlers.RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3,
                                                        encoding="utf-8")
    file_handler.setFormatter(fmt)
    err_handler = logging.StreamHandler(sys.stderr)
    err_handler.setLevel(logging.WARNING)
    err_handler.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [file_handler, err_handler]
    root.setLevel(logging.INFO)
    redact.install_log_filter(root)
    logging.captureWarnings(True)
    import warnings
    warnings.simplefilter("ignore", DeprecationWarning)
    for noisy in ("httpx", "httpcore", "neo4j", "openai", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return path


class WorkerServer:
    def __init__(self, cfg: P.ConfigMessage, out: LineWriter, stdin, hooks: bool):
        self.cfg = cfg
        self.limits = cfg.limits
        self.out = out
        self.stdio = StdioConn(out)
        self.stdin = stdin
        self.hooks = hooks
        self.data_dir = Path(cfg.data_dir)
        self.started = time.monotonic()
        self.tasks: dict[tuple[int, str], tuple[asyncio.Task, P.OpSpec]] = {}
        self.ops_done = 0
        self.memory_returned_mb = 0.0   # freed heap given back to the system when idle (malloc_trim)
        self.last_activity = time.monotonic()
        self.accepting = True
        self.recycle = False
        self.stop_reason = ""
        self.grace: float | None = self.limits.shutdown_grace_s
        self.shutdown_waiters: list[tuple[Conn, str]] = []
        self.sockets: set[SocketConn] = set()
        self.socket_path: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._lock_fd: int | None = None
        self._n_sockets = 0
        self.engine = None
        self.service = None     # LocalMemoryService over the engine, made on the first request

    # ── life cycle ─────────────────────────────────────────────────────────────────────
    async def run(self) -> int:
        from memoryplus.config.schema import validate
        from memoryplus.engine.memory_engine import MemoryEngine

        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        self.gate = Gate()
        try:
            settings = validate(self.cfg.settings)
            self.engine = MemoryEngine(settings, self.data_dir, self.cfg.credentials, app=self.cfg.app)
        except Exception as exc:
            log.error("cannot start the engine: %s: %s", type(exc).__name__, exc)
            self.stdio.send(P.encode(P.Event(event="fatal", data={
                "type": type(exc).__name__, "message": redact.redact(str(exc))})))
            return EXIT_BAD_CONFIG
        if self.cfg.role == "persistent":
            await self._start_socket()
        else:
            self.grace = None  # per-call: the client's Runner Timeout bounds the process
        try:
            self.loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        except (NotImplementedError, RuntimeError, AttributeError):
            pass
        self.stdio.send(P.encode(P.Event(event="ready", data=self._identity())))
        log.info("worker ready (%s, pid %d, extraction %s, %.2f s after start)", self.cfg.role,
                 os.getpid(), self.engine.extraction, time.monotonic() - self.started)
        threading.Thread(target=self._read_stdin, name="protocol-in", daemon=True).start()
        maint = self.loop.create_task(self._maintenance()) if self.cfg.role == "persistent" else None
        await self.stopping.wait()
        if maint is not None:   # let a running maintenance finish (it may be closing a bank)
            await asyncio.wait([maint], timeout=30)
            maint.cancel()
        await self._finish()
        return EXIT_OK

    def _identity(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "protocol": P.PROTOCOL_VERSION, "role": self.cfg.role,
                "extraction": self.engine.extraction if self.engine else None,
                "embedder": self.engine.embedder_status() if self.engine else None,
                "backend": self.engine.settings.backend if self.engine else None,
                "socket": self.socket_path, "python": sys.executable}

    def _on_sigterm(self) -> None:
        """Stop soon, but cleanly: running requests get a short grace, then are cancelled,
        and the engine closes its banks (a killed Kuzu process leaves a log to replay)."""
        self.grace = min(self.grace if self.grace is not None else 2.0, 2.0)
        self.begin_stop("SIGTERM")

    def begin_stop(self, reason: str, *, recycle: bool = False) -> None:
        if self.stopping.is_set():
            return
        self.stop_reason, self.recycle = reason, recycle
        self.accepting = False
        log.info("worker stopping: %s", reason)
        if recycle:
            self._mark_recycling()
            self.stdio.send(P.encode(P.Event(event="recycling", data={"reason": reason})))
        self.stopping.set()

    async def _finish(self) -> None:
        if self._server is not None:
            self._server.close()
        pending = [t for t, _ in self.tasks.values()]
        if pending:
            done, still = await asyncio.wait(pending, timeout=self.grace)
            if still:
                log.warning("shutting down: cancelling %d request(s) still running after %.1f s",
                            len(still), self.grace or 0)
                for t in still:
                    t.cancel()
                await asyncio.wait(still, timeout=5)
        try:
            await asyncio.wait_for(self.engine.close(), timeout=30)
        except Exception as exc:
            log.error("closing the engine failed: %s: %s", type(exc).__name__, exc)
        self._stop_socket()
        for conn, rid in self.shutdown_waiters:
            conn.send(P.encode(P.Response(id=rid, ok=True, result={
                "closed": True, "reason": self.stop_reason, "pid": os.getpid()})))
        for s in list(self.sockets):
            try:
                s.writer.close()
            except Exception:
                pass
        log.info("worker stopped (%s) after %d operation(s), %.1f s", self.stop_reason,
                 self.ops_done, time.monotonic() - self.started)

    # ── the socket other processes reach us by ─────────────────────────────────────────
    async def _start_socket(self) -> None:
        if os.name != "posix" or not hasattr(asyncio, "start_unix_server"):
            log.info("no local socket on this platform; other processes cannot share this worker")
            return
        import fcntl
        try:
            fd = os.open(self.data_dir / P.WORKER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                other = P.read_worker_file(self.data_dir)
                log.warning("another worker (pid %s) already serves %s; not listening",
                            other.pid if other else "?", self.data_dir)
                return
            self._lock_fd = fd
            path = P.socket_path_for(self.data_dir)
            try:
                os.unlink(path)  # a stale socket of a dead worker
            except FileNotFoundError:
                pass
            old = os.umask(0o177)
            try:
                self._server = await asyncio.start_unix_server(self._on_socket, path=path, limit=2 ** 30)
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            self.socket_path = path
            P.write_worker_file(self.data_dir, P.WorkerInfo(
                pid=os.getpid(), socket=path, app=self.cfg.app, owner_pid=self.cfg.owner_pid,
                started=time.time()))
        except OSError as exc:
            log.warning("cannot listen on a local socket: %s", exc)

    def _mark_recycling(self) -> None:
        info = P.read_worker_file(self.data_dir)
        if info is not None and info.pid == os.getpid():
            info.recycling = True
            try:
                P.write_worker_file(self.data_dir, info)
            except OSError:
                pass

    def _stop_socket(self) -> None:
        if self.socket_path:
            if not self.recycle:
                P.remove_worker_file(self.data_dir, os.getpid())
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    async def _on_socket(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._n_sockets += 1
        conn = SocketConn(writer, self._n_sockets)
        self.sockets.add(conn)
        log.info("%s connected", conn.name)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                self._on_line(conn, line)
        except (ConnectionError, ValueError, asyncio.LimitOverrunError) as exc:
            log.warning("%s: %s", conn.name, exc)
        finally:
            conn.closed = True
            self.sockets.discard(conn)
            for (key, _rid), (task, spec) in list(self.tasks.items()):
                if key == conn.key and spec.cancellable:
                    task.cancel()  # nobody is waiting for this read any more
            try:
                writer.close()
            except Exception:
                pass
            log.info("%s disconnected", conn.name)

    # ── requests ───────────────────────────────────────────────────────────────────────
    def _read_stdin(self) -> None:
        """Lines from the starter (a thread: blocking reads, no pipe-size limits)."""
        try:
            while True:
                line = self.stdin.readline()
                if not line:
                    break
                self.loop.call_soon_threadsafe(self._on_line, self.stdio, line)
        except (OSError, ValueError):
            pass
        try:
            self.loop.call_soon_threadsafe(self.begin_stop, "stdin closed")
        except RuntimeError:  # the loop is gone already
            pass

    def _on_line(self, conn: Conn, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            msg = P.decode(raw)
        except P.ProtocolError as exc:
            log.warning("%s: skipped a line that is not a request (%s)", conn.name, exc)
            return
        if not isinstance(msg, P.Request):
            log.warning("%s: skipped a %s message", conn.name, type(msg).__name__)
            return
        spec = P.OPS.get(msg.op)
        if spec is None or (spec.test and not self.hooks):
            conn.send(P.encode(P.error_response(msg.id, f"unknown operation {msg.op!r}",
                                                "UnknownOperation", code=errors.UnknownOperation.code)))
            return
        if msg.op in P.OWNER_ONLY and not conn.owner:
            conn.send(P.encode(P.error_response(
                msg.id, f"{msg.op} is reserved to the process that started this worker "
                        f"({self.cfg.app})", "NotOwner", code=errors.NotOwner.code)))
            return
        if msg.op == "shutdown":
            if conn.owner:
                try:
                    grace = P.ShutdownParams.model_validate(msg.params).grace_s
                except Exception:
                    grace = None
                if grace is not None:
                    self.grace = grace
                self.shutdown_waiters.append((conn, msg.id))
                self.begin_stop("shutdown requested")
            return
        if not self.accepting:
            # Not run: the client sends it to the next worker.
            log.info("%s: not taking %s %s, the worker is stopping", conn.name, msg.op, msg.id)
            conn.send(P.encode(P.error_response(msg.id, "the worker is stopping", P.NOT_ACCEPTED,
                                                code=errors.NotAccepted.code)))
            return
        if msg.op == "cancel":
            self._cancel(conn, msg)
            return
        key = (conn.key, msg.id)
        if key in self.tasks:
            log.warning("%s: request %s is already running", conn.name, msg.id)
            return
        if spec.counts:
            self.last_activity = time.monotonic()
        task = self.loop.create_task(self._handle(conn, msg, spec))
        self.tasks[key] = (task, spec)

    def _cancel(self, conn: Conn, msg: P.Request) -> None:
        target = str(msg.params.get("id", ""))
        entry = self.tasks.get((conn.key, target))
        cancelled = False
        if entry is not None and entry[1].cancellable:
            entry[0].cancel()
            cancelled = True
        conn.send(P.encode(P.Response(id=msg.id, ok=True, result=cancelled)))

    async def _handle(self, conn: Conn, msg: P.Request, spec: P.OpSpec) -> None:
        key = (conn.key, msg.id)
        entered = False
        try:
            try:
                params = spec.params.model_validate(msg.params)
            except ValidationError as exc:
                raise _BadParams(exc) from None
            if spec.lane != "control" or spec.exclusive:
                await self.gate.enter(spec.exclusive)
                entered = True
            result = await self._dispatch(conn, msg.op, params)
            resp = P.Response(id=msg.id, ok=True, result=P.to_jsonable(result))
        except asyncio.CancelledError:
            resp = P.error_response(msg.id, "the request was cancelled", "Cancelled", code=errors.Cancelled.code)
        except _BadParams as bad:
            # Only the request's own parameters: a provider's malformed answer failing graphiti's
            # models is an engine error, reported as such below.
            exc = bad.error
            first = exc.errors()[0] if exc.errors() else {}
            where = ".".join(str(x) for x in first.get("loc", ()))
            resp = P.error_response(msg.id, redact.redact(
                f"bad parameters for {msg.op}: {where}: {first.get('msg', exc)}"), "BadRequest",
                code=errors.BadParams.code)
        except Exception as exc:
            from memoryplus.service.local import service_error
            err = service_error(exc)   # its wire error: the code the client acts on
            # an error the user can act on: one line, no traceback
            if err.expected or spec.test:
                log.info("%s %s failed: %s: %s", msg.op, msg.id, err.origin, err)
            else:
                log.exception("%s %s failed", msg.op, msg.id)
            resp = P.error_response(msg.id, redact.redact(str(err) or err.origin), err.origin, code=err.code)
        finally:
            if entered:
                await self.gate.leave(spec.exclusive)
            self.tasks.pop(key, None)
            if spec.counts:
                self.ops_done += 1
                self.last_activity = time.monotonic()
        try:
            data = P.encode(resp)
        except (TypeError, ValueError) as exc:
            data = P.encode(P.error_response(msg.id, f"the result cannot be sent: {exc}", "Unserializable",
                                             code=errors.Internal.code))
        conn.send(data)

    async def _dispatch(self, conn: Conn, op: str, p: Any) -> Any:
        if self.service is None:     # the op → engine mapping: the in-process service's
            from memoryplus.service.local import LocalMemoryService
            self.service = LocalMemoryService(self.engine, self.loop)
        if op == "health":
            return await self._health()
        if op == "ping":
            return {"pid": os.getpid()}
        if op == "update_settings":
            redact.register(*_secrets_of(p.settings, p.credentials))
            applied = await self.service.execute(op, p)
            log.info("settings updated (extraction %s, backend %s)", applied.extraction, applied.backend)
            return applied
        if not P.OPS[op].test:
            return await self.service.execute(op, p)
        # test hooks (only reachable with MEMORYPLUS_TEST_HOOKS=1)
        if op == "sleep":
            if p.blocking:
                time.sleep(p.seconds)
            else:
                await asyncio.sleep(p.seconds)
            return p.seconds
        if op == "junk":
            for line in p.lines:
                conn.send(line.encode("utf-8", "replace") + b"\n")
            if p.binary:
                conn.send(b"\xff\xfe\x00 not text \x80\n")
            print("a stray print from the junk hook")          # must land on stderr
            os.write(1, b"a stray native write to fd 1\n")     # so must this
            return len(p.lines)
        if op == "log":
            getattr(log, p.level)("%s", p.message)
            return True
        if op == "fail":
            raise RuntimeError(p.message)
        if op == "crash":
            logging.shutdown()
            os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))
        raise P.ProtocolError(f"operation {op!r} is not implemented")

    async def _health(self) -> dict[str, Any]:
        info = (await self.service.execute("health", P.NoParams())).model_dump(exclude_none=True)
        info.update(self._identity())
        info.update({"uptime_s": round(time.monotonic() - self.started, 3),
                     "rss_mb": round(_rss_mb(), 1),
                     "in_flight": sum(1 for _, s in self.tasks.values() if s.counts),
                     "ops": self.ops_done, "sockets": len(self.sockets),
                     "memory_returned_mb": round(self.memory_returned_mb, 1),
                     "app": self.cfg.app})
        return info

    # ── maintenance and recycling (when idle) ──────────────────────────────────────────
    def _busy(self) -> bool:
        return any(s.counts for _, s in self.tasks.values())

    def _recycle_reason(self) -> str | None:
        lim = self.limits
        if lim.recycle_after_ops and self.ops_done >= lim.recycle_after_ops:
            return f"recycling after {self.ops_done} operations"
        if lim.recycle_rss_mb and self.ops_done:   # a fresh worker never recycles
            rss = _rss_mb()
            if rss > lim.recycle_rss_mb:
                return f"recycling at {rss:.0f} MB resident memory (bound {lim.recycle_rss_mb} MB)"
        return None

    async def _maintenance(self) -> None:
        maintained_at = 0.0
        tick = max(0.05, min(0.5, self.limits.idle_s / 2))
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), tick)
                return
            except asyncio.TimeoutError:
                pass
            now = time.monotonic()
            if self._busy() or now - self.last_activity < self.limits.idle_s:
                continue
            if self.last_activity > maintained_at or now - maintained_at > 60:
                maintained_at = now
                await self.gate.enter(True)
                try:
                    if await self.engine.maintain():
                        log.info("maintenance reopened bank(s) whose Kuzu memory had grown")
                except Exception:
                    log.exception("maintenance failed")
                finally:
                    await self.gate.leave(True)
                self.memory_returned_mb += _return_free_memory()
            if self._busy() or not self.accepting:
                continue
            reason = self._recycle_reason()
            if reason:
                self.begin_stop(reason, recycle=True)


class _BadParams(Exception):
    def __init__(self, error: ValidationError):
        super().__init__(str(error))
        self.error = error


def _return_free_memory() -> float:
    """Give the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing).
    An ingest frees much of what it allocated, but glibc keeps it: ~65 MB after 100 turns on a
    5,000-turn bank, for ~9 ms of work once idle. Returns the MB the resident size fell by."""
    trim = _malloc_trim()
    if trim is None:
        return 0.0
    before = _rss_mb()
    trim(0)
    return max(0.0, before - _rss_mb())


@functools.lru_cache(maxsize=1)     # looked up once: maintenance calls it on every idle round
def _malloc_trim():
    try:
        import ctypes
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def _rss_mb() -> float:
    try:
        import psutil
        return psutil.Process().memory_info().rss / 1048576
    except Exception:
        return 0.0


def main() -> int:
    # The protocol keeps the real stdout; descriptor 1 (print, native writes) goes to stderr.
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in PyGPT's terminal is the parent's
    except (ValueError, OSError):
        pass
    out = LineWriter(proto_fd)
    stdin = sys.stdin.buffer
    first = stdin.readline()
    if not first.strip():
        out.close()
        return EXIT_BAD_CONFIG
    try:
        msg = P.decode(first)
        if not isinstance(msg, P.ConfigMessage):
            raise P.ProtocolError("the first line must be the config message")
        if msg.protocol != P.PROTOCOL_VERSION:
            raise P.ProtocolError(f"protocol {msg.protocol} is not this worker's ({P.PROTOCOL_VERSION}): "
                                  f"the worker's Python has another memoryplus version installed")
    except P.ProtocolError as exc:
        out.send(P.encode(P.Event(event="fatal", data={"type": "ProtocolError", "message": str(exc)})))
        out.close()
        return EXIT_BAD_CONFIG
    redact.register(*_secrets_of(msg.settings, msg.credentials))
    data_dir = Path(msg.data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = setup_logging(data_dir)
    except OSError as exc:
        out.send(P.encode(P.Event(event="fatal", data={
            "type": type(exc).__name__, "message": f"cannot use the data directory: {exc}"})))
        out.close()
        return EXIT_BAD_CONFIG
    hooks = os.environ.get(P.TEST_HOOKS_ENV) == "1"
    if hooks and msg.test.get("exit_at_start") in (msg.role, "all"):
        log.error("test hook: exiting at start (%s)", msg.role)
        print("test hook: the worker exits at start", file=sys.stderr)
        out.close()
        return EXIT_TEST_START_FAILURE
    log.info("worker starting (%s, pid %d, python %s, log %s)", msg.role, os.getpid(),
             sys.executable, log_path)
    server = WorkerServer(msg, out, stdin, hooks)
    try:
        code = asyncio.run(server.run())
    except Exception:
        log.exception("the worker failed")
        code = 1
    out.close()
    logging.shutdown()
    return code


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # Leave without waiting for stray native threads: the engine is closed already.
    os._exit(code)
