"""A bank's entities and the facts between them, loaded page by page with `browse` (never on
the GUI thread's time: each page is a Future delivered by GuiPost), for the Entities and the
Graph views."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from memoryplus.ui.common import READ_TIMEOUT_S, GuiPost
from memoryplus.wire.protocol import BrowseParams

PAGE = 500
MAX_ENTITIES = 5000
TAG_LABELS = frozenset({"Topic", "Emotion"})


@dataclass
class Fact:
    id: str
    relation: str
    text: str
    source: str
    target: str
    valid_at: str | None = None
    invalid_at: str | None = None
    current: bool = True

    @classmethod
    def from_record(cls, r) -> "Fact":
        """From a FactRow (wire/records.py)."""
        return cls(id=r.id, relation=r.relation, text=r.text, source=r.source, target=r.target,
                   valid_at=r.valid_at, invalid_at=r.invalid_at, current=r.current and not r.invalid_at)


@dataclass
class Entity:
    id: str
    name: str
    labels: list[str]
    summary: str
    facts: list[str] = field(default_factory=list)     # fact ids touching it

    @property
    def types(self) -> list[str]:
        return [lb for lb in self.labels if lb != "Entity"]

    @property
    def is_tag(self) -> bool:
        return bool(set(self.labels) & TAG_LABELS)


@dataclass
class EntityIndex:
    bank: str
    entities: dict[str, Entity] = field(default_factory=dict)     # by name
    by_id: dict[str, Entity] = field(default_factory=dict)
    facts: dict[str, Fact] = field(default_factory=dict)
    truncated: bool = False

    def add_page(self, rows: list) -> None:
        """EntityRow records (wire/records.py)."""
        for r in rows:
            ent = Entity(id=r.id, name=r.name or "?", labels=list(r.labels), summary=r.summary)
            for rel in r.relations:
                fact = Fact.from_record(rel)
                self.facts.setdefault(fact.id, fact)
                ent.facts.append(fact.id)
            # two entities may share a name: the graph keys by name, so keep the richer one
            old = self.entities.get(ent.name)
            if old is None or len(ent.facts) > len(old.facts):
                self.entities[ent.name] = ent
            self.by_id[ent.id] = ent

    def neighbours(self, name: str) -> list[tuple[Fact, str]]:
        """(fact, other entity's name), current facts first."""
        ent = self.entities.get(name)
        if ent is None:
            return []
        out = []
        for fid in ent.facts:
            f = self.facts.get(fid)
            if f is None:
                continue
            other = f.target if f.source == name else f.source
            if other and other != name:
                out.append((f, other))
        out.sort(key=lambda p: (not p[0].current, p[1].lower()))
        return out

    def find(self, text: str) -> Entity | None:
        t = text.strip().lower()
        for name, ent in self.entities.items():
            if name.lower() == t:
                return ent
        return None


def load_index(service, post: GuiPost, bank: str, done: Callable[[EntityIndex | None, str | None], None]) -> None:
    """Load every entity of `bank` (up to MAX_ENTITIES) page by page; `done(index, error)` on
    the GUI thread."""
    index = EntityIndex(bank)

    def ask(offset: int) -> None:
        fut = service.browse(BrowseParams(bank=bank, what="entities", offset=offset, limit=PAGE),
                             timeout=READ_TIMEOUT_S)
        post.run(fut, lambda rows, o=offset: got(rows, o), lambda err: done(None, err))

    def got(rows: list, offset: int) -> None:
        index.add_page(rows)
        if len(rows) == PAGE:
            if offset + PAGE >= MAX_ENTITIES:
                index.truncated = True
                done(index, None)
                return
            ask(offset + PAGE)
            return
        done(index, None)

    ask(0)
