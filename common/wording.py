"""How memories read to people: counts with the right plural, texts cut at a word or sentence
boundary, a stored turn's role labels in plain words. Plain Python (no Qt): the chat commands,
the command line and the memory browser share it."""
from __future__ import annotations

import re

# A stored turn holds "User: ..." / "Assistant: ..." lines (records.Turn.episode_text).
_ROLE = re.compile(r"^(User|Assistant): ?", re.M)
ROLE_WORDS = {"User": "You said:", "Assistant": "The assistant said:"}
_SENTENCE_END = re.compile(r"[.!?…](?=\s)")


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 memory', '2 memories', '1,204 turns'."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def one_line(text: str) -> str:
    return " ".join(str(text or "").split())


def shorten(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters: cut after the last whole sentence that
    fits when that keeps most of the room, else after the last whole word, with an ellipsis.
    Never part of a word (a single word longer than the limit is the only exception)."""
    t = one_line(text)
    if len(t) <= limit:
        return t
    room = t[: max(limit - 1, 1)]
    ends = [m.end() for m in _SENTENCE_END.finditer(t[: limit + 1]) if m.end() <= limit - 2]
    if ends and ends[-1] >= limit * 0.6:
        return t[: ends[-1]] + " …"
    if t[len(room)].isspace():   # the cut falls between two words
        cut = room.rstrip()
    else:
        cut = room.rsplit(" ", 1)[0].rstrip() if " " in room else room
    return cut.rstrip(",;:-–—") + "…"


def readable(text: str) -> str:
    """A stored turn's role labels in plain words: 'You said: ... The assistant said: ...'."""
    return _ROLE.sub(lambda m: ROLE_WORDS[m.group(1)] + " ", str(text or ""))
