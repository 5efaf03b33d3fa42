"""Date expressions ("Friday", "next week", "May 3rd", "end of Q3") read from tokens."""
from __future__ import annotations

import re

from .lexicons import _MONTHS, _WEEKDAYS


_SEASONS = {"spring", "summer", "autumn", "fall", "winter"}
_DATE_WORDS = set(_WEEKDAYS) | {"today", "tonight", "tomorrow", "eod", "eow", "eom", "noon",
                                "midnight"}


def _parse_date(toks: list[str], lows: list[str], i: int) -> tuple[str, int] | None:
    """A date expression at toks[i:], as (display text, tokens used)."""
    j = i
    n = len(toks)
    if j < n and lows[j] in ("on", "by", "before", "at", "for"):
        j += 1
    if j >= n:
        return None
    w = lows[j]
    if w == "the" and j + 1 < n and lows[j + 1] in ("end", "day") :
        j += 1
        w = lows[j]
    if w in ("next", "this", "coming", "following") and j + 1 < n:
        nxt = lows[j + 1]
        if nxt in _WEEKDAYS or nxt in _SEASONS or nxt in ("week", "month", "year", "weekend",
                                                          "quarter", "sprint"):
            words = [w, toks[j + 1].capitalize() if nxt in _WEEKDAYS else nxt]
            return " ".join(words), j + 2 - i
        return None
    if w in _DATE_WORDS:
        return (toks[j].capitalize() if w in _WEEKDAYS else toks[j]), j + 1 - i
    if w in _SEASONS:
        return w, j + 1 - i
    if w == "end" and j + 2 < n and lows[j + 1] == "of":
        k = j + 2
        if lows[k] in ("the", "this", "next") and k + 1 < n:
            k += 1
        if lows[k] in ("day", "week", "month", "quarter", "year", "sprint") or \
                re.fullmatch(r"q[1-4]", lows[k]) or lows[k] in _MONTHS:
            rest = [t for t in toks[j + 2:k + 1] if t.lower() != "the"]
            return "end of " + " ".join(rest), k + 1 - i
        return None
    if re.fullmatch(r"q[1-4]", w):
        if j + 1 < n and re.fullmatch(r"\d{4}", lows[j + 1]):
            return f"{toks[j].upper()} {toks[j + 1]}", j + 2 - i
        return toks[j].upper(), j + 1 - i
    if w in _MONTHS:
        k = j + 1
        parts = [toks[j].capitalize()]
        if k < n and re.fullmatch(r"\d{1,2}(st|nd|rd|th)?", lows[k]):
            parts.append(toks[k])
            k += 1
            if k + 1 < n and lows[k] == "," and re.fullmatch(r"\d{4}", lows[k + 1]):
                parts.append(toks[k + 1])
                k += 2
            elif k < n and re.fullmatch(r"\d{4}", lows[k]):
                parts.append(toks[k])
                k += 1
        elif k < n and re.fullmatch(r"\d{4}", lows[k]):
            parts.append(toks[k])
            k += 1
        return " ".join(parts), k - i
    if re.fullmatch(r"\d{1,2}(st|nd|rd|th)?", w):
        k = j + 1
        if k < n and lows[k] == "of":
            k += 1
        if k < n and lows[k] in _MONTHS:
            parts = [toks[j], toks[k].capitalize()]
            k += 1
            if k < n and re.fullmatch(r"\d{4}", lows[k]):
                parts.append(toks[k])
                k += 1
            return " ".join(parts), k - i
        return None
    if re.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.]\d{1,2}(?:[/.]\d{2,4})?", w):
        return toks[j], j + 1 - i
    if w == "in" and j + 2 < n and re.fullmatch(r"\d+|a|an|two|three|few", lows[j + 1]) \
            and lows[j + 2].rstrip("s") in ("day", "week", "month", "hour"):
        return " ".join(toks[j:j + 3]), j + 3 - i
    return None
