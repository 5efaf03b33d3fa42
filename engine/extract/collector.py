"""What one extraction returns, and the state that collects it: entities typed by the
mode's cue words, facts keyed by (subject, relation, object)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from memoryplus.engine.modes import ModeSpec

from .text import _lower


MAX_FACTS = 200
MAX_ENTITIES = 300


@dataclass
class LocalEntity:
    name: str
    type: str            # a key of spec.entity_types, or "Entity"


@dataclass
class LocalFact:
    subject: str
    relation: str
    object: str
    fact: str
    functional: bool     # a new object for (subject, relation) replaces the old one
    # the emotion/topic tags of the sentence it was said in ("emotion:sad", "topic:books"):
    # a turn's other sentences do not tag it
    tags: list[str] = field(default_factory=list)


@dataclass
class LocalExtraction:
    entities: list[LocalEntity]
    facts: list[LocalFact]


# ── The extraction state ─────────────────────────────────────────────────────────────────

class _Collector:
    def __init__(self, spec: ModeSpec):
        self.spec = spec
        self.entities: dict[str, LocalEntity] = {}
        self.scores: dict[str, int] = {}
        self.facts: dict[tuple[str, str, str], LocalFact] = {}
        self.said_in: tuple[str, str] = ("User", "")    # (speaker, sentence) being read
        self.origin: dict[tuple[str, str, str], tuple[str, str]] = {}
        # names the user said (or a rule found): a name only the assistant's reply mentions is
        # no entity unless a fact uses it or the mode keeps them (ModeSpec.assistant_names)
        self.by_user: set[str] = set()
        self.cue_index: list[tuple[str, frozenset[str]]] = [
            (t, frozenset(c)) for t, c in spec.cues.items() if t not in ("Emotion", "Topic")]

    def type_for(self, name: str, context: Iterable[str] = (), hints: Iterable[str] = (),
                 own_words: bool = True) -> tuple[str, int]:
        """The best-cued entity type and its score: words of the name and its neighbours
        count 1, hints (what a rule says the entity is) count 2; no cue: "Entity"."""
        own = [w for w in re.split(r"[\s\-]+", _lower(name)) if w] if own_words else []
        words = set(own) | {w for w in context if w}
        head = own[-1] if len(own) > 1 else ""       # "data platform team" is a team
        hint_set = set(hints)
        best, best_score = "Entity", 0
        for type_name, cues in self.cue_index:
            score = len(words & cues) + 2 * len(hint_set & cues) + (head in cues)
            if score > best_score:
                best, best_score = type_name, score
        return best, best_score

    def entity(self, name: str, context: Iterable[str] = (), hints: Iterable[str] = (),
               own_words: bool = True) -> None:
        if not name:
            return
        key = _lower(name)
        if self.said_in[0] != "Assistant":
            self.by_user.add(key)
        type_name, score = self.type_for(name, context, hints, own_words)
        current = self.entities.get(key)
        if current is None:
            if len(self.entities) >= MAX_ENTITIES:
                return
            self.entities[key] = LocalEntity(name, type_name)
            self.scores[key] = score
        elif score > self.scores.get(key, 0):
            current.type = type_name
            self.scores[key] = score

    def fact(self, subject: str, relation: str, obj: str, sentence: str, functional: bool,
             subject_hints: Iterable[str] = (), object_hints: Iterable[str] = (),
             phrase_subject: bool = False, phrase_object: bool = False) -> None:
        if not subject or not obj or _lower(subject) == _lower(obj):
            return
        if len(self.facts) >= MAX_FACTS:
            return
        # the same entity keeps one spelling ("EOD" mentioned, "eod" as a date)
        for old, known in ((subject, self.entities.get(_lower(subject))),
                           (obj, self.entities.get(_lower(obj)))):
            if known and known.name != old:
                sentence = sentence.replace(old, known.name)
                subject = known.name if old is subject else subject
                obj = known.name if old is obj else obj
        if functional:
            # Within one turn the later statement of a functional relation wins.
            for key in [k for k in self.facts if k[0] == _lower(subject) and k[1] == relation]:
                del self.facts[key]
        key = (_lower(subject), relation, _lower(obj))
        self.facts.pop(key, None)
        self.facts[key] = LocalFact(subject, relation, obj, sentence, functional)
        self.origin[key] = self.said_in
        if subject in ("User", "Assistant"):
            self.entity(subject, hints=("person",))
        else:
            self.entity(subject, hints=subject_hints, own_words=not phrase_subject)
        self.entity(obj, hints=object_hints, own_words=not phrase_object)

    def result(self) -> LocalExtraction:
        used = {_lower(f.subject) for f in self.facts.values()} | \
               {_lower(f.object) for f in self.facts.values()}
        # A bare mention that only starts a fact's longer name ("Italian" of "Italian food").
        prefixes = {" ".join(u.split()[:k]) for u in used for k in range(1, len(u.split()))}
        tag = ("Emotion", "Topic")
        entities = [e for k, e in self.entities.items()
                    if k in used or (e.name not in ("User", "Assistant")
                                     and (k not in prefixes or e.type in tag)
                                     and (k in self.by_user or e.type in tag or self.spec.assistant_names))]
        return LocalExtraction(entities=entities, facts=list(self.facts.values()))
