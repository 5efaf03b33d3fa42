"""Reading a search query with rules, like the extraction reads a turn."""
from __future__ import annotations

import re

from .text import _upper_snake


# ── reading a search query (rules, like the extraction above) ─────────────────────────────
_PAST_INTENT = re.compile(
    r"\b(before|previous(ly)?|used to|formerly|former|originally|prior to|no longer|any ?more|"
    r"in the past|back then|old (address|job|car|flat|house|home)|last (year|month|week|time))\b", re.I)
_MY_ROLE = re.compile(r"\bmy ((?:[^\W\d_][\w\-]* ){0,2}[^\W\d_][\w\-]*)", re.I)


def asks_about_past(query: str) -> bool:
    """'Where did Ravi live before moving to Valencia?': superseded facts are the answer."""
    return bool(_PAST_INTENT.search(query))


def role_references(query: str) -> list[tuple[str, str]]:
    """("my boss", "HAS_BOSS")-style pairs for the roles a query names, longest first per
    mention: the relations under which the user's own facts name that person ("My boss is
    Tomasz" is stored as User HAS_BOSS Tomasz)."""
    out: list[tuple[str, str]] = []
    for m in _MY_ROLE.finditer(query):
        words = m.group(1).split()
        for n in range(len(words), 0, -1):
            role = [w.lower() for w in words[:n]]
            if role[-1].endswith("'s"):
                role[-1] = role[-1][:-2]
            phrase = f"{m.group(0)[:3]}{' '.join(words[:n])}"
            out.append((phrase, "HAS_" + _upper_snake(role)))
    return out
