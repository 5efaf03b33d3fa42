"""A small retrieval check with known answers: keeps fusion changes honest.

Recall@k counts a question as answered when its source turn is the first source of one of
the top k results; the baseline is BM25 over the same raw turns (what plain keyword search
would give)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from memoryplus.cli.bench import bm25_ranking   # the same keyword baseline the benchmark uses
from memoryplus.worker.records import Turn

DATA = json.loads((Path(__file__).parent / "data" / "retrieval_small.json").read_text())
K = 5


async def test_recall_at_k_beats_plain_keyword_search(engine):
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    turns = [Turn(id=i, user=u, assistant=a, time=t0 + timedelta(hours=n))
             for n, (i, u, a) in enumerate(DATA["turns"])]
    await engine.ingest("eval", turns)
    docs = {i: f"User: {u}\nAssistant: {a}" for i, u, a in DATA["turns"]}
    ours = base = 0
    for question, answer in DATA["questions"]:
        results = await engine.search("eval", question, K)
        firsts = [r.sources[0] for r in results if r.sources][:K]
        ours += answer in firsts
        base += answer in bm25_ranking(question, docs)[:K]
    n = len(DATA["questions"])
    print(f"recall@{K}: ours {ours / n:.3f}, BM25 baseline {base / n:.3f} over {n} questions")
    assert ours >= base, f"fusion lost to plain keywords: {ours}/{n} vs {base}/{n}"
    assert ours / n >= 0.8
