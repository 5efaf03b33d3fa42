"""How the turn index's weights (engine/turn_index.WEIGHTS) were chosen: 5-fold cross-validation
on LongMemEval's dev split, turns only, no graph (issue 18, docs/PERFORMANCE.md).

    python scripts/recall_weights.py ../shared/data/longmemeval/dev.json.gz

For each question, the haystack's turns go into a TurnIndex (the engine's own code: the same
tokens, BM25 and embedder), and the three signals are computed once. Each fold picks the grid
point with the best any-evidence recall@5 + all-evidence recall@10 on the other four folds
and is scored on its own questions; the mean over the folds is the estimate, and the pick on
all questions is what WEIGHTS holds. Abstention questions are left out, as in the bench.

A tool of the checkout, not of the package (it reads the bench's dev-split loader in cli/, and
testing/ must not import cli/: the layout check forbids cycles between folders).
"""
from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout's parent: `memoryplus`

from memoryplus.cli import bench_recall as br  # noqa: E402  (after the path insert)
from memoryplus.engine.embedders import LocalEmbedder  # noqa: E402
from memoryplus.engine.turn_index import TurnIndex  # noqa: E402

GRID = [(1.0, u, c) for u, c in itertools.product([0, 0.25, 0.5, 1], [0.5, 1, 1.5, 2, 3, 4])]


def signals(path: str) -> list[tuple[br.DevQuestion, list[np.ndarray], np.ndarray]]:
    emb = LocalEmbedder()
    out = []
    for raw in br.load(path):
        q = br.to_question(raw)
        if q.abstention:
            continue
        index = TurnIndex(dim=emb.dim)
        vectors = emb.embed_sync([t.user or "-" for t in q.turns])
        for t, v in zip(q.turns, vectors):
            index.add(t.id, f"User: {t.user}\nAssistant: {t.assistant}", t.time, v)
        sig, live = index.signals(q.question, emb.embed_sync([q.question])[0])
        out.append((q, sig, live))
    return out


def per_question(data, weights) -> np.ndarray:
    rows = []
    for q, sig, live in data:
        total = TurnIndex.fuse(sig, live, weights)
        ranked = [q.turns[i].id for i in np.argsort(-total, kind="stable") if np.isfinite(total[i])]
        rows.append((br.score(ranked, q, 5)["any"], br.score(ranked, q, 10)["all"]))
    return np.array(rows)


def main(path: str) -> None:
    data = signals(path)
    table = {w: per_question(data, w) for w in GRID}
    order = list(range(len(data)))
    random.Random(0).shuffle(order)
    folds = [order[i::5] for i in range(5)]
    held = []
    for fold in folds:
        train = [i for i in order if i not in fold]
        best = max(GRID, key=lambda w: table[w][train].sum())
        held.append(table[best][fold])
        print(f"fold of {len(fold)}: picked {best}, held-out any@5 / all@10 "
              f"{table[best][fold][:, 0].mean():.3f} / {table[best][fold][:, 1].mean():.3f}")
    est = np.concatenate(held).mean(axis=0)
    best = max(GRID, key=lambda w: table[w].sum())
    print(f"cross-validated estimate any@5 {est[0]:.3f}, all@10 {est[1]:.3f}; "
          f"on all {len(data)} questions {best}: {table[best][:, 0].mean():.3f} / {table[best][:, 1].mean():.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
