"""A headless PyGPT host for driving the real plugin without the whole desktop app.

Real parts of pygpt-net 2.9.1: `Config` (over a temporary workdir seeded with PyGPT's own
default config.json), the core plugin registry (`core.plugins.Plugins`: registration, saved
option values, option pruning), the plugin controller's enabled-state, the `Dispatcher`,
`Event`, `CtxItem`, `CtxMeta` and the command core (`core.command`, which a plugin command's
reply consults). Everything else PyGPT's dispatcher consults before reaching
plugins (its tool, agent, ctx, model, idx and ui controllers) is an inert stand-in: those are
PyGPT's own features, not the plugin API under test. The chat render controller, which gets
every RenderEvent, records what would be shown in the chat (`chat`); `core.ctx` knows which
conversation is open. Used by the tests, the demo and the bench.
"""
from __future__ import annotations

import json
import os
import threading
import types
from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

# MemoryPlus settings for an offline run: no LLM, no API key, the persistent worker
LOCAL = {"extraction_engine": "local", "embedding_provider": "local", "engine_mode": "persistent"}


class _Dialogs:
    def __init__(self, host: "HostWindow"):
        self.host = host

    def alert(self, msg: Any) -> None:
        assert threading.current_thread() is threading.main_thread(), "alert from a worker thread"
        self.host.alerts.append(str(msg))


class _ChatRender:
    """Stands in for PyGPT's chat render controller (`controller.chat.render`, which the real
    dispatcher hands every RenderEvent): records the exchanges a RenderEvent.APPEND_OUTPUT puts
    into the chat, as (input, output, the bot's name)."""

    def __init__(self, host: "HostWindow"):
        self.host = host

    def handle(self, event) -> None:
        from pygpt_net.core.events import RenderEvent
        assert threading.current_thread() is threading.main_thread(), "chat render from a worker thread"
        if event.name == RenderEvent.APPEND_OUTPUT:
            ctx = event.data.get("ctx")
            assert ctx is not None and ctx.id is not None, "PyGPT's page drops a block without an id"
            assert event.data.get("meta") is self.host.meta, "rendered into the open conversation"
            self.host.chat.append((ctx.input, ctx.output, ctx.output_name))


class HostWindow:
    """The `window` object a PyGPT plugin sees, with the real registry and dispatcher."""

    def __init__(self, workdir: Path, *, config: dict | None = None):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        from PySide6.QtCore import QThreadPool
        from PySide6.QtWidgets import QApplication
        self.app = QApplication.instance() or QApplication([])
        # PyGPT's icons, registered as its app.py does: pygpt_net.ui builds QIcons from them at
        # import ("qt.svg: Cannot open file ':/icons/...'" on stderr otherwise)
        import pygpt_net.icons_rc  # noqa: F401
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.environ["PYGPT_WORKDIR"] = str(self.workdir)
        import pygpt_net
        from pygpt_net.config import Config
        from pygpt_net.controller.plugins.plugins import Plugins as PluginController
        from pygpt_net.core.dispatcher.dispatcher import Dispatcher
        from pygpt_net.core.plugins.plugins import Plugins as PluginRegistry
        defaults = Path(pygpt_net.__file__).parent / "data" / "config" / "config.json"
        target = self.workdir / "config.json"
        if not target.exists():
            data = json.loads(defaults.read_text(encoding="utf-8"))
            data.update(config or {})
            target.write_text(json.dumps(data), encoding="utf-8")
        self.statuses: list[str] = []
        self._last_tick = 0.0
        self.alerts: list[str] = []
        self.chat: list[tuple[str, str, str]] = []    # what was shown in the chat (see _ChatRender)
        from pygpt_net.item.ctx import CtxMeta
        self.meta = CtxMeta()        # the conversation open in the chat
        self.meta.id = 1
        # the conversation store: only which conversation is open
        ctx_store = types.SimpleNamespace(get_current_meta=lambda: self.meta)
        self.core = types.SimpleNamespace(debug=MagicMock(), models=MagicMock(), llm=MagicMock(),
                                          ctx=ctx_store)
        self.core.models.has.return_value = False
        # PyGPT's provider registry as on a machine with no keys: no provider is set up (a
        # bare MagicMock would hand the plugin a mock as an "API key"); Ollama's default URL.
        self.core.llm.get.return_value = None
        self.core.models.ollama.get_base_url.return_value = "http://localhost:11434"
        self.core.config = Config(self)
        from pygpt_net.core.command import Command
        self.core.command = Command(self)     # PyGPT's own: a plugin's reply asks it of its tools
        self.core.config.init(all=False)
        self.core.plugins = PluginRegistry(self)
        self.controller = MagicMock()
        self.controller.kernel.stopped.return_value = False   # plugin workers check it per command
        self.controller.plugins = PluginController(self)
        self.controller.chat.render = _ChatRender(self)
        self.tools = MagicMock()
        self.ui = types.SimpleNamespace(dialogs=_Dialogs(self), menu={}, nodes={})
        self.threadpool = QThreadPool.globalInstance()
        self.dispatcher = Dispatcher(self)

    # what plugins call on the window
    def dispatch(self, event, all: bool = False):
        return self.dispatcher.dispatch(event, all=all)

    def update_status(self, message: str = "") -> None:
        assert threading.current_thread() is threading.main_thread(), "status bar from a worker thread"
        self.statuses.append(str(message))

    def wait_chat(self, n: int, timeout: float = 60.0) -> list[tuple[str, str, str]]:
        """Let events run until the chat shows `n` exchanges (or the time is up); the list."""
        import time
        end = time.monotonic() + timeout
        while len(self.chat) < n and time.monotonic() < end:
            self.process_events(0.05)
        return self.chat

    # what the tests do as PyGPT would
    def register(self, plugin, *, enable: bool = True):
        self.core.plugins.register(plugin)
        if enable:
            self.controller.plugins.enabled[plugin.id] = True
            self.core.config.data.setdefault("plugins_enabled", {})[plugin.id] = True
        plugin.setup_ui()
        return plugin

    def save_options(self, plugin, **values) -> None:
        """What Plugins → Settings… → Save does: store values, then tell the plugins."""
        from pygpt_net.core.events import Event
        stored = self.core.config.data.setdefault("plugins", {}).setdefault(plugin.id, {})
        from memoryplus.plugin.host import set_value
        for key, value in values.items():   # a tool's switch is its command's (`cmd.<name>`)
            set_value(plugin, key, value)
            stored[key] = value
        self.core.config.save()
        self.dispatch(Event(Event.PLUGIN_SETTINGS_CHANGED))

    def process_events(self, seconds: float = 0.0) -> None:
        """Let queued signals reach the GUI thread, and give enabled plugins their 1-second
        on_post_update() tick as PyGPT's main loop does."""
        import time
        end = time.monotonic() + seconds
        while True:
            self.app.processEvents()
            now = time.monotonic()
            if now - self._last_tick >= 1.0:
                self._last_tick = now
                for pid, plugin in list(self.core.plugins.plugins.items()):
                    if self.controller.plugins.is_enabled(pid):
                        plugin.on_post_update()
            if now >= end:
                break
            time.sleep(0.01)


def turn_ctx(text: str, *, preset: str = "current.chat", meta_id: int = 1, ctx_id: int | None = None,
             output: str = ""):
    """A real PyGPT CtxItem of a chat turn, as PyGPT builds it for a send."""
    import time
    from pygpt_net.item.ctx import CtxItem, CtxMeta
    meta = CtxMeta()
    meta.id = meta_id
    meta.preset = preset
    ctx = CtxItem()
    ctx.meta = meta
    ctx.meta_id = meta_id
    ctx.id = ctx_id
    ctx.input = text
    ctx.output = output
    ctx.mode = "chat"
    ctx.input_timestamp = int(time.time())
    return ctx


def chat_turn(window: HostWindow, text: str, answer: str, *, preset: str = "current.chat",
              meta_id: int = 1, ctx_id: int = 1, system_prompt: str = "You are a helpful assistant.",
              previews: int = 3) -> str:
    """One chat-mode turn through the dispatcher, in PyGPT's order and on PyGPT's threads:
    INPUT_BEFORE, CTX_BEFORE, silent SYSTEM_PROMPT/preview POST_PROMPT_END (token counting),
    POST_PROMPT_END on a pool thread, then CTX_AFTER and CTX_END. Returns the system prompt
    the model would have received, or None when the input was swallowed (a chat command)."""
    from pygpt_net.core.events import Event
    data = {"mode": "chat", "value": text, "multimodal_ctx": None, "attachments": {}, "stop": False,
            "silent": False}
    window.dispatch(Event(Event.INPUT_BEFORE, data))
    if data.get("stop"):
        window.process_events(0.05)
        return None
    ctx = turn_ctx(data["value"], preset=preset, meta_id=meta_id, ctx_id=ctx_id)
    before = Event(Event.CTX_BEFORE, {"mode": "chat"})
    before.ctx = ctx
    window.dispatch(before)
    for _ in range(previews):
        window.dispatch(Event(Event.SYSTEM_PROMPT, {"mode": "chat", "value": system_prompt,
                                                    "is_expert": False, "silent": True}))
        preview = Event(Event.POST_PROMPT_END, {"mode": "chat", "reply": False, "value": system_prompt,
                                                "silent": True, "preview": True})
        preview.ctx = ctx
        window.dispatch(preview)
    out: dict[str, str] = {}

    def bridge():   # PyGPT's BridgeWorker runs this on a QThreadPool thread in chat mode
        ev = Event(Event.POST_PROMPT_END, {"mode": "chat", "reply": False, "value": system_prompt})
        ev.ctx = ctx
        window.dispatch(ev)
        out["prompt"] = ev.data["value"]

    worker = threading.Thread(target=bridge)
    worker.start()
    while worker.is_alive():
        window.process_events(0.01)
    ctx.output = answer
    for name in (Event.CTX_AFTER, Event.CTX_END):
        ev = Event(name, {"mode": "chat"})
        ev.ctx = ctx
        window.dispatch(ev)
    window.process_events(0.02)
    return out["prompt"]

