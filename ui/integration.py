"""Where the memory UI meets PyGPT: called once from the plugin's `setup_ui()` (GUI thread).

- A "MemoryPlus tools" submenu at the end of PyGPT's Plugins menu: the live status line, "Open memory browser…",
  "Review recent memories…" and the nine memory modes as checkable entries.
- The mode selector in that menu and in the browser's header edit the plugin's `memory_mode`
  option, the same one the settings tab shows (ui/modes.py keeps all three in sync).
- The review reminder (Memory Review Interval, ui/review.py).
- The status: PyGPT's status bar gets the plugin's status line from `Plugin.on_post_update`
  (GUI thread); the menu and the browser show the same line.
"""
from __future__ import annotations

import logging
from datetime import datetime

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QWidget

from memoryplus.config.schema import MEMORY_MODES
from memoryplus.ui.common import GuiPost, Ratings
from memoryplus.ui.modes import MODE_HINTS, ModeSync
from memoryplus.ui.review import ReviewReminder

log = logging.getLogger("memoryplus.ui")

ATTR = "memory_ui"


class MemoryUi:
    """Everything the memory UI keeps for one plugin instance."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.post = GuiPost(plugin)
        self.modes = ModeSync(plugin, parent=plugin)
        self.ratings = Ratings.open(plugin.user_dir() / "ratings.json")
        self.browser = None
        self.menu = self._build_menu()
        self.modes.changed.connect(self._mode_changed)
        self.reminder = ReviewReminder(self, parent=plugin)

    # ── PyGPT's window ─────────────────────────────────────────────────────────────────
    def main_window(self) -> QWidget | None:
        w = getattr(self.plugin, "window", None)
        return w if isinstance(w, QWidget) else None

    def current_bank(self) -> str:
        try:
            return self.plugin.current_bank()
        except Exception:
            return self.plugin.settings.fallback_bank

    def status_text(self) -> str:
        if self.plugin.service is None:
            return "MemoryPlus is off (enable it in the Plugins menu)"
        try:
            return self.plugin.status_text()
        except Exception as exc:
            return f"MemoryPlus: {exc}"

    # ── the menu ───────────────────────────────────────────────────────────────────────
    def _build_menu(self) -> QMenu:
        host = None
        try:
            host = self.plugin.window.ui.menu.get("menu.plugins")
        except Exception:
            pass
        menu = QMenu("MemoryPlus tools", host if isinstance(host, QWidget) else None)
        menu.setToolTipsVisible(True)
        self.status_action = QAction("MemoryPlus", menu)
        self.status_action.setEnabled(False)
        menu.addAction(self.status_action)
        menu.addSeparator()
        self.open_action = QAction("Open memory browser…", menu)
        self.open_action.triggered.connect(lambda _=False: self.open_browser())
        menu.addAction(self.open_action)
        self.review_action = QAction("Review recent memories…", menu)
        self.review_action.setToolTip("The memories added since your last review")
        self.review_action.triggered.connect(lambda _=False: self.review_now())
        menu.addAction(self.review_action)
        menu.addSeparator()
        header = QAction("Memory mode", menu)
        header.setEnabled(False)
        f = header.font()
        f.setBold(True)
        header.setFont(f)
        menu.addAction(header)
        self.mode_group = QActionGroup(menu)
        self.mode_group.setExclusive(True)
        self.mode_actions: dict[str, QAction] = {}
        current = self.modes.mode()
        for mode in MEMORY_MODES:
            act = QAction(mode, menu, checkable=True)
            act.setToolTip(MODE_HINTS.get(mode, ""))
            act.setChecked(mode == current)
            act.triggered.connect(lambda checked=False, m=mode: self._mode_chosen(m))
            self.mode_group.addAction(act)
            menu.addAction(act)
            self.mode_actions[mode] = act
        menu.aboutToShow.connect(self._menu_showing)
        if isinstance(host, QMenu):
            host.addMenu(menu)
        return menu

    def _menu_showing(self) -> None:
        self.status_action.setText(self.status_text())
        self.modes.poll()

    def _mode_chosen(self, mode: str) -> None:
        try:
            self.modes.set_mode(mode)
        except Exception as exc:
            log.warning("cannot change the memory mode: %s", exc)
            self._mode_changed(self.modes.mode())

    def _mode_changed(self, mode: str) -> None:
        act = self.mode_actions.get(mode)
        if act is not None and not act.isChecked():
            act.setChecked(True)

    # ── the browser ────────────────────────────────────────────────────────────────────
    def open_browser(self, bank: str | None = None, since: datetime | None = None):
        from memoryplus.ui.browser import MemoryBrowser
        if self.browser is None:
            self.browser = MemoryBrowser(self, self.main_window())
        if since is not None:
            self.browser.review(since, bank)
        elif bank:
            self.browser.set_bank(bank)
        self.browser.show()
        self.browser.raise_()
        self.browser.activateWindow()
        return self.browser

    def review_now(self):
        st = self.reminder.state()
        since = st.last_review()
        st.set_last_review(self.reminder.clock())
        return self.open_browser(bank=self.current_bank(), since=since or datetime.fromtimestamp(0).astimezone())


def install(plugin) -> MemoryUi | None:
    """Build the memory UI for `plugin` (once); never raises into PyGPT."""
    existing = getattr(plugin, ATTR, None)
    if existing is not None:
        return existing
    try:
        ui = MemoryUi(plugin)
    except Exception as exc:
        log.warning("MemoryPlus: cannot build the memory UI: %s", exc, exc_info=True)
        return None
    setattr(plugin, ATTR, ui)
    return ui


def open_browser(plugin, **kw):
    """The settings page's "Open memory browser" button and the menu entry."""
    ui = install(plugin)
    return ui.open_browser(**kw) if ui is not None else None
