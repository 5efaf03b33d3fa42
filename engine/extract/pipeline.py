"""The extraction of one episode body: blocks, sentences, clauses, rules, then tags."""
from __future__ import annotations

import re

from memoryplus.common.text import EXTRACTION_TOKEN, split_sentences
from memoryplus.engine.insights import analyze
from memoryplus.engine.modes import ModeSpec

from .clauses import _Clause, _clauses, _strip_discourse
from .collector import LocalEntity, LocalExtraction, _Collector
from .lexicons import _QUESTION_START
from .personal import recommendations
from .phrases import _mention_names
from .rules import _appositives, _task, _try_due, _try_instruction, _try_role
from .text import _bounded_blocks, _lower, _normalize
from .verbs import _apply_rules, _subject, _try_call_me, _try_have_named


_LOWERCASE_WORD = re.compile(r"\b[a-z][a-z']+\b")
_ASCII_LOWER = re.compile(r"[a-z]")


def _clause_facts(cl: _Clause, inherited):
    """Facts of one clause; returns the subject for a coordinated next clause."""
    if not cl.lows:
        return None
    if _try_due(cl):
        return None
    if _try_instruction(cl) or _try_call_me(cl):
        return None
    _appositives(cl)
    if _try_role(cl):
        return None
    lows = cl.lows
    if lows[:1] == ["remind"] and len(lows) > 3 and lows[1] == "me" and lows[2] == "to":
        _task(cl, cl.me() if cl.speaker == "User" else "User", 3, "HAS_TASK")
        return None
    k = 1 if lows[:1] == ["please"] else 0
    for phrase in (("remember", "to"), ("do", "not", "forget", "to")):
        if tuple(lows[k:k + len(phrase)]) == phrase and cl.speaker == "User":
            _task(cl, "User", k + len(phrase), "HAS_TASK")     # "remember to buy milk"
            return None
    subj = _subject(cl, inherited)
    if subj is None:
        return None
    subject, first, i = subj
    # "my sister Anna lives in Rome": a possessive-role-name subject
    if _try_have_named(cl, subject, i):
        return (subject, first)
    _apply_rules(cl, subject, first, i)
    return (subject, first)


# ── Public API ──────────────────────────────────────────────────────────────────────────

def extract(body: str, spec: ModeSpec) -> LocalExtraction:
    """Entities and facts of an episode body, typed with the mode's entity types."""
    return _extract_blocks(_bounded_blocks(body or ""), spec)


def _extract_blocks(blocks: list[tuple[str, str]], spec: ModeSpec) -> LocalExtraction:
    col = _Collector(spec)
    text_for_tags: list[str] = []
    for speaker, raw in blocks:
        text = _normalize(raw)
        text_for_tags.append(f"{speaker}: {text}")
        lowercase_words = frozenset(_LOWERCASE_WORD.findall(text))
        for line in text.splitlines():
            if not line.strip():
                continue
            if not _ASCII_LOWER.search(line):   # a line with a lowercase letter is not shouted
                cased = [c for c in line if c.isupper() or c.islower()]
                if len(cased) > 3 and not any(c.islower() for c in cased):
                    line = line.lower()          # SHOUTED LINES carry no case information
            caseless = not any(c.isupper() for c in line)
            for sentence in split_sentences(line):
                toks = EXTRACTION_TOKEN.findall(sentence)
                if not toks:
                    continue
                lows = [_lower(t) for t in toks]
                col.said_in = (speaker, sentence)
                recommendations(speaker, sentence, col)
                _mention_names(toks, lows, col, lowercase_words)
                question = sentence.rstrip().endswith("?")
                spans = _clauses(toks, lows)
                inherited = None
                for idx, (s, e, coordinated) in enumerate(spans):
                    ctoks, clows, kind = _strip_discourse(toks[s:e], lows[s:e])
                    if not ctoks or kind == "conditional":
                        inherited = None
                        continue
                    is_question = (question and idx == len(spans) - 1) or (
                        clows[0] in _QUESTION_START and question)
                    if is_question or (clows[0] in _QUESTION_START and len(clows) > 1
                                       and clows[1] in ("i", "you", "we", "he", "she", "they")):
                        inherited = None
                        continue
                    cl = _Clause(ctoks, clows, speaker, caseless, col)
                    inherited = _clause_facts(cl, inherited if coordinated else None)
    if spec.tagging and text_for_tags:
        tags = analyze("\n".join(text_for_tags), emotions="Emotion" in spec.entity_types,
                       sensitivity=spec.emotion_sensitivity,
                       topics="Topic" in spec.entity_types)
        for emotion in tags.emotions:
            col.entities.setdefault("emotion:" + emotion, LocalEntity(emotion, "Emotion"))
        for topic in tags.topics:
            col.entities.setdefault("topic:" + topic, LocalEntity(topic, "Topic"))
        _tag_facts(col, spec)
    return col.result()


def _tag_facts(col: _Collector, spec: ModeSpec) -> None:
    """Each fact gets the tags of its own sentence: emotions only from the user's sentences
    (the assistant's "happy to help" is not the user's mood), topics from either."""
    emotions, topics = "Emotion" in spec.entity_types, "Topic" in spec.entity_types
    found: dict[tuple[str, str], list[str]] = {}
    for key, fact in col.facts.items():
        speaker, sentence = where = col.origin[key]
        if where not in found:
            tags = analyze(sentence, emotions=emotions and speaker == "User",
                           sensitivity=spec.emotion_sensitivity, topics=topics)
            found[where] = ([f"emotion:{e}" for e in tags.emotions]
                            + [f"topic:{t}" for t in tags.topics])
        fact.tags = list(found[where])
