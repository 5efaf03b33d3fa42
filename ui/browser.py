"""The memory browser: a non-modal window onto what MemoryPlus remembers.

Header: the bank (the current chat's or any other), the memory mode (the same setting as the
settings tab and the PyGPT menu) and the live status. Tabs: Recall, Timeline, Entities & facts,
Graph, Queue. Actions on the selection of the current tab: 👍/👎 (when Memory Feedback is on)
and Forget. Bank actions: Remember, Export, Import, Re-embed, Clear. Long operations show a
progress bar with Cancel at the bottom.
"""
from __future__ import annotations

from datetime import datetime
from typing import Callable

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QComboBox, QHBoxLayout, QLabel, QMessageBox, QProgressBar, QPushButton, QTabWidget, QVBoxLayout,
    QWidget,
)

from memoryplus.config.schema import MEMORY_MODES
from memoryplus.ui.actions import BrowserActions
from memoryplus.ui.common import READ_TIMEOUT_S, ElidedLabel, elide, printable
from memoryplus.ui.dialogs import ClearBankDialog, ForgetDialog, RememberDialog
from memoryplus.ui.graph_view import GraphView
from memoryplus.ui.index import load_index
from memoryplus.ui.modes import MODE_HINTS
from memoryplus.ui.operations import LongOp
from memoryplus.ui.entities_view import EntitiesView
from memoryplus.ui.queue_view import QueueView
from memoryplus.ui.views import RecallView, TimelineView

BANK_ROLE = Qt.ItemDataRole.UserRole


class MemoryBrowser(BrowserActions, QWidget):
    def __init__(self, ui, parent: QWidget | None = None):
        super().__init__(parent, Qt.WindowType.Window)
        self.ui = ui
        self.plugin = ui.plugin
        self.post = ui.post
        self.ratings = ui.ratings
        self.op: LongOp | None = None
        self.forget_dialog: ForgetDialog | None = None
        self.clear_dialog: ClearBankDialog | None = None
        self.remember_dialog: RememberDialog | None = None
        self.reembed_box: QMessageBox | None = None
        self._index_cache: dict[str, object] = {}
        self._index_waiters: dict[tuple[str, int], list[Callable]] = {}
        self._index_gen = 0
        self._bank = ui.current_bank()
        self.setWindowTitle("MemoryPlus — memory browser")
        self.setWindowModality(Qt.WindowModality.NonModal)
        self.resize(1000, 700)
        self.setMinimumSize(860, 560)

        # header: bank, mode, status
        self.bank_box = QComboBox()
        self.bank_box.setMinimumContentsLength(18)
        self.bank_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.bank_box.setToolTip("The memory bank shown: the current chat's, or any other")
        self.bank_box.activated.connect(lambda _i: self.set_bank(self.bank_box.currentData(BANK_ROLE)))
        self.mode_box = QComboBox()
        for i, mode in enumerate(MEMORY_MODES):
            self.mode_box.addItem(mode)
            self.mode_box.setItemData(i, MODE_HINTS.get(mode, ""), Qt.ItemDataRole.ToolTipRole)
        self.mode_box.setToolTip("Memory mode: what is extracted from new turns (the same setting as "
                                 "Plugins → Settings → MemoryPlus → Models)")
        self.mode_box.setCurrentText(ui.modes.mode())
        self.mode_box.activated.connect(lambda _i: self._mode_chosen(self.mode_box.currentText()))
        ui.modes.changed.connect(self._mode_changed)
        self.status = ElidedLabel()
        head = QHBoxLayout()
        head.addWidget(QLabel("Bank:"))
        head.addWidget(self.bank_box)
        head.addSpacing(12)
        head.addWidget(QLabel("Memory mode:"))
        head.addWidget(self.mode_box)
        head.addSpacing(12)
        head.addWidget(self.status, 1)

        # bank actions
        self.remember_btn = QPushButton("Remember…")
        self.export_btn = QPushButton("Export…")
        self.import_btn = QPushButton("Import…")
        self.reembed_btn = QPushButton("Re-embed…")
        self.clear_btn = QPushButton("Clear bank…")
        self.refresh_btn = QPushButton("Refresh")
        self.remember_btn.setToolTip("Type something for MemoryPlus to remember in this bank")
        self.export_btn.setToolTip("Save this bank to a JSON-lines file")
        self.import_btn.setToolTip("Merge a JSON-lines export into this bank")
        self.reembed_btn.setToolTip("Recompute this bank's vectors with the embedder now configured")
        self.clear_btn.setToolTip("Delete every memory in this bank (asks you to type its name)")
        self.remember_btn.clicked.connect(self.ask_remember)
        self.export_btn.clicked.connect(self.ask_export)
        self.import_btn.clicked.connect(self.ask_import)
        self.reembed_btn.clicked.connect(self.ask_reembed)
        self.clear_btn.clicked.connect(self.ask_clear)
        self.refresh_btn.clicked.connect(self.refresh)
        tools = QHBoxLayout()
        for btn in (self.remember_btn, self.export_btn, self.import_btn, self.reembed_btn, self.clear_btn):
            tools.addWidget(btn)
        tools.addStretch(1)
        tools.addWidget(self.refresh_btn)

        # views
        self.recall = RecallView(self)
        self.timeline = TimelineView(self)
        self.entities = EntitiesView(self)
        self.graph = GraphView(self)
        self.queue = QueueView(self)
        self.views = [self.recall, self.timeline, self.entities, self.graph, self.queue]
        self.tabs = QTabWidget()
        for v in self.views:
            self.tabs.addTab(v, v.title)
        self.tabs.currentChanged.connect(self._tab_changed)

        # selection actions
        self.up_btn = QPushButton("👍 Helpful")
        self.down_btn = QPushButton("👎 Not helpful")
        self.up_btn.setToolTip("Rank this memory higher in later recall (bounded: at most +30 %)")
        self.down_btn.setToolTip("Rank this memory lower in later recall (bounded: at most −30 %)")
        self.forget_btn = QPushButton("Forget selected…")
        self.forget_btn.setToolTip("Forget the selected memories, with the conversation turns behind them")
        self.up_btn.clicked.connect(lambda: self.rate(+1))
        self.down_btn.clicked.connect(lambda: self.rate(-1))
        self.forget_btn.clicked.connect(self.ask_forget)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        actions = QHBoxLayout()
        actions.addWidget(self.up_btn)
        actions.addWidget(self.down_btn)
        actions.addWidget(self.forget_btn)
        actions.addWidget(self.message, 1)

        # long operation progress
        self.op_label = QLabel()
        self.op_label.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setMinimumWidth(220)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.clicked.connect(self.cancel_op)
        prog = QHBoxLayout()
        prog.setContentsMargins(0, 0, 0, 0)
        prog.addWidget(self.op_label, 1)
        prog.addWidget(self.progress)
        prog.addWidget(self.cancel_btn)
        self.progress_box = QWidget()
        self.progress_box.setLayout(prog)
        self.progress_box.hide()

        lay = QVBoxLayout(self)
        lay.addLayout(head)
        lay.addLayout(tools)
        lay.addWidget(self.tabs, 1)
        lay.addLayout(actions)
        lay.addWidget(self.progress_box)

        self.status_timer = QTimer(self)
        self.status_timer.setInterval(1000)
        self.status_timer.timeout.connect(self.update_status)
        self._fill_banks([])
        self.apply_feedback()
        self.update_status()
        self.selection_changed()

    # ── what the views use ─────────────────────────────────────────────────────────────
    @property
    def service(self):
        """The plugin's MemoryService (None while MemoryPlus is not running)."""
        return getattr(self.plugin, "service", None)

    @property
    def bank(self) -> str:
        return self._bank

    def feedback_on(self) -> bool:
        try:
            return bool(self.plugin.get_option_value("memory_feedback"))
        except Exception:
            return bool(self.plugin.settings.memory_feedback)

    def say(self, text: str) -> None:
        self.message.setText(elide(text, 400))
        self.message.setToolTip(text)

    def get_index(self, callback: Callable) -> None:
        """The bank's entity index (cached until something changes); callback(index, error)."""
        bank = self.bank
        if bank in self._index_cache:
            callback(self._index_cache[bank], None)
            return
        key = (bank, self._index_gen)          # a load started before a change is not reused
        waiters = self._index_waiters.setdefault(key, [])
        waiters.append(callback)
        if len(waiters) > 1 or self.service is None:
            return

        def done(index, err):
            current = key == (self.bank, self._index_gen)
            if index is not None and current:
                self._index_cache[bank] = index
            for cb in self._index_waiters.pop(key, []):
                if current:
                    cb(index, err)
        load_index(self.service, self.post, bank, done)

    def show_in_graph(self, name: str) -> None:
        self.tabs.setCurrentWidget(self.graph)
        self.graph.focus_entity(name)

    def selection_changed(self) -> None:
        view = self.tabs.currentWidget() if hasattr(self, "tabs") else None
        items = view.selected_memories() if view is not None else []
        busy = self.op is not None
        self.forget_btn.setEnabled(bool(items) and not busy and self.service is not None)
        rateable = len(items) == 1 and items[0].rateable and self.service is not None
        self.up_btn.setEnabled(rateable)
        self.down_btn.setEnabled(rateable)
        tip = "" if rateable or not items else "Rate one fact or entity at a time (a conversation turn has no rating)"
        for b in (self.up_btn, self.down_btn):
            b.setStatusTip(tip)

    # ── header ─────────────────────────────────────────────────────────────────────────
    def _mode_chosen(self, mode: str) -> None:
        try:
            self.ui.modes.set_mode(mode)
            self.say(f"Memory mode: {mode}. New turns are read with this lens; stored memories stay.")
        except Exception as exc:
            self.say(f"Cannot change the memory mode: {exc}")
            self.mode_box.setCurrentText(self.ui.modes.mode())

    def _mode_changed(self, mode: str) -> None:
        self.mode_box.blockSignals(True)
        self.mode_box.setCurrentText(mode)
        self.mode_box.blockSignals(False)

    def update_status(self) -> None:
        self.status.setText(self.ui.status_text())
        self.apply_feedback()

    def apply_feedback(self) -> None:
        on = self.feedback_on()
        if on != getattr(self, "_feedback_shown", None):
            self._feedback_shown = on
            self.up_btn.setVisible(on)
            self.down_btn.setVisible(on)
            self.recall.set_feedback(on)

    def _fill_banks(self, names: list[str]) -> None:
        current = self.ui.current_bank()
        names = list(dict.fromkeys([current, self._bank] + sorted(names)))
        self.bank_box.blockSignals(True)
        self.bank_box.clear()
        for name in names:
            label = printable(name) + ("  (current chat)" if name == current else "")
            self.bank_box.addItem(label)
            self.bank_box.setItemData(self.bank_box.count() - 1, name, BANK_ROLE)
        self.bank_box.setCurrentIndex(names.index(self._bank))
        self.bank_box.blockSignals(False)

    def update_banks(self, names: list[str]) -> None:
        self._fill_banks(names)

    def load_banks(self) -> None:
        if self.service is None:
            return
        self.post.run(self.service.banks(timeout=READ_TIMEOUT_S),
                      lambda banks: self._fill_banks([b.name for b in banks]))

    def set_bank(self, bank: str) -> None:
        if not bank or bank == self._bank:
            return
        self._bank = bank
        self._fill_banks([self.bank_box.itemData(i, BANK_ROLE) for i in range(self.bank_box.count())])
        self.timeline.set_since(None)
        self.changed(everything=True)

    # ── showing ────────────────────────────────────────────────────────────────────────
    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.status_timer.start()
        self.update_status()
        self.load_banks()
        self.tabs.currentWidget().ensure_loaded()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self.status_timer.stop()

    def _tab_changed(self, _i: int) -> None:
        self.tabs.currentWidget().ensure_loaded()
        self.selection_changed()

    def refresh(self) -> None:
        self.load_banks()
        self.changed(everything=True)

    def changed(self, everything: bool = False) -> None:
        """The bank's content changed: drop cached pictures, reload what is shown."""
        self._index_gen += 1
        self._index_cache.pop(self.bank, None)
        if everything:
            self._index_cache.clear()
        cache = getattr(self.plugin, "cache", None)
        if cache is not None:
            cache.invalidate(self.bank)
        for v in self.views:
            v.invalidate()
        self.selection_changed()

    def review(self, since: datetime | None, bank: str | None = None) -> None:
        """Open on the Timeline, filtered to what was stored since `since`."""
        if bank:
            self.set_bank(bank)
        self.timeline.set_since(since)
        self.tabs.setCurrentWidget(self.timeline)
        self.timeline.ensure_loaded()
