"""`LocalMemoryService`: the memory operations on a `MemoryEngine` in this process.

`execute(op, request)` is THE mapping of an operation to the engine: the worker process
awaits it for every request (worker/process.py), and the service's own methods run it on an
event loop of their own (a daemon thread) for the CLI. Engine exceptions leave it as the
`wire.errors` class of their kind (`service_error`), so that an in-process caller and a
remote one see the same errors.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import os
import threading
from typing import Any

from memoryplus.service.base import MemoryService, Status, decode
from memoryplus.wire import errors
from memoryplus.wire import protocol as P

log = logging.getLogger("memoryplus.service")


def service_error(exc: BaseException) -> errors.ServiceError:
    """The wire error an exception of the engine (or its libraries) stands for."""
    if isinstance(exc, errors.ServiceError):
        return exc
    from pydantic import ValidationError

    from memoryplus.config.schema import SettingsError
    from memoryplus.engine.errors import (
        BankLockedError, EmbeddingMismatchError, EngineError, StoreError, UnknownBankError,
    )
    from memoryplus.engine.providers import ProviderError
    from memoryplus.wire.banks import BankNameError
    origin = type(exc).__name__
    text = str(exc) or origin
    if isinstance(exc, ValidationError):
        # Raised inside an operation (a request's own parameters are checked before): graphiti's
        # models rejecting a provider's malformed answer. A provider error, retryable.
        first = exc.errors()[0] if exc.errors() else {}
        return errors.ProviderError(f"the model's answer could not be used ({exc.title}: "
                                    f"{str(first.get('msg', ''))[:200]}); the turn will be retried",
                                    origin="ProviderError")
    for cls, err in ((UnknownBankError, errors.UnknownBank), (EmbeddingMismatchError, errors.EmbeddingMismatch),
                     (EngineError, errors.EngineFailure), (BankLockedError, errors.BankInUse),
                     (StoreError, errors.StoreFailure), (ProviderError, errors.ProviderError),
                     (BankNameError, errors.BadBankName), (SettingsError, errors.SettingsInvalid)):
        if isinstance(exc, cls):
            return err(text, origin=origin)
    try:
        import openai
        if isinstance(exc, openai.RateLimitError):
            return errors.RateLimited(text, origin=origin)
    except ImportError:
        pass
    return errors.Internal(text, origin=origin)


class LocalMemoryService(MemoryService):
    """The engine in this process. `loop`: the event loop the engine runs on (the worker's);
    without one the service starts its own, on a daemon thread, for callers without a loop."""

    def __init__(self, engine, loop: asyncio.AbstractEventLoop | None = None):
        self.engine = engine
        self._thread: threading.Thread | None = None
        if loop is None:
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=loop.run_forever, name="memoryplus-engine", daemon=True)
            self._thread.start()
        self.loop = loop
        self._closed = False

    @classmethod
    def open(cls, settings, data_dir, credentials=None, app: str = "memoryplus") -> "LocalMemoryService":
        from memoryplus.engine.memory_engine import MemoryEngine
        return cls(MemoryEngine(settings, data_dir, credentials, app=app))

    # ── the op → engine mapping ────────────────────────────────────────────────────────
    async def execute(self, op: str, p: Any) -> Any:
        """Run one operation on the engine (on the engine's loop); its typed result, or a
        wire error."""
        try:
            return decode(op, p, await self._engine_call(op, p))
        except errors.ServiceError:
            raise
        except Exception as exc:
            raise service_error(exc) from exc

    async def _engine_call(self, op: str, p: Any) -> Any:
        e = self.engine
        if op == "ingest":
            return await e.ingest(p.bank, p.turns, defer_flush=p.defer_flush, backlog=p.backlog)
        if op == "remember":
            return await e.remember(p.bank, p.text, key=p.key, tags=p.tags)
        if op == "search":
            return await e.search(p.bank, p.query, limit=p.limit, as_of=p.as_of, now=p.now)
        if op == "forget":
            return await e.forget(p.bank, last=p.last, ids=p.ids, text=p.text, confirm=p.confirm)
        if op == "rate":
            return await e.rate(p.bank, p.id, p.value)
        if op == "prune":
            return await e.prune(p.bank, p.threshold)
        if op == "expire":
            return await e.expire(p.bank, p.days)
        if op == "clear":
            return await e.clear(p.bank)
        if op == "reembed":
            return await e.reembed(p.bank)
        if op == "browse":
            return await e.browse(p.bank, p.what, p.offset, p.limit)
        if op == "timeline":
            return await e.timeline(p.bank, p.entity, limit=p.limit, as_of=p.as_of)
        if op == "stats":
            return await e.stats(p.bank)
        if op == "banks":
            return await e.banks_info()
        if op == "export":
            return await e.export(p.bank)
        if op == "import":
            return await e.import_(p.bank, p.records)
        if op == "health":
            return await e.health()
        if op == "update_settings":
            from memoryplus.config.schema import validate
            settings = validate(p.settings)
            await e.update_settings(settings, p.credentials)
            return {"extraction": e.extraction, "backend": settings.backend}
        raise errors.UnknownOperation(f"operation {op!r} is not one of the engine's")

    # ── MemoryService ──────────────────────────────────────────────────────────────────
    def _run(self, coro) -> cf.Future:
        if self._closed:
            coro.close()
            return _failed(errors.WorkerUnavailable("the memory service is closed"))
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def _submit(self, op: str, request: Any, timeout: float | None) -> cf.Future:
        """In process there is nobody to give up on: `timeout` is the caller's to wait with
        (`.result(timeout)`); the operation runs to its end, as a write in the worker does."""
        if request is None:
            request = P.NoParams()
        return self._run(self.execute(op, request))

    def update_settings(self, settings, credentials=None, *, timeout: float | None = None) -> cf.Future:
        request = P.UpdateSettingsParams(settings=settings.model_dump(), credentials=credentials)
        return self._run(self.execute("update_settings", request))

    def maintain(self) -> cf.Future:
        return self._run(self.engine.maintain())

    def status(self) -> Status:
        e = self.engine
        return {"state": "closed" if self._closed else "ready", "mode": "in-process", "using": "in-process",
                "pid": os.getpid(), "extraction": e.extraction, "embedder": e.embedder_status()}

    def close(self, timeout: float = 15.0) -> None:
        if self._closed:
            return
        try:
            if self._thread is not None:
                asyncio.run_coroutine_threadsafe(self.engine.close(), self.loop).result(timeout)
        except Exception as exc:
            log.warning("closing the engine: %s: %s", type(exc).__name__, exc)
        finally:
            self._closed = True
            if self._thread is not None:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join(timeout)
                self.loop.close()


def _failed(exc: BaseException) -> cf.Future:
    fut: cf.Future = cf.Future()
    fut.set_exception(exc)
    return fut
