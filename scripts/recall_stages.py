"""Where recall is lost (issue 18): per question of a stratified subset of LongMemEval's dev
split, the ranks of the evidence turns in the turn index's own ranking, in graphiti's
`search_` (facts, entities, turns by their first source) and in the fused output.

    python scripts/recall_stages.py ../shared/data/longmemeval/dev.json.gz --limit 30 \
        --workdir /tmp/recall-stages --out stages.jsonl

The banks stay in `--workdir` (ingested once, local extraction, as the bench does), so a
second run after a ranking change searches them again without ingesting. Each line of `--out`
holds one question: its evidence turn ids, the three stages' results (kind, first source,
score, tokens of the text) and the turn index's signals per turn, for offline experiments.
The script reads the bench's loader (cli/) and the engine's private steps: a tool of the
checkout, not of the package.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))     # the checkout's parent: `memoryplus`

from memoryplus.cli import bench_recall as br  # noqa: E402
from memoryplus.config.schema import Settings  # noqa: E402
from memoryplus.engine import extract as local_extract  # noqa: E402
from memoryplus.engine.episodes import EpisodeMeta  # noqa: E402
from memoryplus.engine.fusion import sources  # noqa: E402
from memoryplus.engine.memory_engine import MemoryEngine  # noqa: E402
from memoryplus.engine.search_ops import NOW_SLACK, clean_query, search_config, search_filter  # noqa: E402
from memoryplus.engine.turn_index import reply_query  # noqa: E402
from memoryplus.plugin.memory_block import tokens  # noqa: E402
from memoryplus.testing.pygpt_host import LOCAL  # noqa: E402
from memoryplus.wire.records import Turn  # noqa: E402


def first_rank(ids: list[str | None], wanted: set[str]) -> int | None:
    return next((i for i, x in enumerate(ids, 1) if x in wanted), None)


async def stages(engine: MemoryEngine, name: str, q: br.DevQuestion) -> dict:
    ops = engine.search_ops
    b = await engine.pool.bank(name, create=False)
    horizon = q.date + NOW_SLACK

    async def inner():
        past = local_extract.asks_about_past(q.question)
        turn_text, graph_text, related = await ops._read(b, q.question)
        index = await ops.turn_index(b)
        vec = await b.embedder.create(clean_query(turn_text))
        sig, live = index.signals(clean_query(turn_text), vec, horizon, related,
                                  reply_query(b.embedder, clean_query(turn_text), vec))
        hits, ended = await ops._turn_hits(b, clean_query(turn_text), horizon, 50, past, related)
        flt = search_filter(None, horizon)
        res = await b.graphiti.search_(clean_query(graph_text), config=search_config(engine.settings.search_depth),
                                       group_ids=[b.slug], search_filter=flt)
        metas: dict = {}
        behind = await sources(engine.pool, b, list(res.edges), list(res.nodes), metas, horizon)
        return past, index, sig, live, hits, ended, res, behind
    past, index, sig, live, hits, ended, res, behind = await engine.pool.run(b, inner())
    names = {r["uuid"]: EpisodeMeta.parse(r["name"], r["uuid"]).id
             for r in await engine.pool.query(b, "episode_names", uuids=[u for u in index.uuids if u])}
    slots = [names.get(u) if u else None for u in index.uuids]

    def first(uuid):
        m = behind.get(uuid)
        return m[0].id if m else None
    graph = ([("fact", first(e.uuid), s, tokens(e.fact)) for e, s in zip(res.edges, res.edge_reranker_scores)]
             + [("entity", first(n.uuid), s, tokens(f"{n.name}: {n.summary}")) for n, s in zip(res.nodes, res.node_reranker_scores)]
             + [("episode", names.get(e.uuid), s, tokens(e.content)) for e, s in zip(res.episodes, res.episode_reranker_scores)])
    fused = await engine.search(name, q.question, limit=10, now=q.date)
    return {
        "past": past,
        "turns": [(names.get(e.uuid), s, tokens(e.content), e.uuid in ended) for e, s in hits],
        "graph": graph,
        "fused": [(r.kind, r.sources[0] if r.sources else None, r.score, tokens(r.text)) for r in fused],
        "slots": slots, "live": live.tolist(), "signals": [s.tolist() for s in sig],
    }


async def main(args) -> None:
    raw = br.stratified(br.load(args.dev), args.limit)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    engine = MemoryEngine(Settings(**LOCAL), workdir, app="recall-stages")
    out = open(args.out, "w", encoding="utf-8")
    try:
        for n, item in enumerate(raw):
            q = br.to_question(item)
            name = f"dev-{n}"
            if not engine.known(name):
                t0 = time.perf_counter()
                turns = [Turn(id=t.id, user=t.user, assistant=t.assistant, time=t.time) for t in q.turns]
                for i in range(0, len(turns), br.BATCH):
                    await engine.ingest(name, turns[i:i + br.BATCH], defer_flush=i + br.BATCH < len(turns))
                print(f"{n}: ingested {len(turns)} turns in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            rec = await stages(engine, name, q)
            ev = q.evidence
            rec |= {"n": n, "type": q.qtype, "abstention": q.abstention, "evidence": sorted(ev),
                    "question": q.question, "date": q.date.isoformat(),
                    "answer_sessions": sorted(q.answer_sessions),
                    "session_of": {t.id: t.session for t in q.turns},
                    "user_tokens": {t.id: tokens(t.user) for t in q.turns},
                    "turn_tokens": {t.id: tokens(f"User: {t.user}\nAssistant: {t.assistant}") for t in q.turns}}
            # an open Kuzu database reserves 8 TB of address space: ~15 open at once exhaust it
            await engine.pool.close_bank(await engine.pool.bank(name, create=False))
            out.write(json.dumps(rec) + "\n")
            out.flush()
            if not q.abstention:
                ranks = {"turns": first_rank([x[0] for x in rec["turns"]], ev),
                         "fused": first_rank([x[1] for x in rec["fused"]], ev)}
                g = {kind: first_rank([x[1] for x in rec["graph"] if x[0] == kind], ev)
                     for kind in ("fact", "entity", "episode")}
                print(f"{n} {q.qtype}: first evidence at turns {ranks['turns']}, fused {ranks['fused']}, "
                      f"graph {g}", file=sys.stderr)
    finally:
        out.close()
        await engine.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("dev")
    p.add_argument("--limit", type=int, default=30)
    p.add_argument("--workdir", default="/tmp/recall-stages")
    p.add_argument("--out", default="/tmp/recall-stages.jsonl")
    main_args = p.parse_args()
    asyncio.run(main(main_args))
