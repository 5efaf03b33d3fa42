"""A sentence cut into clauses, fillers and reported speech stripped, and the clause a
rule reads (who "I" and "you" are in it)."""
from __future__ import annotations

from .collector import _Collector
from .lexicons import (
    _ADVERBS, _AUX, _CAUSAL, _CONDITIONAL, _DISCOURSE, _DISCOURSE_PHRASES, _FORMS,
    _MEMO_PHRASES, _MODALS, _REPORTING)
from .text import _is_cap, _is_word


MAX_CLAUSE_TOKENS = 60

# ── Clauses ─────────────────────────────────────────────────────────────────────────────

_SPLIT_PUNCT = {";", ":", "—", "–", "(", ")", "\"", "…"}


def _starts_clause(lows: list[str], toks: list[str], i: int) -> bool:
    if i >= len(lows):
        return False
    while i + 1 < len(lows) and lows[i] in _ADVERBS | {"then", "now"}:
        i += 1            # "..., but now I live in Paris"
    w = lows[i]
    nxt = lows[i + 1] if i + 1 < len(lows) else ""
    if w in ("i", "you", "he", "she", "we", "they", "it", "there"):
        return True
    if w in ("my", "your", "our", "his", "her", "their") and nxt:
        return any(lows[k] in ("is", "are", "was", "were", "has")
                   for k in range(i + 1, min(i + 5, len(lows))))
    if w in _FORMS or w in _AUX or w in _MODALS:
        return True
    if _is_cap(toks[i]) and nxt in _FORMS and _FORMS[nxt][1] in ("3sg", "past"):
        return True
    if _is_cap(toks[i]) and nxt in ("is", "was", "has"):
        return True
    return False


def _clauses(toks: list[str], lows: list[str]) -> list[tuple[int, int, bool]]:
    """(start, end, coordinated) token spans; coordinated clauses may inherit a subject."""
    spans: list[tuple[int, int, bool]] = []
    start, coordinated = 0, False
    i, n = 0, len(toks)
    while i < n:
        t, w = toks[i], lows[i]
        cut = None
        if t in _SPLIT_PUNCT or (t == "-" and i > 0):
            cut, nxt_start, coord = i, i + 1, False
        elif t == ",":
            k = i + 1
            if k < n and lows[k] in ("and", "but", "so", "or", "plus", "then"):
                k += 1
            if _starts_clause(lows, toks, k) or (k < n and lows[k] in _CONDITIONAL | _CAUSAL):
                cut, nxt_start, coord = i, i + 1, True
        elif w in ("and", "but", "so", "plus", "then", "or") and i > start:
            if _starts_clause(lows, toks, i + 1):
                cut, nxt_start, coord = i, i, True
        elif w in _CONDITIONAL or w in ("because", "since", "although", "though", "whereas",
                                        "cause", "cuz"):
            if i > start and w not in ("hopefully", "maybe", "perhaps", "before", "after"):
                cut, nxt_start, coord = i, i, False
        if cut is not None:
            if cut > start:
                spans.append((start, cut, coordinated))
            start, coordinated = nxt_start, coord
        i += 1
    if start < n:
        spans.append((start, n, coordinated))
    return spans


def _strip_discourse(toks: list[str], lows: list[str]) -> tuple[list[str], list[str], str]:
    """Drop leading fillers; returns the tokens and the kind of clause ("", "conditional")."""
    i, n = 0, len(toks)
    changed = True
    while changed and i < n:
        changed = False
        while i < n and not _is_word(toks[i]):
            i += 1
            changed = True
        for phrase in _DISCOURSE_PHRASES:
            if i < n and lows[i] == phrase[0] and tuple(lows[i:i + len(phrase)]) == phrase:
                i += len(phrase)
                changed = True
        if i < n and lows[i] in _CONDITIONAL:
            return toks[i:], lows[i:], "conditional"
        if i < n and (lows[i] in _DISCOURSE or lows[i] in _CAUSAL):
            i += 1
            changed = True
        # "Remember that ...", "note: ...", "keep in mind that ..."
        for phrase in _MEMO_PHRASES:
            if i < n and lows[i] == phrase[0] and tuple(lows[i:i + len(phrase)]) == phrase:
                k = i + len(phrase)
                while k < n and lows[k] in ("that", ",", ":", "-", "—"):
                    k += 1
                if k < n and _starts_clause(lows, toks, k) and lows[k] not in _FORMS:
                    i = k
                    changed = True
                break
        # Reported speech: "you said (that) ...", "I think (that) ..."
        if n - i > 2 and lows[i] in ("i", "you") and lows[i + 1] in _REPORTING:
            k = i + 2
            if lows[i + 1] == "told" and k < n and lows[k] in ("me", "you", "us"):
                k += 1
            if k < n and lows[k] == "that":
                k += 1
            if _starts_clause(lows, toks, k) and lows[k] not in _FORMS:
                i = k
                changed = True
    # Facts sit at the start of a clause; a run-on clause is read up to MAX_CLAUSE_TOKENS.
    return toks[i:i + MAX_CLAUSE_TOKENS], lows[i:i + MAX_CLAUSE_TOKENS], ""


# ── Rules over one clause ────────────────────────────────────────────────────────────────

class _Clause:
    def __init__(self, toks, lows, speaker, caseless, col: _Collector):
        self.toks, self.lows, self.speaker = toks, lows, speaker
        self.caseless, self.col = caseless, col
        self.negated = any(
            lows[k] == "anymore" or (lows[k] in ("any", "no") and k + 1 < len(lows)
                                     and lows[k + 1] in ("more", "longer"))
            for k in range(len(lows)))

    # who "I/my" and "you/your" are in this line
    def me(self) -> str:
        return self.speaker

    def other(self) -> str:
        return "Assistant" if self.speaker == "User" else "User"

    def owner(self, word: str) -> str | None:
        if word in ("i", "me", "my"):
            return self.me()
        if word in ("you", "your"):
            return self.other()
        return None
