"""The memory-mode selector's one source of truth: the plugin's `memory_mode` option.

The PyGPT menu, the browser's header and PyGPT's settings tab all show and edit that one
option. A change from the menu or the header goes the way PyGPT's own Save goes: the option's
value (which refreshes the settings widget), PyGPT's config.json, then the plugin applies it.
A change saved on the settings tab is noticed by polling the option (cheap, GUI thread), so all
three stay in sync whichever one the user touched.
"""
from __future__ import annotations

import logging

from PySide6.QtCore import QObject, QTimer, Signal

from memoryplus.config.schema import MEMORY_MODES

log = logging.getLogger("memoryplus.ui")

OPTION = "memory_mode"
POLL_MS = 500

# What each mode looks for (README "Memory modes"), for tooltips.
MODE_HINTS = {
    "Identity": "people, traits, preferences, biography",
    "Assistant": "tasks, goals, instructions",
    "Chatbot": "broad interests, people, places, things (default)",
    "Productivity": "projects, tasks, deadlines, tools",
    "Research": "claims, sources, concepts, data points",
    "Discourse": "viewpoints, arguments, opinions",
    "ResolveEntities": "people, places, organisations, concepts, resolved against known entities",
    "MemoryGate": "Chatbot's types, but each turn is first judged worth keeping",
    "CustomPrompt": "Chatbot's types with your Custom Analysis Prompt as the instructions",
}


def current_mode(plugin) -> str:
    try:
        value = plugin.get_option_value(OPTION)
    except Exception:
        value = None
    return value if value in MEMORY_MODES else plugin.settings.memory_mode


def apply_mode(plugin, mode: str) -> None:
    """Set the memory mode exactly as PyGPT's settings page saves it, then apply it."""
    if mode not in MEMORY_MODES:
        raise ValueError(f"unknown memory mode {mode!r}")
    plugin.set_option_value(OPTION, mode)
    config = plugin.window.core.config
    config.data.setdefault("plugins", {}).setdefault(plugin.id, {})[OPTION] = mode
    config.save()
    plugin.on_settings_changed()


class ModeSync(QObject):
    """Announces the memory mode to every selector (`changed`), whoever changed it."""

    changed = Signal(str)

    def __init__(self, plugin, parent: QObject | None = None, poll_ms: int = POLL_MS):
        super().__init__(parent)
        self.plugin = plugin
        self._last = current_mode(plugin)
        self._timer = QTimer(self)
        self._timer.setInterval(poll_ms)
        self._timer.timeout.connect(self.poll)
        self._timer.start()

    def mode(self) -> str:
        return self._last

    def set_mode(self, mode: str) -> None:
        if mode == current_mode(self.plugin) and mode == self._last:
            return
        apply_mode(self.plugin, mode)
        self.poll()

    def poll(self) -> None:
        mode = current_mode(self.plugin)
        if mode != self._last:
            self._last = mode
            self.changed.emit(mode)
