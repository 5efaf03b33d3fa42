"""Entity resolution: which existing entity a new name refers to."""
from __future__ import annotations

import re
import unicodedata
from typing import Iterable

from .lexicons import _STOP_ANY


def _name_key(name: str) -> list[str]:
    text = unicodedata.normalize("NFKD", name)
    text = "".join(c for c in text if not unicodedata.combining(c))
    text = re.sub(r"'s\b", "", text.casefold())
    return [w for w in re.split(r"[^\w]+", text) if w]


_PERSON_TITLES = {"dr", "mr", "mrs", "ms", "miss", "mx", "prof", "professor", "sir", "dame",
                  "rev", "fr", "capt", "captain", "lord", "lady", "judge", "coach"}


_ORG_SUFFIXES = {"corp", "corporation", "inc", "ltd", "llc", "gmbh", "plc", "co", "company",
                 "group", "labs", "ag", "sa", "limited"}
_NOT_PERSON_PARTS = _ORG_SUFFIXES | {
    "st", "saint", "san", "santa", "los", "las", "el", "la", "le", "new", "fort", "port",
    "lake", "mount", "mt", "city", "county", "state", "university", "college", "school",
    "bank", "river", "island", "street", "road", "park", "north", "south", "east", "west",
    "project", "team", "club", "app"}


def _alias_of(short: list[str], full: list[str]) -> bool:
    """`short` names `full` by its first or last words: a person's first or last name
    ("Bob" of "Bob Smith"), or an organization without its suffix ("Acme" of "Acme Corp").
    Not a place's or a thing's part ("Louis" of "St Louis", "Beatles" of "The Beatles")."""
    n = len(short)
    if full[:n] == short:
        extra = full[n:]
    elif full[-n:] == short:
        extra = full[:-n]
    else:
        return False
    if full[:n] == short and all(w in _ORG_SUFFIXES for w in extra):
        return True
    return all(w.isalpha() and w not in _NOT_PERSON_PARTS and w not in _STOP_ANY
               for w in extra + short)


def canonical_entity(name: str, existing: Iterable[str]) -> str | None:
    """The existing entity `name` refers to, or None when no match is confident.

    Case, accents, punctuation and titles do not matter ("dr okafor" -> "Dr Okafor",
    "Zoe" -> "Zoë"). A first or last name alone matches the one existing full name that
    starts or ends with it ("Bob" -> "Bob Smith"), and a full name matches the one
    existing short name it extends; two candidates make it ambiguous (None).
    """
    words = _name_key(name or "")
    if not words or all(w in _STOP_ANY for w in words):
        return None
    bare = [w for w in words if w not in _PERSON_TITLES] or words
    titles = {w for w in words if w in _PERSON_TITLES}
    candidates = [e for e in existing if e and e.strip()]
    exact = [e for e in candidates if _name_key(e) == words]
    if exact:
        return exact[0]

    def compatible(e: str) -> bool:
        # "Mr Okafor" is not "Dr Okafor", and "Dr Smith" need not be "Bob Smith".
        other = {w for w in _name_key(e) if w in _PERSON_TITLES}
        return not titles or titles == other

    keyed = [(e, [w for w in _name_key(e) if w not in _PERSON_TITLES] or _name_key(e))
             for e in candidates if compatible(e)]
    same = [e for e, k in keyed if k == bare]
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        return None
    if any(len(w) < 2 for w in bare):
        return None
    longer = [e for e, k in keyed if len(k) > len(bare) and _alias_of(bare, k)]
    shorter = [e for e, k in keyed if 0 < len(k) < len(bare) and len(k[0]) > 1
               and _alias_of(k, bare)]
    if len(longer) == 1 and not shorter:
        return longer[0]
    if len(shorter) == 1 and not longer:
        # Only when no other full name also extends that short name.
        short_key = dict(keyed)[shorter[0]]
        rivals = [e for e, k in keyed if len(k) > len(short_key) and _alias_of(short_key, k)]
        if not rivals:
            return shorter[0]
    return None
