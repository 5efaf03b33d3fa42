"""The Graph view: the entities and facts around a search or an entity, drawn with
QGraphicsView. Nodes are entities, labelled edges are facts (superseded ones dashed and grey);
clicking a node expands its neighbours. Layout: ui/graph_layout.py."""
from __future__ import annotations

import html
import math

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPen, QPolygonF
from PySide6.QtWidgets import (
    QGraphicsItem, QGraphicsObject, QGraphicsScene, QGraphicsView, QHBoxLayout, QLabel, QLineEdit,
    QPushButton, QTextBrowser, QVBoxLayout,
)

from memoryplus.ui.common import READ_TIMEOUT_S, Memory, elide, fmt_date, splitter, validity
from memoryplus.ui.graph_layout import layout
from memoryplus.ui.views import View
from memoryplus.wire.protocol import SearchParams

EXPAND_STEP = 10          # neighbours added per click
SEED_NEIGHBOURS = 5       # neighbours shown around each search hit at first
MAX_NODES = 45
LABEL_CHARS = 22


def _mix(a: QColor, b: QColor, t: float) -> QColor:
    return QColor(round(a.red() * (1 - t) + b.red() * t), round(a.green() * (1 - t) + b.green() * t),
                  round(a.blue() * (1 - t) + b.blue() * t))


class NodeItem(QGraphicsObject):
    """An entity: a rounded box with its name; a click expands it."""

    def __init__(self, view: "GraphView", name: str, types: list[str]):
        super().__init__()
        self.view = view
        self.name = name
        self.label = elide(name, LABEL_CHARS)
        self.types = types
        self.seed = False
        self.expanded = False
        self.selected_ = False
        f = QFont(view.canvas.font())
        f.setPointSizeF(max(9.0, f.pointSizeF()))
        self.font = f
        fm = QFontMetricsF(f)
        self.w = max(70.0, fm.horizontalAdvance(self.label) + 22)
        self.h = fm.height() + 14
        self.setAcceptHoverEvents(True)
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setZValue(2)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable, False)
        self.setToolTip(f"{name}" + (f" ({', '.join(types)})" if types else "") + "\nClick to show its neighbours")

    def boundingRect(self) -> QRectF:
        return QRectF(-self.w / 2 - 2, -self.h / 2 - 2, self.w + 4, self.h + 4)

    def rect(self) -> QRectF:
        return QRectF(-self.w / 2, -self.h / 2, self.w, self.h)

    def paint(self, painter: QPainter, option, widget=None) -> None:
        pal = self.view.canvas.palette()
        base, hi, text = pal.base().color(), pal.highlight().color(), pal.text().color()
        fill = _mix(base, hi, 0.42 if self.seed else 0.18)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pen = QPen(_mix(text, hi, 0.5) if not self.selected_ else hi, 2.6 if self.selected_ else
                   (1.8 if self.expanded else 1.0))
        painter.setPen(pen)
        painter.setBrush(QBrush(fill))
        painter.drawRoundedRect(self.rect(), 8, 8)
        painter.setPen(text)
        f = QFont(self.font)
        f.setBold(self.seed)
        painter.setFont(f)
        painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.label)

    def mousePressEvent(self, event) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            event.accept()
            self.view.node_clicked(self.name)
        else:
            super().mousePressEvent(event)


class EdgeItem(QGraphicsItem):
    """A fact: a line (dashed and grey when superseded) with an arrow and its relation label."""

    def __init__(self, view: "GraphView", fact, a: NodeItem, b: NodeItem, lane: int):
        super().__init__()
        self.view, self.fact, self.a, self.b, self.lane = view, fact, a, b, lane
        self.setZValue(1)
        tip = f"{fact.text}\n{validity(fact.valid_at, fact.invalid_at, fact.current)}"
        self.setToolTip(tip)
        self.label = fact.relation.replace("_", " ").lower() or "related"
        if not fact.current:
            self.label += f" (until {fmt_date(fact.invalid_at)})" if fact.invalid_at else " (superseded)"
        f = QFont(view.canvas.font())
        f.setPointSizeF(max(8.0, f.pointSizeF() - 1))
        self.font = f
        fm = QFontMetricsF(f)
        self.lw, self.lh = fm.horizontalAdvance(self.label) + 8, fm.height() + 2

    def _ends(self) -> tuple[QPointF, QPointF]:
        pa, pb = self.a.pos(), self.b.pos()
        return self._clip(pa, pb, self.a), self._clip(pb, pa, self.b)

    @staticmethod
    def _clip(p: QPointF, toward: QPointF, node: NodeItem) -> QPointF:
        dx, dy = toward.x() - p.x(), toward.y() - p.y()
        if dx == 0 and dy == 0:
            return p
        sx = (node.w / 2 + 3) / abs(dx) if dx else math.inf
        sy = (node.h / 2 + 3) / abs(dy) if dy else math.inf
        s = min(sx, sy, 1.0)
        return QPointF(p.x() + dx * s, p.y() + dy * s)

    def label_rect(self) -> QRectF:
        p, q = self._ends()
        mid = QPointF((p.x() + q.x()) / 2, (p.y() + q.y()) / 2)
        off = (self.lane - 0) * (self.lh + 2)
        return QRectF(mid.x() - self.lw / 2, mid.y() - self.lh / 2 + off, self.lw, self.lh)

    def boundingRect(self) -> QRectF:
        p, q = self._ends()
        r = QRectF(p, q).normalized().adjusted(-8, -8, 8, 8)
        return r.united(self.label_rect().adjusted(-2, -2, 2, 2))

    def paint(self, painter: QPainter, option, widget=None) -> None:
        pal = self.view.canvas.palette()
        text, base = pal.text().color(), pal.base().color()
        colour = _mix(text, base, 0.25) if self.fact.current else QColor(150, 150, 150)
        pen = QPen(colour, 1.6 if self.fact.current else 1.3)
        if not self.fact.current:
            pen.setStyle(Qt.PenStyle.DashLine)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(pen)
        p, q = self._ends()
        painter.drawLine(p, q)
        # arrow head at the target
        ang = math.atan2(q.y() - p.y(), q.x() - p.x())
        size = 8
        head = QPolygonF([q, QPointF(q.x() - size * math.cos(ang - 0.4), q.y() - size * math.sin(ang - 0.4)),
                          QPointF(q.x() - size * math.cos(ang + 0.4), q.y() - size * math.sin(ang + 0.4))])
        painter.setBrush(colour)
        painter.setPen(QPen(colour, 1))
        painter.drawPolygon(head)
        # the label on a background, readable over lines
        r = self.label_rect()
        bg = QColor(base)
        bg.setAlpha(235)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(bg)
        path = QPainterPath()
        path.addRoundedRect(r, 4, 4)
        painter.drawPath(path)
        painter.setFont(self.font)
        painter.setPen(colour if not self.fact.current else text)
        painter.drawText(r, Qt.AlignmentFlag.AlignCenter, self.label)


class Canvas(QGraphicsView):
    def __init__(self):
        super().__init__()
        self.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setMinimumHeight(200)

    def wheelEvent(self, event) -> None:
        factor = 1.15 if event.angleDelta().y() > 0 else 1 / 1.15
        self.scale(factor, factor)


class GraphView(View):
    title = "Graph"

    def __init__(self, browser):
        super().__init__(browser)
        self.index = None
        self.nodes: dict[str, NodeItem] = {}
        self.shown_facts: set[str] = set()
        self.positions: dict[str, tuple[float, float]] = {}
        self.expanded: dict[str, int] = {}     # name -> neighbours shown
        self.selected: str | None = None
        self._pending_focus: tuple[str, str] | None = None
        self._gen = 0

        self.query = QLineEdit()
        self.query.setPlaceholderText("Search, or an entity's name (e.g. “User”)")
        self.query.returnPressed.connect(self.show_query)
        self.go = QPushButton("Show")
        self.go.clicked.connect(self.show_query)
        self.fit_btn = QPushButton("Fit")
        self.fit_btn.clicked.connect(self.fit)
        self.clear_btn = QPushButton("Clear")
        self.clear_btn.clicked.connect(self.clear)
        top = QHBoxLayout()
        top.addWidget(self.query, 1)
        top.addWidget(self.go)
        top.addWidget(self.fit_btn)
        top.addWidget(self.clear_btn)

        self.scene = QGraphicsScene(self)
        self.canvas = Canvas()
        self.canvas.setScene(self.scene)
        self.info = QTextBrowser()
        self.info.setOpenLinks(False)
        self.info.setMinimumWidth(220)
        self.legend = QLabel("Click a node to show its neighbours · solid line: current fact · "
                             "dashed grey: superseded · drag to pan, wheel to zoom")
        self.legend.setWordWrap(True)
        self.status = QLabel()
        self.status.setWordWrap(True)

        split = splitter(Qt.Orientation.Horizontal, self.canvas, self.info, (4, 1), [700, 260])
        lay = QVBoxLayout(self)
        lay.addLayout(top)
        lay.addWidget(split, 1)
        lay.addWidget(self.legend)
        lay.addWidget(self.status)
        self._info_default()

    # ── loading ──────────────────────────────────────────────────────────────────────────
    def reload(self) -> None:
        if self.not_running(self.status):
            return
        self.status.setText("Loading the bank's entities…")
        self.b.get_index(self._loaded)

    def _loaded(self, index, err) -> None:
        self.index = index
        self.clear()
        if err:
            self.status.setText(f"No graph: {err}")
            return
        self.status.setText(f"{len(index.entities)} entities and {len(index.facts)} facts in "
                            f"{self.b.bank}. Search for something or name an entity.")
        if self._pending_focus:
            kind, text = self._pending_focus
            self._pending_focus = None
            (self.focus_entity if kind == "entity" else self.search)(text)
        elif self.query.text().strip():
            self.show_query()
        else:
            self._start_default()

    def _start_default(self) -> None:
        """Around the best-connected entity, so that the view is never empty for nothing."""
        if not self.index or not self.index.entities:
            return
        best = max(self.index.entities.values(), key=lambda e: (len(e.facts), e.name == "User"))
        if best.facts:
            self.focus_entity(best.name)

    def show_query(self) -> None:
        text = self.query.text().strip()
        if not text:
            return
        if self.index is None:
            self._pending_focus = ("query", text)
            self.ensure_loaded()
            return
        ent = self.index.find(text)
        if ent is not None:
            self.focus_entity(ent.name)
        else:
            self.search(text)

    def focus_entity(self, name: str) -> None:
        """The picture of one entity and its neighbours."""
        if self.index is None:
            self._pending_focus = ("entity", name)
            self.query.setText(name)
            self.ensure_loaded()
            return
        self.clear()
        self.query.setText(name)
        self._add_node(name, seed=True)
        self._expand(name, EXPAND_STEP)
        self._relayout()
        self.select(name)
        self.status.setText(f"Around “{name}”: {len(self.nodes)} entities, {len(self.shown_facts)} facts.")

    def search(self, text: str) -> None:
        if self.b.service is None:
            return
        self._gen += 1
        gen = self._gen
        self.status.setText(f"Searching “{elide(text, 60)}”…")
        fut = self.b.service.search(SearchParams(bank=self.b.bank, query=text, limit=15), timeout=READ_TIMEOUT_S)
        self.b.post.run(fut, lambda rows: self._searched(rows, gen, text),
                        lambda err: self._search_failed(err, gen))

    def _search_failed(self, err: str, gen: int) -> None:
        if gen == self._gen and self.index is not None:
            self.status.setText(f"Search failed: {err}")

    def _searched(self, rows: list, gen: int, text: str) -> None:
        if gen != self._gen or self.index is None:
            return
        seeds: list[str] = []          # the entities found, then the ends of the facts found
        ends: list[str] = []
        facts: list[str] = []
        for r in rows:
            if r.kind == "entity" and r.name in self.index.entities:
                seeds.append(r.name)
            elif r.kind == "fact" and r.id in self.index.facts:
                f = self.index.facts[r.id]
                facts.append(f.id)
                ends += [n for n in (f.source, f.target) if n in self.index.entities]
        seeds = list(dict.fromkeys(seeds + ends))[:8]
        self.clear()
        if not seeds:
            self.status.setText(f"Nothing in the graph matches “{elide(text, 60)}”.")
            return
        for name in seeds:
            self._add_node(name, seed=True)
        for fid in facts:
            self.shown_facts.add(fid)
        for name in seeds:
            self._expand(name, SEED_NEIGHBOURS)
        self._relayout()
        self.select(seeds[0])
        self.status.setText(f"“{elide(text, 50)}”: {len(seeds)} matching entities (bold) and their "
                            f"neighbours — {len(self.nodes)} entities, {len(self.shown_facts)} facts.")

    # ── the picture ──────────────────────────────────────────────────────────────────────
    def clear(self) -> None:
        self.scene.clear()
        self.nodes.clear()
        self.shown_facts.clear()
        self.positions.clear()
        self.expanded.clear()
        self.selected = None
        self._info_default()
        self.b.selection_changed()

    def _add_node(self, name: str, seed: bool = False) -> NodeItem | None:
        node = self.nodes.get(name)
        if node is None:
            if len(self.nodes) >= MAX_NODES:
                return None
            ent = self.index.entities.get(name)
            node = NodeItem(self, name, ent.types if ent else [])
            self.nodes[name] = node
            self.scene.addItem(node)
        node.seed = node.seed or seed
        return node

    def _expand(self, name: str, step: int) -> int:
        """Show up to `step` more neighbours of `name`; how many were added."""
        neigh = self.index.neighbours(name)
        have = self.expanded.get(name, 0)
        added = 0
        shown_names = set(self.nodes)
        for fact, other in neigh[have:]:
            if added >= step:
                break
            if other not in shown_names and self._add_node(other) is None:
                break
            self.shown_facts.add(fact.id)
            added += 1
            have += 1
        self.expanded[name] = have
        if name in self.nodes:
            self.nodes[name].expanded = True
        return added

    def node_clicked(self, name: str) -> None:
        """Click: select the entity; show its next neighbours."""
        total = len(self.index.neighbours(name)) if self.index else 0
        added = self._expand(name, EXPAND_STEP) if self.index else 0
        if added:
            self._relayout()
        self.select(name)
        shown = self.expanded.get(name, 0)
        if len(self.nodes) >= MAX_NODES and shown < total:
            self.status.setText("The picture is full: Clear it, or start from another entity.")
        else:
            self.status.setText(f"“{name}”: {shown} of {total} relations shown"
                                + (" — click again for more." if shown < total else "."))

    def _relayout(self) -> None:
        # every fact between two shown entities (not only those that brought a node in)
        for name in list(self.nodes):
            for fact, other in self.index.neighbours(name):
                if other in self.nodes:
                    self.shown_facts.add(fact.id)
        facts = [self.index.facts[f] for f in self.shown_facts if f in self.index.facts]
        facts = [f for f in facts if f.source in self.nodes and f.target in self.nodes]
        names = list(self.nodes)
        sizes = {n: (self.nodes[n].w, self.nodes[n].h) for n in names}
        vp = self.canvas.viewport().rect()
        aspect = vp.width() / vp.height() if vp.height() > 50 and vp.width() > 50 else 1.5
        pos = layout(names, [(f.source, f.target) for f in facts], sizes,
                     start={n: p for n, p in self.positions.items() if n in self.nodes}, spacing=120,
                     aspect=min(2.5, max(0.8, aspect)))
        self.positions = pos
        for n, (x, y) in pos.items():
            self.nodes[n].setPos(x, y)
        for item in list(self.scene.items()):
            if isinstance(item, EdgeItem):
                self.scene.removeItem(item)
        lanes: dict[frozenset, int] = {}
        for f in sorted(facts, key=lambda f: (not f.current, f.relation)):
            key = frozenset((f.source, f.target))
            lane = lanes.get(key, 0)
            lanes[key] = lane + 1
            self.scene.addItem(EdgeItem(self, f, self.nodes[f.source], self.nodes[f.target], lane))
        self.scene.setSceneRect(self.scene.itemsBoundingRect().adjusted(-40, -40, 40, 40))
        self.fit()

    def fit(self) -> None:
        if not self.nodes:
            return
        self.canvas.resetTransform()
        rect = self.scene.sceneRect()
        vp = self.canvas.viewport().rect()
        if rect.width() > vp.width() or rect.height() > vp.height():
            self.canvas.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
            # never so small that names cannot be read: pan instead
            if self.canvas.transform().m11() < 0.7:
                self.canvas.resetTransform()
                self.canvas.scale(0.7, 0.7)
        self.canvas.centerOn(self.nodes[self.selected].pos() if self.selected in self.nodes else rect.center())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.fit()

    def select(self, name: str) -> None:
        for n, node in self.nodes.items():
            node.selected_ = n == name
            node.update()
        self.selected = name if name in self.nodes else None
        self._info(name)
        self.b.selection_changed()

    def _info_default(self) -> None:
        self.info.setHtml("<p><i>Click an entity to see what is known about it.</i></p>")

    def _info(self, name: str) -> None:
        ent = self.index.entities.get(name) if self.index else None
        if ent is None:
            self._info_default()
            return
        rows = []
        for fact, other in self.index.neighbours(name):
            style = " style='color: gray'" if not fact.current else ""
            rows.append(f"<li{style}>{html.escape(fact.text)}"
                        f"<br><small>{html.escape(validity(fact.valid_at, fact.invalid_at, fact.current))}"
                        "</small></li>")
        rating = self.b.ratings.get(self.b.bank, ent.id) if self.b.feedback_on() else 0
        self.info.setHtml(f"<h3>{html.escape(ent.name)}</h3>"
                          f"<p><i>{html.escape(', '.join(ent.types) or 'entity')}</i>"
                          + (f" · your rating {rating:+d}" if rating else "") + "</p>"
                          f"<p>{html.escape(ent.summary or '(no summary)')}</p>"
                          f"<p><b>{len(rows)} relations</b></p><ul>{''.join(rows)}</ul>")

    def selected_memories(self) -> list[Memory]:
        if not self.selected or self.index is None:
            return []
        ent = self.index.entities.get(self.selected)
        if ent is None:
            return []
        return [Memory(id=ent.id, kind="entity", text=f"{ent.name}: {ent.summary}" if ent.summary else ent.name,
                       name=ent.name)]
