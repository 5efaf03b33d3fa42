"""Search fusion: one ranked list of memories from graphiti's facts and entities and the turn
index's turns, each with the completed turns behind it."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.episodes import COMPLETE, FACT_TAGS, TAG_LABELS, EpisodeMeta, ts
from memoryplus.wire.records import SearchResult, as_utc

# Fusion weights, tuned on tests/data retrieval set (see tests/test_retrieval_quality.py):
# keyword hits on raw turns are the strongest single signal on chat data; facts add precision.
# Turns first: on real conversations (issue 18's dev set) the turn index finds the turn that
# holds the answer more often than a fact or summary extracted by rules does; facts and
# summaries fill in between (shorter, so the prompt is no longer for it). Chosen on a stratified
# 40-question subset of the dev split (docs/PERFORMANCE.md).
KIND_WEIGHT = {"episode": 1.0, "fact": 0.2, "entity": 0.1}
RATING_STEP, RATING_CAP = 0.15, 2   # feedback moves a score by at most ±30 %


def scaled(scores: list[float], n: int) -> list[float]:
    scores = list(scores)[:n] + [0.0] * max(0, n - len(scores))
    top = max(scores) if scores and max(scores) > 0 else 1.0
    return [s / top for s in scores]


def rating(attributes: dict | None) -> int:
    """A fact's or entity's feedback rating (admin_ops.AdminOps.rate), bounded."""
    try:
        return max(-RATING_CAP, min(RATING_CAP, int((attributes or {}).get("mp_rating", 0))))
    except (TypeError, ValueError):
        return 0


async def fuse(pool: BankPool, bank: Bank, res, as_of: datetime | None,
               limit: int | None = None, turns: list[tuple[Any, float]] | None = None,
               ended: dict[str, datetime] | None = None) -> list[SearchResult]:
    """One ranked list from facts, entities and episodes: scores scaled per kind, weighted,
    nudged (boundedly) by feedback ratings; tags and sources from the episodes behind each.

    With `limit`, only the best `limit` that have sources: a candidate's score is known
    before its sources, so sources are looked up best first, for as many as can still make
    the list (on a 5,000-turn bank a hub entity such as "User" is mentioned by thousands of
    turns: looking up every candidate's sources cost more than a tenth of a search)."""
    t = as_utc(as_of) if as_of else None
    nodes = [n for n in res.nodes if not set(n.labels) & set(TAG_LABELS)
             and (t is None or ts(n.created_at) <= t)]
    node_scores = scaled([s for n, s in zip(res.nodes, res.node_reranker_scores)
                          if n in nodes], len(nodes))
    # the turn index's ranking (scaled already) replaces graphiti's keyword-only turn search
    pairs = list(turns) if turns is not None else list(zip(res.episodes, res.episode_reranker_scores))
    known = {e.uuid: EpisodeMeta.parse(e.name, e.uuid) for e, _ in pairs}   # turns: no lookup
    pairs = [(e, s) for e, s in pairs
             if known[e.uuid].state == COMPLETE and (t is None or ts(e.valid_at) <= t)]
    episodes = [e for e, _ in pairs]
    ep_scores = [s for _, s in pairs] if turns is not None else scaled([s for _, s in pairs], len(pairs))
    edges = list(res.edges)
    edge_scores = scaled(res.edge_reranker_scores, len(edges))
    # stable: on a tie, turns before facts before entities (the best fact, 0.2, ties the 5th
    # turn, 1/5: the turn holds what the fact was drawn from, and more)
    candidates = sorted(
        [("episode", e, round(KIND_WEIGHT["episode"] * s, 6)) for e, s in zip(episodes, ep_scores)]
        + [("fact", e, round(KIND_WEIGHT["fact"] * s * (1 + RATING_STEP * rating(e.attributes)), 6))
           for e, s in zip(edges, edge_scores)]
        + [("entity", n, round(KIND_WEIGHT["entity"] * s * (1 + RATING_STEP * rating(n.attributes)), 6))
           for n, s in zip(nodes, node_scores)],
        key=lambda c: c[2], reverse=True)
    want = len(candidates) if limit is None else limit
    out: list[SearchResult] = []
    latest: dict[str, datetime] = {}    # entity uuid -> its newest turn (up to `t`)
    covered: set[str] = set()           # turns the results so far come from (first sources)
    repeats = 0                         # results from a covered turn: they make no room
    while candidates and len(out) - repeats < want:
        # a few spare: a candidate whose turns were all forgotten or are pending drops out
        room = want - len(out) + repeats + 2
        chunk, candidates = candidates[:room], candidates[room:]
        behind_each = await sources(pool, bank, [c for kind, c, _ in chunk if kind == "fact"],
                                    [c for kind, c, _ in chunk if kind == "entity"], known, t, latest)
        await _read_texts(pool, bank, [c for kind, c, _ in chunk if kind == "episode"])
        for kind, c, score in chunk:
            first = len(out)
            if kind == "episode":
                if not c.content:       # forgotten since it was found
                    continue
                meta = known[c.uuid]
                out.append(SearchResult(id=c.uuid, kind="episode", text=c.content,
                                        valid_at=ts(c.valid_at), invalid_at=(ended or {}).get(c.uuid),
                                        tags=meta.tags, sources=[meta.id], score=score))
            else:
                behind = behind_each.get(c.uuid)
                if not behind:
                    continue
                _append_result(out, kind, c, behind, score, latest)
            if len(out) > first:
                if out[-1].sources[0] in covered:
                    repeats += 1
                covered.add(out[-1].sources[0])
    out.sort(key=lambda r: r.score, reverse=True)
    return out


async def _read_texts(pool: BankPool, bank: Bank, episodes: list) -> None:
    """The text of turns found without it (the turn index's hits: content ""), read now
    that they are to be shown: only these, not every hit; from the turn index's copy when
    it has one (a read by key from Kuzu costs ~0.22 ms at 20,000 turns)."""
    unread = [e for e in episodes if not e.content]
    if bank.turns is not None:
        for e in unread:
            e.content = bank.turns.text(e.uuid) or ""
        unread = [e for e in unread if not e.content]
    rows = await pool.episodes(bank, [e.uuid for e in unread]) if unread else {}
    for e in unread:
        e.content = (rows.get(e.uuid) or {}).get("content") or ""


def _append_result(out: list[SearchResult], kind: str, c, behind: list[EpisodeMeta], score: float,
                   latest: dict[str, datetime]) -> None:
    """A fact or entity candidate as a result, with the turns behind it."""
    ids, tags = [m.id for m in behind], list(dict.fromkeys(x for m in behind for x in m.tags))
    if kind == "fact":
        own = (c.attributes or {}).get(FACT_TAGS)
        if own is not None:     # a local fact knows its sentence's tags; an LLM fact has its turn's
            tags = list(own)
        out.append(SearchResult(id=c.uuid, kind="fact", text=c.fact, name=c.name,
                                valid_at=ts(c.valid_at), invalid_at=ts(c.invalid_at),
                                tags=tags, sources=ids, score=score))
    else:
        out.append(SearchResult(id=c.uuid, kind="entity", name=c.name, tags=tags,
                                text=f"{c.name}: {c.summary}" if c.summary else c.name,
                                valid_at=latest.get(c.uuid) or ts(c.created_at), sources=ids,
                                score=score))


def covering(results: list[SearchResult], limit: int) -> list[SearchResult]:
    """Best first, but no two from the same stored turn (first source) while results from
    other turns remain: one turn's text, fact and summary would otherwise fill the prompt
    with one memory. Repeats follow, best first, when nothing else is left."""
    seen: set[str] = set()
    first, later = [], []
    for r in sorted(results, key=lambda r: r.score, reverse=True):
        key = r.sources[0] if r.sources else r.id
        (later if key in seen else first).append(r)
        seen.add(key)
    return (first + later)[:limit]


async def sources(pool: BankPool, bank: Bank, facts: list, entities: list,
                  metas: dict[str, EpisodeMeta], t: datetime | None = None,
                  latest: dict[str, datetime] | None = None) -> dict[str, list[EpisodeMeta]]:
    """The completed turns behind facts (theirs, newest first) and entities (the newest
    five that mention them, up to `t`), by fact or entity uuid. `metas`: turns known already
    (the search's own turn hits, often the very turns behind its facts); grows with the rest.
    `latest` gets each entity's newest turn time: the date of what its summary says."""
    mentions: dict[str, list[tuple[datetime, str]]] = {}
    if entities:
        for r in await pool.query(bank, "episode_uuids_mentioning", uuids=[n.uuid for n in entities]):
            when = ts(r["valid_at"])
            if t is None or (when is not None and when <= t):
                mentions.setdefault(r["entity"], []).append((when, r["episode"]))
            else:       # its summary may tell what was said after `t`: not shown
                mentions.setdefault(r["entity"], []).append((None, None))
        if latest is not None:
            latest.update({u: w for u, ms in mentions.items()
                           if (w := max((w for w, _ in ms if w), default=None))})
    behind = {f.uuid: list(reversed(f.episodes)) for f in facts}
    behind |= {n.uuid: [u for _, u in sorted(mentions.get(n.uuid, []), reverse=True)[:5]]
               for n in entities if all(u for _, u in mentions.get(n.uuid, []))}
    metas |= await turn_metas(pool, bank, [u for uuids in behind.values() for u in uuids if u not in metas])
    return {uuid: [metas[u] for u in uuids if u in metas and metas[u].state == COMPLETE]
            for uuid, uuids in behind.items()}


async def turn_metas(pool: BankPool, bank: Bank, uuids: list[str]) -> dict[str, EpisodeMeta]:
    """The metadata of stored turns, by uuid: from the turn index's names (it holds every
    completed turn), the rest (pending, or an index without names) read from the bank."""
    out: dict[str, EpisodeMeta] = {}
    index, unread = bank.turns, []
    for u in dict.fromkeys(uuids):
        name = index.name(u) if index is not None else None
        if name is None:
            unread.append(u)
        else:
            out[u] = EpisodeMeta.parse(name, u)
    for r in await pool.query(bank, "episode_names", uuids=unread) if unread else []:
        out[r["uuid"]] = EpisodeMeta.parse(r["name"], r["uuid"])
    return out
