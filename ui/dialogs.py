"""The browser's dialogs: Forget (showing what goes with a memory), Clear bank (typed
confirmation), Remember (typed text), and the gentle review prompt. None runs a nested event
loop: each is opened with open()/show() and answers through its buttons' signals."""
from __future__ import annotations

import html
from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QTextBrowser,
    QVBoxLayout, QWidget,
)

from memoryplus.ui.common import READ_TIMEOUT_S, Memory, elide, fmt_date, fmt_source, kind_label, printable
from memoryplus.wire.protocol import BrowseParams, SearchParams

EPISODE_SCAN = 200
EPISODE_SCAN_MAX = 2000


def _e(text) -> str:
    return html.escape(str(text or ""))


class ForgetDialog(QDialog):
    """Confirm forgetting memories, after showing the conversation turns that go with them.

    Forgetting a memory removes the turns it came from (so its text is found nowhere any more),
    and with them every fact and entity only those turns support."""

    confirmed = Signal(list)

    def __init__(self, browser, bank: str, items: list[Memory]):
        super().__init__(browser)
        self.b, self.bank, self.items = browser, bank, items
        self.setWindowTitle("Forget memories")
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.resize(640, 460)
        self.preview_ready = False
        self.turns: dict[str, dict] = {}          # caller id -> episode record
        self.sources: dict[str, list[str]] = {}   # memory id -> caller ids
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        buttons = QDialogButtonBox()
        self.forget_btn = buttons.addButton("Forget", QDialogButtonBox.ButtonRole.DestructiveRole)
        self.cancel_btn = buttons.addButton("Keep them", QDialogButtonBox.ButtonRole.RejectRole)
        self.forget_btn.clicked.connect(self._confirm)
        self.cancel_btn.clicked.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(self.text, 1)
        lay.addWidget(buttons)
        self._render()
        self._gather()

    def _confirm(self) -> None:
        self.confirmed.emit(self.items)
        self.accept()

    # what goes with them
    def _gather(self) -> None:
        service = self.b.service
        waiting = [m for m in self.items if m.sources is None or m.kind == "entity"]
        for m in self.items:
            if m.sources is not None:
                self.sources[m.id] = list(m.sources)
        if service is None:
            return
        self._left = len(waiting)
        for m in waiting:     # find its sources: search its text, keep the result with its id
            query = (m.name or m.text)[:300] if m.kind == "entity" else m.text[:300]
            fut = service.search(SearchParams(bank=self.bank, query=query, limit=40), timeout=READ_TIMEOUT_S)
            self.b.post.run(fut, lambda rows, m=m: self._found(rows, m), lambda _err, m=m: self._found([], m))
        if not waiting:
            self._scan_turns(0)

    def _found(self, rows: list, m: Memory) -> None:
        for r in rows:
            if r.id == m.id:
                self.sources[m.id] = list(dict.fromkeys(self.sources.get(m.id, []) + list(r.sources)))
        self._left -= 1
        if self._left == 0:
            self._scan_turns(0)

    def _scan_turns(self, offset: int) -> None:
        wanted = {s for lst in self.sources.values() for s in lst}
        if not wanted or wanted <= set(self.turns) or self.b.service is None:
            self._done()
            return
        fut = self.b.service.browse(BrowseParams(bank=self.bank, what="episodes", offset=offset,
                                                 limit=EPISODE_SCAN), timeout=READ_TIMEOUT_S)

        def got(rows):
            for r in rows:
                if r.source in wanted:
                    self.turns[r.source] = r
            if len(rows) == EPISODE_SCAN and offset + EPISODE_SCAN < EPISODE_SCAN_MAX \
                    and not wanted <= set(self.turns):
                self._scan_turns(offset + EPISODE_SCAN)
            else:
                self._done()
        self.b.post.run(fut, got, lambda _err: got([]))

    def _done(self) -> None:
        self.preview_ready = True
        self._render()

    def _render(self) -> None:
        n = len(self.items)
        parts = [f"<p>Forget {n} {'memory' if n == 1 else 'memories'} from bank <b>{_e(printable(self.bank))}</b>:</p><ul>"]
        for m in self.items:
            parts.append(f"<li>[{_e(kind_label(m.kind))}] {_e(elide(m.text or m.name, 200))}</li>")
        parts.append("</ul><p><b>What goes with it.</b> MemoryPlus forgets the conversation turns a memory "
                     "came from, so that its text is found nowhere any more; every fact and entity that "
                     "only those turns support goes too, and other entities' summaries are rebuilt "
                     "without them.</p>")
        if any(m.kind == "entity" for m in self.items):
            names = ", ".join(f"“{_e(m.name)}”" for m in self.items if m.kind == "entity")
            parts.append(f"<p><b>Careful:</b> forgetting the entity {names} forgets <i>every</i> turn that "
                         "mentions it (the most recent ones are listed below).</p>")
        if not self.preview_ready:
            parts.append("<p><i>Looking up the turns that go with it…</i></p>")
        else:
            ids = list(dict.fromkeys(s for m in self.items for s in self.sources.get(m.id, [])))
            if not ids:
                parts.append("<p>No conversation turn could be found behind it: only the memory itself goes.</p>")
            else:
                parts.append("<p>This conversation turn will be forgotten:</p><ul>" if len(ids) == 1 else
                             f"<p>These {len(ids)} conversation turns will be forgotten:</p><ul>")
                for s in ids:
                    r = self.turns.get(s)
                    if r is None:
                        parts.append(f"<li>{_e(fmt_source(s))} (not found in the latest turns)</li>")
                    else:
                        parts.append(f"<li><small>{_e(fmt_date(r.valid_at))} · {_e(fmt_source(s))}</small><br>"
                                     f"{_e(elide(r.text or '', 300))}</li>")
                parts.append("</ul>")
        self.text.setHtml("".join(parts))


class ClearBankDialog(QDialog):
    """Clearing a bank needs its name typed exactly."""

    confirmed = Signal()

    def __init__(self, parent: QWidget, bank: str, counts: str = ""):
        super().__init__(parent)
        self.bank = bank
        self.setWindowTitle("Clear bank")
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self.setMinimumWidth(480)
        label = QLabel(f"<p>This deletes <b>every memory</b> in bank <b>{_e(printable(bank))}</b>"
                       f"{_e(counts)}. It cannot be undone (export the bank first to keep a copy).</p>"
                       f"<p>Type the bank's name to confirm:</p>")
        label.setWordWrap(True)
        self.name = QLineEdit()
        self.name.setPlaceholderText(printable(bank))
        buttons = QDialogButtonBox()
        self.clear_btn = buttons.addButton("Clear bank", QDialogButtonBox.ButtonRole.DestructiveRole)
        self.cancel_btn = buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.clear_btn.setEnabled(False)
        self.name.textChanged.connect(lambda t: self.clear_btn.setEnabled(t == bank))
        self.clear_btn.clicked.connect(self._confirm)
        self.cancel_btn.clicked.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(label)
        lay.addWidget(self.name)
        lay.addWidget(buttons)

    def _confirm(self) -> None:
        if self.name.text() == self.bank:
            self.confirmed.emit()
            self.accept()


class RememberDialog(QDialog):
    """Type something for MemoryPlus to remember in the bank."""

    confirmed = Signal(str)

    def __init__(self, parent: QWidget, bank: str):
        super().__init__(parent)
        self.setWindowTitle("Remember")
        self.setMinimumSize(480, 240)
        label = QLabel(f"Something to remember in bank <b>{_e(printable(bank))}</b> (stored as if you "
                       "had said it, and kept even when pruning is on):")
        label.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setPlaceholderText("e.g. My passport expires in March 2027.")
        buttons = QDialogButtonBox()
        self.ok_btn = buttons.addButton("Remember", QDialogButtonBox.ButtonRole.AcceptRole)
        self.cancel_btn = buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.ok_btn.setEnabled(False)
        self.text.textChanged.connect(lambda: self.ok_btn.setEnabled(bool(self.text.toPlainText().strip())))
        self.ok_btn.clicked.connect(self._confirm)
        self.cancel_btn.clicked.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addWidget(label)
        lay.addWidget(self.text, 1)
        lay.addWidget(buttons)

    def _confirm(self) -> None:
        text = self.text.toPlainText().strip()
        if text:
            self.confirmed.emit(text)
            self.accept()


class ReviewPrompt(QWidget):
    """A small, non-modal note offering a review; it never takes the focus from the chat."""

    def __init__(self, parent: QWidget | None, text: str, on_review: Callable[[], None],
                 on_later: Callable[[], None]):
        super().__init__(parent, Qt.WindowType.Tool | Qt.WindowType.WindowStaysOnTopHint)
        self.setAttribute(Qt.WidgetAttribute.WA_ShowWithoutActivating)
        self.setWindowTitle("MemoryPlus")
        self.setWindowModality(Qt.WindowModality.NonModal)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setMinimumWidth(360)
        self.review_btn = QPushButton("Review now")
        self.later_btn = QPushButton("Later")
        self.review_btn.clicked.connect(lambda: (self.close(), on_review()))
        self.later_btn.clicked.connect(lambda: (self.close(), on_later()))
        hint = QLabel("<small>Set Memory Review Interval to 0 (Plugins → Settings → MemoryPlus → "
                      "Advanced) to stop these reminders.</small>")
        hint.setWordWrap(True)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.later_btn)
        row.addWidget(self.review_btn)
        lay = QVBoxLayout(self)
        lay.addWidget(self.label)
        lay.addWidget(hint)
        lay.addLayout(row)
        self.adjustSize()

    def place(self) -> None:
        """Bottom right of the main window (or of the screen)."""
        parent = self.parentWidget()
        if parent is not None and parent.isVisible():
            geo = parent.frameGeometry()
        else:
            screen = self.screen()
            geo = screen.availableGeometry() if screen is not None else None
        if geo is not None:
            self.move(geo.right() - self.width() - 24, geo.bottom() - self.height() - 48)
