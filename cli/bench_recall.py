"""Recall on real conversations (issue 18): LongMemEval's own JSON format, ours against BM25.

Each question's haystack goes into a bank of its own (local extraction, deleted afterwards),
a turn being one user message with the assistant reply that follows it, at its session's
date. The engine is searched with the question, with the question's date as "now". Turn ids
handed to the engine are opaque (`s<session index>t<turn index>`): no session id, file name
or flag from the data reaches it (the answer sessions' ids start with `answer_`).

Scoring, as the data set's README defines it:
- any-evidence recall@k: the first source of one of the top k results is an evidence turn
  (one holding a `has_answer` message); all-evidence recall@k: every evidence turn is so
  covered; session recall@k: the first source of one of the top k is in an answer session.
  One source per result, so a result listing many turns cannot inflate coverage.
- abstention questions (id ending `_abs`) are left out of recall; for them the number of
  results a search returns is reported (nothing relevant exists, so fewer is better).
- the baseline is Okapi BM25 (k1 1.5, b 0.75) over "user + ' ' + assistant" of every turn of
  the same haystack, with the README's tokens and stop words (`bm25_tokens`).
- tokens of the top k (ours: the results' texts; BM25: its turns' texts), counted as the
  memory block counts them (plugin/memory_block.tokens).

    run_dev(path, limit=None) -> dict of figures (keys `dev_*`, see KEYS)
"""
from __future__ import annotations

import asyncio
import gzip
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

# the README's tokens and stop words, shared with the engine's turn index
from memoryplus.common.text import keyword_tokens as bm25_tokens

# Where the developers and CI keep the dev split (never copied into the repository):
# ../shared/data/longmemeval/dev.json.gz relative to the repository (or the current folder).
DEV_RELATIVE = Path("..") / "shared" / "data" / "longmemeval" / "dev.json.gz"
QUICK_LIMIT = 6          # one question per type: each haystack is ~500 long turns (~30-40 s)
BATCH = 5                # turns per ingest call, as the plugin's queue batches them
WARM_UP = "What did we talk about last time?"
# SHORT_TWINS questions (from the second on) also store as many of the bench's own short turns
# (testing/make_recall_data.generate_turns) in a fresh bank, the same way, at the same dates,
# one before the other by turns: long-turn ingest ÷ short-turn ingest measured in one set-up
# (the plugin's rate comes from its worker and one growing bank: another set-up, ±30%).
SHORT_TWINS = 4
TIMED_ROUNDS = 3         # timed searches per bank and side (see _one)

_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\([^)]*\))?(?:\s+(\d{1,2}):(\d{2}))?")


# ── the data ────────────────────────────────────────────────────────────────────────────
@dataclass
class DevTurn:
    id: str                 # opaque: what the engine sees
    user: str
    assistant: str
    time: datetime
    session: int            # index into the question's haystack (the bench's side only)
    evidence: bool


@dataclass
class DevQuestion:
    qid: str
    qtype: str
    question: str
    date: datetime
    turns: list[DevTurn]
    answer_sessions: set[int] = field(default_factory=set)

    @property
    def abstention(self) -> bool:
        return self.qid.endswith("_abs")

    @property
    def evidence(self) -> set[str]:
        return {t.id for t in self.turns if t.evidence}


def parse_date(text: str) -> datetime:
    """LongMemEval's `2023/05/20 (Sat) 15:03` (UTC: the data gives no zone)."""
    m = _DATE.search(text or "")
    if not m:
        raise ValueError(f"not a LongMemEval date: {text!r}")
    y, mo, d, h, mi = (int(x) if x else 0 for x in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=timezone.utc)


def load(path: str | Path) -> list[dict]:
    """The JSON list of question objects, plain or gzipped."""
    p = Path(path)
    raw = p.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise ValueError(f"{p}: not LongMemEval JSON ({exc})") from None
    if not isinstance(data, list) or not all(isinstance(q, dict) and "haystack_sessions" in q for q in data):
        raise ValueError(f"{p}: expected a JSON list of LongMemEval question objects")
    return data


def to_question(raw: dict) -> DevQuestion:
    sessions, dates = raw["haystack_sessions"], raw["haystack_dates"]
    answer_ids = set(raw.get("answer_session_ids") or [])
    turns: list[DevTurn] = []
    answer_sessions = set()
    for si, (session, date) in enumerate(zip(sessions, dates)):
        if raw.get("haystack_session_ids") and raw["haystack_session_ids"][si] in answer_ids:
            answer_sessions.add(si)
        when = parse_date(date)
        msgs = [m for m in session if isinstance(m, dict)]
        i = ti = 0
        while i < len(msgs):
            user = asst = ""
            evidence = False
            if msgs[i].get("role") == "user":
                user, evidence = str(msgs[i].get("content") or ""), bool(msgs[i].get("has_answer"))
                i += 1
            if i < len(msgs) and msgs[i].get("role") == "assistant":
                asst = str(msgs[i].get("content") or "")
                evidence = evidence or bool(msgs[i].get("has_answer"))
                i += 1
            elif not user:      # neither role: skip the message
                i += 1
                continue
            # the session's date; seconds keep its turns in order
            turns.append(DevTurn(f"s{si}t{ti}", user, asst, when + timedelta(seconds=ti), si, evidence))
            ti += 1
    return DevQuestion(str(raw["question_id"]), str(raw.get("question_type", "unknown")),
                       str(raw["question"]), parse_date(raw["question_date"]), turns, answer_sessions)


def stratified(raw: list[dict], limit: int | None) -> list[dict]:
    """`limit` questions in the file's proportions of question types (largest remainder, at
    least one per type while the limit allows), in the file's order within each type."""
    if not limit or limit >= len(raw):
        return list(raw)
    by_type: dict[str, list[dict]] = defaultdict(list)
    for q in raw:
        by_type[str(q.get("question_type", "unknown"))].append(q)
    types = sorted(by_type, key=lambda t: -len(by_type[t]))
    share = {t: limit * len(by_type[t]) / len(raw) for t in types}
    take = {t: min(len(by_type[t]), int(share[t])) for t in types}
    if limit >= len(types):
        for t in types:
            take[t] = max(1, take[t])
    while sum(take.values()) > limit:      # the minimum of one overshot: trim the largest
        t = max(types, key=lambda t: (take[t] - share[t], take[t]))
        take[t] -= 1
    for t in sorted(types, key=lambda t: -(share[t] - int(share[t]))):
        if sum(take.values()) >= limit:
            break
        if take[t] < len(by_type[t]):
            take[t] += 1
    # within a type, abstention questions in proportion too; picks spread over the list
    picked = set()
    for t in types:
        qs, n = by_type[t], take[t]
        abst = [q for q in qs if str(q.get("question_id", "")).endswith("_abs")]
        rest = [q for q in qs if q not in abst]
        n_abs = min(len(abst), round(n * len(abst) / len(qs)))
        for group, m in ((rest, n - n_abs), (abst, n_abs)):
            picked |= {id(group[int(i * len(group) / m)]) for i in range(m)} if m else set()
    return [q for q in raw if id(q) in picked]


# ── the baseline and the scores ─────────────────────────────────────────────────────────


def bm25_ranking(query: str, docs: dict[str, str], k1: float = 1.5, b: float = 0.75) -> list[str]:
    """Doc ids by Okapi BM25, best first (ties in the docs' order); every doc is ranked."""
    scores = bm25_scores(query, docs, k1, b)
    return sorted(scores, key=lambda d: -scores[d])


def bm25_scores(query: str, docs: dict[str, str], k1: float = 1.5, b: float = 0.75) -> dict[str, float]:
    toks = {d: bm25_tokens(t) for d, t in docs.items()}
    n = len(toks)
    if not n:
        return {}
    avg = sum(map(len, toks.values())) / n or 1.0
    df = Counter(w for ws in toks.values() for w in set(ws))
    terms = bm25_tokens(query)
    scores = {}
    for d, ws in toks.items():
        tf = Counter(ws)
        s = 0.0
        for w in terms:
            if w in tf:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                s += idf * tf[w] * (k1 + 1) / (tf[w] + k1 * (1 - b + b * len(ws) / avg))
        scores[d] = s
    return scores


def score(firsts: list[str | None], q: DevQuestion, k: int) -> dict[str, float]:
    """The README's scores for one question from the first source of each result, best first."""
    top = [f for f in firsts[:k] if f is not None]
    sessions = {t.id: t.session for t in q.turns}
    ev = q.evidence
    return {"any": float(bool(ev & set(top))),
            "all": float(bool(ev) and ev <= set(top)),
            "session": float(any(sessions.get(f) in q.answer_sessions for f in top))}


# ── graphiti's own search, the baseline ─────────────────────────────────────────────────
def graphiti_config(depth: int):
    """The engine's search configuration (facts, entities) with graphiti's turn search added
    (BM25 over its full-text index of turns): graphiti's own `search_` searches all three
    kinds, as ours does (our turns come from the turn index, engine/turn_index.py)."""
    from graphiti_core.search.search_config import EpisodeReranker, EpisodeSearchConfig, EpisodeSearchMethod
    from memoryplus.engine.search_ops import search_config
    turns = EpisodeSearchConfig(search_methods=[EpisodeSearchMethod.bm25], reranker=EpisodeReranker.rrf)
    return search_config(depth).model_copy(update={"episode_config": turns})


async def add_graphiti_turn_index(driver, bank_dir) -> None:
    """graphiti's full-text index of turns, which a bank does not keep (the turn index ranks
    turns), made on a Kuzu bank for graphiti's search before it is timed (with graphiti's
    indexes of facts and entities too, for its own search on the bank's plain driver:
    `graphiti_driver`). The bank drops them again when it next opens."""
    from memoryplus.engine.store import add_graphiti_fulltext_indexes
    await add_graphiti_fulltext_indexes(driver, bank_dir, ("Episodic", "Entity", "RelatesToNode_"))


def graphiti_driver(driver):
    """The bank's driver as stock graphiti has it: its searches by words are Kuzu's own full-
    text queries, not our word index (graph_index._Words)."""
    from memoryplus.engine.graph_index import IndexedDriver
    return IndexedDriver(driver, None)


# ── the run ─────────────────────────────────────────────────────────────────────────────
def _say(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def _short_twin(engine, bank: str, q: DevQuestion, rec: dict) -> None:
    """As many short turns as `q` has, stored as _one stores its turns (SHORT_TWINS)."""
    from memoryplus.testing.make_recall_data import generate_turns
    from memoryplus.wire.records import Turn
    turns = [Turn(id=tid, user=user, assistant=asst, time=t.time)
             for (tid, user, asst), t in zip(generate_turns(len(q.turns)), q.turns)]
    t0 = time.perf_counter()
    for i in range(0, len(turns), BATCH):
        await engine.ingest(bank, turns[i:i + BATCH], defer_flush=i + BATCH < len(turns))
    rec["short_ingest_s"] = time.perf_counter() - t0
    rec["short_turns"] = len(turns)


async def _one(engine, bank: str, q: DevQuestion, rec: dict) -> None:
    from memoryplus.plugin.memory_block import tokens
    from memoryplus.engine.search_ops import clean_query, search_filter
    from memoryplus.wire.records import Turn
    turns = [Turn(id=t.id, user=t.user, assistant=t.assistant, time=t.time) for t in q.turns]
    t0 = time.perf_counter()
    for i in range(0, len(turns), BATCH):
        await engine.ingest(bank, turns[i:i + BATCH], defer_flush=i + BATCH < len(turns))
    rec["ingest_s"] = time.perf_counter() - t0
    rec["turns"] = len(turns)
    # graphiti's own search_ on the same bank needs its index of turns: built first, since
    # building it is a write and a write empties what our search keeps until the next one
    b = await engine.pool.bank(bank, create=False)
    await add_graphiti_turn_index(b.driver, b.dir)
    cfg, flt = graphiti_config(engine.settings.search_depth), search_filter(None)

    async def ours():
        return await engine.search(bank, q.question, limit=10, now=q.date)

    async def graphiti():
        await b.graphiti.search_(clean_query(q.question), config=cfg, group_ids=[b.slug], search_filter=flt,
                                 driver=plain)

    await engine.search(bank, WARM_UP, limit=10, now=q.date)
    plain = graphiti_driver(b.driver)
    await b.graphiti.search_(clean_query(WARM_UP), config=cfg, group_ids=[b.slug], search_filter=flt,
                             driver=plain)
    # each side timed TIMED_ROUNDS times, interleaved, first side alternating: one search per
    # bank measured this machine's bursts more than either search (a burst in one side's
    # single search moved the p95 ratio by 0.3); the first round is kept as well
    sides = {"search_ms": ours, "graphiti_ms": graphiti}
    times: dict[str, list[float]] = {key: [] for key in sides}
    for n in range(TIMED_ROUNDS):
        for key in list(sides)[::1 if n % 2 == 0 else -1]:
            t0 = time.perf_counter()
            found = await sides[key]()
            times[key].append((time.perf_counter() - t0) * 1000)
            if key == "search_ms" and n == 0:
                results = found
    for key, ms in times.items():
        rec[key] = statistics.median(ms)
        rec[f"{key}_first"] = ms[0]
    firsts = [r.sources[0] if r.sources else None for r in results]
    docs = {t.id: f"{t.user} {t.assistant}" for t in q.turns}
    base = bm25_ranking(q.question, docs)
    rec["n_results"] = len(results)
    for k in (5, 10):
        rec[f"tokens_at{k}"] = sum(tokens(r.text) for r in results[:k])
        rec[f"tokens_at{k}_bm25"] = sum(tokens(docs[d]) for d in base[:k])
        if not q.abstention:
            rec[f"ours_at{k}"] = score(firsts, q, k)
            rec[f"bm25_at{k}"] = score(base, q, k)


def _mean(values) -> float:
    values = list(values)
    return statistics.fmean(values) if values else float("nan")


def summarize(records: list[dict]) -> dict[str, Any]:
    """The figures (JSON keys as issue 18 names them) from per-question records."""
    from memoryplus.cli.bench import pct
    scored = [r for r in records if not r["abstention"]]
    out: dict[str, Any] = {"dev_questions": len(records), "dev_questions_scored": len(scored)}

    def block(rs: list[dict]) -> dict[str, float]:
        d: dict[str, float] = {"n": len(rs)}
        for side, suffix in (("ours", ""), ("bm25", "_bm25")):
            d[f"any_at5{suffix}"] = _mean(r[f"{side}_at5"]["any"] for r in rs)
            d[f"any_at10{suffix}"] = _mean(r[f"{side}_at10"]["any"] for r in rs)
            d[f"all_at10{suffix}"] = _mean(r[f"{side}_at10"]["all"] for r in rs)
            d[f"session_at5{suffix}"] = _mean(r[f"{side}_at5"]["session"] for r in rs)
            d[f"tokens_at5{suffix}"] = _mean(r[f"tokens_at5{suffix}"] for r in rs)
        return d
    overall = block(scored)
    for key, value in overall.items():
        if key != "n" and not key.startswith("tokens"):
            out[f"dev_{key}"] = value
    out["dev_by_type"] = {t: block([r for r in scored if r["type"] == t])
                          for t in sorted({r["type"] for r in scored})}
    for k in (5, 10):
        out[f"dev_tokens_at{k}"] = _mean(r[f"tokens_at{k}"] for r in records)
        out[f"dev_tokens_at{k}_bm25"] = _mean(r[f"tokens_at{k}_bm25"] for r in records)
    out["dev_tokens_ratio_at5"] = out["dev_tokens_at5"] / out["dev_tokens_at5_bm25"]
    abst = [r["n_results"] for r in records if r["abstention"]]
    out["dev_abstention_questions"] = len(abst)
    out["dev_abstention_results"] = _mean(abst)
    turns, secs = sum(r["turns"] for r in records), sum(r["ingest_s"] for r in records)
    out["long_turn_ingest_turns_per_s"] = turns / secs if secs else float("nan")
    twins = [r for r in records if r.get("short_turns")]
    if twins:
        rate = lambda n, s: sum(r[n] for r in twins) / sum(r[s] for r in twins)   # noqa: E731
        out["short_turn_ingest_turns_per_s"] = rate("short_turns", "short_ingest_s")
        out["long_vs_short_ingest_ratio"] = rate("turns", "ingest_s") / out["short_turn_ingest_turns_per_s"]
    ms = [r["search_ms"] for r in records]
    gms = [r["graphiti_ms"] for r in records]
    out["dev_search_ms_p50"], out["dev_search_ms_p95"] = pct(ms, 50), pct(ms, 95)
    out["dev_graphiti_search_ms_p50"], out["dev_graphiti_search_ms_p95"] = pct(gms, 50), pct(gms, 95)
    out["dev_search_ratio_p95"] = out["dev_search_ms_p95"] / out["dev_graphiti_search_ms_p95"]
    first = [r["search_ms_first"] for r in records], [r["graphiti_ms_first"] for r in records]
    out["dev_search_ratio_p95_first_round"] = pct(first[0], 95) / pct(first[1], 95)
    return out


def run_dev(path: str | Path, limit: int | None = None, *, workdir: Path | None = None,
            settings: dict | None = None) -> dict[str, Any]:
    """Ingest, search and score every (or a stratified `limit` of the) question(s) of `path`."""
    from memoryplus.config.schema import Settings
    from memoryplus.testing.pygpt_host import LOCAL
    from memoryplus.engine.memory_engine import MemoryEngine
    raw = stratified(load(path), limit)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="memoryplus-recall-")
        workdir = Path(tmp.name)
    records: list[dict] = []
    started = time.monotonic()

    async def run():
        engine = MemoryEngine(Settings(**{**LOCAL, **(settings or {})}), workdir, app="bench-recall")
        try:
            for n, item in enumerate(raw):
                q = to_question(item)
                bank = f"dev-{n}"
                rec = {"type": q.qtype, "abstention": q.abstention}
                # not the first question: its turns are the process's first (models loading)
                twin = 0 < n <= SHORT_TWINS or len(raw) == 1
                steps = [(bank, _one)] + ([(f"short-{n}", _short_twin)] if twin else [])
                for name, step in steps[::-1] if n % 2 else steps:
                    try:
                        await step(engine, name, q, rec)
                    finally:
                        if engine.known(name):
                            await engine.clear(name)
                records.append(rec)
                hit = rec.get("ours_at10", {}).get("any")
                _say(f"recall {n + 1}/{len(raw)} ({q.qtype}): {rec['turns']} turns in {rec['ingest_s']:.0f} s, "
                     f"search {rec['search_ms']:.0f} ms" + ("" if hit is None else
                     f", any@10 ours {hit:.0f} / BM25 {rec['bm25_at10']['any']:.0f}"))
        finally:
            await engine.close()
    try:
        asyncio.run(run())
    finally:
        if tmp is not None:
            tmp.cleanup()
    out = summarize(records)
    out["dev_file"] = Path(path).name
    out["dev_limit"] = limit or 0
    out["dev_seconds"] = time.monotonic() - started
    return out


TYPE_COLS = [("any_at5", "any@5"), ("all_at10", "all@10"), ("any_at10", "any@10"), ("session_at5", "sess@5"),
             ("tokens_at5", "tokens@5")]


def print_dev(out: dict, stream=sys.stdout) -> None:
    """The recall section of the bench's table."""
    if "dev_any_at5" not in out:
        print("\nrecall on real conversations: NOT MEASURED. " + out.get("dev_not_measured", ""), file=stream)
        return
    print(f"\nrecall on real conversations ({out['dev_file']}, {out['dev_questions']} questions, "
          f"{out['dev_questions_scored']} scored, {out['dev_seconds']:.0f} s): ours / BM25", file=stream)
    head = f"{'question type':28} {'n':>3} " + " ".join(f"{h:>13}" for _, h in TYPE_COLS)
    print(head, file=stream)
    rows = [("all", {"n": out["dev_questions_scored"], **{k[4:]: v for k, v in out.items()
                                                          if k.startswith("dev_") and not isinstance(v, dict)}})]
    rows += list(out["dev_by_type"].items())
    for name, d in rows:
        cells = " ".join(f"{d[k]:6.0f}/{d[k + '_bm25']:<6.0f}" if k.startswith("tokens") else
                         f"{d[k]:6.3f}/{d[k + '_bm25']:<6.3f}" for k, _ in TYPE_COLS)
        print(f"{name:28} {int(d['n']):>3} {cells}", file=stream)
    print(f"tokens of the top 5: {out['dev_tokens_at5']:.0f} (BM25 {out['dev_tokens_at5_bm25']:.0f}), "
          f"top 10: {out['dev_tokens_at10']:.0f} (BM25 {out['dev_tokens_at10_bm25']:.0f}); "
          f"results on {out['dev_abstention_questions']} abstention questions: "
          f"{out['dev_abstention_results']:.1f}", file=stream)
    twin = (f" ({out['long_vs_short_ingest_ratio']:.2f} of short turns stored the same way, "
            f"{out['short_turn_ingest_turns_per_s']:.1f} turns/s)" if "long_vs_short_ingest_ratio" in out else "")
    print(f"long-turn ingest {out['long_turn_ingest_turns_per_s']:.1f} turns/s{twin}; search p50 "
          f"{out['dev_search_ms_p50']:.0f} ms, p95 {out['dev_search_ms_p95']:.0f} ms (graphiti search_ p95 "
          f"{out['dev_graphiti_search_ms_p95']:.0f} ms; each the median of {TIMED_ROUNDS} per bank; "
          f"p95 ratio of the first round alone {out['dev_search_ratio_p95_first_round']:.2f})", file=stream)
    stream.flush()


def find_dev() -> Path | None:
    """The dev split beside the repository or the current folder, if it is there."""
    for base in (Path(__file__).resolve().parent.parent, Path.cwd()):
        path = (base / DEV_RELATIVE).resolve()
        if path.is_file():
            return path
    return None


def not_measured() -> str:
    return (f"No LongMemEval file was given and none is at {DEV_RELATIVE.as_posix()} (relative to the "
            "repository or the current folder). "
            "Run `memoryplus bench --recall longmemeval_s.json` (LongMemEval's official file, plain "
            "or gzipped) to measure recall on real conversations.")


def dev_for_mode(mode: str, path: str | Path | None, limit: int | None) -> dict[str, Any]:
    """The recall section of a bench run: the given file, else the dev split where developers
    and CI keep it (quick and full runs only); else a plain note that it was not measured."""
    path = path or (find_dev() if mode in ("quick", "full") else None)
    if not path:
        return {"dev_not_measured": not_measured()}
    if limit is None:
        limit = {"smoke": 1, "quick": QUICK_LIMIT}.get(mode)
    _say(f"recall on real conversations: {Path(path).name}" + (f", {limit} questions" if limit else ""))
    return run_dev(path, limit)


def run_section(path: str | Path | None, limit: int | None, json_path=None, stream=sys.stdout) -> dict:
    """`memoryplus bench --recall FILE [--limit N]`: only this section."""
    if not path:
        raise ValueError("--recall needs a LongMemEval JSON file")
    from memoryplus.cli.bench import quiet_logs
    quiet_logs()
    out: dict[str, Any] = {"mode": "recall", **run_dev(path, limit)}
    print_dev(out, stream)
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=2, default=float) + "\n", encoding="utf-8")
    return out
