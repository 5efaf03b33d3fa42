"""The plugin's part in a chat turn: the search started at CTX_BEFORE and injected at
POST_PROMPT_END, and the finished turn handed to the ingestion queue (and stored by its sink).

A mixin of `plugin.plugin.Plugin` (its state lives on the plugin: settings, service, cache,
queue, counters); see plugin.py for the threads each event runs on.
"""
from __future__ import annotations

import threading
import time
import types
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from memoryplus.plugin import host
from memoryplus.plugin.memory_block import build_block, inject

if TYPE_CHECKING:   # pydantic models: imported on the start-up thread, not at import
    from memoryplus.wire.records import SearchResult, Turn

GUI_BUDGET_S = 0.02        # the longest the GUI thread ever waits on us
INJECT_WAIT_S = 4.0        # off the GUI thread: how long a turn waits for its memories
SEARCH_TIMEOUT_S = 15.0


@dataclass
class PendingSearch:
    bank: str
    query: str
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    results: list[SearchResult] | None = None
    generation: object = None


def snapshot(ctx) -> Any:
    """What bank_for() and turn_from_ctx() read of a turn, kept while the start is under way
    (PyGPT may go on changing its CtxItem)."""
    meta = getattr(ctx, "meta", None)
    return types.SimpleNamespace(
        input=getattr(ctx, "input", ""), output=getattr(ctx, "output", ""),
        id=getattr(ctx, "id", None) or f"obj{id(ctx)}", meta_id=getattr(ctx, "meta_id", None),
        input_timestamp=getattr(ctx, "input_timestamp", None) or time.time(),
        meta=None if meta is None else types.SimpleNamespace(id=getattr(meta, "id", None),
                                                             preset=getattr(meta, "preset", None)))


class TurnsMixin:
    # ── retrieval ──────────────────────────────────────────────────────────────────────
    def _start_search(self, ctx) -> None:
        s = self.settings
        if not s.inject_context or ctx is None or self.service is None:
            return
        query = str(getattr(ctx, "input", "") or "").strip()
        if not query:
            return
        bank = host.bank_for(ctx, s)
        pending = PendingSearch(bank=bank, query=query, started=time.monotonic())
        with self._lock:
            self._searches[id(ctx)] = pending
            if len(self._searches) > 32:   # turns that never reached POST_PROMPT_END
                for key in list(self._searches)[:-32]:
                    del self._searches[key]
        cached = self.cache.get(bank, query) if self.cache else None
        if cached is not None:
            pending.results = cached
            pending.done.set()
            return
        # A search racing a write to its bank must not be cached as if it were fresh.
        pending.generation = self.cache.generation(bank) if self.cache else None
        from memoryplus.wire.protocol import SearchParams
        future = self.service.search(SearchParams(bank=bank, query=query, limit=s.context_limit),
                                     timeout=SEARCH_TIMEOUT_S)
        future.add_done_callback(lambda f, p=pending: self._search_done(p, f))

    def _search_done(self, pending: PendingSearch, future) -> None:
        from memoryplus.wire import errors
        try:
            pending.results = list(future.result() or [])
            if self.cache is not None:
                self.cache.put(pending.bank, pending.query, pending.results, generation=pending.generation)
        except Exception as exc:
            if not isinstance(exc, errors.UnknownBank):  # a preset's first chat: nothing stored yet
                self.last_error = f"search failed: {exc}"
                self.counters["errors"] += 1
            pending.results = []
        finally:
            pending.done.set()

    def _inject(self, ctx, prompt: str) -> str:
        # The bridge hands POST_PROMPT_END the very ctx object CTX_BEFORE had: that ties the
        # search to its turn (the earlier plugin's results landed one turn late).
        with self._lock:
            pending = self._searches.pop(id(ctx), None) if ctx is not None else None
        if pending is None or not self.settings.inject_context:
            return prompt
        on_gui = threading.current_thread() is threading.main_thread()
        if not pending.done.wait(GUI_BUDGET_S if on_gui else INJECT_WAIT_S):
            self.counters["late"] += 1        # the turn goes ahead without memories
            return prompt
        s = self.settings
        block = build_block(pending.results or [], limit=s.context_limit, max_tokens=s.max_injected_tokens,
                            prefer_over_vector_store=s.disable_default_vector_store)
        if not block:
            self.counters["empty"] += 1
            return prompt
        self.counters["injected"] += 1
        return inject(prompt, block)

    # ── ingestion ──────────────────────────────────────────────────────────────────────
    @staticmethod
    def is_real_turn(ctx) -> bool:
        """Only what the user really said and got answered: not internal calls, agent
        sub-calls, tool continuations, stopped or empty turns."""
        for flag in ("internal", "sub_call", "stopped", "turn_continuation", "agent_call"):
            if getattr(ctx, flag, False):
                return False
        return bool(str(getattr(ctx, "input", "") or "").strip()
                    and str(getattr(ctx, "output", "") or "").strip())

    def turn_from_ctx(self, ctx) -> Turn:
        from memoryplus.wire.records import Turn
        meta = getattr(ctx, "meta", None)
        meta_id = getattr(meta, "id", None) or getattr(ctx, "meta_id", None) or "0"
        ctx_id = getattr(ctx, "id", None) or f"obj{id(ctx)}"
        stamp = getattr(ctx, "input_timestamp", None)
        when = datetime.fromtimestamp(stamp, timezone.utc) if stamp else datetime.now(timezone.utc)
        return Turn(id=f"pygpt:{meta_id}:{ctx_id}", user=str(ctx.input or ""),
                    assistant=str(ctx.output or ""), time=when)

    def _on_turn_end(self, ctx) -> None:
        if not self.is_real_turn(ctx):
            return
        with self._lock:
            queue = self.queue
            if queue is None:   # still starting: handled on the start-up thread, with the saved settings
                self._early_turns.append(snapshot(ctx))
                return
        self._take_turn(ctx, queue)

    def _take_turn(self, ctx, queue) -> None:
        bank = host.bank_for(ctx, self.settings)
        turn = self.turn_from_ctx(ctx)
        key = f"{bank}\x00{turn.id}\x00{hash((turn.user, turn.assistant))}"
        if key in self._seen_turns:      # the same turn dispatched twice
            return
        self._seen_turns[key] = None
        if len(self._seen_turns) > 1000:
            self._seen_turns.popitem(last=False)
        self._last_turn[bank] = turn
        if not self.settings.auto_ingest:
            return
        queue.put(bank, turn)

    def _ingest_batch(self, bank: str, turns: list[Turn]):
        """The queue's sink: runs on the queue's thread, never the GUI thread."""
        from memoryplus.plugin.queue import IngestError
        from memoryplus.wire import errors
        from memoryplus.wire.protocol import IngestParams
        self._check_llm_budget()
        # Sanitized here, on the queue's thread: custom rules may take a while on long turns.
        clean = self.sanitizer.clean if self.sanitizer else (lambda t: t)
        turns = [t.model_copy(update={"user": clean(t.user), "assistant": clean(t.assistant)}) for t in turns]
        # A persistent worker may flush Kuzu's log with a later batch or when idle (the queue
        # keeps the turns spooled until then): a flush blocks the bank's searches and grows
        # with the bank (MemoryEngine.ingest), and the next turn's search need not wait for
        # it. A backlog: more turns of this bank queued (another bank's do not count).
        defer = self.settings.engine_mode != "subprocess" and self.queue is not None
        backlog = defer and self.queue.waiting(bank) > 0
        try:
            report = self.service.ingest(IngestParams(bank=bank, turns=turns, defer_flush=defer,
                                                      backlog=backlog),
                                         timeout=max(60.0, self.settings.runner_timeout_s * len(turns))).result()
        except errors.ServiceError as exc:
            # a bad bank name or an engine's refusal stays as it is; anything else may pass
            retryable = not isinstance(exc, (errors.BadBankName, errors.EngineFailure))
            self._storing_failed(exc)
            raise IngestError(str(exc), retryable=retryable) from None
        self._streak.clear()
        # flushed=False: the queue keeps them spooled
        if report.embedder.get("id"):
            self._bank_embedders[bank] = dict(report.embedder)
        if report.fallbacks:
            from memoryplus.plugin.problems import llm_fallback
            self._say_once(llm_fallback(next(iter(report.fallbacks.values())), self.settings.graphiti_model))
        if self.cache is not None:
            self.cache.invalidate(bank)
        if report.llm_calls:
            self._llm_calls.append((time.monotonic(), report.llm_calls))
        return report

    def _check_llm_budget(self) -> None:
        limit = self.settings.max_llm_calls_per_hour
        if not limit or self.queue is None:
            return
        now = time.monotonic()
        self._llm_calls = [(t, n) for t, n in self._llm_calls if now - t < 3600]
        if sum(n for _, n in self._llm_calls) >= limit:
            wait = 3600 - (now - self._llm_calls[0][0])
            self.queue.pause(f"LLM call limit ({limit}/hour) reached; storing resumes in {int(wait // 60) + 1} min")
            timer = threading.Timer(wait, self.queue.resume)
            timer.daemon = True
            timer.start()
            from memoryplus.plugin.queue import IngestError
            raise IngestError("LLM call limit reached", paused=True)
