"""A long stored turn shown by the sentences that answer the query.

A turn of a real conversation runs to hundreds of words (the assistant's replies on
LongMemEval average ~23 sentences), and the memory block skips a memory longer than what is
left of its budget (plugin/memory_block.build_block): the most relevant turn would be the
first to go. A turn over EXCERPT_TOKENS is therefore shown as its user message (whole, up to
USER_WHOLE tokens) and the best sentences of the rest for the query, each with the sentence
after it when there is room (what follows "I got a new bike" says which), in their order,
"…" where something was left out, under its "User:" and "Assistant:" labels. A sentence's
score is the cosine of the offline embedder between it and the query plus KEYWORD_WEIGHT ×
the share of the query's words it holds. The turn's first sentence starts with a bonus
(FIRST_BONUS): it usually says what the turn is about. The reply's sentence vectors are the
turn index's (no reply is embedded again per search).
Chosen on the dev split (scripts/excerpt_budget.py, docs/PERFORMANCE.md).
"""
from __future__ import annotations

import bisect
import itertools
import re

import numpy as np

from memoryplus.common.text import KEYWORD_STOP_WORDS, prompt_tokens, split_sentences, stem, truncate_tokens
from memoryplus.engine.embedders import embed_rows, sentence_embedder
from memoryplus.engine.turn_index import REPLY_DIM, compact_query, split_body, tokens as stems

EXCERPT_TOKENS = 250        # a turn up to this many prompt tokens is shown whole
KEYWORD_WEIGHT = 0.5
FIRST_BONUS = 0.1
GAP = "…"
USER_WHOLE = 125            # a user message up to this many tokens is kept whole in an excerpt


def excerpt(body: str, query: str, bank_embedder, budget: int = EXCERPT_TOKENS) -> str:
    """`body` (Turn.body: 'User: …' / 'Assistant: …') in at most ~`budget` prompt tokens
    (its labels and gap marks on top)."""
    return excerpts([body], query, bank_embedder, budget=budget)[0]


def excerpts(bodies: list[str], query: str, bank_embedder, replies: list | None = None,
             budget: int = EXCERPT_TOKENS) -> list[str]:
    """excerpt() of each body. `replies`: per body, the turn index's compact vectors of its
    reply's sentences (TurnIndex.reply_rows; None: not known), so that a search embeds no
    reply again (a reply has ~23 sentences; embedding them took ~2 ms a turn)."""
    out = list(bodies)
    long: dict[int, tuple[list[str], list[str], bool]] = {}
    for n, body in enumerate(bodies):
        # a token is at least one character, and real text has far fewer than one per 8
        if len(body) <= budget or (len(body) <= 8 * budget and prompt_tokens(body) <= budget):
            continue
        user, assistant = split_body(body)
        # a short user message is kept whole: it is the user's memory, and the part a
        # question about what the user said needs (it needs no splitting either)
        whole = prompt_tokens(user) <= USER_WHOLE
        mine = ([user] if user.strip() else []) if whole else split_sentences(user)
        theirs = split_sentences(assistant)
        if mine or theirs:
            long[n] = (mine, theirs, whole)
    if not long:
        return out
    words = _query_words(query)
    by = sentence_embedder(bank_embedder)
    # what is scored by its vector: the sentences of a long user message, and of a reply
    # the index holds no vectors of; embedded in one call
    held = {n: replies[n] for n, (_, theirs, _) in long.items()
            if replies is not None and replies[n] is not None and len(replies[n]) == len(theirs)}
    fresh = [s for n, (mine, theirs, whole) in long.items()
             for s in ([] if whole else mine) + ([] if n in held else theirs)]
    vectors = compact = None
    if by is not None:
        rows = embed_rows(by, [query, *fresh], REPLY_DIM)
        vectors = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)
        compact = compact_query(vectors[0])
    at = 1
    for n, (mine, theirs, whole) in long.items():
        sentences = mine + theirs
        score = KEYWORD_WEIGHT * _keyword_share(sentences, words)
        if vectors is not None:
            for first, count, rows in ((0, 0 if whole else len(mine), None),
                                       (len(mine), len(theirs), held.get(n))):
                if rows is not None:
                    score[first:first + count] += rows.astype(np.float32) @ compact
                elif count:
                    score[first:first + count] += vectors[at:at + count] @ vectors[0]
                    at += count
        parts = [("User", s) for s in mine] + [("Assistant", s) for s in theirs]
        out[n] = _chosen(parts, score, budget, keep=len(mine) if whole else 0)
    return out


def _query_words(query: str) -> tuple[re.Pattern | None, dict[str, str], int]:
    """The query's words (by their singular, as the turn index matches them) as one pattern
    over a lower-cased sentence, each spelling found mapped to its word, and their number."""
    words = set(stems(query))
    spelled: dict[str, str] = {}
    for w in words:
        for x in (w, w + "s", w[:-1] + "ies" if w.endswith("y") else w):
            if stem(x) == w and x not in KEYWORD_STOP_WORDS:
                spelled[x] = w
    if not spelled:
        return None, {}, len(words)
    alternatives = "|".join(sorted(map(re.escape, spelled), key=len, reverse=True))
    return re.compile(rf"(?<![a-z0-9])(?:{alternatives})(?![a-z0-9])"), spelled, len(words)


def _keyword_share(sentences: list[str], words) -> np.ndarray:
    """Per sentence, the share of the query's words it holds (the turn index's tokens).
    One scan of the sentences joined by newlines, each match counted for the sentence it
    falls in: a newline bounds a word as the ends of a sentence do, and no query word holds
    one, so the matches are those of a scan per sentence (a reply has ~23 sentences: one
    scan each was a fifth of a search's excerpt time)."""
    pattern, spelled, n = words
    share = np.zeros(len(sentences), np.float32)
    if pattern is None or not sentences:
        return share
    lowered = [s.lower() for s in sentences]
    ends = list(itertools.accumulate(len(s) + 1 for s in lowered))     # past each one's newline
    found: dict[int, set[str]] = {}
    for m in pattern.finditer("\n".join(lowered)):
        found.setdefault(bisect.bisect_right(ends, m.start()), set()).add(spelled[m.group()])
    for i, got in found.items():
        share[i] = len(got) / n
    return share


def _chosen(parts: list[tuple[str, str]], score: np.ndarray, budget: int, keep: int = 0) -> str:
    """The best sentences by `score` within `budget`, the first `keep` of them in any case."""
    score[0] += FIRST_BONUS
    cost: dict[int, int] = {}           # counted when first looked at: most never are

    def tokens_of(j: int) -> int:
        if j not in cost:
            cost[j] = prompt_tokens(parts[j][1])
        return cost[j]
    chosen: set[int] = set(range(keep))
    left = budget - sum(tokens_of(j) for j in range(keep))
    for i in np.argsort(-score, kind="stable"):
        if left <= 0:
            break
        for j in (int(i), int(i) + 1):      # the sentence, then what follows it
            if j < len(parts) and j not in chosen and tokens_of(j) <= left:
                chosen.add(j)
                left -= cost[j]
    if not chosen:      # one sentence longer than the budget: its first words
        role, sentence = parts[int(np.argmax(score))]
        return f"{role}: {truncate_tokens(sentence, budget)}"
    return _joined(parts, sorted(chosen))


def _joined(parts: list[tuple[str, str]], chosen: list[int]) -> str:
    """The chosen sentences under their speakers' labels, "…" wherever sentences are left out."""
    picked = set(chosen)
    last = {parts[i][0]: i for i in chosen}         # each speaker's last sentence shown
    lines: dict[str, list[str]] = {}
    for i in chosen:
        role, sentence = parts[i]
        line = lines.setdefault(role, [])
        if i > 0 and parts[i - 1][0] == role and i - 1 not in picked:
            line.append(GAP)
        line.append(sentence)
        if i == last[role] and i + 1 < len(parts) and parts[i + 1][0] == role:
            line.append(GAP)
    return "\n".join(f"{role}: {' '.join(line)}" for role, line in lines.items())
