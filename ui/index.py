"""A bank's entities and the facts between them, loaded page by page with `browse` (never on
the GUI thread's time: each page is a Future delivered by GuiPost), for the Entities and the
Graph views."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from memoryplus.ui.common import READ_TIMEOUT_S, GuiPost, outcome

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
    def from_record(cls, r: dict[str, Any]) -> "Fact":
        return cls(id=r["id"], relation=r.get("relation") or "", text=r.get("text") or "",
                   source=r.get("source") or "", target=r.get("target") or "",
                   valid_at=r.get("valid_at"), invalid_at=r.get("invalid_at"),
                   current=bool(r.get("current", True)) and not r.get("invalid_at"))


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

    def add_page(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            ent = Entity(id=r["id"], name=r.get("name") or "?", labels=list(r.get("labels") or []),
                         summary=r.get("summary") or "")
            for rel in r.get("relations") or []:
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


def load_index(client, post: GuiPost, bank: str, done: Callable[[EntityIndex | None, str | None], None]) -> None:
    """Load every entity of `bank` (up to MAX_ENTITIES) page by page; `done(index, error)` on
    the GUI thread."""
    index = EntityIndex(bank)

    def ask(offset: int) -> None:
        fut = client.submit("browse", {"bank": bank, "what": "entities", "offset": offset, "limit": PAGE},
                            timeout=READ_TIMEOUT_S)
        post.watch(fut, lambda f, o=offset: got(f, o))

    def got(fut, offset: int) -> None:
        rows, err = outcome(fut)
        if err:
            done(None, err)
            return
        index.add_page(rows or [])
        if len(rows or []) == PAGE:
            if offset + PAGE >= MAX_ENTITIES:
                index.truncated = True
                done(index, None)
                return
            ask(offset + PAGE)
            return
        done(index, None)

    ask(0)
