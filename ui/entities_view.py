"""The browser's Entities & facts view: every entity of the bank with its summary and the
facts that touch it, superseded ones marked."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QTreeWidgetItem, QVBoxLayout, QWidget,
)

from memoryplus.ui.common import Memory, splitter, validity
from memoryplus.ui.views import ROLE, View, esc, make_tree, mark_superseded


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
