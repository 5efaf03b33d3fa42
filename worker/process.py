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
  the transport recorded in `worker.json` (worker/listener.py: so the CLI or another window
  reaches it instead of fighting for the Kuzu lock; wire/protocol.py says what it owes them:
  the hello, the governing settings, the bank events); when idle, runs the engine's maintenance and exits cleanly for
  recycling after a number of operations or past a memory bound (its client starts the next).
- oneshot: one request (per-call mode), then EOF: finishes it, closes the bank, exits.

The parts: worker/connections.py (the owner's pipe and the peers), worker/listener.py (the
transport and worker.json), worker/gate.py (exclusive requests), worker/logs.py (the log),
worker/governance.py (hello and events), worker/maintenance.py (idle time, recycling),
worker/priority.py (its CPU priority, below PyGPT's); this
module runs the requests and the life cycle.

At the end it answers (or cancels, after a bounded grace time) what is in flight, closes the
engine (releasing every Kuzu lock) and exits 0.
"""
from __future__ import annotations

import asyncio
import logging
import os
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
from memoryplus.wire.transport import Sender  # noqa: E402
from memoryplus.worker import governance, maintenance, priority  # noqa: E402
from memoryplus.worker.connections import Conn, SocketConn, StdioConn, stdout_writer  # noqa: E402
from memoryplus.worker.gate import Gate  # noqa: E402
from memoryplus.worker.listener import Listener  # noqa: E402
from memoryplus.worker.logs import setup_logging  # noqa: E402

log = logging.getLogger("memoryplus.worker")
EXIT_OK, EXIT_BAD_CONFIG, EXIT_TEST_START_FAILURE = 0, 2, 3


class WorkerServer:
    def __init__(self, cfg: P.ConfigMessage, out: Sender, stdin, hooks: bool):
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
        self.memory_returned_mb = 0.0   # freed heap given back to the system (malloc_trim)
        self.trimmed_rss_mb: float | None = None   # the resident size after the last trim (maintenance.py)
        self.last_activity = time.monotonic()
        self.accepting = True
        self.recycle = False
        self.stop_reason = ""
        self.grace: float | None = self.limits.shutdown_grace_s
        self.shutdown_waiters: list[tuple[Conn, str]] = []
        self.listener: Listener | None = None
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
            self.listener = Listener(self.data_dir, self.cfg.app, self.cfg.owner_pid, self.loop,
                                     on_open=self._peer_opened, on_line=self._on_line,
                                     on_close=self._peer_closed)
            self.listener.start()
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
        maint = self.loop.create_task(maintenance.run(self)) if self.cfg.role == "persistent" else None
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
                "socket": self.listener.address if self.listener else None,
                "transport": self.listener.family if self.listener and self.listener.address else None,
                "python": sys.executable}

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
        if recycle and self.listener is not None:
            self.listener.mark_recycling()
            self.stdio.send(P.encode(P.Event(event="recycling", data={"reason": reason})))
        self.stopping.set()

    async def _finish(self) -> None:
        if self.listener is not None:
            self.listener.stop_accepting()
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
        if self.listener is not None:
            self.listener.close(keep_file=self.recycle)
        for conn, rid in self.shutdown_waiters:
            conn.send(P.encode(P.Response(id=rid, ok=True, result={
                "closed": True, "reason": self.stop_reason, "pid": os.getpid()})))
        if self.listener is not None:
            self.listener.close_peers()
        log.info("worker stopped (%s) after %d operation(s), %.1f s", self.stop_reason,
                 self.ops_done, time.monotonic() - self.started)

    # ── peers of the transport (worker/listener.py) ───────────────────────────────────
    @property
    def sockets(self) -> set[SocketConn]:
        return self.listener.conns if self.listener is not None else set()

    def _peer_opened(self, conn: SocketConn) -> None:
        log.info("%s connected", conn.name)

    def _peer_closed(self, conn: SocketConn) -> None:
        for (key, _rid), (task, spec) in list(self.tasks.items()):
            if key == conn.key and spec.cancellable:
                task.cancel()  # nobody is waiting for this read any more
        log.info("%s disconnected", conn.name)

    def _hello(self, conn: Conn, msg: P.Request) -> None:
        """A socket client says who it is: told what governs (worker/governance.py)."""
        try:
            params = P.HelloParams.model_validate(msg.params)
        except ValidationError as exc:
            conn.send(P.encode(P.error_response(msg.id, f"bad parameters for hello: {exc}", "BadRequest")))
            return
        if params.protocol != P.PROTOCOL_VERSION:
            conn.send(P.encode(P.error_response(msg.id, (
                f"this worker speaks protocol {P.PROTOCOL_VERSION}, the client {params.protocol}: "
                f"{self.cfg.app} and this client run different memoryplus versions"),
                P.PROTOCOL_MISMATCH)))
            return
        conn.app = params.app
        result = governance.hello(self.engine, self.cfg, params)
        if result.differs:
            log.info("%s (%s) runs under this worker's settings; its own differ in %s", conn.name,
                     params.app, ", ".join(d.option for d in result.differs))
        conn.send(P.encode(P.Response(id=msg.id, ok=True, result=result.model_dump(mode="json"))))

    def _announce(self, origin: Conn, op: str, params: Any, result: Any) -> None:
        """Tell every client what a request changed, before its answer (worker/governance.py)."""
        event = governance.bank_event(op, params, result, origin.name)
        if event is None:
            return
        data = P.encode(event)
        for conn in [self.stdio, *self.sockets]:
            if not conn.closed:
                conn.send(data)

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
        if msg.op == "hello":
            self._hello(conn, msg)
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
            result = P.to_jsonable(await self._dispatch(conn, msg.op, params))
            resp = P.Response(id=msg.id, ok=True, result=result)
            self._announce(conn, msg.op, params, result)
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
                maintenance.trim_if_grown(self)
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
            redact.register_config(p.settings, p.credentials)
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
                     "rss_mb": round(maintenance.rss_mb(), 1),
                     "in_flight": sum(1 for _, s in self.tasks.values() if s.counts),
                     "ops": self.ops_done, "sockets": len(self.sockets),
                     "memory_returned_mb": round(self.memory_returned_mb, 1),
                     "app": self.cfg.app})
        return info

    # ── maintenance and recycling (when idle): worker/maintenance.py ─────────────────
    def _busy(self) -> bool:
        return any(s.counts for _, s in self.tasks.values())


class _BadParams(Exception):
    def __init__(self, error: ValidationError):
        super().__init__(str(error))
        self.error = error


def main() -> int:
    not_lowered = priority.lower()   # before any thread starts: they inherit it (worker/priority.py)
    # graphiti imports the Neo4j driver, which imports pandas when it is installed (31 MB
    # resident, measured): nothing the worker runs uses it, so the worker process has none.
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]
    # The protocol keeps the real stdout; descriptor 1 (print, native writes) goes to stderr.
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in PyGPT's terminal is the parent's
    except (ValueError, OSError):
        pass
    out = stdout_writer(proto_fd)
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
    redact.register_config(msg.settings, msg.credentials)
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
    if not_lowered:
        log.info("%s", not_lowered)
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
