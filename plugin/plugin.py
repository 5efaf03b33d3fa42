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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal, Slot

from pygpt_net.core.events import Event
from pygpt_net.plugin.base.plugin import BasePlugin

from memoryplus.common.wording import shorten
from memoryplus.config.schema import TABS, defaults
from memoryplus.plugin import host
from memoryplus.plugin.chat import ChatCommandsMixin
from memoryplus.plugin.status import StatusMixin
from memoryplus.plugin.tools import TOOL_EVENTS, ToolsMixin
from memoryplus.plugin.turns import TurnsMixin

if TYPE_CHECKING:   # pydantic models: imported on the start-up thread, not at import
    from memoryplus.plugin.turns import PendingSearch
    from memoryplus.wire.records import SearchResult, Turn

log = logging.getLogger("memoryplus.plugin")

PLUGIN_ID = "memoryplus"
TURN_EVENTS = frozenset({Event.INPUT_BEFORE, Event.CTX_BEFORE, Event.POST_PROMPT_END, Event.CTX_END})


class Plugin(TurnsMixin, ChatCommandsMixin, ToolsMixin, StatusMixin, BasePlugin):
    """Life cycle, settings and the events' dispatch here; a turn's search and storing in
    plugin/turns.py, the chat commands in plugin/chat.py, what the user is told in plugin/status.py."""
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
        self.type = ["cmd.inline"]    # the model tools (plugin/tools.py), as PyGPT's memory plugin
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
            from memoryplus.plugin.cache import bank_events_listener   # what other clients change
            client.subscribe(bank_events_listener(self.cache, lambda: self.queue))
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
            values = host.pygpt_values(values)     # a tool's switch is PyGPT's `cmd.<name>`
            for name, value in values.items():
                host.set_value(self, name, value)
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
        if name in TOOL_EVENTS:    # before the silent check: PyGPT asks for tools silently
            self.tool_event(event)
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




