"""Reading a search query with rules, like the extraction reads a turn."""
from __future__ import annotations

import re
from typing import Iterable

from .lexicons import _FORMS, _MODALS, _MONTHS, _STOP_ANY, _TITLES, _WEEKDAYS, WORD_FAMILIES
from .text import _is_cap, _upper_snake


# ── reading a search query (rules, like the extraction above) ─────────────────────────────
_PAST_INTENT = re.compile(
    r"\b(before|previous(ly)?|used to|formerly|former|originally|prior to|no longer|any ?more|"
    r"in the past|back then|old (address|job|car|flat|house|home)|last (year|month|week|time))\b", re.I)
_MY_ROLE = re.compile(r"\bmy ((?:[^\W\d_][\w\-]* ){0,2}[^\W\d_][\w\-]*)", re.I)
_FAMILY_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")
# words a name can also be ("Will", "June", "Rose"): in a query typed all in lowercase they
# are read as words, not as the user's name
_COMMON = frozenset(_STOP_ANY | set(_FORMS) | _MODALS | set(_MONTHS) | set(_WEEKDAYS))


def _families(table: str) -> dict[str, tuple[str, ...]]:
    """word -> the words that stand for it (lexicons.WORD_FAMILIES), in the table's order."""
    out: dict[str, list[str]] = {}
    for line in table.strip().splitlines():
        left, _, right = line.partition(">")
        words, narrower = left.split(), right.split()
        for w in words:
            out.setdefault(w, []).extend(words + narrower)
        for w in narrower:
            out.setdefault(w, []).extend(words)
    return {w: tuple(dict.fromkeys(x for x in xs if x != w)) for w, xs in out.items()}


FAMILIES = _families(WORD_FAMILIES)


def relatives(word: str) -> tuple[str, ...]:
    """The words of `word`'s families ('boss' -> manager, supervisor, ...); a plural in, plurals out."""
    w = word.lower()
    if w in FAMILIES:
        return FAMILIES[w]
    for cut in (1, 2):                  # "managers", "bosses"
        if len(w) > 3 and w.endswith("es"[2 - cut:]) and w[:-cut] in FAMILIES:
            return tuple(x + "s" for x in FAMILIES[w[:-cut]])
    return ()


def family_words(query: str) -> list[str]:
    """The words a query's words stand for as well, those it lacks: 'Am I vegetarian?' asks
    about a diet whichever it is now (diet, vegan, pescatarian, ...)."""
    words = [w.lower() for w in _FAMILY_WORD.findall(query)]
    have = set(words)
    return list(dict.fromkeys(x for w in words for x in relatives(w) if x not in have))


def asks_about_past(query: str) -> bool:
    """'Where did Ravi live before moving to Valencia?': superseded facts are the answer."""
    return bool(_PAST_INTENT.search(query))


# "what was that restaurant you recommended?": the answer is in the assistant's words
_TO_ASSISTANT = re.compile(
    r"\b(you (told|said|recommended|suggested|mentioned|gave|provided|created|wrote|listed|"
    r"explained|shared|came up with)|remind me|our (previous|last|earlier) (conversation|chat|"
    r"discussion)|we (talked|discussed|spoke|chatted))\b", re.I)
_NUMBER = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3}
_DAYS_IN = {"day": 1.0, "week": 7.0, "month": 30.4, "year": 365.0}
_AGO = re.compile(r"\b(\d{1,3}|a couple of|a few|an?|one|two|three|four|five|six|seven|eight|"
                  r"nine|ten)\s+(day|week|month|year)s?\s+ago\b", re.I)
_LAST = re.compile(r"\b(yesterday|last (week|weekend|month|year))\b", re.I)
_LAST_DAYS = {"yesterday": 1.0, "last week": 7.0, "last weekend": 7.0, "last month": 30.4,
              "last year": 365.0}


def asks_about_assistant(query: str) -> bool:
    """'Can you remind me of the book you recommended?': what the assistant said is asked for."""
    return bool(_TO_ASSISTANT.search(query))


# The answer adds up, compares or orders what was said on several occasions: "how many …
# in total", "how much faster … compared to last year", "which did I do first, A or B?",
# "the order of the three trips", "which … most recently"
_SEVERAL = re.compile(r"\b(how (many|much)|(in )?total|altogether|combined|in all|average|"
                      r"compared? (to|with)|difference|in (the|what|which) order|the order of|"
                      r"earliest|most recent(ly)?|first\b[^?]*\bor)\b", re.I)


def asks_for_several(query: str) -> bool:
    """'How many doctors did I visit?': the answer is spread over several conversations."""
    return bool(_SEVERAL.search(query))


def days_ago(query: str) -> float | None:
    """How far back the query points, in days ('four weeks ago' 28, 'last month' 30.4,
    'yesterday' 1), or None when it names no such time."""
    m = _AGO.search(query)
    if m:
        n = m.group(1).lower()
        return (int(n) if n.isdigit() else _NUMBER[n]) * _DAYS_IN[m.group(2).lower()]
    m = _LAST.search(query)
    return _LAST_DAYS[m.group(1).lower()] if m else None


def role_references(query: str) -> list[tuple[str, str]]:
    """("my boss", "HAS_BOSS")-style pairs for the roles a query names, longest first per
    mention: the relations under which the user's own facts name that person ("My boss is
    Tomasz" is stored as User HAS_BOSS Tomasz). After each, the same role in the other words
    of its family ("my boss": HAS_MANAGER, HAS_SUPERVISOR, ...), tried when it names nobody."""
    out: list[tuple[str, str]] = []
    for m in _MY_ROLE.finditer(query):
        words = m.group(1).split()
        for n in range(len(words), 0, -1):
            role = [w.lower() for w in words[:n]]
            if role[-1].endswith("'s"):
                role[-1] = role[-1][:-2]
            phrase = f"{m.group(0)[:3]}{' '.join(words[:n])}"
            out.append((phrase, "HAS_" + _upper_snake(role)))
            out += [(phrase, "HAS_" + _upper_snake(role[:-1] + [other]))
                    for other in relatives(role[-1])]
    return out


def as_the_user(query: str, names: Iterable[str]) -> tuple[str, list[str]] | None:
    """The query with the user's own names read as the user, and the names read: asked by
    someone who said "Hi, I'm Mira", 'Where does Mira live now?' is 'Where does I live now?'
    and 'Mira's boss' is 'my boss' (their turns say "I" and "my", their facts "User"). None
    when no name of theirs occurs. A full name's first word counts too ("Mira" for "Mira
    Novak"). A name is read where it is capitalised, or anywhere in a query typed all in
    lowercase; one that is also a common word ("Will", "June") not in lowercase or at the
    start of a sentence."""
    forms: set[str] = set()
    for name in names:
        words = name.split()
        if not words or not _is_cap(words[0]):
            continue
        forms.add(" ".join(words))
        if len(words) > 1 and words[0].lower().rstrip(".") not in _TITLES:
            forms.add(words[0])
    if not forms:
        return None
    lower = query == query.lower()
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w'’])({alternatives})(['’]s)?(?![\w'’])", re.I if lower else 0)

    found: list[str] = []

    def read(m: re.Match) -> str:
        before = query[:m.start()].rstrip()
        if m.group(1).lower() in _COMMON and (lower or not before or before[-1] in ".!?"):
            return m.group(0)           # "Will I need a visa?" asked by Will
        found.append(m.group(1))
        return "my" if m.group(2) else "I"

    out = pattern.sub(read, query)
    return (out, list(dict.fromkeys(found))) if found else None
