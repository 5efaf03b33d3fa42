"""Offline emotion, topic and vibe analysis: lexicons matched on whole tokens.

No LLM, no network, deterministic. Text is split into tokens (words, and single
punctuation or emoji characters); cues are looked up as whole token sequences, so "display"
never matches a gaming cue and "category" never matches "cat" (the earlier plugin matched
substrings and tagged everything "curious").

Emotions are the speaker's: when the text has role labels ("User: ..."), only User lines are
read for emotions and vibe (the assistant's "happy to help" is not the user's mood); topics
come from every line. A cue preceded by a negation in the same clause ("not happy", "don't
worry") does not count.

Sensitivity: Low keeps only strong, explicit cues ("I'm furious", "I hate", "so excited"),
Medium adds clear ones ("frustrated", "haha that's hilarious", "thank you"), High adds mild
cues (emoji, "lol", "hmm", "ugh", "thanks"). A clear cue with an intensifier ("so", "really"),
in capitals or stretched ("sooo") counts as strong.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from memoryplus.common.text import LEXICON_TOKEN
from memoryplus.engine.insight_words import (
    _EMOTION_CUES, _NOT_EMOTIONS, _VALENCE, _SYNONYMS, _TOPIC_CUES,
    _VERB_CUES, _BEFORE_VERB, _AFTER_VERB, _POSITIVE, _NEGATIVE, _NEGATORS, _INTENSIFIERS,
    _CLAUSE_BREAK, _EMOTICON, _ROLE, _LEVELS, _SENSITIVITY,
)

MAX_CHARS = 200_000        # longer text is analysed up to here
MAX_EMOTIONS = 3
MAX_TOPICS = 3



@dataclass
class Insights:
    emotions: list[str]
    topics: list[str]
    vibe: float | None


def _norm(tok: str) -> str:
    return tok.lower().replace("’", "'")


def _tokenize(text: str) -> list[str]:
    return LEXICON_TOKEN.findall(text)


def _build(entries: dict[str, list[tuple[str, object]]]) -> tuple[dict, dict]:
    """A phrase lexicon: token tuple -> payload, and first token -> longest phrase length."""
    lex: dict[tuple[str, ...], object] = {}
    first: dict[str, int] = {}
    for phrase, payload in ((p, v) for items in entries.values() for p, v in items):
        key = tuple(_norm(t) for t in _tokenize(phrase))
        if not key:
            continue
        lex.setdefault(key, payload)
        first[key[0]] = max(first.get(key[0], 0), len(key))
    return lex, first


def _plural(word: str) -> str | None:
    if not word.isalpha() or len(word) < 3 or word.endswith("s"):
        return None
    if word.endswith(("x", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def _emotion_entries():
    out: dict[str, list] = {}
    for emotion, levels in _EMOTION_CUES.items():
        for level_name, cues in zip(("strong", "clear", "mild"), levels):
            for cue in cues:
                if cue.startswith((":", ";", "=", "<")) or cue in ("xd", ":p"):
                    continue   # emoticons are found by _EMOTICON
                out.setdefault(emotion, []).append((cue, (emotion, _LEVELS[level_name])))
    # matched first (longest match), then dropped: the words in them are not cues there
    out["-"] = [(phrase, ("", 0)) for phrase in _NOT_EMOTIONS]
    return out


def _topic_entries():
    out: dict[str, list] = {}
    for topic, cues in _TOPIC_CUES.items():
        for cue in cues:
            weight = 0.5 if cue.endswith("~") else 1.0
            phrase = cue.rstrip("~")
            out.setdefault(topic, []).append((phrase, (topic, weight, phrase)))
            words = phrase.split(" ")
            plural = _plural(words[-1])
            if plural:
                out[topic].append((" ".join(words[:-1] + [plural]), (topic, weight, phrase)))
    return out


_EMO_LEX, _EMO_FIRST = _build(_emotion_entries())
_TOPIC_LEX, _TOPIC_FIRST = _build(_topic_entries())
_SENT_LEX, _SENT_FIRST = _build({
    "pos": [(w, 1.0) for w in _POSITIVE], "neg": [(w, -1.0) for w in _NEGATIVE]})
_EMOTICONS = {
    ":)": ("happy", 2), ":-)": ("happy", 2), ":]": ("happy", 2), "=)": ("happy", 2),
    ":D": ("happy", 2), ":-D": ("happy", 2), "<3": ("happy", 2), ";)": ("amused", 2),
    ";-)": ("amused", 2), "xD": ("amused", 2), "XD": ("amused", 2), ":P": ("amused", 2),
    ":p": ("amused", 2), ":-P": ("amused", 2), ":(": ("sad", 2), ":-(": ("sad", 2),
    ":'(": ("sad", 1), "=(": ("sad", 2), ":/": ("confused", 2), ":-/": ("confused", 2),
    ":|": ("bored", 2), ":-|": ("bored", 2),
}


@lru_cache(maxsize=4096)
def _canon_token(tok: str) -> tuple[str, bool]:
    """Lowercase token with stretched letters undone ("sooo" -> "so", "hahaha" -> "haha").

    Returns (token, stretched)."""
    low = _norm(tok)
    if re.fullmatch(r"(?:ha){2,}h?|(?:ah){2,}", low):
        return "haha", len(low) > 4
    if re.fullmatch(r"(?:he){2,}h?", low):
        return "hehe", len(low) > 4
    if re.fullmatch(r"lo+l+", low):
        return "lol", len(low) > 3
    if re.search(r"(.)\1\1", low):
        for pattern in (r"(.)\1{2,}", ):
            two = re.sub(pattern, r"\1\1", low)
            one = re.sub(pattern, r"\1", low)
            for cand in (one, two):
                if (cand,) in _EMO_LEX or cand in _EMO_FIRST or cand in _INTENSIFIERS \
                        or (cand,) in _SENT_LEX:
                    return cand, True
            return one, True
    return low, False


def _scan(tokens: list[str], lex: dict, first: dict):
    """Longest-match phrase hits: yields (start, length, payload)."""
    i, n = 0, len(tokens)
    while i < n:
        longest = first.get(tokens[i])
        if longest:
            for size in range(min(longest, n - i), 0, -1):
                payload = lex.get(tuple(tokens[i:i + size]))
                if payload is not None:
                    yield i, size, payload
                    i += size
                    break
            else:
                i += 1
        else:
            i += 1


def _negated(tokens: list[str], start: int) -> bool:
    for j in range(start - 1, max(-1, start - 4), -1):
        tok = tokens[j]
        if tok in _CLAUSE_BREAK:
            return False
        if tok in _NEGATORS or tok.endswith("n't"):
            return True
    return False


def _speaker_text(text: str) -> tuple[str, str]:
    """(text to read emotions from, all text without role labels)."""
    if not any(_ROLE.match(line) for line in text.splitlines()[:200]) and not _ROLE.match(text):
        return text, text
    user_lines, all_lines = [], []
    speaker = "user"
    for line in text.splitlines():
        m = _ROLE.match(line)
        if m:
            role = m.group(1).lower()
            speaker = "user" if role in ("user", "human") else "other"
            line = line[m.end():]
        all_lines.append(line)
        if speaker == "user":
            user_lines.append(line)
    return "\n".join(user_lines), "\n".join(all_lines)


def _emotion_hits(text: str) -> tuple[list[tuple[str, int, int]], list[str]]:
    """(emotion, level, position) hits (level 0 strong, 1 clear, 2 mild), and the tokens."""
    raw = _tokenize(text)
    canon = [_canon_token(t) for t in raw]
    tokens = [c[0] for c in canon]
    hits = []
    for start, size, (emotion, level) in _scan(tokens, _EMO_LEX, _EMO_FIRST):
        if not emotion or _negated(tokens, start):
            continue
        words = raw[start:start + size]
        shouted = any(len(w) >= 3 and w.isalpha() and w.isupper() for w in words)
        stretched = any(c[1] for c in canon[start:start + size])
        intensified = start > 0 and tokens[start - 1] in _INTENSIFIERS
        if level == 1 and (shouted or stretched or intensified):
            level = 0
        elif level == 2 and (intensified or shouted):
            level = 1
        hits.append((emotion, level, start))
    for m in _EMOTICON.finditer(text):
        found = _EMOTICONS.get(m.group(0))
        if found:
            hits.append((found[0], found[1], len(raw) + m.start()))
    return hits, tokens


def _level_of(sensitivity: str) -> int:
    try:
        return _SENSITIVITY[sensitivity.strip().lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown emotion sensitivity {sensitivity!r}; expected Low, Medium "
                         "or High") from None


def detect_emotions(text: str, sensitivity: str = "Medium") -> list[str]:
    """Emotion names found in `text` (all of it, role labels or not), strongest first."""
    return _pick_emotions(_emotion_hits(text[:MAX_CHARS])[0], _level_of(sensitivity))


def _pick_emotions(hits: list[tuple[str, int, int]], limit: int) -> list[str]:
    best: dict[str, tuple[int, int]] = {}
    for emotion, level, pos in hits:
        if level <= limit and (emotion not in best or (level, pos) < best[emotion]):
            best[emotion] = (level, pos)
    return [e for e, _ in sorted(best.items(), key=lambda kv: kv[1])][:MAX_EMOTIONS]


def detect_topics(text: str) -> list[str]:
    """Topic labels found in `text`, best first."""
    tokens = [_norm(t) for t in _tokenize(text[:MAX_CHARS])]
    seen: dict[str, dict[str, float]] = {}
    first_pos: dict[str, int] = {}
    for start, size, (topic, weight, cue) in _scan(tokens, _TOPIC_LEX, _TOPIC_FIRST):
        if cue in _VERB_CUES and tokens[start] == cue and (
                (start > 0 and tokens[start - 1] in _BEFORE_VERB)
                or (start + size < len(tokens) and tokens[start + size] in _AFTER_VERB)):
            continue
        seen.setdefault(topic, {})[cue] = weight
        first_pos.setdefault(topic, start)
    scored = [(sum(cues.values()), topic) for topic, cues in seen.items()]
    scored = [(s, t) for s, t in scored if s >= 1.0]
    scored.sort(key=lambda st: (-st[0], first_pos[st[1]]))
    return [t for _, t in scored[:MAX_TOPICS]]


def _vibe(hits: list[tuple[str, int, int]], tokens: list[str]) -> float:
    total = 0.0
    for emotion, level, _pos in hits:
        total += 2 * (_VALENCE[emotion] - 0.5) * (1.5 if level == 0 else 1.0 if level == 1 else 0.5)
    for start, _size, polarity in _scan(tokens, _SENT_LEX, _SENT_FIRST):
        total += (-0.3 if _negated(tokens, start) else 0.6) * polarity
    return round(0.5 + 0.5 * math.tanh(total / 2), 2)


def analyze(text: str, *, emotions: bool = True, sensitivity: str = "Medium",
            topics: bool = True, vibe: bool = False) -> Insights:
    """Emotions (lowercase adjectives), topics (short lowercase labels) and vibe of `text`.

    `text` may be an episode body ("User: ..." / "Assistant: ..." lines): emotions and vibe
    are then read from User lines only, topics from all lines. vibe is 0 (negative) .. 1
    (positive), 0.5 neutral, and None when `vibe` is off.
    """
    limit = _level_of(sensitivity)  # validated even when emotions are off
    text = (text or "")[:MAX_CHARS]
    own, everything = _speaker_text(text)
    hits, tokens = _emotion_hits(own) if (emotions or vibe) else ([], [])
    return Insights(
        emotions=_pick_emotions(hits, limit) if emotions else [],
        topics=detect_topics(everything) if topics else [],
        vibe=_vibe(hits, tokens) if vibe else None,
    )


def canonical_emotion(name: str) -> str | None:
    """An emotion name (ours, a synonym, any case) as one of EMOTION_NAMES, or None."""
    key = " ".join((name or "").strip().lower().split())
    if key in _VALENCE:
        return key
    mapped = _SYNONYMS.get(key)
    return mapped or None


def vibe_from_emotions(emotions: list[str]) -> float | None:
    """Mean valence (0..1) of the known emotions in `emotions`; None when none is known.

    Accepts our names and common synonyms in any case, so it also scores emotion names an
    LLM extracted ("Joyful", "annoyed").
    """
    values = [_VALENCE[c] for c in (canonical_emotion(e) for e in emotions or []) if c]
    if not values:
        return None
    return round(sum(values) / len(values), 2)
