"""The phases of `memoryplus bench` (see cli/bench.py, which runs them and prints the table):
ingestion through the plugin's queue, search and recall at each bank size, chat turns through
PyGPT's events, per-call and fresh workers, LLM extraction, and graphiti's own search_ and
add_episode as baselines.
"""
from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from memoryplus.cli.bench import (
    BANK, ingest, make_turn, pct, quiet_logs, rss_of, say, search, slope_per_100, timed_search, wait_ready,
)
from memoryplus.cli.bench_recall import add_graphiti_turn_index, bm25_ranking, graphiti_config


# ── phases ──────────────────────────────────────────────────────────────────────────────
class Ingestion:
    """Turns handed to the queue as CTX_END hands them, batched as the queue batches, in
    stretches up to each checkpoint; the worker's RSS after every chunk."""

    def __init__(self, plugin, turns, chunk: int):
        self.plugin, self.turns, self.chunk = plugin, turns, chunk
        self.done, self.busy = 0, 0.0
        self.rss_points = [(0, rss_of(plugin.service))]

    def up_to(self, target: int) -> float:
        """Ingest until `target` turns are in; returns this stretch's turns per second."""
        plugin, first, busy0 = self.plugin, self.done, self.busy
        while self.done < min(target, len(self.turns)):
            part = self.turns[self.done:min(self.done + self.chunk, target)]
            t = time.perf_counter()
            room = plugin.settings.queue_size or 10 ** 9
            for n, (tid, u, a) in enumerate(part, self.done):
                # a sustained stream, never faster than the queue drains: a full queue drops turns
                while plugin.queue.counts().get("pending", 0) >= room - 1:
                    time.sleep(0.002)
                if plugin.queue.put(BANK, make_turn(tid, u, a, n)) == "dropped":
                    raise RuntimeError(f"the queue dropped turn {tid}: {plugin.queue.counts()}")
            if not plugin.queue.flush(timeout=1800):
                raise RuntimeError(f"ingestion did not finish: {plugin.queue.counts()}")
            self.busy += time.perf_counter() - t
            self.done += len(part)
            self.rss_points.append((self.done, rss_of(plugin.service)))
        rate = (self.done - first) / (self.busy - busy0) if self.busy > busy0 else float("nan")
        say(f"ingested {self.done} turns ({rate:.1f}/s this stretch), worker RSS {self.rss_points[-1][1]:.0f} MB")
        return rate

    def finish(self, out: dict, growth: dict) -> None:
        out["local_ingest_turns_per_s"] = self.done / self.busy
        growth["ours"] = self.rss_points
        # growth over the turns the graphiti baseline stores (its first 500), after the first
        # chunk: the embedder and the bank's first open are start-up, not growth
        out["worker_rss_growth_mb_per_100_turns"] = slope_per_100(
            [p for p in self.rss_points[1:] if p[0] <= 500])
        half = self.done / 2
        out["worker_rss_growth_last_half_mb_per_100_turns"] = slope_per_100(
            [p for p in self.rss_points if p[0] >= half])
        from memoryplus.wire.protocol import BankParams
        stats = self.plugin.service.stats(BankParams(bank=BANK), timeout=120).result()
        out["bank_episodes"] = float(stats.episodes)


def phase_recall(service, turns, questions, out: dict, suffix: str = "") -> None:
    docs = {tid: f"{u} {a}" for tid, u, a in turns}
    ours = base = 0
    for q, answer in questions:
        firsts = [r.sources[0] for r in search(service, q) if r.sources][:10]
        ours += answer in firsts
        base += answer in bm25_ranking(q, docs)[:10]
    out[f"recall_at_10{suffix}"] = ours / len(questions)
    out[f"recall_at_10_keyword_baseline{suffix}"] = base / len(questions)
    out[f"recall_questions{suffix}"] = len(questions)


def phase_growth_point(service, turns_in: list, questions, queries: list[str], rate: float,
                       growth: dict) -> None:
    """The figures that depend on the bank's size, at one size: search latency (persistent
    worker), recall@10 against BM25 over the same turns, RSS, and the last stretch's ingest rate."""
    for q in queries[:5]:
        search(service, q)
    ms = [timed_search(service, q) for q in queries]
    ids = {t[0] for t in turns_in}
    point: dict[str, Any] = {"turns": len(turns_in), "ingest_turns_per_s": rate,
                             "search_ms_p50": pct(ms, 50), "search_ms_p95": pct(ms, 95)}
    asked = [(q, a) for q, a in questions if a in ids]
    if asked:
        phase_recall(service, turns_in, asked, point)
    point["worker_rss_mb"] = rss_of(service)
    growth.setdefault("points", []).append(point)
    say("at {turns} turns: search p50 {search_ms_p50:.0f} ms, p95 {search_ms_p95:.0f} ms, ".format(**point)
        + (f"recall@10 {point['recall_at_10']:.3f} vs BM25 {point['recall_at_10_keyword_baseline']:.3f}, "
           if asked else "") + f"RSS {point['worker_rss_mb']:.0f} MB")


CHAT_ANSWER = "Thanks, noted."


def phase_chat(window, plugin, probe, questions, n_turns: int, n_cache: int, out: dict,
               first_ctx: int = 100000) -> list[tuple[str, str, str]]:
    """Chat turns through PyGPT's events: each a new question (a cache miss), answered and
    stored as PyGPT would; then repeated questions with no answer (nothing stored, so nothing
    invalidates the cache) for cache hits. PyGPT's ctx ids from `first_ctx` on: the plugin
    takes a turn with the id and text of one it took before as dispatched twice, so each chat
    phase needs ids of its own. Returns the turns it stored (id, user, assistant)."""
    from memoryplus.testing.pygpt_host import chat_turn, turn_ctx
    gui, inject, stored = [], [], []
    qs = [q for q, _ in questions] or ["What do you remember about me?"]
    for i in range(n_turns):
        q = qs[i % len(qs)] + ("" if i < len(qs) else f" (again, {i // len(qs)})")
        probe.gui_s = 0.0
        seen = len(probe.records)
        chat_turn(window, q, CHAT_ANSWER, ctx_id=first_ctx + i, previews=5)
        stored.append((plugin.turn_from_ctx(turn_ctx(q, ctx_id=first_ctx + i, output=CHAT_ANSWER)).id, q, CHAT_ANSWER))
        gui.append(probe.gui_s * 1000)
        inject += [ms for ms, hit in probe.records[seen:] if not hit]
    plugin.queue.flush(timeout=600)
    hits = []
    for i in range(n_cache):
        q = qs[i % len(qs)] + " (cache check)"
        cache_ctx = first_ctx + n_turns + 2 * i
        chat_turn(window, q, "", ctx_id=cache_ctx, previews=5)       # fills the cache
        seen = len(probe.records)
        chat_turn(window, q, "", ctx_id=cache_ctx + 1, previews=5)   # the same query again
        hits += [ms for ms, hit in probe.records[seen:] if hit]
    out["gui_ms_per_turn_p50"] = pct(gui, 50)
    out["gui_ms_per_turn_p99"] = pct(gui, 99)
    # over every turn: late and failed ones at the wait bound (INJECT_WAIT_S), see Probe
    out["inject_ms_p50"] = pct(inject, 50)
    out["inject_ms_p95"] = pct(inject, 95)
    out["inject_measured_turns"] = len(inject)
    out["inject_late_turns"] = probe.late_turns
    out["inject_failed_turns"] = probe.failed_turns
    out["cache_hit_ms_p50"] = pct(hits, 50)
    out["cache_hits_measured"] = len(hits)
    out["late_turns"] = plugin.counters.get("late", 0)
    return stored


def phase_chat_turns_recalled(service, turns_in: list, stored: list[tuple[str, str, str]], questions,
                              out: dict) -> None:
    """The chat (phase_chat) asked the recall questions and got nothing back, and those turns
    were stored: recall@10 with them in the bank, against BM25 over the same turns; then they
    are forgotten (as /forget_that by id does), so that later checkpoints, and the growth keys,
    measure the bench's own bank again. A turn left behind stops the bench."""
    from memoryplus.wire.protocol import ForgetParams
    have = {t[0] for t in turns_in}
    asked = [(q, a) for q, a in questions if a in have]
    if asked:
        phase_recall(service, turns_in + stored, asked, out, suffix="_with_chat_turns")
        say(f"with the chat's {len(stored)} turns stored: recall@10 {out['recall_at_10_with_chat_turns']:.3f} "
            f"vs BM25 {out['recall_at_10_keyword_baseline_with_chat_turns']:.3f}; forgotten again")
    ids = [tid for tid, _, _ in stored]
    report = service.forget(ForgetParams(bank=BANK, ids=ids), timeout=600).result()
    if sorted(report.sources) != sorted(ids):
        raise RuntimeError(f"forgetting the chat turns left {len(set(ids) - set(report.sources))} of {len(ids)}")


def phase_ours_search(service, queries: list[str], out: dict) -> list[float]:
    for q in queries:   # warm-up pass, as for the baseline
        search(service, q)
    ms = [timed_search(service, q) for q in queries]
    out["search_ms_p50"] = pct(ms, 50)
    out["search_ms_p95"] = pct(ms, 95)
    return ms


def phase_percall(settings: dict, banks_dir: Path, query: str, n: int, out: dict) -> None:
    """Per-call mode: one worker process per request (the persistent worker is closed first:
    Kuzu allows one owner process)."""
    from memoryplus.config.schema import Settings
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service import RemoteMemoryService
    s = Settings(**{**settings, "engine_mode": "subprocess"})
    service = RemoteMemoryService(WorkerClient(s, banks_dir, mode="subprocess", app="bench").start())
    try:
        ms = [timed_search(service, query, timeout=300) for _ in range(n)]
    finally:
        service.close(timeout=30)
    out["percall_search_ms_p50"] = statistics.median(ms)


def phase_worker_start(settings: dict, data_dir: Path, out: dict) -> None:
    """How long a persistent worker takes to be ready, by each way of starting it: `python -m`
    and multiprocessing's spawn protocol (what a frozen PyGPT uses, here with this Python)."""
    from memoryplus.config.schema import Settings
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service import RemoteMemoryService
    for launch in ("python", "multiprocessing"):
        service = RemoteMemoryService(WorkerClient(Settings(**settings), data_dir / launch, mode="persistent",
                                                   app="bench", launch=launch))
        try:
            service.health(timeout=120).result()
            out[f"worker_ready_s_{launch}"] = service.status()["startup_s"]
        finally:
            service.close(timeout=30)


def phase_graphiti_search(settings: dict, banks_dir: Path, queries: list[str], out: dict) -> None:
    """graphiti's `search_` in this process, with the configuration and filter our engine
    hands it and graphiti's own turn search (bench_recall.graphiti_config), on the same bank,
    same queries, through our driver and vector index."""
    from memoryplus.config.schema import Settings
    from memoryplus.engine import graph_index
    from memoryplus.engine.memory_engine import MemoryEngine
    from memoryplus.engine.search_ops import clean_query, search_filter

    async def run():
        eng = MemoryEngine(Settings(**settings), banks_dir, app="bench")
        try:
            bank = await eng.pool.bank(BANK, create=False)
            await add_graphiti_turn_index(bank.driver, bank.dir)
            cfg, flt = graphiti_config(eng.settings.search_depth), search_filter(None)

            async def one(q):   # the same driver and vector index as ours (graph_index.py)
                t = time.perf_counter()
                await graph_index.candidates(bank, clean_query(q), cfg, flt)
                return (time.perf_counter() - t) * 1000
            for q in queries:
                await one(q)
            return [await one(q) for q in queries]
        finally:
            await eng.close()
    ms = asyncio.run(run())
    out["graphiti_search_ms_p50"] = pct(ms, 50)
    out["graphiti_search_ms_p95"] = pct(ms, 95)
    return ms


def phase_llm(server, workdir: Path, turns, n_first: int, n_busy: int, n_idle: int, queries, out: dict) -> None:
    """Our ingestion with LLM extraction (default mode, insights on) through a worker: every
    call the scripted LLM sees, per ingested turn; and search p95 while such a batch runs."""
    from memoryplus.config.schema import Settings
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service import RemoteMemoryService
    s = Settings(**llm_settings(server.base_url))
    service = RemoteMemoryService(WorkerClient(s, workdir / "llm-banks", mode="persistent", app="bench-llm").start())
    try:
        wait_ready(service)
        first = [make_turn(t, u, a, n) for n, (t, u, a) in enumerate(turns[:n_first])]
        c0, tok0 = sum(server.calls.values()), server.input_tokens
        rep = ingest(service, "llm", first, timeout=1800).result()
        calls, toks = sum(server.calls.values()) - c0, server.input_tokens - tok0
        out["llm_calls_per_turn"] = calls / n_first
        out["llm_input_tokens_per_turn"] = toks / n_first
        out["llm_turns_stored"] = len(rep.stored)
        from memoryplus.wire.protocol import BankParams     # what those calls stored, per turn
        st = service.stats(BankParams(bank="llm")).result()
        out["llm_facts_per_turn"], out["llm_entities_per_turn"] = st.facts / n_first, st.entities / n_first
        out["llm_turns_skipped"] = len(rep.skipped)
        qs = (queries * (1 + n_idle // max(1, len(queries))))[:n_idle]
        idle = [timed_search(service, q, "llm") for q in qs]
        busy_turns = [make_turn(t, u, a, n + n_first) for n, (t, u, a) in enumerate(turns[n_first:n_first + n_busy])]
        fut = ingest(service, "llm", busy_turns, timeout=1800)
        time.sleep(0.3)     # the batch is under way
        busy, i = [], 0
        while not fut.done() or len(busy) < 3:
            busy.append(timed_search(service, qs[i % len(qs)], "llm"))
            i += 1
        fut.result()
        out["search_idle_ms_p95"] = pct(idle, 95)
        out["search_during_ingest_ms_p95"] = pct(busy, 95)
        out["search_during_ingest_ratio"] = pct(busy, 95) / pct(idle, 95)
    finally:
        service.close(timeout=30)


def llm_settings(base_url: str) -> dict:
    return dict(extraction_engine="llm", llm_provider="openai", override_base_url=base_url,
                override_api_key="sk-test-aaaaaaaaaaaaaaaaaaaaaaaa", graphiti_model="scripted-llm",
                embedding_provider="local", engine_mode="persistent")


def phase_graphiti_baseline(server, workdir: Path, turns, n_same: int, chunk: int, budget_s: float,
                            out: dict, growth: dict, buffer_pool_mb: int | None = None) -> None:
    """Stock graphiti: `add_episode` per turn over KuzuDriver (no recycling; its default buffer
    pool, 80% of RAM, or `buffer_pool_mb`), same scripted LLM at zero latency, in its own
    process (its RSS is its own). It stops after turn `n_same` until its LLM calls are counted:
    the count is of that many turns, fully done, none of the next one's."""
    latency, server.latency_s = server.latency_s, 0.0
    name = "graphiti-baseline" if buffer_pool_mb is None else "graphiti-baseline-bounded"
    prefix = "graphiti" if buffer_pool_mb is None else "graphiti_bounded_pool"
    args = {"base_url": server.base_url, "db": str(workdir / name / "graph.kuzu"),
            "turns": turns, "chunk": chunk, "budget_s": budget_s, "pause_after": n_same,
            "buffer_pool_mb": buffer_pool_mb}
    (workdir / name).mkdir(parents=True, exist_ok=True)
    argfile = workdir / name / "args.json"
    argfile.write_text(json.dumps(args))
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    proc = subprocess.Popen([sys.executable, "-c", "from memoryplus.cli.bench_phases import _baseline_main; "
                             "_baseline_main()", str(argfile)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, text=True)
    c0, tok0 = sum(server.calls.values()), server.input_tokens
    points, calls_same, stored_same, done = [], None, None, 0
    try:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            done = msg["turn"]
            if msg.get("paused"):      # turn n_same returned; the next has not started
                calls_same = (sum(server.calls.values()) - c0, server.input_tokens - tok0)
                stored_same = msg.get("stored")
                proc.stdin.write("go\n")
                proc.stdin.flush()
            if "rss_mb" in msg:
                points.append((done, msg["rss_mb"]))
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.latency_s = latency
    if calls_same is None:
        raise RuntimeError(f"the graphiti baseline stopped after {done} turns (exit {proc.returncode})")
    out[f"{prefix}_turns"] = done       # fewer than asked: the budget ran out, or it failed
    out[f"{prefix}_exit_code"] = proc.returncode
    if buffer_pool_mb is None:
        out["graphiti_llm_calls_per_turn"] = calls_same[0] / n_same
        out["graphiti_llm_input_tokens_per_turn"] = calls_same[1] / n_same
        if stored_same:
            out["graphiti_facts_per_turn"] = stored_same["facts"] / n_same
            out["graphiti_entities_per_turn"] = stored_same["entities"] / n_same
    out[f"{prefix}_rss_mb_end"] = points[-1][1] if points else float("nan")
    out[f"{prefix}_rss_growth_mb_per_100_turns"] = slope_per_100(points[1:])
    growth[prefix] = points


def phase_llm_growth(server, workdir: Path, turns, chunk: int, out: dict, growth: dict) -> None:
    """Our worker's RSS with LLM extraction over the very turns the graphiti baseline stores,
    at the same zero LLM latency, in chunks as the baseline reports them: the like-for-like
    side of `rss_growth_ratio_vs_graphiti` (the local-extraction growth is reported apart)."""
    from memoryplus.config.schema import Settings
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service import RemoteMemoryService
    latency, server.latency_s = server.latency_s, 0.0
    service = RemoteMemoryService(WorkerClient(Settings(**llm_settings(server.base_url)), workdir / "llm-growth-banks",
                                               mode="persistent", app="bench-llm-growth").start())
    try:
        wait_ready(service)
        ingest(service, "growth", [make_turn("warm", "Hello there.", "Hi!", 0)], timeout=600).result()
        points = [(0, rss_of(service))]
        for start in range(0, len(turns), chunk):
            part = [make_turn(t, u, a, n) for n, (t, u, a) in enumerate(turns[start:start + chunk], start + 1)]
            ingest(service, "growth", part, timeout=3600).result()
            points.append((start + len(part), rss_of(service)))
    finally:
        service.close(timeout=30)
        server.latency_s = latency
    out["llm_worker_rss_growth_mb_per_100_turns"] = slope_per_100(points[1:])
    out["llm_worker_rss_mb_end"] = points[-1][1]
    growth["ours_llm"] = points


def _baseline_main() -> None:
    args = json.loads(Path(sys.argv[1]).read_text())
    quiet_logs()
    asyncio.run(_baseline(args))


async def _baseline(a: dict) -> None:
    import psutil
    from graphiti_core import Graphiti
    from graphiti_core.driver.kuzu_driver import KuzuDriver
    from graphiti_core.nodes import EpisodeType

    from memoryplus.config.schema import Settings
    from memoryplus.wire.records import Credentials
    from memoryplus.engine.embedders import LocalEmbedder
    from memoryplus.engine.providers import OverlapReranker, build_llm
    from memoryplus.engine.store import add_graphiti_fulltext_indexes
    proc = psutil.Process()

    def rss():
        return round(proc.memory_info().rss / 1048576, 1)
    llm = build_llm(Settings(**llm_settings(a["base_url"])), Credentials())
    if a.get("buffer_pool_mb"):     # KuzuDriver takes no pool size: bound it as open_kuzu does
        import graphiti_core.driver.kuzu_driver as kd
        database, pool = kd.kuzu.Database, a["buffer_pool_mb"] * 1024 * 1024
        kd.kuzu.Database = lambda path, *args, **kw: database(path, buffer_pool_size=pool)
    driver = KuzuDriver(db=a["db"])          # graphiti's defaults otherwise: no recycling
    driver._database = ""                    # graphiti 0.31.2 bug: add_episode(group_id=...) reads it
    await add_graphiti_fulltext_indexes(driver, Path(a["db"]).parent)
    g = Graphiti(graph_driver=driver, llm_client=llm, embedder=LocalEmbedder(),
                 cross_encoder=OverlapReranker())
    await g.embedder.create("warm up")
    print(json.dumps({"turn": 0, "rss_mb": rss()}), flush=True)
    start = time.monotonic()
    for n, (tid, u, asst) in enumerate(a["turns"], 1):
        turn = make_turn(tid, u, asst, n)
        await g.add_episode(name=tid, episode_body=turn.body(), source_description="chat turn",
                            reference_time=turn.time, source=EpisodeType.message, group_id="bench")
        msg: dict = {"turn": n}
        over = time.monotonic() - start > a["budget_s"]
        if n % a["chunk"] == 0 or n == len(a["turns"]) or over:
            msg["rss_mb"] = rss()
        if n == a.get("pause_after"):
            msg["paused"] = True     # the parent counts this many turns' LLM calls, then says go
            msg["stored"] = {k: (await driver.execute_query(q))[0][0]["n"] for k, q in (
                ("facts", "MATCH (r:RelatesToNode_) RETURN count(r) AS n"),
                ("entities", "MATCH (n:Entity) RETURN count(n) AS n"))}
        print(json.dumps(msg), flush=True)
        if msg.get("paused"):
            sys.stdin.readline()
        if over:
            break


# ── scale (issue 16): memory at rest, several banks, graphiti's own search ──────────────
def idle_rss(service, wait_s: float) -> float:
    """The worker's RSS once idle: its banks closed (bank_idle_close_s) and freed memory
    given back. Waits at most `wait_s`; polls by health (the worker is idle between polls)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        h = service.health(timeout=60).result()
        if not h.banks_open and h.memory_returned_mb:
            break
        time.sleep(3)
    time.sleep(3)           # the round that closed them has given the memory back
    return rss_of(service)


# The worker maintains after 2 s without a request (wire/protocol.py WorkerLimits.idle_s)
IDLE_ROUND_S = 4.0


def phase_three_banks(settings: dict, workdir: Path, turns, per_bank: int, queries, out: dict) -> None:
    """A fresh worker with three banks of `per_bank` turns each, all open and searched, then
    idle for a moment with the three still open: its RSS (`worker_rss_mb_three_banks`)."""
    from memoryplus.config.schema import Settings
    from memoryplus.client.worker_client import WorkerClient
    from memoryplus.service import RemoteMemoryService
    service = RemoteMemoryService(WorkerClient(Settings(**settings), workdir / "three-banks", mode="persistent",
                                               app="bench-banks").start())
    try:
        wait_ready(service)
        names = ["work", "home", "travel"]
        for name in names:
            for start in range(0, per_bank, 100):
                part = [make_turn(t, u, a, n) for n, (t, u, a) in
                        enumerate(turns[start:min(per_bank, start + 100)], start)]
                ingest(service, name, part, timeout=1800).result()
        for _ in range(2):                  # all three in use: each searched, round after round
            for name in names:
                for q in queries[:5]:
                    search(service, q, name)
        # then idle, as between a user's turns: past the worker's first idle round (which gives
        # freed heap back), well before bank_idle_close_s closes the banks
        time.sleep(IDLE_ROUND_S)
        h = service.health(timeout=60).result()
        out["worker_rss_mb_three_banks"] = rss_of(service)
        out["three_banks_open"] = float(len(h.banks_open))
        out["three_banks_turns_each"] = float(per_bank)
    finally:
        service.close(timeout=60)


def phase_stock_graphiti_search(banks_dir: Path, queries: list[str], out: dict) -> list[float]:
    """Stock graphiti `search_` on the bench's bank: graphiti's own KuzuDriver (no prepared
    statements, no vector index, its default pool), the configuration and filter our engine
    hands it with graphiti's own turn search, in this process (`search_vs_graphiti_ratio`)."""
    from graphiti_core import Graphiti
    from graphiti_core.driver.kuzu_driver import KuzuDriver

    from memoryplus.engine.bank_pool import NoLLM
    from memoryplus.engine.embedders import LocalEmbedder
    from memoryplus.engine.providers import OverlapReranker
    from memoryplus.engine.search_ops import clean_query, search_filter
    from memoryplus.engine.store import add_graphiti_fulltext_indexes
    from memoryplus.wire.banks import BankDirectory, slug
    from memoryplus.config.schema import Settings

    async def run():
        db = BankDirectory(banks_dir, "kuzu").path(BANK) / "graph.kuzu"
        driver = KuzuDriver(db=str(db))
        driver._database = ""               # graphiti 0.31.2 bug 1 (store.py)
        g = Graphiti(graph_driver=driver, llm_client=NoLLM(), embedder=LocalEmbedder(),
                     cross_encoder=OverlapReranker())
        await add_graphiti_fulltext_indexes(driver, db.parent, ("Entity", "RelatesToNode_", "Episodic"))
        cfg, flt = graphiti_config(Settings().search_depth), search_filter(None)
        try:
            async def one(q):
                t = time.perf_counter()
                await g.search_(clean_query(q), config=cfg, group_ids=[slug(BANK)], search_filter=flt)
                return (time.perf_counter() - t) * 1000
            for q in queries[:5]:
                await one(q)
            return [await one(q) for q in queries]
        finally:
            driver.client.close()
            driver.db.close()
    ms = asyncio.run(run())
    out["stock_graphiti_search_ms_p50"] = pct(ms, 50)
    return ms
