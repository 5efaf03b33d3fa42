"""`MemoryService`: the one typed interface the plugin, the memory UI and the CLI call.

One method per operation of the wire protocol (wire/protocol.py's OPS) that a client uses.
Each takes the op's params model (wire/protocol.py) as its request and answers with a
`concurrent.futures.Future` of the op's typed result (wire/records.py): never a dict.

Why Futures: the same call serves three kinds of caller. The GUI thread must never wait, so
it hands the Future to `ui.common.GuiPost.run()` and gets the outcome back on the GUI thread;
the plugin's queue thread and the CLI wait with `.result(timeout)`; and the worker client
underneath already answers every request with a Future (its request table), so the remote
service adds no thread of its own. An async interface would force an event loop on PyGPT's
GUI thread; a blocking one would force a thread per call on the GUI.

Failures arrive as the Future's exception: a `wire.errors.ServiceError` subclass chosen by its
code (unknown bank, bank in use, embedding mismatch, provider error, timeout, worker
unavailable, ...), the same classes whichever implementation runs the operation.

Two implementations: `service.local.LocalMemoryService` (the engine in this process: the CLI
when no worker holds the data directory, and the worker process itself, whose op dispatch is
the local service's `execute`), and `service.remote.RemoteMemoryService` (over a
`WorkerClient`: the plugin, and the CLI when PyGPT's worker holds the data directory).
"""
from __future__ import annotations

import concurrent.futures as cf
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Callable

from memoryplus.wire import errors
from memoryplus.wire import protocol as P
from memoryplus.wire.protocol import (
    BankParams, BrowseParams, ExpireParams, ForgetParams, ImportParams, IngestParams, NoParams,
    PruneParams, RateParams, RememberParams, SearchParams, TimelineParams,
)
from memoryplus.wire.records import BROWSE_ROWS

if TYPE_CHECKING:
    from memoryplus.wire.records import (
        BankInfo, BankStats, BrowseRow, EmbedderStatus, ExportRecord, ForgetReport, Health,
        ImportReport, IngestReport, SearchResult, SettingsApplied, Timeline,
    )

Future = cf.Future

# What `status()` answers: a dict of the client's state (state, mode, pid, uptime_s, rss_mb,
# extraction, embedder, python, last_error, ...); not an operation of the worker.
Status = dict


_ROW_ADAPTERS: dict[str, Any] = {}


def decode(op: str, request: Any, raw: Any) -> Any:
    """An op's result (JSON data or the engine's values) as its typed records."""
    if op == "browse":     # the row type follows what was browsed
        what = getattr(request, "what", "episodes")
        adapter = _ROW_ADAPTERS.get(what)
        if adapter is None:
            from pydantic import TypeAdapter
            adapter = _ROW_ADAPTERS[what] = TypeAdapter(list[BROWSE_ROWS[what]])
        return adapter.validate_python(raw)
    return P.decode_result(op, raw)


def chain(inner: cf.Future, convert: Callable[[Any], Any],
          translate: Callable[[BaseException], BaseException] | None = None) -> cf.Future:
    """A Future of `convert(inner's result)`; cancelling it cancels `inner`."""
    outer: cf.Future = cf.Future()

    def done(f: cf.Future) -> None:
        if f.cancelled():
            outer.cancel()
            return
        exc = f.exception()
        try:
            if exc is not None:
                outer.set_exception(translate(exc) if translate else exc)
            else:
                try:
                    outer.set_result(convert(f.result()))
                except Exception as bad:   # a result that is not of the op's type
                    outer.set_exception(errors.Internal(f"unexpected answer: {bad}", origin=type(bad).__name__))
        except cf.InvalidStateError:   # cancelled by its caller meanwhile
            pass

    outer.add_done_callback(lambda o: inner.cancel() if o.cancelled() else None)
    inner.add_done_callback(done)
    return outer


def done_future(value: Any = None, exc: BaseException | None = None) -> cf.Future:
    fut: cf.Future = cf.Future()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(value)
    return fut


class MemoryService(ABC):
    """Typed memory operations; every method returns at once with a Future."""

    @abstractmethod
    def _submit(self, op: str, request: Any, timeout: float | None) -> cf.Future:
        """Run one op; the Future gets its typed result or a ServiceError."""

    # ── writing ────────────────────────────────────────────────────────────────────────
    def ingest(self, request: IngestParams, *, timeout: float | None = None) -> Future[IngestReport]:
        return self._submit("ingest", request, timeout)

    def remember(self, request: RememberParams, *, timeout: float | None = None) -> Future[IngestReport]:
        return self._submit("remember", request, timeout)

    def forget(self, request: ForgetParams, *, timeout: float | None = None) -> Future[ForgetReport]:
        return self._submit("forget", request, timeout)

    def rate(self, request: RateParams, *, timeout: float | None = None) -> Future[int]:
        """The memory's new rating."""
        return self._submit("rate", request, timeout)

    def prune(self, request: PruneParams, *, timeout: float | None = None) -> Future[int]:
        """How many memories were pruned."""
        return self._submit("prune", request, timeout)

    def expire(self, request: ExpireParams, *, timeout: float | None = None) -> Future[int]:
        """How many stored turns expired."""
        return self._submit("expire", request, timeout)

    def clear(self, request: BankParams, *, timeout: float | None = None) -> Future[None]:
        return self._submit("clear", request, timeout)

    def reembed(self, request: BankParams, *, timeout: float | None = None) -> Future[int]:
        """How many vectors were recomputed."""
        return self._submit("reembed", request, timeout)

    def import_records(self, request: ImportParams, *, timeout: float | None = None) -> Future[ImportReport]:
        """The `import` op (a Python keyword, hence the name)."""
        return self._submit("import", request, timeout)

    # ── reading ────────────────────────────────────────────────────────────────────────
    def search(self, request: SearchParams, *, timeout: float | None = None) -> Future[list[SearchResult]]:
        return self._submit("search", request, timeout)

    def browse(self, request: BrowseParams, *, timeout: float | None = None) -> Future[list[BrowseRow]]:
        """EpisodeRow, FactRow or EntityRow records, as `request.what` says."""
        return self._submit("browse", request, timeout)

    def timeline(self, request: TimelineParams, *, timeout: float | None = None) -> Future[Timeline]:
        """What is known about one person, place or thing, each fact with its validity."""
        return self._submit("timeline", request, timeout)

    def stats(self, request: BankParams, *, timeout: float | None = None) -> Future[BankStats]:
        return self._submit("stats", request, timeout)

    def banks(self, *, timeout: float | None = None) -> Future[list[BankInfo]]:
        return self._submit("banks", NoParams(), timeout)

    def export(self, request: BankParams, *, timeout: float | None = None) -> Future[list[ExportRecord]]:
        return self._submit("export", request, timeout)

    def health(self, *, timeout: float | None = None) -> Future[Health]:
        return self._submit("health", NoParams(), timeout)

    def embedder_status(self, *, timeout: float | None = None) -> Future[EmbedderStatus]:
        """The embedder a new bank gets (and why) and the one each open bank has."""
        def pick(h):
            from memoryplus.wire.records import EmbedderStatus
            return h.embedder or EmbedderStatus()
        return chain(self.health(timeout=timeout), pick)

    # ── settings and life cycle ────────────────────────────────────────────────────────
    @abstractmethod
    def update_settings(self, settings, credentials=None, *,
                        timeout: float | None = None) -> Future[SettingsApplied]:
        """Apply new settings (config.schema.Settings) and credentials without a restart."""

    @abstractmethod
    def status(self) -> Status:
        """What the UI shows of the machinery (never blocks)."""

    def restart(self) -> cf.Future:
        """Start the machinery anew (a worker's crash-loop breaker included)."""
        return done_future(None)

    def maintain(self) -> Future[bool]:
        """Keep native memory bounded between long writes (a worker does it by itself when idle)."""
        return done_future(False)

    @abstractmethod
    def close(self, timeout: float = 15.0) -> None:
        """Release what the service holds (an in-process engine's banks; a client's worker)."""

    def __enter__(self) -> "MemoryService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
