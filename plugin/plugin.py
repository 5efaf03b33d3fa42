"""MemoryPlus as a PyGPT plugin: the adapter between PyGPT's events and our machinery.

Threads (PyGPT 2.9.1, see reference/pygpt-plugin-api.md):
- GUI thread: INPUT_BEFORE (chat commands), CTX_BEFORE (start this turn's search: a
  non-blocking hand-off), SYSTEM_PROMPT (nothing), CTX_END (hand the turn to the queue: no I/O).
- Pool thread in chat mode: POST_PROMPT_END, where we wait (bounded) for this turn's search and
  inject the block into this same turn's system prompt. Where PyGPT runs it on the GUI thread
  (assistant/expert modes) we only take what is ready within the GUI budget.
Every handler catches everything: an exception escaping handle() leaves PyGPT "generating".
Widgets and PyGPT's config are touched only from the GUI thread: results from other threads
arrive by signal.

Start-up: importing this module, constructing and registering the plugin and PyGPT's start-up
timer stay cheap on the GUI thread: nothing here imports pydantic or builds the Settings model
at import. The options are registered from the schema's plain metadata and `settings` holds
the defaults until the start-up thread (`_build`) has read and validated the saved values.
"""
from __future__ import annotations

import itertools
import logging
import threading
import types
from collections import OrderedDict
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal, Slot

from pygpt_net.core.events import Event
from pygpt_net.plugin.base.plugin import BasePlugin

from memoryplus.config.schema import TABS, defaults
from memoryplus.plugin import commands as chat_commands
from memoryplus.plugin import host
from memoryplus.plugin.memory_block import build_block, inject
from memoryplus.common.wording import plural, readable, shorten

if TYPE_CHECKING:   # pydantic models: imported on the start-up thread, not at import
    from memoryplus.wire.records import SearchResult, Turn

log = logging.getLogger("memoryplus.plugin")

PLUGIN_ID = "memoryplus"
GUI_BUDGET_S = 0.02        # the longest the GUI thread ever waits on us
INJECT_WAIT_S = 4.0        # off the GUI thread: how long a turn waits for its memories
SEARCH_TIMEOUT_S = 15.0
COMMAND_TIMEOUT_S = 60.0
# How much of a memory a command's reply quotes (characters, cut at a word or sentence boundary)
REPLY_TEXT, OFFER_TEXT, CONFIRM_TEXT = 160, 240, 160
EXPIRY_EVERY_S = 24 * 3600
TURN_EVENTS = frozenset({Event.INPUT_BEFORE, Event.CTX_BEFORE, Event.POST_PROMPT_END, Event.CTX_END})


@dataclass
class PendingSearch:
    bank: str
    query: str
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    results: list[SearchResult] | None = None
    generation: object = None


def _snapshot(ctx) -> Any:
    """What bank_for() and turn_from_ctx() read of a turn, kept while the start is under way
    (PyGPT may go on changing its CtxItem)."""
    meta = getattr(ctx, "meta", None)
    return types.SimpleNamespace(
        input=getattr(ctx, "input", ""), output=getattr(ctx, "output", ""),
        id=getattr(ctx, "id", None) or f"obj{id(ctx)}", meta_id=getattr(ctx, "meta_id", None),
        input_timestamp=getattr(ctx, "input_timestamp", None) or time.time(),
        meta=None if meta is None else types.SimpleNamespace(id=getattr(meta, "id", None),
                                                             preset=getattr(meta, "preset", None)))


def _why(exc: BaseException) -> str:
    """An error, for a chat reply: one line, secrets redacted."""
    from memoryplus.common.redact import redact
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return shorten(redact(text), 300)


class Plugin(BasePlugin):
    notify = Signal(str)           # text for the user, shown on the GUI thread
    replied = Signal(str, str)     # (the command typed, our reply): shown in the chat, GUI thread
    restore_requested = Signal(object)   # mirrored values PyGPT lost: restored on the GUI thread

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.id = PLUGIN_ID
        self.name = "MemoryPlus"
        self.description = ("Time-aware long-term memory: remembers your conversations in a "
                            "knowledge graph and recalls what matters in later chats.")
        self.prefix = "MemoryPlus"
        self.type = []
        self.order = 100
        self.use_locale = False
        self.tabs = dict(TABS)
        # The defaults (plain values, no pydantic) until _build() has validated the saved ones.
        self.settings: Any = types.SimpleNamespace(**defaults())
        self.client = None       # the WorkerClient under `service` (its life cycle is the service's)
        self.service = None      # RemoteMemoryService: every memory operation goes through it
        self.queue = None
        self.cache = None
        self.sanitizer = None
        self.counters = {"injected": 0, "late": 0, "empty": 0, "errors": 0, "commands": 0}
        self.last_error = ""
        self._lock = threading.Lock()
        self._searches: dict[int, PendingSearch] = {}
        self._last_turn: dict[str, Turn] = {}
        self._seen_turns: OrderedDict[str, None] = OrderedDict()   # recent turns, for double dispatch
        self._forget_offer: tuple[str, list[SearchResult]] | None = None
        self._reply_ids = itertools.count(-1, -1)   # chat blocks of our replies: never a stored id
        self._started = False
        self._closed = False
        self._ready = threading.Event()       # set once _build() has finished (or failed)
        self._ready.set()
        self._early_turns: list[Any] = []   # turns (ctx snapshots) that ended before the queue existed
        self._settings_stale = False
        self._status = ""
        self._last_expiry = 0.0
        self._llm_calls: list[tuple[float, int]] = []
        self._said: set[str] = set()        # causes already told to the user (see _say_once)
        self._streak: dict[str, int] = {}   # cause -> storing attempts failed in a row for it
        self._asked_embedder: set[str] = set()   # banks whose embedder was asked of the worker
        self._creds = None                  # PyGPT's keys and endpoints, as last read
        self._embedder_shown: str | None = None
        self._bank_embedders: dict[str, dict] = {}   # bank -> {"id", "why"}, from ingest reports
        # Auto: a direct call when emitted on the GUI thread, queued from the start-up thread.
        self.restore_requested.connect(self._restore_options)
        self.init_options()

    # ── options ────────────────────────────────────────────────────────────────────────
    def init_options(self):
        host.register_options(self)
        # ── memory UI (issue 5): a settings-page button opening the browser (never persisted) ──
        def open_memory_browser():
            from memoryplus.ui import integration
            integration.open_browser(self)
        self.add_option("open_browser", "button", value=None, label="Open memory browser",
                        description="See, search, rate and forget what MemoryPlus remembers.",
                        tab="general", callback=open_memory_browser)
        # ── end memory UI ──

    # ── life cycle ─────────────────────────────────────────────────────────────────────
    def setup_ui(self):
        """Once, on the GUI thread, for every registered plugin (enabled or not)."""
        self.notify.connect(self._show_message)
        # queued even from the GUI thread: a reply given inside INPUT_BEFORE renders after PyGPT
        # has finished with the send it stopped
        self.replied.connect(self._show_reply, Qt.QueuedConnection)
        # ── memory UI (issue 5): MemoryPlus menu, mode selector, review reminder ──
        try:
            from memoryplus.ui import integration
            integration.install(self)
        except Exception as exc:  # the memory UI is optional: never take PyGPT down with it
            self._fail("cannot build the memory UI", exc)
        # ── end memory UI ──
        if self._enabled():
            QTimer.singleShot(0, self._start_in_background)

    def _enabled(self) -> bool:
        try:
            return bool(self.window.core.config.get("plugins_enabled", {}).get(self.id))
        except Exception:
            return False

    def user_dir(self) -> Path:
        try:
            return Path(self.window.core.config.get_user_path()) / "memoryplus"
        except Exception:
            from memoryplus.config.paths import default_data_dir   # imports pydantic: fallback only
            return default_data_dir()

    def banks_dir(self) -> Path:
        path = self.settings.kuzu_storage_path.strip()
        return Path(path).expanduser() if path else self.user_dir()

    def _ensure_started(self, wait: bool = True) -> None:
        """Build the machinery and start the worker. From PyGPT (start-up timer, ENABLE, the
        first turn event) `wait=False`: imports, spool replay and the worker's spawn run on a
        thread, so that PyGPT's window is not held up by them."""
        with self._lock:
            if self._started or self._closed:   # closed: PyGPT shut us down; only ENABLE reopens
                return
            self._started = True
            self._ready.clear()
        if wait:
            self._build()
        else:
            threading.Thread(target=self._build, daemon=True, name="memoryplus-start").start()

    def _start_in_background(self) -> None:
        self._ensure_started(wait=False)

    def wait_started(self, timeout: float) -> bool:
        """For callers that drive the plugin themselves (bench, demo): True once built."""
        return self._ready.wait(timeout)

    def _build(self) -> None:
        try:
            self._read_settings()     # pydantic and the Settings model: here, not at import
        except Exception as exc:
            self._fail("cannot read settings", exc)
            try:
                from memoryplus.config.schema import Settings
                if not isinstance(self.settings, Settings):
                    self.settings = Settings()
            except Exception:
                pass
        try:
            from memoryplus.plugin.cache import SearchCache
            from memoryplus.plugin.queue import IngestQueue
            from memoryplus.plugin.sanitize import Sanitizer
            from memoryplus.client.worker_client import WorkerClient
            from memoryplus.service.remote import RemoteMemoryService
            s = self.settings
            self.sanitizer = Sanitizer(s)
            for problem in self.sanitizer.problems:
                self._report(f"MemoryPlus: {problem}")
            self.cache = SearchCache(s.search_cache_size, s.search_cache_ttl, s.search_cache_similarity,
                                     enabled=s.search_cache)
            self._creds = host.credentials(self.window, s)
            client = WorkerClient(s, self.banks_dir(), self._creds, mode=s.engine_mode, app="PyGPT")
            client.start()
            self.client = client
            self.service = RemoteMemoryService(client)
            queue = IngestQueue(self.user_dir() / "spool", s, self._ingest_batch)
            queue.start()
            while True:   # turns that ended while we were starting, in order, with our settings
                with self._lock:
                    early, self._early_turns = self._early_turns, []
                    if not early:
                        self.queue = queue
                        break
                for ctx in early:
                    try:
                        self._take_turn(ctx, queue)
                    except Exception as exc:   # one bad turn must not stop the start
                        self._fail("cannot keep a turn that ended while starting", exc)
        except Exception as exc:  # never take PyGPT down with us
            self._fail("cannot start", exc)
            self._say_problem(f"{type(exc).__name__}: {exc}", generic="start")
        finally:
            with self._lock:
                self._ready.set()
                stale, self._settings_stale = self._settings_stale, False
        if stale:      # saved while we were starting
            try:
                self.on_settings_changed()
            except Exception as exc:
                self._fail("cannot apply settings", exc)

    def _read_settings(self) -> None:
        """The saved values, validated (on the start-up thread). PyGPT drops a plugin's saved
        values when it starts without the plugin; we keep a mirror in our data directory and
        restore from it when PyGPT has nothing saved (PyGPT's side of that on the GUI thread)."""
        from memoryplus.config.paths import SETTINGS_FILE, load_settings
        saved = {}
        try:
            saved = self.window.core.config.get("plugins", {}).get(self.id) or {}
        except Exception:
            pass
        mirror = self.user_dir() / SETTINGS_FILE
        if not saved and mirror.exists():
            restored, problems = load_settings(self.user_dir())
            self.restore_requested.emit(restored.model_dump())
            self._apply_settings(restored, problems)
        else:
            self._apply_settings()

    @Slot(object)
    def _restore_options(self, values: dict) -> None:
        """GUI thread: put the mirrored values back into PyGPT's options and config."""
        try:
            for name, value in values.items():
                if self.has_option(name):
                    self.set_option_value(name, value)
            self.window.core.config.get("plugins", {})[self.id] = dict(values)
            self.window.core.config.save()
        except Exception as exc:
            log.warning("cannot save restored settings into PyGPT's config: %s", exc)

    def _apply_settings(self, settings=None, problems: list[str] | None = None) -> None:
        from memoryplus.config.paths import save_settings
        if settings is None:
            settings, problems = host.read_settings(self)
        for p in problems or []:
            self._report(f"MemoryPlus: {p}")
        self.settings = settings
        try:
            save_settings(self.user_dir(), settings)
        except OSError as exc:
            log.warning("cannot mirror settings: %s", exc)

    def on_settings_changed(self) -> None:
        """A change takes effect without restarting PyGPT."""
        if not self._started:
            return
        with self._lock:
            if not self._ready.is_set():   # the start-up thread applies them when it is done
                self._settings_stale = True
                return
        self._apply_settings()
        s = self.settings
        from memoryplus.plugin.sanitize import Sanitizer
        self.sanitizer = Sanitizer(s)
        for problem in self.sanitizer.problems:
            self._report(f"MemoryPlus: {problem}")
        self.cache.configure(s.search_cache_size, s.search_cache_ttl, s.search_cache_similarity,
                             enabled=s.search_cache)
        self.cache.clear()
        self.queue.configure(s)
        with self._lock:     # the user may have fixed a cause: say it again if it persists
            self._said.clear()
        self._embedder_shown = None
        self._asked_embedder.clear()
        self._bank_embedders.clear()
        self._streak.clear()
        if str(self.queue.counts().get("paused_reason") or "").startswith("LLM call limit"):
            self.queue.resume()   # the sink pauses again at once if the new limit is still spent
        self._creds = host.credentials(self.window, s)
        self.service.update_settings(s, self._creds)

    def shutdown(self, enabled: bool = True):  # PyGPT 2.9: on exit
        self._stop()

    def destroy(self):
        self._stop()

    def _stop(self) -> None:
        self._closed = True
        self._ready.wait(10.0)    # a start under way: let it finish, then stop what it started
        try:
            if self.queue is not None:
                self.queue.stop(timeout=5.0)      # what is not stored stays spooled
            if self.service is not None:
                self.service.close(timeout=10.0)
        except Exception as exc:
            log.warning("MemoryPlus shutdown: %s", exc)
        finally:
            self._started = False

    # ── events ─────────────────────────────────────────────────────────────────────────
    def handle(self, event: Event, *args, **kwargs):
        try:
            self._handle(event)
        except Exception as exc:   # degrade: no memories this turn, never a hung PyGPT
            self._fail(f"while handling {getattr(event, 'name', '?')}", exc)

    def _handle(self, event) -> None:
        name, data = event.name, event.data
        if name == Event.ENABLE and data.get("value") == self.id:
            self._closed = False
            self._ensure_started(wait=False)
            return
        if name == Event.DISABLE and data.get("value") == self.id:
            self._stop()
            return
        if name == Event.PLUGIN_SETTINGS_CHANGED:
            self.on_settings_changed()
            return
        if name == Event.MODELS_CHANGED:
            for opt in ("insight_model", "graphiti_model"):
                self.refresh_option(opt)
            return
        if name not in TURN_EVENTS or data.get("silent") or data.get("preview"):
            return  # e.g. SYSTEM_PROMPT, fired ~10×/turn by token counting: nothing slow here
        if not self._started:
            if self._closed:   # PyGPT is exiting: events after shutdown() start nothing
                return
            self._ensure_started(wait=False)
        if name == Event.INPUT_BEFORE:
            self._on_input(data)
        elif name == Event.CTX_BEFORE:
            self._start_search(event.ctx)
        elif name == Event.POST_PROMPT_END:
            data["value"] = self._inject(event.ctx, data.get("value", ""))
        elif name == Event.CTX_END and isinstance(event, Event) and event.ctx is not None:
            self._on_turn_end(event.ctx)

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
                self._early_turns.append(_snapshot(ctx))
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
        # More turns of this bank queued (a backlog): the worker may flush Kuzu's log with a
        # later batch. Another bank's turns do not count: nothing would flush this one.
        defer = (self.settings.engine_mode != "subprocess" and self.queue is not None
                 and self.queue.waiting(bank) > 0)
        try:
            report = self.service.ingest(IngestParams(bank=bank, turns=turns, defer_flush=defer),
                                         timeout=max(60.0, self.settings.runner_timeout_s * len(turns))).result()
        except errors.ServiceError as exc:
            # a bad bank name or an engine's refusal stays as it is; anything else may pass
            retryable = not isinstance(exc, (errors.BadBankName, errors.EngineFailure))
            self._storing_failed(str(exc))
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

    # ── chat commands ──────────────────────────────────────────────────────────────────
    def current_bank(self) -> str:
        preset = ""
        try:
            preset = self.window.core.config.get("preset") or ""
        except Exception:
            pass

        class _Meta:  # the shape bank_for() reads
            pass
        meta = _Meta()
        meta.preset = preset
        ctx = _Meta()
        ctx.meta = meta
        return host.bank_for(ctx, self.settings)

    def _on_input(self, data: dict) -> None:
        flagging = self.settings.manual_flagging
        if self.queue is None:   # still starting: the saved value, not yet validated
            try:
                flagging = self.get_option_value("manual_flagging") is not False
            except Exception:
                pass
        if not flagging:
            return
        typed = str(data.get("value", "") or "")
        cmd = chat_commands.parse(typed)
        if cmd is None:
            return
        data["stop"] = True     # the command is ours: nothing goes to the model
        data["silent"] = True
        self.counters["commands"] += 1

        def say(text: str) -> None:   # from any thread: the reply shows in the chat
            self.replied.emit(typed.strip(), text)
        if self.service is None or self.queue is None:
            say("MemoryPlus is still starting; send the command again in a moment.")
            return
        bank = self.current_bank()
        if cmd.name == "invalid":
            say(cmd.error[:1].upper() + cmd.error[1:] + ".")
        elif cmd.name == "remember":
            self._remember(bank, cmd.text, say)
        elif cmd.name == "forget":
            self._forget(bank, cmd.text, say)
        elif cmd.name in ("confirm", "cancel"):
            self._confirm_forget(bank, cmd, say)

    def _remember(self, bank: str, text: str, say) -> None:
        if text:
            from memoryplus.wire.protocol import RememberParams
            fut = self.service.remember(RememberParams(bank=bank, text=text), timeout=COMMAND_TIMEOUT_S)
            fut.add_done_callback(lambda f: self._after(f, f"Remembered: {shorten(text, REPLY_TEXT)}",
                                                        bank, say))
            return
        turn = self._last_turn.get(bank)
        if turn is None:
            say("Nothing to remember yet: /remember_this needs a text or a previous turn.")
            return
        explicit = turn.model_copy(update={"explicit": True})
        self.queue.put(bank, explicit)
        say(f"Remembered the previous turn: {shorten(turn.user, REPLY_TEXT)}")

    def _forget(self, bank: str, text: str, say) -> None:
        if not text:
            turn = self._last_turn.get(bank)
            if turn is None:
                say("Nothing to forget: there is no previous turn in this conversation.")
                return
            where = self.queue.remove(bank, turn.id)
            if where is True or where == "removed":
                say(f"Forgotten before it was stored: {shorten(turn.user, REPLY_TEXT)}")
                return
            # stored, or being stored: forget it by its id once the queue is done with it
            threading.Thread(target=self._forget_stored_turn, args=(bank, turn, say), daemon=True).start()
            return

        def search_then_offer():
            # Turns still queued are stored first, so that they can be offered too.
            from memoryplus.wire.protocol import ForgetParams
            try:
                self.queue.flush(timeout=COMMAND_TIMEOUT_S)
                fut = self.service.forget(ForgetParams(bank=bank, text=text, confirm=False),
                                          timeout=COMMAND_TIMEOUT_S)
            except Exception as exc:
                say(f"Could not search the memories to forget: {_why(exc)}")
                return
            fut.add_done_callback(lambda f: self._offer(bank, text, f, say))
        threading.Thread(target=search_then_offer, daemon=True, name="memoryplus-forget").start()

    def _forget_stored_turn(self, bank: str, turn: Turn, say) -> None:
        from memoryplus.wire.banks import episode_uuid, slug
        from memoryplus.wire.protocol import ForgetParams
        try:
            self.queue.flush(timeout=COMMAND_TIMEOUT_S)
            result = self.service.forget(ForgetParams(bank=bank, ids=[episode_uuid(slug(bank), turn.id)]),
                                         timeout=COMMAND_TIMEOUT_S).result()
            self.cache.invalidate(bank)
            self.forgotten(bank, result)
            gone = result.episodes_removed
            say(f"Forgot the last turn: {shorten(turn.user, REPLY_TEXT)}" if gone
                else "That turn was not stored, so there was nothing to forget.")
        except Exception as exc:
            say(f"Could not forget the last turn: {_why(exc)}")

    def _offer(self, bank: str, text: str, future, say) -> None:
        try:
            report = future.result()
        except Exception as exc:
            say(f"Could not search the memories to forget: {_why(exc)}")
            return
        matches = list(report.matches)
        if not matches:
            self._forget_offer = None
            say(f"Nothing matches “{shorten(text, REPLY_TEXT)}” strongly, so nothing was forgotten.")
            return
        self._forget_offer = (bank, matches)
        lines = [f"{i}. {shorten(readable(m.text), OFFER_TEXT)}" for i, m in enumerate(matches, 1)]
        them = "it" if len(matches) == 1 else "them all"
        some = ("" if len(matches) == 1 else
                ", /forget_that 1 3 to forget only some, /forget_that keep 2 to keep some")
        say(f"{plural(len(matches), 'memory matches', 'memories match')} “{shorten(text, REPLY_TEXT)}”:"
            "\n\n" + "\n".join(lines) +
            f"\n\nType /forget_that yes to forget {them}{some}, or /forget_that no to keep "
            f"{'it' if len(matches) == 1 else 'them'}.")

    def _confirm_forget(self, bank: str, cmd, say) -> None:
        offer, self._forget_offer = self._forget_offer, None
        if cmd.name == "cancel" or offer is None or offer[0] != bank:
            say("Nothing was forgotten." if cmd.name == "cancel" else
                "Nothing to confirm: use /forget_that TEXT first.")
            return
        _, matches = offer
        chosen = [m for i, m in enumerate(matches, 1)
                  if (not cmd.only or i in cmd.only) and i not in cmd.keep]
        if not chosen:
            say("Nothing was forgotten.")
            return
        from memoryplus.wire.protocol import ForgetParams
        fut = self.service.forget(ForgetParams(bank=bank, ids=[m.id for m in chosen]), timeout=COMMAND_TIMEOUT_S)
        what = "\n".join(f"- {shorten(readable(m.text), CONFIRM_TEXT)}" for m in chosen)
        fut.add_done_callback(lambda f: self._after(
            f, f"Forgot {plural(len(chosen), 'memory', 'memories')}:\n\n{what}", bank, say))

    def _after(self, future, message: str, bank: str, say) -> None:
        try:
            self.forgotten(bank, future.result())
            if self.cache is not None:
                self.cache.invalidate(bank)
            say(message)
        except Exception as exc:
            problem = self._problem(str(exc))
            if problem is not None:
                with self._lock:
                    self._said.add(problem.cause)
            say(f"MemoryPlus could not do that: {problem.text if problem else _why(exc)}")

    def forgotten(self, bank: str, report) -> None:
        """After the worker forgot turns (a ForgetReport's `sources`; None for a cleared bank;
        another report, e.g. a remember's, forgot nothing): the queue's spool lets go of its
        copies, so no replay stores them again."""
        if self.queue is None:
            return
        if report is None:
            self.queue.forgotten(bank)
        elif getattr(report, "sources", None):
            self.queue.forgotten(bank, [str(s) for s in report.sources])

    # ── talking to the user (GUI thread only) ──────────────────────────────────────────
    def _report(self, text: str) -> None:
        self.last_error = text
        self.notify.emit(text)

    @Slot(str, str)
    def _show_reply(self, command: str, text: str) -> None:
        """A command's reply in the chat, under the command, as a chat message of its own. It is
        only shown: not stored in the conversation, so it never reaches the model either."""
        try:
            self.window.update_status("MemoryPlus: " + shorten(text.splitlines()[0], 160))
        except Exception as exc:
            log.warning("cannot show a status: %s", exc)
        try:
            from pygpt_net.core.events import RenderEvent
            from pygpt_net.item.ctx import CtxItem
            meta = self.window.core.ctx.get_current_meta()
            if meta is None:   # no conversation open: the status bar is all there is
                return
            ctx = CtxItem()
            ctx.meta = meta
            ctx.id = next(self._reply_ids)   # PyGPT's page drops a block without an id
            ctx.set_input(command, self.window.core.config.get("user_name"))
            ctx.set_output(text, "MemoryPlus")
            # APPEND_OUTPUT renders the command and the reply as one exchange
            self.window.dispatch(RenderEvent(RenderEvent.APPEND_OUTPUT, {"meta": meta, "ctx": ctx}))
        except Exception as exc:
            log.warning("cannot show a reply in the chat: %s", exc)

    def _problem(self, error: str):
        """The fixable cause behind an error text (see problems.py), or None."""
        from memoryplus.plugin.problems import diagnose
        st = self.service.status() if self.service is not None else {}
        return diagnose(error, python=st.get("python") or "", endpoints=self._endpoints(st))

    def _endpoints(self, st: dict) -> str:
        """Which servers MemoryPlus talks to, by host only (for the texts of problems)."""
        from memoryplus.common.redact import host_of
        s, c = self.settings, self._creds
        parts = []
        if st.get("extraction") == "llm":
            pygpt = c.ollama_base_url if c is not None and c.model_provider == "ollama" else \
                (c.openai_base_url if c is not None else "")
            parts.append(f"LLM at {host_of(s.override_base_url or pygpt or 'https://api.openai.com/v1')}")
        emb = ((st.get("embedder") or {}).get("new_banks") or {})
        if emb.get("provider") and emb.get("provider") not in ("local", "hash"):
            parts.append(f"embeddings {emb.get('id')}: {emb.get('why')}")
        return "; ".join(parts)

    def _say_problem(self, error: str, generic: str = "") -> None:
        """Tell the user once about a cause they can fix; `generic`: a cause key for an
        unrecognised error that must still be said (the worker cannot start)."""
        from memoryplus.plugin.problems import Problem
        problem = self._problem(error)
        if problem is None and generic:
            from memoryplus.common.redact import redact
            st = self.service.status() if self.service is not None else {}
            python = st.get("python") or "python"
            problem = Problem(f"worker:{generic}", redact(
                f"MemoryPlus's memory worker cannot run: {error[:400]}\n\nYour turns are kept on "
                f"disk, not stored. To see why: \"{python}\" -m memoryplus doctor; then use Restart "
                f"worker in the memory browser (MemoryPlus menu)."))
        if problem is not None:
            self._say_once(problem)

    def _storing_failed(self, error: str) -> None:
        """A cause that may pass by itself (an unreachable server) is said once a turn has
        failed on it as many times as the queue tries (Ingestion Retry Attempts); one that will
        not (a missing package, a refused key, a bank in use) at once."""
        problem = self._problem(error)
        if problem is None:
            return
        n = self._streak[problem.cause] = self._streak.get(problem.cause, 0) + 1
        if problem.cause != "unreachable" or n >= self.settings.retry_attempts:
            self._say_once(problem)

    def _say_once(self, problem) -> None:
        with self._lock:
            if problem.cause in self._said:
                return
            self._said.add(problem.cause)
        log.warning("%s", problem.text.splitlines()[0])
        self._report(problem.text)      # an alert dialog in PyGPT (the text has several lines)

    def _watch_worker(self, st: dict) -> None:
        """A worker that cannot start (or keeps dying) is said once, with its reason."""
        state = st.get("state")
        if state in ("fallback", "broken") and st.get("last_error"):
            self._say_problem(str(st["last_error"]), generic=state)

    def embedder_text(self, st: dict) -> str:
        """The embedder in use for the current bank (else for new banks) and why."""
        info = st.get("embedder") or {}
        bank = self.current_bank()
        cur = (self._bank_embedders.get(bank) or (info.get("banks") or {}).get(bank)
               or info.get("new_banks") or {})
        ident, why = cur.get("id") or "", cur.get("why") or ""
        if not ident:
            return f"Embeddings: {why}" if why else ""
        if ident.startswith("hash") and "not installed" not in why:
            from memoryplus.config.install import local_embedder_hint
            why = (f"hashed word features: the offline embedder was not installed when this bank "
                   f"was built. {local_embedder_hint(st.get('python') or '')}")
        return f"Embeddings in use: {ident} — {why}" if why else f"Embeddings in use: {ident}"

    def _ask_embedder(self, bank: str) -> None:
        """The embedder an existing bank was built with (it keeps it), asked once (off the GUI
        thread: the answer arrives on the client's thread)."""
        if bank in self._asked_embedder or bank in self._bank_embedders or self.service is None:
            return
        self._asked_embedder.add(bank)

        def done(fut) -> None:
            try:
                st = fut.result()
                if st.embedder:
                    self._bank_embedders.setdefault(bank, {"id": st.embedder, "why": st.embedder_note or ""})
            except Exception:      # unknown bank (nothing stored yet): the new-bank choice shows
                pass
        from memoryplus.wire.protocol import BankParams
        self.service.stats(BankParams(bank=bank), timeout=COMMAND_TIMEOUT_S).add_done_callback(done)

    def _show_embedder(self, st: dict) -> None:
        """On the settings page, under Embedding Provider: the embedder in use and why."""
        if st.get("state") == "ready":
            self._ask_embedder(self.current_bank())
        text = self.embedder_text(st)
        if not text or text == self._embedder_shown:
            return
        self._embedder_shown = text
        from memoryplus.config.schema import options
        base = next((o.description for o in options() if o.id == "embedding_provider"), "")
        opt = self.options.get("embedding_provider")
        if opt is not None:
            opt["description"] = f"{base}\n\n{text}"
        try:
            node = self.window.ui.nodes.get(f"plugin.{self.id}.embedding_provider.desc")
            if node is not None:
                node.setText(f"{base}\n\n{text}")
        except Exception:   # the settings dialog is not built yet: it reads the option
            pass

    @Slot(str)
    def _show_message(self, text: str) -> None:
        try:
            self.window.update_status(text.splitlines()[0][:200])
            if "\n" in text or text.startswith(("Remembered", "Forgot", "These memories", "Nothing")):
                self.window.ui.dialogs.alert(text)
        except Exception as exc:
            log.warning("cannot show a message: %s", exc)

    def _fail(self, what: str, exc: Exception) -> None:
        from memoryplus.common.redact import redact
        self.counters["errors"] += 1
        self.last_error = redact(f"MemoryPlus {what}: {type(exc).__name__}: {exc}")[:300]
        log.warning("%s", self.last_error)

    def on_post_update(self):
        """Every second on the GUI thread: the status line and the daily expiry check."""
        try:
            if not self._started or self.service is None:
                return
            self._maybe_expire()
            st = self.service.status()
            self._watch_worker(st)
            self._show_embedder(st)
            text = self.status_text()
            if text != self._status:
                self._status = text
                self.window.update_status(text)
        except Exception as exc:
            self._fail("status update", exc)

    def restart_worker(self):
        """*Restart worker* (the memory browser's button): start a new worker, which also closes
        an open crash-loop breaker, then requeue the turns that failed meanwhile. Returns the
        client's future (resolved once the worker is reachable); never blocks the GUI thread."""
        if self.service is None:
            return None
        fut = self.service.restart()

        def requeue(f) -> None:
            if f.exception() is None and self.queue is not None:
                n = self.queue.retry_failed()
                log.info("worker restarted by hand; %d failed turn(s) queued again", n)
        fut.add_done_callback(requeue)
        return fut

    def status_text(self) -> str:
        st = self.service.status() if self.service else {}
        counts = self.queue.counts() if self.queue else {}
        parts = [f"{counts.get('pending', 0)} pending"]
        if counts.get("failed"):
            parts.append(f"{counts['failed']} failed")
        if counts.get("skipped"):
            parts.append(f"{counts['skipped']} skipped by memory mode")
        if counts.get("corrupt_lines"):
            parts.append(f"{plural(counts['corrupt_lines'], 'corrupt spool line')} set aside")
        if counts.get("paused_reason"):
            parts.append(str(counts["paused_reason"]))
        parts.append(f"worker {st.get('state', 'starting')}")
        if st.get("state") == "broken":     # the crash-loop breaker is open
            parts.append("turns are kept; use Restart worker in the memory browser")
        if st.get("extraction"):
            parts.append(f"{st['extraction']} extraction")
        if self.embedder_text(st).startswith("Embeddings in use: hash"):
            parts.append("hashed embeddings: the offline embedder is missing (see the settings)")
        return "MemoryPlus: " + " · ".join(parts)

    def _maybe_expire(self) -> None:
        days = self.settings.memory_expiry_days
        now = time.monotonic()
        if days <= 0 or now - self._last_expiry < EXPIRY_EVERY_S:
            return
        self._last_expiry = now

        def run():
            from memoryplus.wire.protocol import ExpireParams
            try:
                for bank in self.service.banks(timeout=COMMAND_TIMEOUT_S).result():
                    self.service.expire(ExpireParams(bank=bank.name, days=days), timeout=COMMAND_TIMEOUT_S).result()
            except Exception as exc:
                self._fail("expiry check", exc)
        threading.Thread(target=run, daemon=True, name="memoryplus-expiry").start()
