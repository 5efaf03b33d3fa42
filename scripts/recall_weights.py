"""How the turn index's weights (engine/turn_index.py) were chosen: 5-fold cross-validation
on LongMemEval's dev split, turns only, no graph (issue 18, docs/PERFORMANCE.md).

    python scripts/recall_weights.py ../shared/data/longmemeval/dev.json.gz

For each question, the haystack's turns go into a TurnIndex (the engine's own code: the same
tokens, BM25, embedder, query reading and feedback step), and the signals are computed once
per way of matching words (by their singular, as the engine does, or as written). The grid
spans that, the cosine's weight (WEIGHTS[2]), DATE_WEIGHT, CONVERSATION_WEIGHT, the
pseudo-relevance feedback (PRF_TURNS, PRF_WEIGHT; none at 0) and the weight of the reply's
best sentence (WEIGHTS[3] and ASSISTANT_WEIGHTS[3]; none at 0). Each fold picks the grid point
with the best any-evidence recall@5 + all-evidence recall@10 + half of any-evidence recall@10
on the other four folds and is scored on its own questions; the mean over the folds is the
estimate (for three shuffles), and the pick on all questions is what the module holds.
Folds are by question (seeded shuffle). Abstention questions are left out, as in the bench.
SPREAD (for questions that add up or order occasions) is chosen the same way after the grid,
the other weights held at what the module holds.

A tool of the checkout, not of the package (it reads the bench's dev-split loader in cli/, and
testing/ must not import cli/: the layout check forbids cycles between folders).
"""
from __future__ import annotations

import itertools
import random
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout's parent: `memoryplus`

from memoryplus.cli import bench_recall as br  # noqa: E402  (after the path insert)
from memoryplus.common.text import keyword_tokens  # noqa: E402
from memoryplus.engine import extract as local_extract  # noqa: E402
from memoryplus.engine import turn_index as ti  # noqa: E402
from memoryplus.engine.embedders import LocalEmbedder  # noqa: E402

MATCHING = {"singular": ti.tokens, "as written": keyword_tokens}
# (matching, cosine weight, date weight, conversation share, (feedback turns, weight), reply
# sentences' weight)
GRID = list(itertools.product(MATCHING, [2.0, 3.0], [2.0, 4.0], [0.1, 0.2],
                              [(0, 0.0), (3, 0.5), (3, 1.0), (5, 1.0)], [0.0, 0.5, 1.0]))
HELD = ("singular", 3.0, 4.0, 0.2, (3, 1.0), 0.5)       # what engine/turn_index.py holds
SPREADS = [0.0, 0.5, 1.0, 2.0, 3.0, 4.0]


def signals(path: str) -> dict[str, list[tuple]]:
    emb = LocalEmbedder()
    questions = [q for q in map(br.to_question, br.load(path)) if not q.abstention]
    vectors = [(emb.embed_sync([t.user or "-" for t in q.turns]), emb.embed_sync([q.question])[0],
                [ti.reply_vectors(emb, f"Assistant: {t.assistant}") for t in q.turns])
               for q in questions]
    out: dict[str, list[tuple]] = {}
    engine_tokens = ti.tokens
    for name, matching in MATCHING.items():
        ti.tokens = matching
        try:
            rows = []
            for q, (users, qv, replies) in zip(questions, vectors):
                index = ti.TurnIndex(dim=emb.dim)
                for t, v, r in zip(q.turns, users, replies):
                    index.add(t.id, f"User: {t.user}\nAssistant: {t.assistant}", t.time, v, r)
                sig, live = index.signals(q.question, qv, reply_vector=ti.reply_query(emb, q.question, qv))
                back = local_extract.days_ago(q.question)
                near = None if back is None else index.near(q.date - timedelta(days=back), back)
                rows.append((q, index, qv, sig, live, local_extract.asks_about_assistant(q.question), near,
                             index.conversations()))
            out[name] = rows
        finally:
            ti.tokens = engine_tokens
    return out


def per_question(data, point, spread: float = 0.0) -> np.ndarray:
    """Per question, (any@5, all@10, any@10) of the turn ranking at `point`, with `spread`
    for the questions that asks_for_several."""
    matching, cos, date_w, conv_w, (prf_turns, prf_w), reply_w = point
    ti.DATE_WEIGHT, ti.CONVERSATION_WEIGHT, ti.PRF_TURNS, ti.PRF_WEIGHT = date_w, conv_w, prf_turns, prf_w
    rows = []
    for q, index, qv, sig, live, to_assistant, near, conv in data[matching]:
        weights = (ti.ASSISTANT_WEIGHTS[:3] if to_assistant else (1.0, 0.5, cos)) + (reply_w,)
        total = index.ranking(sig, live, qv, weights, near, conv, feedback=not to_assistant)
        if local_extract.asks_for_several(q.question):
            total = index.spread(total, conv, spread)
        ranked = [q.turns[i].id for i in np.argsort(-total, kind="stable") if np.isfinite(total[i])]
        rows.append((br.score(ranked, q, 5)["any"], br.score(ranked, q, 10)["all"],
                     br.score(ranked, q, 10)["any"]))
    return np.array(rows)


GAIN = np.array([1.0, 1.0, 0.5])


def cross_validate(table: dict, n: int) -> None:
    """Per seed, each fold's pick on the other four folds and its held-out figures."""
    for seed in (0, 1, 2):
        order = list(range(n))
        random.Random(seed).shuffle(order)
        folds = [order[i::5] for i in range(5)]
        held = []
        for fold in folds:
            train = [i for i in order if i not in fold]
            best = max(table, key=lambda w: (table[w][train] @ GAIN).sum())
            held.append(table[best][fold])
            print(f"seed {seed}, fold of {len(fold)}: picked {best}, held-out any@5 / all@10 / any@10 "
                  + " / ".join(f"{x:.3f}" for x in table[best][fold].mean(axis=0)))
        est = np.concatenate(held).mean(axis=0)
        print(f"seed {seed}: cross-validated estimate any@5 / all@10 / any@10 "
              + " / ".join(f"{x:.3f}" for x in est))


def main(path: str) -> None:
    data = signals(path)
    table = {w: per_question(data, w) for w in GRID}
    n = len(data["singular"])
    cross_validate(table, n)
    best = max(GRID, key=lambda w: (table[w] @ GAIN).sum())
    print(f"on all {n} questions {best}: " + " / ".join(f"{x:.3f}" for x in table[best].mean(axis=0)))
    print(f"what the module holds {HELD}: " + " / ".join(f"{x:.3f}" for x in table[HELD].mean(axis=0)))
    old = ("singular", 3.0, 4.0, 0.2, (3, 1.0), 0.0)
    print(f"before the reply's sentences {old}: "
          + " / ".join(f"{x:.3f}" for x in table[old].mean(axis=0)))
    spreads = {s: per_question(data, HELD, s) for s in SPREADS}
    print("SPREAD, the other weights as held:")
    cross_validate(spreads, n)
    for s, rows in spreads.items():
        print(f"SPREAD {s} on all {n}: " + " / ".join(f"{x:.3f}" for x in rows.mean(axis=0)))


if __name__ == "__main__":
    main(sys.argv[1])
