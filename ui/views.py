"""The browser's views: what they share (View, the list and detail helpers), Recall and Timeline
(Entities & facts in entities_view.py, Queue in queue_view.py, the Graph in graph_view.py). Each
view loads when it is first shown for a bank, asks the MemoryService only through Futures, and
offers its selection (`selected_memories()`) to Forget and 👍/👎."""
from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Any

from PySide6.QtCore import QDateTime, Qt
from PySide6.QtWidgets import (
    QAbstractItemView, QCheckBox, QDateTimeEdit, QHBoxLayout, QHeaderView,
    QLabel, QLineEdit, QPushButton, QTextBrowser, QTreeWidget, QTreeWidgetItem,
    QVBoxLayout, QWidget,
)

from memoryplus.ui.common import (
    READ_TIMEOUT_S, Memory, elide, fmt_tags, fmt_time, one_line,
    kind_label, parse_time, plural, printable, result_validity, splitter, fmt_source, fmt_sources,
)
from memoryplus.wire.protocol import BrowseParams, SearchParams

ROLE = Qt.ItemDataRole.UserRole


def make_tree(columns: list[str], widths: dict[int, int], stretch: int, multi: bool = True,
              fit: tuple[int, ...] = ()) -> QTreeWidget:
    """A flat list; `fit` columns size to their header and content (whatever the theme's
    padding), `stretch` takes the rest, the others start at `widths` and can be resized."""
    tree = QTreeWidget()
    tree.setColumnCount(len(columns))
    tree.setHeaderLabels(columns)
    tree.setRootIsDecorated(False)
    tree.setUniformRowHeights(True)
    tree.setAlternatingRowColors(True)
    tree.setTextElideMode(Qt.TextElideMode.ElideRight)
    tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection if multi
                          else QAbstractItemView.SelectionMode.SingleSelection)
    header = tree.header()
    header.setStretchLastSection(False)
    for col in range(len(columns)):
        if col == stretch:
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch)
        elif col in fit:
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        else:
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive)
            tree.setColumnWidth(col, widths.get(col, 100))
    return tree


def mark_superseded(item: QTreeWidgetItem, columns: int) -> None:
    """Grey and italic: visibly not current, in a light or a dark theme."""
    for c in range(columns):
        item.setForeground(c, Qt.GlobalColor.gray)
        f = item.font(c)
        f.setItalic(True)
        item.setFont(c, f)


def detail_box(min_h: int = 90) -> QTextBrowser:
    box = QTextBrowser()
    box.setOpenLinks(False)
    box.setMinimumHeight(min_h)
    return box


def esc(text: Any) -> str:
    return html.escape(str(text or ""))


def paragraphs(text: str) -> str:
    return "<br>".join(esc(line) for line in str(text or "").splitlines())


class View(QWidget):
    """A tab of the browser: loads lazily for the browser's bank."""
    title = "?"

    def __init__(self, browser):
        super().__init__()
        self.b = browser
        self.stale = True

    def ensure_loaded(self) -> None:
        if self.stale:
            self.stale = False
            self.reload()

    def invalidate(self) -> None:
        self.stale = True
        if self.isVisible():
            self.ensure_loaded()

    def reload(self) -> None:
        pass

    def selected_memories(self) -> list[Memory]:
        return []

    def not_running(self, label: QLabel) -> bool:
        if self.b.service is None:
            label.setText("MemoryPlus is not running: enable it in the Plugins menu.")
            return True
        return False


# ── Recall ────────────────────────────────────────────────────────────────────────────────
class RecallView(View):
    title = "Recall"
    COLS = ["Memory", "Kind", "Validity", "Tags", "Sources", "Score"]

    def __init__(self, browser):
        super().__init__(browser)
        self.results: list[dict[str, Any]] = []
        self.query_sent = ""
        self.as_of_sent: datetime | None = None
        self._gen = 0
        self.stale = False        # nothing to load before a search

        self.query = QLineEdit()
        self.query.setPlaceholderText("Search memories, e.g. “where do I live?”")
        self.query.returnPressed.connect(self.search)
        self.as_of_on = QCheckBox("As of")
        self.as_of_on.setToolTip("Time travel: what was true at that moment (superseded facts included)")
        self.as_of = QDateTimeEdit(QDateTime.currentDateTime())
        self.as_of.setCalendarPopup(True)
        self.as_of.setDisplayFormat("yyyy-MM-dd HH:mm")
        self.as_of.setEnabled(False)
        self.as_of_on.toggled.connect(self.as_of.setEnabled)
        self.search_btn = QPushButton("Search")
        self.search_btn.clicked.connect(self.search)
        self.hide_demoted = QCheckBox("Hide 👎 demoted")
        self.hide_demoted.setToolTip("Hide memories you rated down to the bottom (−2)")
        self.hide_demoted.toggled.connect(lambda _=False: self._fill())

        top = QHBoxLayout()
        top.addWidget(self.query, 1)
        top.addWidget(self.as_of_on)
        top.addWidget(self.as_of)
        top.addWidget(self.search_btn)
        top.addWidget(self.hide_demoted)

        self.tree = make_tree(self.COLS, {3: 150, 4: 110}, stretch=0, fit=(1, 2, 5))
        self.tree.itemSelectionChanged.connect(self._selected)
        self.detail = detail_box()
        self.status = QLabel("Type a question or a few words and press Search.")
        self.status.setWordWrap(True)

        split = splitter(Qt.Orientation.Vertical, self.tree, self.detail, (3, 1))

        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(self.status)
        lay.addWidget(split, 1)

    def set_feedback(self, on: bool) -> None:
        self.hide_demoted.setVisible(on)
        self._fill()

    def search(self) -> None:
        text = self.query.text().strip()
        if not text or self.not_running(self.status):
            return
        self._gen += 1
        gen = self._gen
        self.query_sent = text
        bank = self.b.bank
        self.as_of_sent = None
        if self.as_of_on.isChecked():
            self.as_of_sent = self.as_of.dateTime().toPython().astimezone().astimezone(timezone.utc)
        self.status.setText(f"Searching “{elide(text, 60)}” in {printable(bank)}…")
        fut = self.b.service.search(SearchParams(bank=bank, query=text, limit=25, as_of=self.as_of_sent),
                                    timeout=READ_TIMEOUT_S)
        self.b.post.run(fut, lambda rows: self._got(rows, None, gen), lambda err: self._got([], err, gen))

    def reload(self) -> None:
        if self.query_sent:
            self.search()
        else:
            self.results = []
            self._fill()

    def _got(self, rows: list, err: str | None, gen: int) -> None:
        if gen != self._gen:
            return                       # a newer search was sent
        if err:
            self.results = []
            self._fill()
            self.status.setText(f"No results: {err}")
            return
        self.results = rows or []
        self._fill()

    def visible_results(self) -> list[dict[str, Any]]:
        bank = self.b.bank
        if self.b.feedback_on() and self.hide_demoted.isChecked():
            return [r for r in self.results if self.b.ratings.get(bank, r.id) > -2]
        return list(self.results)

    def _fill(self) -> None:
        keep = {m.id for m in self.selected_memories()}
        self.tree.clear()
        bank = self.b.bank
        shown = self.visible_results()
        for r in shown:
            rating = self.b.ratings.get(bank, r.id) if self.b.feedback_on() else 0
            score = f"{r.score:.3f}" + (f" ({rating:+d})" if rating else "")
            item = QTreeWidgetItem([one_line(r.text), kind_label(r.kind), result_validity(r, self.as_of_sent),
                                    fmt_tags(r.tags), fmt_sources(r.sources), score])
            item.setData(0, ROLE, r)
            item.setToolTip(0, r.text)
            if r.invalid_at:
                mark_superseded(item, len(self.COLS))
            self.tree.addTopLevelItem(item)
            if r.id in keep:
                item.setSelected(True)
        hidden = len(self.results) - len(shown)
        if self.query_sent:
            when = f" as of {fmt_time(self.as_of_sent)}" if self.as_of_sent else ""
            msg = f"{plural(len(shown), 'memory', 'memories')} for “{elide(self.query_sent, 60)}”{when} in {printable(bank)}"
            if hidden:
                msg += f" ({hidden} demoted hidden)"
            self.status.setText(msg + ".")
        self._selected()

    def _selected(self) -> None:
        items = self.tree.selectedItems()
        if not items:
            self.detail.setHtml("<i>Select a memory to see it in full.</i>")
        else:
            r = items[0].data(0, ROLE)
            rating = self.b.ratings.get(self.b.bank, r.id)
            parts = [f"<b>{esc(kind_label(r.kind))}</b> · {esc(result_validity(r, self.as_of_sent))}",
                     paragraphs(r.text),
                     f"<small>tags: {esc(fmt_tags(r.tags) or '—')} · from turns: "
                     f"{esc(fmt_sources(r.sources) or '—')} · score {r.score:.3f}"
                     + (f" · your rating {rating:+d}" if rating and self.b.feedback_on() else "")
                     + f" · id {esc(r.id)}</small>"]
            self.detail.setHtml("<p>" + "</p><p>".join(parts) + "</p>")
        self.b.selection_changed()

    def selected_memories(self) -> list[Memory]:
        out = []
        for item in self.tree.selectedItems():
            r = item.data(0, ROLE)
            out.append(Memory(id=r.id, kind=r.kind, text=r.text, name=r.name or "",
                              sources=list(r.sources or []), when=r.valid_at))
        return out

    def select_id(self, memory_id: str) -> bool:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, ROLE).id == memory_id:
                self.tree.clearSelection()
                item.setSelected(True)
                self.tree.setCurrentItem(item)
                return True
        return False


# ── Timeline ──────────────────────────────────────────────────────────────────────────────
class TimelineView(View):
    title = "Timeline"
    COLS = ["When", "Conversation turn", "Tags", "Facts", "From"]
    PAGE = 50
    SINCE_SCAN = 200
    SINCE_MAX = 2000

    def __init__(self, browser):
        super().__init__(browser)
        self.offset = 0
        self.rows: list[dict[str, Any]] = []
        self.has_next = False
        self.since: datetime | None = None
        self._since_rows: list[dict[str, Any]] = []
        self._gen = 0
        self._detail_gen = 0

        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setStyleSheet("QLabel { padding: 4px; border: 1px solid palette(highlight); }")
        self.show_all = QPushButton("Show all")
        self.show_all.clicked.connect(lambda: self.set_since(None))
        banner_row = QHBoxLayout()
        banner_row.addWidget(self.banner, 1)
        banner_row.addWidget(self.show_all)
        self.banner_box = QWidget()
        self.banner_box.setLayout(banner_row)
        banner_row.setContentsMargins(0, 0, 0, 0)
        self.banner_box.hide()

        self.tree = make_tree(self.COLS, {2: 170, 4: 120}, stretch=1, fit=(0, 3))
        self.tree.itemSelectionChanged.connect(self._selected)
        self.detail = detail_box(110)

        self.newer = QPushButton("◀ Newer")
        self.older = QPushButton("Older ▶")
        self.newer.clicked.connect(lambda: self.page(-1))
        self.older.clicked.connect(lambda: self.page(+1))
        self.page_label = QLabel()
        nav = QHBoxLayout()
        nav.addWidget(self.newer)
        nav.addWidget(self.page_label, 1, Qt.AlignmentFlag.AlignCenter)
        nav.addWidget(self.older)
        self.status = QLabel()

        split = splitter(Qt.Orientation.Vertical, self.tree, self.detail, (3, 2))

        lay = QVBoxLayout(self)
        lay.addWidget(self.banner_box)
        lay.addWidget(split, 1)
        lay.addLayout(nav)
        lay.addWidget(self.status)

    def set_since(self, since: datetime | None) -> None:
        """Show only the turns stored since `since` (the review), or everything (None)."""
        self.since = since
        self.offset = 0
        self.banner_box.setVisible(since is not None)
        self.banner.setText(f"Reviewing the memories added since {fmt_time(since)}." if since else "")
        self.stale = True
        if self.isVisible():
            self.ensure_loaded()

    def page(self, step: int) -> None:
        self.offset = max(0, self.offset + step * self.PAGE)
        if self.since is not None:
            self._show_since_page()
        else:
            self.reload()

    def reload(self) -> None:
        if self.not_running(self.status):
            return
        self._gen += 1
        gen, bank = self._gen, self.b.bank
        self.status.setText("Loading…")
        if self.since is not None:
            self._since_rows = []
            self._scan_since(gen, bank, 0)
            return
        fut = self.b.service.browse(BrowseParams(bank=bank, what="episodes", offset=self.offset,
                                                 limit=self.PAGE + 1), timeout=READ_TIMEOUT_S)
        self.b.post.run(fut, lambda rows: self._got(rows, None, gen), lambda err: self._got([], err, gen))

    def _got(self, rows: list, err: str | None, gen: int) -> None:
        if gen != self._gen:
            return
        if err:
            rows = []
            self.status.setText(f"No conversation turns: {err}")
        else:
            self.status.setText("")
        self.has_next = len(rows) > self.PAGE
        self.rows = rows[: self.PAGE]
        self._fill()

    def _scan_since(self, gen: int, bank: str, offset: int) -> None:
        fut = self.b.service.browse(BrowseParams(bank=bank, what="episodes", offset=offset,
                                                 limit=self.SINCE_SCAN), timeout=READ_TIMEOUT_S)
        self.b.post.run(fut, lambda rows: self._scanned(rows, None, gen, bank, offset),
                        lambda err: self._scanned([], err, gen, bank, offset))

    def _scanned(self, rows: list, err: str | None, gen: int, bank: str, offset: int) -> None:
        if gen != self._gen:
            return
        newer = [r for r in rows if (parse_time(r.stored_at) or self.since) >= self.since]
        self._since_rows.extend(newer)
        if (not err and len(rows) == self.SINCE_SCAN and len(newer) == len(rows)
                and len(self._since_rows) < self.SINCE_MAX):
            self._scan_since(gen, bank, offset + self.SINCE_SCAN)
            return
        self.status.setText(f"Could not load everything: {err}" if err else "")
        self.banner.setText(f"Reviewing {plural(len(self._since_rows), 'conversation turn')} added since "
                            f"{fmt_time(self.since)}: select one to see the memories taken from it, and "
                            "forget what should not be kept.")
        self._show_since_page()

    def _show_since_page(self) -> None:
        self.rows = self._since_rows[self.offset: self.offset + self.PAGE]
        self.has_next = self.offset + self.PAGE < len(self._since_rows)
        self._fill()

    def _fill(self) -> None:
        self.tree.clear()
        for r in self.rows:
            first = one_line(r.text or "")
            item = QTreeWidgetItem([fmt_time(r.valid_at), first, fmt_tags(r.tags),
                                    str(r.facts), fmt_source(r.source)])
            item.setData(0, ROLE, r)
            item.setToolTip(1, r.text or "")
            if r.fallback:   # the LLM's answers were unusable: rules extracted this turn
                item.setText(3, f"{r.facts} (local)")
                item.setToolTip(3, f"Stored by local extraction: {r.fallback}")
            item.setTextAlignment(3, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.tree.addTopLevelItem(item)
        n = len(self.rows)
        first = self.offset + 1 if n else 0
        self.page_label.setText(f"Turns {first}–{self.offset + n} · newest first" if n else "No conversation turns")
        self.newer.setEnabled(self.offset > 0)
        self.older.setEnabled(self.has_next)
        self._selected()

    def _selected(self) -> None:
        items = self.tree.selectedItems()
        self._detail_gen += 1
        if not items:
            self.detail.setHtml("<i>Select a conversation turn to read it and see the memories taken from it.</i>")
            self.b.selection_changed()
            return
        r = items[0].data(0, ROLE)
        self._detail_html = (f"<p><b>{esc(fmt_time(r.valid_at))}</b> · {esc(fmt_source(r.source))}"
                             f" · stored {esc(fmt_time(r.stored_at))}"
                             + (f" · tags: {esc(fmt_tags(r.tags))}" if r.tags else "")
                             + (" · remembered on request" if r.explicit else "")
                             + (f" · stored by local extraction: {esc(r.fallback)}" if r.fallback else "")
                             + f"</p><p>{paragraphs(r.text)}</p>")
        self.detail.setHtml(self._detail_html + "<p><i>Looking up the memories taken from this turn…</i></p>")
        self._lookup_memories(r, self._detail_gen)
        self.b.selection_changed()

    def _lookup_memories(self, r: dict[str, Any], gen: int) -> None:
        """The facts and entities whose sources include this turn (found by searching its text)."""
        if self.b.service is None or not r.text:
            return
        fut = self.b.service.search(SearchParams(bank=self.b.bank, query=r.text[:500], limit=40),
                                    timeout=READ_TIMEOUT_S)

        def got(rows, err=None):
            if gen != self._detail_gen:
                return
            mine = [x for x in rows or [] if x.kind != "episode" and r.source in (x.sources or [])]
            mine.sort(key=lambda x: x.kind != "fact")     # facts first, then entities
            if err:
                extra = f"<p><i>Could not look up its memories: {esc(err)}</i></p>"
            elif not mine:
                extra = (f"<p><i>{plural(int(r.facts), 'fact')} extracted from it; none is "
                         "current now.</i></p>" if r.facts else "<p><i>No fact was extracted from it.</i></p>")
            else:
                lines = "".join(f"<li>[{esc(kind_label(x.kind))}] {esc(x.text)}"
                                + (" <i>(superseded)</i>" if x.invalid_at else "") + "</li>" for x in mine)
                extra = f"<p><b>Memories from this turn</b></p><ul>{lines}</ul>"
            self.detail.setHtml(self._detail_html + extra)
        self.b.post.run(fut, got, lambda err: got([], err))

    def selected_memories(self) -> list[Memory]:
        return [Memory(id=r.id, kind="episode", text=r.text or "", sources=[r.source or ""],
                       when=r.valid_at)
                for r in (item.data(0, ROLE) for item in self.tree.selectedItems())]
