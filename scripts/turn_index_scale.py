"""What the turn index (engine/turn_index.py) costs as a bank grows (issue 16): per size, the
RSS the index adds to its process, the seconds to build it, and its search p50 over 60 dev
questions.

    python scripts/turn_index_scale.py ../shared/data/longmemeval/dev.json.gz 2000 20000

The turns are LongMemEval's dev turns (user message and the assistant's reply), cycled to the
size, 7 minutes apart; the vectors are random unit vectors of the local embedder's 256
dimensions, one per user message and one per reply sentence the index keeps, so that the
figures measure the index and not the embedder. Each size runs in a process of its own (an
RSS figure is only clean in a fresh process). A tool of the checkout, not of the package.
"""
from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout's parent: `memoryplus`

from memoryplus.cli import bench_recall as br  # noqa: E402  (after the path insert)
from memoryplus.engine import turn_index as ti  # noqa: E402
from memoryplus.worker.maintenance import rss_mb  # noqa: E402

DIM, QUESTIONS = 256, 60
T0 = datetime(2023, 1, 1, tzinfo=timezone.utc)


def measure(path: str, size: int) -> dict:
    questions = [br.to_question(q) for q in br.load(path)]
    bodies = [f"User: {t.user}\nAssistant: {t.assistant}" for q in questions for t in q.turns]
    rng = np.random.default_rng(0)

    def unit(rows: int) -> np.ndarray:
        v = rng.standard_normal((rows, DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    # the inputs first, so that the RSS after them is the index's alone
    turns = [(b, unit(1)[0], unit(n) if (n := len(ti.reply_sentences(b))) else None)
             for b in (bodies[i % len(bodies)] for i in range(size))]
    asked = [(q.question, unit(1)[0]) for q in questions[:QUESTIONS]]
    ti.tokens("warm the stemmer's cache")
    gc.collect()
    before, start = rss_mb(), time.perf_counter()
    index = ti.TurnIndex(dim=DIM)
    for i, (body, user, replies) in enumerate(turns):
        index.add(f"t{i}", body, T0 + timedelta(minutes=7 * i), user, replies)
    index.search("warm", asked[0][1], 10, reply_vector=asked[0][1])    # builds what it keeps
    built = time.perf_counter() - start
    gc.collect()
    grown = rss_mb() - before
    times = []
    for text, vector in asked:
        start = time.perf_counter()
        index.search(text, vector, 20, T0 + timedelta(days=3650), reply_vector=vector)
        times.append(time.perf_counter() - start)
    return {"turns": size, "index_rss_mb": round(grown, 1), "build_s": round(built, 2),
            "search_p50_ms": round(1000 * float(np.median(times)), 2),
            "reply_sentences": int(sum(0 if r is None else len(r) for _, _, r in turns))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="LongMemEval JSON (.json or .json.gz)")
    ap.add_argument("sizes", type=int, nargs="+", help="turns in the index, one run each")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)    # a size's own process
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(args.data, args.sizes[0])))
        return
    for size in args.sizes:
        subprocess.run([sys.executable, __file__, args.data, str(size), "--one"], check=True)


if __name__ == "__main__":
    main()
