"""How SPREAD (engine/turn_index.py) was chosen: 5-fold cross-validation on LongMemEval's dev
split with the whole engine's search (the turn index, graphiti's facts and entities, the
fusion), scored as `memoryplus bench --recall` scores (issue 18, docs/PERFORMANCE.md).

    python scripts/recall_stages.py ../shared/data/longmemeval/dev.json.gz --limit 150 \
        --workdir /tmp/recall-banks --out /tmp/stages.jsonl      # ingests once (~25 min)
    python scripts/recall_spread.py ../shared/data/longmemeval/dev.json.gz --workdir /tmp/recall-banks

Each question's bank (kept by recall_stages.py) is searched once per value of SPREAD with its
question and `question_date` as now. Each fold picks the value with the best any-evidence
recall@5 + all-evidence recall@10 + half of any-evidence recall@10 on the other four folds and
is scored on its own questions (three shuffles). Abstention questions are left out. The turns
alone (scripts/recall_weights.py, no word families, user names, graph or cut at now) gain
nothing from the spread; which of those differences it makes up for is not separated.
A tool of the checkout, not of the package.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout's parent: `memoryplus`

from memoryplus.cli import bench_recall as br  # noqa: E402
from memoryplus.config.schema import Settings  # noqa: E402
from memoryplus.engine import turn_index as ti  # noqa: E402
from memoryplus.engine.memory_engine import MemoryEngine  # noqa: E402
from memoryplus.testing.pygpt_host import LOCAL  # noqa: E402
from recall_weights import SPREADS, cross_validate  # noqa: E402  (this folder: the same folds)


async def table(dev: str, workdir: Path) -> dict[float, np.ndarray]:
    """Per SPREAD, per scored question: (any@5, all@10, any@10) of the engine's search."""
    raw = br.stratified(br.load(dev), 150)
    engine = MemoryEngine(Settings(**LOCAL), workdir, app="recall-spread")
    rows: dict[float, list[tuple]] = {s: [] for s in SPREADS}
    held = ti.SPREAD
    try:
        for n, item in enumerate(raw):
            q = br.to_question(item)
            name = f"dev-{n}"
            if q.abstention or not engine.known(name):
                continue
            for s in SPREADS:
                ti.SPREAD = s
                results = await engine.search(name, q.question, limit=10, now=q.date)
                firsts = [r.sources[0] if r.sources else None for r in results]
                at10 = br.score(firsts, q, 10)
                rows[s].append((br.score(firsts, q, 5)["any"], at10["all"], at10["any"]))
            await engine.pool.close_bank(await engine.pool.bank(name, create=False))
    finally:
        ti.SPREAD = held
        await engine.close()
    return {s: np.array(r, dtype=float) for s, r in rows.items()}


def main(args) -> None:
    scores = asyncio.run(table(args.dev, Path(args.workdir)))
    n = len(scores[SPREADS[0]])
    cross_validate(scores, n)
    for s in SPREADS:
        print(f"SPREAD {s} on all {n}: " + " / ".join(f"{x:.3f}" for x in scores[s].mean(axis=0)))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("dev")
    p.add_argument("--workdir", default="/tmp/recall-banks")
    main(p.parse_args())
