"""The browser's views: Recall, Timeline, Entities & facts and Queue (the Graph is in
graph_view.py). Each view loads when it is first shown for a bank, asks the worker only through
Futures, and offers its selection (`selected_memories()`) to Forget and 👍/👎."""
from __future__ import annotations

import html
from datetime import datetime, timezone
from typing import Any

from PySide6.QtCore import QDateTime, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView, QCheckBox, QDateTimeEdit, QFrame, QGridLayout, QGroupBox, QHBoxLayout, QHeaderView,
    QLabel, QLineEdit, QPushButton, QScrollArea, QTextBrowser, QTreeWidget, QTreeWidgetItem,
    QVBoxLayout, QWidget,
)

from memoryplus.ui.common import (
    READ_TIMEOUT_S, ElidedLabel, Memory, elide, fmt_count, fmt_duration, fmt_tags, fmt_time, one_line,
    kind_label, parse_time, plural, printable, result_validity, splitter, validity, fmt_source, fmt_sources,
)
from memoryplus.wire.protocol import BankParams, BrowseParams, SearchParams

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


# ── Entities and facts ────────────────────────────────────────────────────────────────────
class EntitiesView(View):
    title = "Entities && facts"

    def __init__(self, browser):
        super().__init__(browser)
        self.index = None
        self._focus = "entity"
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter entities…")
        self.filter.textChanged.connect(lambda _: self._fill())
        self.show_tags = QCheckBox("Show topic/emotion tags")
        self.show_tags.toggled.connect(lambda _: self._fill())
        self.list = make_tree(["Entity", "Type", "Relations"], {1: 100}, stretch=0, multi=True, fit=(2,))
        self.list.itemSelectionChanged.connect(self._entity_selected)
        self.status = QLabel()
        self.status.setWordWrap(True)

        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(self.filter)
        ll.addWidget(self.show_tags)
        ll.addWidget(self.list, 1)
        ll.addWidget(self.status)

        self.heading = QLabel("<i>Select an entity.</i>")
        self.heading.setWordWrap(True)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.relations = make_tree(["Relation", "Fact", "Validity"], {0: 120}, stretch=1, fit=(2,))
        self.relations.itemSelectionChanged.connect(self._fact_selected)
        self.graph_btn = QPushButton("Show in graph")
        self.graph_btn.setEnabled(False)
        self.graph_btn.clicked.connect(self._show_graph)
        rel_label = QLabel("<b>Relations</b> (select one to forget or rate that fact)")
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        hl = QHBoxLayout()
        hl.addWidget(self.heading, 1)
        hl.addWidget(self.graph_btn)
        rl.addLayout(hl)
        rl.addWidget(self.summary)
        rl.addWidget(rel_label)
        rl.addWidget(self.relations, 1)

        split = splitter(Qt.Orientation.Horizontal, left, right, (2, 3), [380, 580])
        lay = QVBoxLayout(self)
        lay.addWidget(split)

    def reload(self) -> None:
        if self.not_running(self.status):
            return
        self.status.setText("Loading entities…")
        self.b.get_index(self._loaded)

    def _loaded(self, index, err) -> None:
        if err:
            self.index = None
            self.list.clear()
            self.status.setText(f"No entities: {err}")
            return
        self.index = index
        self._fill()

    def _fill(self) -> None:
        self.list.clear()
        if self.index is None:
            return
        needle = self.filter.text().strip().lower()
        shown = 0
        ents = sorted(self.index.entities.values(), key=lambda e: e.name.lower())
        for ent in ents:
            if ent.is_tag and not self.show_tags.isChecked():
                continue
            if needle and needle not in ent.name.lower() and needle not in ent.summary.lower():
                continue
            item = QTreeWidgetItem([ent.name, ", ".join(ent.types) or "—", str(len(ent.facts))])
            item.setData(0, ROLE, ent.name)
            item.setToolTip(0, ent.summary or ent.name)
            item.setTextAlignment(2, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.list.addTopLevelItem(item)
            shown += 1
        self.status.setText(f"{shown} of {len(self.index.entities)} entities, {len(self.index.facts)} facts"
                            + (" (the first 5,000 entities)" if self.index.truncated else "") + ".")
        if not self.list.selectedItems() and self.list.topLevelItemCount():
            best = max(range(self.list.topLevelItemCount()),
                       key=lambda i: int(self.list.topLevelItem(i).text(2) or 0))
            self.list.topLevelItem(best).setSelected(True)   # never an empty page for nothing
        self._entity_selected()

    def current_entity(self):
        items = self.list.selectedItems()
        if not items or self.index is None:
            return None
        return self.index.entities.get(items[0].data(0, ROLE))

    def _entity_selected(self) -> None:
        self._focus = "entity"
        ent = self.current_entity()
        self.relations.clear()
        self.graph_btn.setEnabled(ent is not None)
        if ent is None:
            self.heading.setText("<i>Select an entity to see its summary and relations.</i>")
            self.summary.setText("")
            self.b.selection_changed()
            return
        rating = self.b.ratings.get(self.b.bank, ent.id) if self.b.feedback_on() else 0
        self.heading.setText(f"<b style='font-size: 14pt'>{esc(ent.name)}</b> &nbsp; "
                             f"<span>{esc(', '.join(ent.types) or 'entity')}</span>"
                             + (f" &nbsp; your rating {rating:+d}" if rating else ""))
        self.summary.setText(ent.summary or "(no summary)")
        for fact, other in self.index.neighbours(ent.name):
            item = QTreeWidgetItem([fact.relation, fact.text,
                                    validity(fact.valid_at, fact.invalid_at, fact.current)])
            item.setData(0, ROLE, fact.id)
            item.setToolTip(1, f"{fact.source} → {fact.target}: {fact.text}")
            if not fact.current:
                mark_superseded(item, 3)
            self.relations.addTopLevelItem(item)
        self.b.selection_changed()

    def _fact_selected(self) -> None:
        if self.relations.selectedItems():
            self._focus = "fact"
        self.b.selection_changed()

    def _show_graph(self) -> None:
        ent = self.current_entity()
        if ent is not None:
            self.b.show_in_graph(ent.name)

    def select_entity(self, name: str) -> bool:
        for i in range(self.list.topLevelItemCount()):
            item = self.list.topLevelItem(i)
            if item.data(0, ROLE) == name:
                self.list.clearSelection()
                item.setSelected(True)
                self.list.setCurrentItem(item)
                return True
        return False

    def selected_memories(self) -> list[Memory]:
        if self.index is None:
            return []
        if self._focus == "fact" and self.relations.selectedItems():
            out = []
            for item in self.relations.selectedItems():
                f = self.index.facts.get(item.data(0, ROLE))
                if f is not None:
                    out.append(Memory(id=f.id, kind="fact", text=f.text, name=f.relation, when=f.valid_at))
            return out
        out = []
        for item in self.list.selectedItems():
            ent = self.index.entities.get(item.data(0, ROLE))
            if ent is not None:
                out.append(Memory(id=ent.id, kind="entity", text=f"{ent.name}: {ent.summary}" if ent.summary
                                  else ent.name, name=ent.name))
        return out


# ── Queue and worker ──────────────────────────────────────────────────────────────────────
class QueueView(View):
    title = "Queue"
    STATS_EVERY_MS = 15000

    def __init__(self, browser):
        super().__init__(browser)
        self.values: dict[str, QLabel] = {}
        self._stats_gen = 0

        def form(title: str, rows: list[tuple[str, str]], wide: tuple[str, ...]) -> QGroupBox:
            """Label/value pairs two to a row; `wide` ones take a whole row (elided, whole in
            the tooltip). No wrapping label: a theme's padding can never squeeze rows together."""
            box = QGroupBox(title)
            grid = QGridLayout(box)
            grid.setHorizontalSpacing(14)
            row = col = 0
            for key, label in rows:
                if key in wide:
                    value = ElidedLabel("—")
                    if col:
                        row, col = row + 1, 0
                    grid.addWidget(QLabel(label), row, 0)
                    grid.addWidget(value, row, 1, 1, 3)
                    row += 1
                else:
                    value = QLabel("—")
                    value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                    grid.addWidget(QLabel(label), row, col)
                    grid.addWidget(value, row, col + 1)
                    col += 2
                    if col == 4:
                        row, col = row + 1, 0
                self.values[key] = value
            grid.setColumnStretch(1, 1)
            grid.setColumnStretch(3, 1)
            return box

        queue_box = form("Ingestion queue", [("pending", "Pending"), ("in_flight", "In flight"),
                                             ("retrying", "Retrying"), ("failed", "Failed"),
                                             ("dropped", "Dropped"), ("done", "Stored this session"),
                                             ("skipped", "Skipped by memory mode"),
                                             ("paused", "Paused")], wide=("paused",))
        worker_box = form("Worker", [("state", "State"), ("pid", "Process id"), ("uptime", "Uptime"),
                                     ("rss", "Memory (RSS)"), ("mode", "Engine mode"),
                                     ("extraction", "Extraction"), ("restarts", "Restarts"),
                                     ("last_error", "Last error")], wide=("mode", "last_error"))
        self.restart_btn = QPushButton("Restart worker")
        self.restart_btn.setToolTip("Start a new worker process (also after three crashes in a row, "
                                    "when it is not restarted by itself), then retry the failed turns")
        self.restart_btn.clicked.connect(self.restart_worker)
        worker_box.layout().addWidget(self.restart_btn, worker_box.layout().rowCount(), 0, 1, 4)
        self.retry_btn = QPushButton("Retry failed")
        self.retry_btn.setEnabled(False)
        self.retry_btn.clicked.connect(self.retry)
        self.failed = make_tree(["Bank", "Turn", "Attempts", "Error"], {0: 90, 1: 110}, stretch=3, fit=(2,))
        self.dropped = make_tree(["Bank", "Turn", "When", "Reason"], {0: 90, 1: 110, 2: 115}, stretch=3)
        self.stats = make_tree(["Bank", "Turns", "Entities", "Facts (current)", "LLM calls today",
                                "LLM calls total", "Tokens total (in / out)", "Embedder"],
                               {0: 110}, stretch=7, fit=(1, 2, 3, 4, 5, 6))
        for tree in (self.failed, self.dropped, self.stats):
            tree.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.stats_note = ElidedLabel()      # no wrapping: see the scroll area below

        top = QHBoxLayout()
        top.addWidget(queue_box, 1)
        top.addWidget(worker_box, 1)

        failed_box = QGroupBox("Failed turns (kept on disk; never dropped)")
        fl = QVBoxLayout(failed_box)
        fh = QHBoxLayout()
        self.failed_label = QLabel("None.")
        fh.addWidget(self.failed_label, 1)
        fh.addWidget(self.retry_btn)
        fl.addLayout(fh)
        fl.addWidget(self.failed)
        dropped_box = QGroupBox("Dropped turns (queue full or stopped)")
        dl = QVBoxLayout(dropped_box)
        dl.addWidget(self.dropped)
        lists = QHBoxLayout()
        lists.addWidget(failed_box, 1)
        lists.addWidget(dropped_box, 1)

        stats_box = QGroupBox("Banks")
        sl = QVBoxLayout(stats_box)
        sl.addWidget(self.stats)
        sl.addWidget(self.stats_note)

        for tree in (self.failed, self.dropped, self.stats):
            tree.setMinimumHeight(64)
        content = QWidget()
        cl = QVBoxLayout(content)
        cl.setContentsMargins(6, 4, 6, 4)
        cl.addLayout(top)
        cl.addLayout(lists, 1)
        cl.addWidget(stats_box, 1)
        scroll = QScrollArea()            # a roomy theme scrolls instead of squeezing rows
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(scroll)

        self.timer = QTimer(self)
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.refresh_live)
        self.stats_timer = QTimer(self)
        self.stats_timer.setInterval(self.STATS_EVERY_MS)
        self.stats_timer.timeout.connect(self.refresh_stats)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh_live()
        self.timer.start()
        self.stats_timer.start()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self.timer.stop()
        self.stats_timer.stop()

    def reload(self) -> None:
        self.refresh_live()
        self.refresh_stats()

    def refresh_live(self) -> None:
        """Queue counts and worker status: both are read without waiting (GUI thread)."""
        v = self.values
        plugin = self.b.plugin
        q = plugin.queue
        if q is None:
            for key in ("pending", "in_flight", "retrying", "failed", "dropped", "done", "skipped", "paused"):
                v[key].setText("—")
            v["paused"].setText("MemoryPlus is not running")
        else:
            c = q.counts()
            for key in ("pending", "in_flight", "retrying", "failed", "dropped", "done", "skipped"):
                v[key].setText(fmt_count(c.get(key, 0)))
            v["paused"].setText(str(c.get("paused_reason") or "no"))
            failed = q.failed()
            self._fill(self.failed, [[printable(f.bank), fmt_source(f.turn_id), str(f.attempts), one_line(f.error)]
                                     for f in failed])
            self.failed_label.setText(f"{plural(len(failed), 'failed turn')}." if failed else "None.")
            self.retry_btn.setEnabled(bool(failed))
            dropped = q.dropped()[-200:][::-1]
            self._fill(self.dropped, [[printable(d.bank), fmt_source(d.turn_id),
                                       datetime.fromtimestamp(d.at).strftime("%Y-%m-%d %H:%M"), d.reason]
                                      for d in dropped])
        service = getattr(plugin, "service", None)
        st = service.status() if service is not None else {}
        v["state"].setText(str(st.get("state") or "not running"))
        v["pid"].setText(str(st.get("pid") or "—"))
        v["uptime"].setText(fmt_duration(st.get("uptime_s")))
        v["rss"].setText(f"{st['rss_mb']:.0f} MB" if st.get("rss_mb") else "—")
        mode = st.get("mode") or "—"
        if st.get("using") and st.get("using") != mode:
            mode += f" (using {st['using']})"
        v["mode"].setText(mode)
        v["extraction"].setText(str(st.get("extraction") or "—"))
        v["restarts"].setText(str(st.get("restarts", "—")))
        v["last_error"].setText(one_line(st.get("last_error") or "none"))

    @staticmethod
    def _fill(tree: QTreeWidget, rows: list[list[str]]) -> None:
        current = [[tree.topLevelItem(i).text(c) for c in range(tree.columnCount())]
                   for i in range(tree.topLevelItemCount())]
        if current == rows:
            return
        tree.clear()
        for row in rows:
            item = QTreeWidgetItem(row)
            item.setToolTip(len(row) - 1, row[-1])
            tree.addTopLevelItem(item)

    def restart_worker(self) -> None:
        plugin = self.b.plugin
        fut = plugin.restart_worker() if hasattr(plugin, "restart_worker") else None
        if fut is None:
            self.b.say("MemoryPlus is not running.")
            return
        self.b.say("Restarting the worker…")
        self.refresh_live()

    def retry(self) -> None:
        q = self.b.plugin.queue
        if q is not None:
            n = q.retry_failed()
            self.b.say(f"{plural(n, 'failed turn')} queued again.")
        self.refresh_live()

    def refresh_stats(self) -> None:
        service = self.b.service
        if service is None:
            self.stats_note.setText("MemoryPlus is not running.")
            return
        self._stats_gen += 1
        gen = self._stats_gen
        self.b.post.run(service.banks(timeout=READ_TIMEOUT_S), lambda banks: self._banks(banks, gen),
                        lambda err: self._banks_failed(err, gen))

    def _banks_failed(self, err: str, gen: int) -> None:
        if gen == self._stats_gen:
            self.stats_note.setText(f"Cannot read the banks: {err}")

    def _banks(self, banks: list, gen: int) -> None:
        if gen != self._stats_gen:
            return
        names = [b.name for b in banks]
        self.b.update_banks(names)
        results: dict[str, tuple] = {}
        if not names:
            self.stats.clear()
            self.stats_note.setText("No bank yet: nothing has been stored.")
            return

        def got(name, st, err=None):
            if gen != self._stats_gen:
                return
            results[name] = (name, st, err)
            if len(results) == len(names):
                self._show_stats([results[n] for n in names])
        for name in names:
            self.b.post.run(self.b.service.stats(BankParams(bank=name), timeout=READ_TIMEOUT_S),
                            lambda st, n=name: got(n, st), lambda err, n=name: got(n, None, err))

    def _show_stats(self, rows: list[tuple]) -> None:
        """(bank name, its BankStats or None, the error when None) per bank."""
        self.stats.clear()
        for name, st, err in rows:
            if st is None:
                item = QTreeWidgetItem([printable(name), "—", "—", "—", "—", "—", "—", err])
            else:
                item = QTreeWidgetItem([
                    printable(st.name), fmt_count(st.episodes), fmt_count(st.entities),
                    f"{fmt_count(st.facts)} ({fmt_count(st.current_facts)})",
                    fmt_count(st.llm_calls_today), fmt_count(st.llm_calls),
                    f"{fmt_count(st.llm_input_tokens)} / {fmt_count(st.llm_output_tokens)}",
                    st.embedder or "—"])
                for c in range(1, 7):
                    item.setTextAlignment(c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setToolTip(7, item.text(7) + (f" — {st.embedder_note}" if st is not None and st.embedder_note else ""))
            if st is not None and st.llm_fallbacks:   # turns the LLM could not extract, stored by rules
                item.setToolTip(5, f"{st.llm_fallbacks} turn(s) stored by local extraction: "
                                   f"the LLM's answers were unusable")
            self.stats.addTopLevelItem(item)
        self.stats_note.setText(f"Updated {datetime.now().strftime('%H:%M:%S')}. Local extraction makes "
                                "no LLM calls; tokens are counted per bank since it was created.")
