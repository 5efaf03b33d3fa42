"""What opening a bank costs its first search (issue 16): the time from a fresh process's first
search of a bank, which opens it and builds its turn index, to its answer.

    python scripts/bank_reopen_cost.py build DIR 1000 ../shared/data/longmemeval/dev.json.gz
    python scripts/bank_reopen_cost.py open DIR        # one fresh process per call
    python scripts/bank_reopen_cost.py forget-vectors DIR   # as a bank from before they were kept

`build` stores LongMemEval's dev turns (each distinct turn once, in order, five to an ingest
call as the plugin's queue batches them) by local extraction with the local embedder, and
prints the seconds it took. Run it from two checkouts to compare them. A tool of the
checkout, not of the package.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout's parent: `memoryplus`
os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")

from memoryplus.cli import bench_recall as br  # noqa: E402  (after the path insert)
from memoryplus.config.schema import Settings  # noqa: E402
from memoryplus.engine.memory_engine import MemoryEngine  # noqa: E402
from memoryplus.wire.records import Turn  # noqa: E402

BANK = "dev"


def dev_turns(path: str, size: int) -> list[Turn]:
    seen, out = set(), []
    for raw in br.load(path):
        for t in br.to_question(raw).turns:
            if (t.user, t.assistant) not in seen:
                seen.add((t.user, t.assistant))
                out.append(Turn(id=f"t{len(out)}", user=t.user, assistant=t.assistant, time=t.time))
    return out[:size]


async def run(what: str, folder: Path, args: list[str]) -> dict:
    if what == "forget-vectors":
        import kuzu
        db = kuzu.Database(str(next(folder.rglob("graph.kuzu"))))
        kuzu.Connection(db).execute("MATCH (e:Episodic) SET e.turn_vectors = NULL")
        db.close()
        return {}
    engine = MemoryEngine(Settings(extraction_engine="local", embedding_provider="local"), folder)
    try:
        if what == "build":
            turns, start = dev_turns(args[1], int(args[0])), time.perf_counter()
            for first in range(0, len(turns), 5):
                await engine.ingest(BANK, turns[first:first + 5])
            return {"turns": len(turns), "ingest_s": round(time.perf_counter() - start, 2)}
        start = time.perf_counter()
        await engine.search(BANK, "what did I say about my vacation plans?")
        first = time.perf_counter() - start
        start = time.perf_counter()
        await engine.search(BANK, "which book did you recommend?")
        return {"first_search_s": round(first, 3), "next_search_s": round(time.perf_counter() - start, 3)}
    finally:
        await engine.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(sys.argv[1], Path(sys.argv[2]), sys.argv[3:]))))
