"""Text preparation: role-labelled blocks, bounded length, contractions, and the small
word helpers the rules share. Tokens and sentences come from common/text."""
from __future__ import annotations

import re
import unicodedata
from typing import Iterable

from .lexicons import _NAME_CONNECTORS


MAX_CHARS = 60_000          # text read per extraction (a setting caps turns at 10k tokens)
# ── Text preparation ─────────────────────────────────────────────────────────────────────

_LABEL = re.compile(r"(?im)^[ \t]*(user|assistant|human|ai|bot|system)[ \t]*:[ \t]?")


# Long turns made these scans a quarter of local extraction. A lookahead of the first letters
# lets a scan pass over other positions, and a literal every match contains (searched with
# the same flags) spares a turn without it the scan: the same matches either way.
def _contraction(pattern: str, repl: str, needs: str | None, flags: int = 0):
    """A contraction's rewrite, and the literal its matches contain (None: too common to test)."""
    return (re.compile(pattern, flags), repl,
            None if needs is None else re.compile(re.escape(needs), flags))


_CONTRACTIONS = [
    _contraction(r"(?=[Cc])\b([Cc]a)n'?t\b", r"\1n not", "an"),
    _contraction(r"\b([Ww])on't\b", r"\1ill not", "on't"),
    _contraction(r"\b(\w+)n't\b", r"\1 not", "n't"),
    _contraction(r"(?=[dihawcs])\b(do|does|did|is|are|was|were|have|has|had|would|could|should)nt\b",
                 r"\1 not", "nt", re.I),
    _contraction(r"(?=[Ii])\b([Ii])'?m\b", r"\1 am", None),
    _contraction(r"\b([Ii])'ve\b", r"\1 have", "'ve"),
    _contraction(r"(\w)'ve\b", r"\1 have", "'ve"),
    _contraction(r"\b([Ii])'ll\b", r"\1 will", "'ll"),
    _contraction(r"(\w)'ll\b", r"\1 will", "'ll"),
    _contraction(r"\b([Ii]|you|we|they|he|she)'d\b", r"\1 would", "'d", re.I),
    _contraction(r"(\w)'re\b", r"\1 are", "'re"),
    _contraction(r"(?=[ithsw])\b(it|that|he|she|there|what|who|where|here|this)'s\b", r"\1 is",
                 "'s", re.I),
    _contraction(r"\b([Ll])et's\b", r"\1et us", "et's"),
    _contraction(r"\b([Gg])onna\b", r"\1oing to", "onna"),
    _contraction(r"\b([Ww])anna\b", r"\1ant to", "anna"),
    _contraction(r"\b([Gg])otta\b", r"\1ot to", "otta"),
]
_TITLE_DOT = re.compile(r"(?=[dmpsjcrf])\b(Dr|Mr|Mrs|Ms|Mx|Prof|St|Jr|Sr|Mt|Capt|Rev|Fr)\.(?=\s)",
                       re.I)


def _lower(text: str) -> str:
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c.lower() if len(c.lower()) == 1 else c for c in text)


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = (text.replace("’", "'").replace("‘", "'").replace("“", '"').replace("”", '"')
            .replace("\u00a0", " "))
    text = _TITLE_DOT.sub(r"\1", text)
    for pattern, repl, needs in _CONTRACTIONS:
        if needs is None or needs.search(text):
            text = pattern.sub(repl, text)
    return text


def _blocks(body: str) -> list[tuple[str, str]]:
    """(speaker, text) blocks; speaker is "User" or "Assistant" (system lines are dropped)."""
    out: list[tuple[str, str]] = []
    matches = list(_LABEL.finditer(body))
    if not matches:
        return [("User", body)] if body.strip() else []
    if body[:matches[0].start()].strip():
        out.append(("User", body[:matches[0].start()]))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(body)
        role = m.group(1).lower()
        if role == "system":
            continue
        speaker = "User" if role in ("user", "human") else "Assistant"
        out.append((speaker, body[m.end():end]))
    return out


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[:limit]
    stop = max(head.rfind(". "), head.rfind("! "), head.rfind("? "), head.rfind("\n"))
    return head[:stop + 1] if stop > limit // 2 else head


def _bounded_blocks(body: str) -> list[tuple[str, str]]:
    blocks = _blocks(body)
    total = sum(len(t) for _, t in blocks)
    if total <= MAX_CHARS:
        return blocks
    # Share the budget between speakers so a huge paste cannot crowd out the other lines.
    blocks = blocks[:200]
    share = max(MAX_CHARS // max(len(blocks), 1), 500)
    out, used = [], 0
    for speaker, text in blocks:
        if used >= MAX_CHARS:
            break
        piece = _cut(text, min(share, MAX_CHARS - used))
        out.append((speaker, piece))
        used += len(piece)
    return out


# ── Small helpers ───────────────────────────────────────────────────────────────────────

def _is_cap(tok: str) -> bool:
    """A token that can be (part of) a proper name: Berlin, iPhone, NASA, Zoë, Łódź."""
    if not tok or not tok[0].isalpha():
        return False
    if tok[0].isupper():
        return True
    rest = tok[1:]
    if not rest or rest.islower():      # the common case, decided without a per-letter scan
        return False
    return any(c.isupper() for c in rest) and tok[0].islower()   # iPhone, macOS, eBay


def _is_word(tok: str) -> bool:
    return bool(tok) and (tok[0].isalnum())


def _clean_name(words: list[str]) -> str:
    name = " ".join(words).strip(" -'\"")
    if name.endswith("'s"):
        name = name[:-2]
    return name


def _title(words: list[str]) -> list[str]:
    return [w if w.lower() in _NAME_CONNECTORS else w[:1].upper() + w[1:] for w in words]


def _gerund(verb: str) -> str:
    v = verb.lower()
    if v.endswith("ie"):
        return v[:-2] + "ying"
    if v.endswith("e") and not v.endswith(("ee", "ye", "oe")) and len(v) > 2:
        return v[:-1] + "ing"
    if (len(v) <= 4 and len(v) >= 3 and v[-1] not in "aeiouwxy" and v[-2] in "aeiou"
            and v[-3] not in "aeiou"):
        return v + v[-1] + "ing"
    return v + "ing"


def _upper_snake(words: Iterable[str]) -> str:
    out = re.sub(r"[^A-Za-z0-9]+", "_", "_".join(words)).strip("_").upper()
    return re.sub(r"FAVORITE", "FAVOURITE", out)
