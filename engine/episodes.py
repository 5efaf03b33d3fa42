"""What the engine keeps in graphiti's records beside graphiti's own fields: an episode's
metadata (in its name), dates read back from a row, and entity summaries written by rules.

Every write is idempotent: an episode's uuid is derived from the bank and the caller's id,
and the content hash is kept beside it, so a replay stores nothing twice and a regenerated
answer (same id, new content) replaces the old episode. Kuzu has no transactions, so an
episode is saved as *pending* first and marked *complete* only after all its writes; a
pending one found when a bank opens is removed with everything it wrote and redone.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from memoryplus.common.isodates import parse_iso

META_PREFIX = '{"mp": 1'
PENDING, COMPLETE = "pending", "complete"
PENDING_PREFIX = '{"mp": 1, "state": "pending"'
# A local fact's own tags, in its attributes (beside the rating): the sentence it came from.
FACT_TAGS = "mp_tags"
TAG_LABELS = ("Topic", "Emotion")          # entity labels that are tags, not memories
SUMMARY_MAX = 1000


def ts(value: Any) -> datetime | None:
    """A row's date as an aware UTC datetime (Kuzu gives datetimes or strings, Neo4j its own)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_iso(value)
    if hasattr(value, "to_native"):  # neo4j DateTime
        value = value.to_native()
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def iso(value: Any) -> str | None:
    v = ts(value)
    return v.isoformat() if v else None


def content_hash(text: str, tags: Iterable[str]) -> str:
    h = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    h.update(("\x00" + "\x00".join(sorted(tags))).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:16]


@dataclass
class EpisodeMeta:
    id: str
    hash: str
    state: str
    tags: list[str] = field(default_factory=list)
    explicit: bool = False
    vibe: float | None = None
    # Why local extraction stored a turn meant for the LLM (its answers were unusable); "" else
    fallback: str = ""

    def dump(self) -> str:
        d = {"mp": 1, "state": self.state, "id": self.id, "hash": self.hash,
             "tags": self.tags, "explicit": self.explicit, "vibe": self.vibe}
        if self.fallback:
            d["fallback"] = self.fallback
        return json.dumps(d, ensure_ascii=False)

    @classmethod
    def parse(cls, name: str | None, fallback_id: str) -> "EpisodeMeta":
        try:
            d = json.loads(name or "")
            if d.get("mp") == 1:
                return cls(id=d["id"], hash=d.get("hash", ""), state=d.get("state", COMPLETE),
                           tags=list(d.get("tags") or []), explicit=bool(d.get("explicit")),
                           vibe=d.get("vibe"), fallback=str(d.get("fallback") or ""))
        except (ValueError, TypeError, KeyError, AttributeError):
            pass
        return cls(id=fallback_id, hash="", state=COMPLETE)

    def description(self) -> str:
        """Indexed for keyword search with the content, so tags are searchable words."""
        return " ".join(["chat turn", *(t.partition(":")[2] for t in self.tags)])


def append_summary(summary: str, facts: list[str]) -> str:
    for f in facts:
        if f not in summary:
            summary = f"{summary} {f}." if summary else f"{f}."
    if len(summary) > SUMMARY_MAX:  # keep the newest facts
        summary = "…" + summary[-(SUMMARY_MAX - 1):]
    return summary


def rule_summary(edges: list) -> str:
    """An entity's summary from its facts (edges or fact rows), by rules: no LLM call."""
    return append_summary("", [e.fact if hasattr(e, "fact") else e["fact"] for e in edges])
