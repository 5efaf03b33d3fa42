"""Phrases in running text: capitalised names, and the noun phrase a rule takes as object."""
from __future__ import annotations

import re

from .collector import _Collector
from .lexicons import (
    _ADJ_OBJECTS, _DEICTIC, _DETERMINERS, _FORMS, _HEAD_NOUNS, _NAME_ADJ, _NAME_CONNECTORS,
    _OBJ_STOP, _PERSON_ROLES, _POSSESSIVES, _PRONOUNS, _REPORTING, _STOP_ANY, _STOP_CAPS,
    _TITLES, _WEAK_CAPS)
from .text import _clean_name, _is_cap, _is_word, _lower, _title


MAX_NAME_TOKENS = 6

# ── Names in running text ───────────────────────────────────────────────────────────────

_OPENERS = {":", "—", "–", "-", "*", "•", ">"}


def _name_runs(toks: list[str], lows: list[str], sentence_start: int = 0,
               lowercase_elsewhere: frozenset[str] = frozenset()) -> list[tuple[int, int]]:
    """(start, end) token spans of capitalised names."""
    spans = []
    i, n = 0, len(toks)
    while i < n:
        tok = toks[i]
        if tok.islower() or not _is_cap(tok):   # most tokens; a title or a weak start is capitalised
            i += 1
            continue
        low = lows[i]
        initial = i == sentence_start or (sentence_start >= 0 and i > 0
                                          and toks[i - 1] in _OPENERS)
        title = low in _TITLES and i + 1 < n and _is_cap(toks[i + 1]) and tok[0].isupper()
        weak_start = low in _WEAK_CAPS and (not initial or low in _NAME_ADJ) and \
            i + 1 < n and _is_cap(toks[i + 1]) and lows[i + 1] not in _STOP_ANY
        if not (_is_cap(tok) or title) or (low in _STOP_ANY and not title and not weak_start):
            i += 1
            continue
        j = i + 1
        while j < n:
            if _is_cap(toks[j]) and lows[j] not in _STOP_CAPS and lows[j] != "i":
                j += 1
            elif re.fullmatch(r"\d+(?:\.\d+)*", toks[j]) and j > i:
                j += 1          # Windows 11, iPhone 15
                break
            elif lows[j] in _NAME_CONNECTORS and j + 1 < n and _is_cap(toks[j + 1]) \
                    and lows[j + 1] not in _STOP_ANY:
                j += 2
            else:
                break
        start = i
        # A capitalised sentence start is a name only with evidence: more words of a name,
        # a verb that takes a person or thing as subject ("Anna loves", "Priya said"), or a
        # possessive; never when the same word appears lowercase elsewhere in the turn.
        if initial and j - start == 1 and not title:
            nxt = lows[j] if j < n else ""
            # "Priya said", "Anna loves" (not "Dust is": a copula follows any noun)
            verbish = nxt in _REPORTING or (
                nxt in _FORMS and _FORMS[nxt][1] in ("3sg", "past") and _FORMS[nxt][0] != "be"
                and nxt not in ("has", "had"))
            if low in lowercase_elsewhere or not (verbish or tok.endswith("'s")):
                i = j
                continue
        if j - start <= MAX_NAME_TOKENS:
            spans.append((start, j))
        i = j
    return spans


def _mention_names(sentence_toks: list[str], sentence_lows: list[str], col: _Collector,
                   lowercase_words: frozenset[str]) -> None:
    first = next((k for k, t in enumerate(sentence_toks) if _is_word(t)), 0)
    for start, end in _name_runs(sentence_toks, sentence_lows, first, lowercase_words):
        words = list(sentence_toks[start:end])
        if end < len(sentence_toks) and sentence_lows[end] in _HEAD_NOUNS:
            words.append(sentence_toks[end])
        name = _clean_name(words)
        if not _valid_name(name):
            continue
        if " " not in name and ((name.isupper() and len(name) <= 2)
                                or _lower(name) in _PERSON_ROLES):
            continue        # "my GP", "ask Mom": a role, not a name
        context = [sentence_lows[start - 1] if start > 0 else "",
                   sentence_lows[end] if end < len(sentence_lows) else "",
                   sentence_lows[end + 1] if end + 1 < len(sentence_lows) else ""]
        col.entity(name, context)


def _valid_name(name: str) -> bool:
    if len(name) < 2 or not any(c.isalpha() for c in name):
        return False
    words = _lower(name).split()
    if all(w in _STOP_ANY or w in _TITLES for w in words):
        return False
    if words[0] in _PRONOUNS or words[0] in _DETERMINERS:
        return False
    return len(words) <= MAX_NAME_TOKENS


# ── Objects ─────────────────────────────────────────────────────────────────────────────

def _np(toks: list[str], lows: list[str], i: int, *, caseless: bool, name_like: bool,
        capital: bool = False, possessor: str = "") -> tuple[str, int] | None:
    """The noun phrase starting at toks[i]: (text, end index) or None when it is no entity."""
    n = len(toks)
    while i < n and lows[i] in _DETERMINERS:
        i += 1
    if i >= n or not _is_word(toks[i]):
        return None
    low = lows[i]
    if low in _DEICTIC or low in _PRONOUNS or low in _POSSESSIVES:
        if low in _POSSESSIVES and i + 2 < n and lows[i + 1] not in _OBJ_STOP:
            # "my sister Anna" / "my dentist Dr Okafor" -> the name
            for k in (i + 2, i + 3):
                if k < n and (_is_cap(toks[k]) or lows[k] in _TITLES):
                    run = _name_runs(toks, lows, -1)
                    for s, e in run:
                        if s == k:
                            return _clean_name(toks[s:e]), e
        return None
    title_start = low in _TITLES and i + 1 < n and toks[i + 1][:1].isalpha()
    if _is_cap(toks[i]) or title_start or re.match(r"\d", toks[i]):
        j = i + 1
        while j < n:
            if _is_cap(toks[j]) or (title_start and j == i + 1) or \
                    re.fullmatch(r"\d+(?:\.\d+)*", toks[j]):
                j += 1
            elif lows[j] in _NAME_CONNECTORS and j + 1 < n and _is_cap(toks[j + 1]):
                j += 2
            else:
                break
        if j < n and lows[j] in _HEAD_NOUNS:
            j += 1
        elif not name_like and j < n and _is_word(toks[j]) and toks[j].islower() and \
                lows[j] not in _OBJ_STOP and lows[j] not in _PRONOUNS and \
                lows[j] not in _ADJ_OBJECTS and lows[j] not in _FORMS and \
                (j + 1 >= n or not _is_word(toks[j + 1]) or lows[j + 1] in _OBJ_STOP):
            j += 1          # "Italian food", "Zelda games", "Python scripts"
        words = list(toks[i:j])
        if title_start or caseless and name_like:
            words = _title(words)
        name = _clean_name(words)
        if re.fullmatch(r"\d+(?:[.,]\d+)?", name) and not capital:
            return None
        return (name, j) if _valid_name(name) or re.match(r"\d", name) else None
    if (capital or name_like) and not caseless:
        return None
    # A lowercase noun phrase: up to four words, stopping at prepositions, adverbs...
    j = i
    words: list[str] = []
    while j < n and len(words) < 5:
        lw = lows[j]
        if not _is_word(toks[j]) or lw in _OBJ_STOP or lw in _POSSESSIVES \
                or (lw in _PRONOUNS and words) or (lw == "of" and not words):
            break
        words.append(toks[j])
        j += 1
        if lw == "of":
            while j < n and lows[j] in _DETERMINERS:
                j += 1
    while words and (_lower(words[-1]) in _OBJ_STOP or _lower(words[-1]) == "of"):
        words.pop()
    if not words or len(words) > 4:
        return None
    if j < n and _is_word(toks[j]) and lows[j] not in _OBJ_STOP and lows[j] not in _POSSESSIVES \
            and lows[j] not in _PRONOUNS and len(words) >= 4:
        return None      # runs on: a clause, not a name
    low_words = [_lower(w) for w in words]
    if low_words[0] in _PRONOUNS or low_words[-1] in _PRONOUNS:
        return None
    if len(low_words) == 1 and (low_words[0] in _ADJ_OBJECTS or low_words[0] in _STOP_ANY
                                and low_words[0] not in _PREF_OK):
        return None
    if low_words[0] in _ADJ_OBJECTS and len(low_words) <= 2 and low_words[-1] in _ADJ_OBJECTS:
        return None
    if low_words[0] in ("going", "doing", "getting", "having", "making", "being", "trying",
                        "taking", "coming", "it"):
        if len(low_words) == 1:
            return None
    if caseless and name_like:
        words = _title(words)
    return " ".join(words), j


_PREF_OK = {"reading", "writing", "music", "art"}


def _split_objects(toks: list[str], lows: list[str], i: int, **kw) -> list[tuple[str, int]]:
    """Coordinated objects: "hiking, cooking and jazz" -> three noun phrases."""
    out = []
    n = len(toks)
    while i < n:
        got = _np(toks, lows, i, **kw)
        if got is None:
            break
        out.append(got)
        j = got[1]
        if j < n and toks[j] == "," and j + 1 < n and lows[j + 1] in ("and", "or"):
            i = j + 2
        elif j < n and (toks[j] == "," or lows[j] in ("and", "or", "&")):
            i = j + 1
        else:
            break
    return out
