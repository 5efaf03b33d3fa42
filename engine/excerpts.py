"""A long stored turn shown by the sentences that answer the query.

A turn of a real conversation runs to hundreds of words (the assistant's replies on
LongMemEval average ~23 sentences), and the memory block skips a memory longer than what is
left of its budget (plugin/memory_block.build_block): the most relevant turn would be the
first to go. A turn over EXCERPT_TOKENS is therefore shown as its best sentences for the
query, each with the sentence after it when there is room (what follows "I got a new bike"
says which), in their order, "…" where something was left out, under its "User:" and
"Assistant:" labels. A sentence's score is the cosine of the offline embedder between it and
the query plus KEYWORD_WEIGHT × the share of the query's words it holds. The turn's first
sentence starts with a bonus (FIRST_BONUS): it usually says what the turn is about.
Chosen on the dev split (scripts/excerpt_budget.py, docs/PERFORMANCE.md).
"""
from __future__ import annotations

import numpy as np

from memoryplus.common.text import PROMPT_TOKEN, split_sentences
from memoryplus.engine.embedders import embed_rows, sentence_embedder
from memoryplus.engine.turn_index import REPLY_DIM, compact_query, split_body, tokens as stems

EXCERPT_TOKENS = 250        # a turn up to this many prompt tokens is shown whole
KEYWORD_WEIGHT = 0.5
FIRST_BONUS = 0.1
GAP = "…"


def prompt_tokens(text: str) -> int:
    return len(PROMPT_TOKEN.findall(text))


def excerpt(body: str, query: str, bank_embedder, budget: int = EXCERPT_TOKENS) -> str:
    """`body` (Turn.body: 'User: …' / 'Assistant: …') in at most ~`budget` prompt tokens
    (its labels and gap marks on top)."""
    return excerpts([body], query, bank_embedder, budget=budget)[0]


def excerpts(bodies: list[str], query: str, bank_embedder, replies: list | None = None,
             budget: int = EXCERPT_TOKENS) -> list[str]:
    """excerpt() of each body. `replies`: per body, the turn index's compact vectors of its
    reply's sentences (TurnIndex.reply_rows; None: not known), so that a search embeds
    only the user's sentences again (a reply has ~23; embedding them took ~2 ms a turn)."""
    out = list(bodies)
    long = {}
    for n, body in enumerate(bodies):
        if prompt_tokens(body) > budget:
            user, assistant = split_body(body)
            mine, theirs = split_sentences(user), split_sentences(assistant)
            if mine or theirs:
                long[n] = (mine, theirs)
    if not long:
        return out
    q = set(stems(query))
    by = sentence_embedder(bank_embedder)
    # the user's sentences, and any reply the index holds no vectors of, embedded at once
    fresh: list[str] = []
    known: dict[int, np.ndarray] = {}
    for n, (mine, theirs) in long.items():
        rows = replies[n] if replies is not None else None
        if rows is not None and len(rows) == len(theirs):
            known[n] = rows
            fresh += mine
        else:
            fresh += mine + theirs
    query_row, fresh_rows = None, None
    if by is not None:
        rows = embed_rows(by, [query, *fresh], REPLY_DIM)
        rows = rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-9)
        query_row, fresh_rows = rows[0], rows[1:]
    at = 0
    for n, (mine, theirs) in long.items():
        sentences = mine + theirs
        kw = np.array([len(q & set(stems(s))) / len(q) if q else 0.0 for s in sentences], np.float32)
        score = KEYWORD_WEIGHT * kw
        if query_row is not None:
            if n in known:
                cos = np.concatenate([fresh_rows[at:at + len(mine)] @ query_row,
                                      known[n].astype(np.float32) @ compact_query(query_row)])
                at += len(mine)
            else:
                cos = fresh_rows[at:at + len(sentences)] @ query_row
                at += len(sentences)
            score = score + cos
        parts = [("User", s) for s in mine] + [("Assistant", s) for s in theirs]
        out[n] = _chosen(parts, score, budget)
    return out


def _chosen(parts: list[tuple[str, str]], score: np.ndarray, budget: int) -> str:
    score[0] += FIRST_BONUS
    cost = [prompt_tokens(s) for _, s in parts]
    chosen: set[int] = set()
    left = budget
    for i in np.argsort(-score, kind="stable"):
        if left <= 0:
            break
        for j in (int(i), int(i) + 1):      # the sentence, then what follows it
            if j < len(parts) and j not in chosen and cost[j] <= left:
                chosen.add(j)
                left -= cost[j]
    if not chosen:      # one sentence longer than the budget: its first words
        role, sentence = parts[int(np.argmax(score))]
        ends = [m.end() for m in PROMPT_TOKEN.finditer(sentence)]
        return f"{role}: {sentence[:ends[budget - 1]]} {GAP}"
    return _joined(parts, sorted(chosen))


def _joined(parts: list[tuple[str, str]], chosen: list[int]) -> str:
    """The chosen sentences under their speakers' labels, "…" wherever sentences are left out."""
    picked = set(chosen)
    lines: dict[str, list[str]] = {}
    for i in chosen:
        role, sentence = parts[i]
        line = lines.setdefault(role, [])
        if i > 0 and parts[i - 1][0] == role and i - 1 not in picked:
            line.append(GAP)
        line.append(sentence)
        after = i + 1
        if after < len(parts) and parts[after][0] == role and after not in picked and \
                not any(j > i and parts[j][0] == role for j in picked):
            line.append(GAP)
    return "\n".join(f"{role}: {' '.join(line)}" for role, line in lines.items())
