"""How the turn index's weights (engine/turn_index.py) were chosen: 5-fold cross-validation
on LongMemEval's dev split, turns only, no graph (issue 18, docs/PERFORMANCE.md).

    python scripts/recall_weights.py ../shared/data/longmemeval/dev.json.gz

For each question, the haystack's turns go into a TurnIndex (the engine's own code: the same
tokens, BM25, embedder and query reading), and the signals are computed once. The grid spans
the cosine's weight (WEIGHTS[2]), the weights for a question about what the assistant said
(ASSISTANT_WEIGHTS: the user-side signals on or off), DATE_WEIGHT and CONVERSATION_WEIGHT.
Each fold picks the grid point with the best any-evidence recall@5 + all-evidence recall@10 +
half of any-evidence recall@10 on the other four folds and is scored on its own questions; the
mean over the folds is the estimate, and the pick on all questions is what the module holds.
Folds are by question (seeded shuffle). Abstention questions are left out, as in the bench.

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
from memoryplus.engine import extract as local_extract  # noqa: E402
from memoryplus.engine import turn_index as ti  # noqa: E402
from memoryplus.engine.embedders import LocalEmbedder  # noqa: E402

# (cosine weight, assistant questions keep the user signals, date weight, conversation share)
GRID = list(itertools.product([2.0, 3.0], [False, True], [0.0, 2.0, 4.0], [0.0, 0.1, 0.2, 0.3]))


def signals(path: str) -> list[tuple]:
    emb = LocalEmbedder()
    out = []
    for raw in br.load(path):
        q = br.to_question(raw)
        if q.abstention:
            continue
        index = ti.TurnIndex(dim=emb.dim)
        vectors = emb.embed_sync([t.user or "-" for t in q.turns])
        for t, v in zip(q.turns, vectors):
            index.add(t.id, f"User: {t.user}\nAssistant: {t.assistant}", t.time, v)
        sig, live = index.signals(q.question, emb.embed_sync([q.question])[0])
        back = local_extract.days_ago(q.question)
        near = None if back is None else index.near(q.date - timedelta(days=back), back)
        out.append((q, sig, live, local_extract.asks_about_assistant(q.question), near,
                    index.conversations()))
    return out


def per_question(data, point) -> np.ndarray:
    cos, keep_user, date_w, conv_w = point
    ti.DATE_WEIGHT, ti.CONVERSATION_WEIGHT = date_w, conv_w
    rows = []
    for q, sig, live, to_assistant, near, conv in data:
        weights = (1.0, 0.5, cos) if not to_assistant or keep_user else ti.ASSISTANT_WEIGHTS
        total = ti.TurnIndex.fuse(sig, live, weights, near, conv)
        ranked = [q.turns[i].id for i in np.argsort(-total, kind="stable") if np.isfinite(total[i])]
        rows.append((br.score(ranked, q, 5)["any"], br.score(ranked, q, 10)["all"],
                     br.score(ranked, q, 10)["any"]))
    return np.array(rows)


def main(path: str) -> None:
    data = signals(path)
    table = {w: per_question(data, w) for w in GRID}
    gain = np.array([1.0, 1.0, 0.5])
    order = list(range(len(data)))
    random.Random(0).shuffle(order)
    folds = [order[i::5] for i in range(5)]
    held = []
    for fold in folds:
        train = [i for i in order if i not in fold]
        best = max(GRID, key=lambda w: (table[w][train] @ gain).sum())
        held.append(table[best][fold])
        print(f"fold of {len(fold)}: picked {best}, held-out any@5 / all@10 / any@10 "
              + " / ".join(f"{x:.3f}" for x in table[best][fold].mean(axis=0)))
    est = np.concatenate(held).mean(axis=0)
    best = max(GRID, key=lambda w: (table[w] @ gain).sum())
    print("cross-validated estimate any@5 / all@10 / any@10 " + " / ".join(f"{x:.3f}" for x in est))
    print(f"on all {len(data)} questions {best}: " + " / ".join(f"{x:.3f}" for x in table[best].mean(axis=0)))
    old = (3.0, True, 0.0, 0.0)
    print(f"without the new terms {old}: " + " / ".join(f"{x:.3f}" for x in table[old].mean(axis=0)))


if __name__ == "__main__":
    main(sys.argv[1])
