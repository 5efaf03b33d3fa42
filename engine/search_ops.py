"""Search: graphiti's fact and entity search and the turn index, fused into one ranked list
of memories (see fusion.py), with the conversation's time as "now" and questions about the
past answered by the facts that were replaced."""
from __future__ import annotations

import asyncio
import logging
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

import numpy as np
from graphiti_core.driver.driver import GraphProvider
from graphiti_core.nodes import EpisodeType, EpisodicNode
from graphiti_core.search.search_config import (
    EdgeReranker, EdgeSearchConfig, EdgeSearchMethod, NodeReranker, NodeSearchConfig, NodeSearchMethod,
    SearchConfig,
)
from graphiti_core.search.search_filters import ComparisonOperator, DateFilter, SearchFilters

from memoryplus.common.text import WORD
from memoryplus.engine import extract as local_extract
from memoryplus.engine import graph_index
from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.embedders import embed_all
from memoryplus.engine.episodes import COMPLETE, EpisodeMeta, ts
from memoryplus.engine.excerpts import excerpts
from memoryplus.engine.fusion import covering, fuse, turn_metas
from memoryplus.engine.turn_index import (TurnIndex, compact, pack_vectors, reply_query, reply_vectors, split_body,
                                          unpack_vectors, vectors_tag)
from memoryplus.engine.turn_texts import TurnTexts
from memoryplus.wire.records import SearchResult, as_utc

log = logging.getLogger(__name__)

KEEP_VECTORS_ROWS = 256     # turns whose vectors one query writes (~3.5 KB each for a dev turn)
SUPERSEDED_FOR = 5          # a question about the past: the top current facts whose predecessors count
NOW_SLACK = timedelta(days=1)   # see search(): the zone of a conversation's dates is unknown
GRAPH_QUERY_WORDS = 128     # graphiti's Kuzu full-text search drops a longer query (MAX_QUERY_LENGTH)
IS_CALLED = "IS_CALLED"      # the relation of the user's own names (local extraction's and the modes')


def clean_query(text: str) -> str:
    """Kuzu's BM25 misses tokens with punctuation attached ('dentist?'); keep words only."""
    return " ".join(WORD.findall(text))[:2000]


def search_config(depth: int) -> SearchConfig:
    """graphiti's search: facts and entities by keywords and vectors. Not turns: the turn
    index ranks those (turn_index.py), and a Kuzu bank has no full-text index of its turns."""
    return SearchConfig(
        edge_config=EdgeSearchConfig(search_methods=[EdgeSearchMethod.bm25,
                                                     EdgeSearchMethod.cosine_similarity],
                                     reranker=EdgeReranker.rrf),
        node_config=NodeSearchConfig(search_methods=[NodeSearchMethod.bm25,
                                                     NodeSearchMethod.cosine_similarity],
                                     reranker=NodeReranker.rrf),
        limit=depth)


def search_filter(as_of: datetime | None, now: datetime | None = None) -> SearchFilters:
    """Current facts (valid by `now`), or the facts valid at `as_of`."""
    if as_of is None:
        flt = SearchFilters(expired_at=[[DateFilter(comparison_operator=ComparisonOperator.is_null)]])
        if now is not None:
            flt.valid_at = [[DateFilter(date=as_utc(now), comparison_operator=ComparisonOperator.less_than_equal)]]
        return flt
    t = as_utc(as_of)
    return SearchFilters(
        valid_at=[[DateFilter(date=t, comparison_operator=ComparisonOperator.less_than_equal)]],
        invalid_at=[[DateFilter(comparison_operator=ComparisonOperator.is_null)],
                    [DateFilter(date=t, comparison_operator=ComparisonOperator.greater_than)]])


async def _both(first, second):
    """Both results; if one fails, the other is cancelled and waited for (no query of a
    failed search runs on after it, against a bank that may be closing)."""
    tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class SearchOps:
    def __init__(self, pool: BankPool):
        self.pool = pool
        # by bank: the first words of its entities' names, for the entity index they are of
        self._first_words: dict[str, tuple[dict, int, frozenset[str]]] = {}

    async def search(self, bank_name: str, query: str, limit: int = 10,
                     as_of: datetime | None = None, now: datetime | None = None) -> list[SearchResult]:
        bank = await self.pool.existing(bank_name)
        async with self.pool.reading(bank):
            # Conversations come with dates but no zone (imports, LongMemEval): a turn up to a
            # day "after" now may have been said before it.
            horizon = as_utc(now) + NOW_SLACK if now is not None else None
            return await self.pool.run(bank, self.ranked(bank, query, limit, as_of, horizon))

    async def ranked(self, bank: Bank, query: str, limit: int, as_of: datetime | None,
                     now: datetime | None = None, whole: bool = False) -> list[SearchResult]:
        """The search itself, on an open bank (search() waits for its transaction first).
        A long turn comes as its best sentences for the query (excerpts.py); `whole`: as
        stored (what forgetting it would delete)."""
        text = clean_query(query)
        if not text:
            return []
        limit = max(1, min(int(limit), 100))
        # "Where did Ravi live before…?": the superseded facts are the answer, so keep them
        past = as_of is None and local_extract.asks_about_past(query)
        turns, graph, related = await self._read(bank, query)
        out = await self._search_once(bank, clean_query(graph), as_of, past, limit, now,
                                      clean_query(turns), related)
        out = covering(out, limit)
        if not whole:
            shown = [r for r in out if r.kind == "episode"]
            index = bank.turns
            replies = [index.reply_rows(r.id) if index is not None else None for r in shown]
            for r, text in zip(shown, excerpts([r.text for r in shown], turns, bank.embedder, replies)):
                r.text = text
        return out

    async def _read(self, bank: Bank, query: str) -> tuple[str, str, list[str]]:
        """The query in the bank's words: (for the turn index, for graphiti's search, the
        words of its word families, which the turn index weighs lower). The user's own names
        are the user ("Where does Mira live?", asked by Mira, is where I live: their turns say
        "I", their facts "User"); "my boss" is the person the user's facts call their boss, or
        their manager (searched for both: one search, not two, for latency); "vegetarian"
        finds "pescatarian" too. At most one query of the user's facts for all of it."""
        refs = local_extract.role_references(query)
        relations = {rel for _, rel in refs}
        if await self._may_name_someone(bank, query):
            relations.add(IS_CALLED)
        rows = await self._user_facts(bank, relations)
        read = local_extract.as_the_user(
            query, [r["target_name"] for r in rows if r["name"] == IS_CALLED])
        if read is not None:
            query, names_read = read
            more = [ref for ref in local_extract.role_references(query) if ref not in refs]
            if more:                    # "Mira's boss" is "my boss"
                rows += await self._user_facts(bank, {rel for _, rel in more} - {rel for _, rel in refs})
                refs += more
        for phrase, names in self._roles(refs, rows):
            query = re.sub(re.escape(phrase), lambda m: f"{m.group(0)} {' '.join(names)}", query,
                           count=1, flags=re.I)
        related = local_extract.family_words(query)
        # the name itself still counts, in the turns as a related word: a name read wrongly
        # ("I'm Mexican" taken for one) costs the query its word only in part
        named = names_read + ["User"] if read is not None else []
        room = max(0, GRAPH_QUERY_WORDS - len(WORD.findall(query)) - len(named))
        return query, " ".join([query, *named, *related[:room]]), related + named[:-1]

    async def _search_once(self, bank: Bank, text: str, as_of: datetime | None, past: bool,
                           limit: int, now: datetime | None = None, turn_text: str | None = None,
                           related: Sequence[str] = ()) -> list[SearchResult]:
        """graphiti's search with `text`, the turn index's with `turn_text` (and `related`
        words, weighed lower), fused."""
        depth = self.pool.settings.search_depth   # candidates per kind (facts, entities, turns)
        if past:        # replaced facts too, but none that began after `now`
            flt = SearchFilters() if now is None else SearchFilters(valid_at=[[DateFilter(
                date=as_utc(now), comparison_operator=ComparisonOperator.less_than_equal)]])
        else:
            flt = search_filter(as_of, now)
        # facts and entities; the turns are the turn index's (fuse takes them from there). Both
        # at once: the turn index's scoring runs while Kuzu's threads answer graphiti's queries
        results, (turns, ended) = await _both(
            graph_index.candidates(bank, text, search_config(depth), flt),
            self._turn_hits(bank, turn_text or text, as_of or now, depth, past, related,
                            as_of or (now - NOW_SLACK if now else None)))
        # a question about the past ranks the replaced facts by the current ones: all of those
        out = await fuse(self.pool, bank, results, as_of or now, None if past else limit, turns, ended)
        if past:
            out += await self._superseded(bank, results.edges[:SUPERSEDED_FOR], out)
        return out

    async def turn_index(self, bank: Bank) -> TurnIndex:
        """The bank's turns as an index (turn_index.py), built from the bank once per open."""
        while bank.turns is None and bank.turns_pending is not None:
            await asyncio.sleep(0.005)          # another search is building it
        if bank.turns is None:
            bank.turns_pending = []             # writes while it is read go here, then in
            try:
                rows = [r for r in await self.pool.query(bank, "turns_for_index", gid=bank.slug)
                        if EpisodeMeta.parse(r["name"], r["uuid"]).state == COMPLETE]
                tag = vectors_tag(bank.manifest.embedder, bank.embedder)
                kept = [unpack_vectors(r["turn_vectors"], tag) for r in rows]
                # turns stored before their vectors were kept, or by other embedders
                missing = [i for i, k in enumerate(kept) if k is None]
                users = await embed_all(bank.embedder, [split_body(rows[i]["content"] or "")[0] or "-"
                                                        for i in missing])
                for i, v in zip(missing, users):
                    replies = reply_vectors(bank.embedder, rows[i]["content"] or "")
                    kept[i] = (np.asarray(v, np.float32), compact(replies))
                index = TurnIndex(dim=len(kept[0][0]) if kept else bank.manifest.embedding_dim or 1,
                                  texts=TurnTexts.open(bank.dir))
                for r, (v, replies) in zip(rows, kept):
                    index.add(r["uuid"], r["content"] or "", ts(r["valid_at"]), v, replies, r["name"],
                              r["entity_edges"] or [])
                for op, args in bank.turns_pending:
                    index.add(*args) if op == "add" else index.remove(*args)
                bank.turns = index
            finally:
                bank.turns_pending = None
            if missing:         # kept, so that the next open embeds none of them again
                await self._keep_vectors(bank, [(rows[i]["uuid"], pack_vectors(tag, *kept[i])) for i in missing])
        return bank.turns

    async def _keep_vectors(self, bank: Bank, packed: list[tuple[str, str]]) -> None:
        """Write turns' vectors to their rows (an older bank's, once); a failure costs only
        their embedding again at the next open."""
        try:
            async with bank.write_lock:
                for first in range(0, len(packed), KEEP_VECTORS_ROWS):
                    await self.pool.query(bank, "set_turn_vectors", rows=[
                        {"uuid": u, "vectors": v} for u, v in packed[first:first + KEEP_VECTORS_ROWS]])
                bank.unflushed += 1
        except Exception as exc:    # noqa: BLE001 - the index is built; the search goes on
            log.warning("bank %r: the turns' vectors were not kept (%s)", bank.name, type(exc).__name__)

    async def _turn_hits(self, bank: Bank, text: str, until: datetime | None, depth: int,
                         past: bool = False, related: Sequence[str] = (), ref: datetime | None = None,
                         ) -> tuple[list[tuple[Any, float]], dict[str, datetime]]:
        """The turn index's best `depth` turns as (episode, score), standing in for graphiti's
        keyword-only turn search, scored by rank as graphiti's RRF scores its single list
        (1, 1/2, 1/3 …), so the weights between kinds keep their meaning.

        Also, by episode uuid, when a turn stopped being true: every fact drawn from it was
        replaced ("I live in Berlin" after "I live in Lisbon now"). Such a turn is no answer
        to a question about now: it follows the turns still true (not for a question about
        the past, where it is the answer), and its result says when it ended.

        `ref`: the time "two weeks ago" counts back from (the conversation's now; the
        machine's when none is given)."""
        index = await self.turn_index(bank)
        if not len(index):
            return [], {}
        vec = await bank.embedder.create(text)
        back = local_extract.days_ago(text)
        pointed = None if back is None else (
            as_utc(ref or datetime.now(timezone.utc)) - timedelta(days=back), back)
        hits = index.search(text, vec, depth, as_utc(until) if until else None, related,
                            to_assistant=local_extract.asks_about_assistant(text), pointed=pointed,
                            reply_vector=reply_query(bank.embedder, text, vec),
                            several=local_extract.asks_for_several(text))
        rows = index.known_rows(u for u, _ in hits)     # their text is read if shown (fusion.py)
        unknown = [u for u, _ in hits if u not in rows]
        rows |= await self.pool.episodes(bank, unknown) if unknown else {}
        hits = [u for u, _ in hits if u in rows]
        edges = list({e for u in hits for e in rows[u]["entity_edges"] or []})
        # the facts' ends: those the graph index keeps (no read by uuid), then the rest
        found = bank.graph_index.kept_ends(edges) if bank.graph_index is not None else {}
        unread = [e for e in edges if e not in found]
        for r in await self.pool.query(bank, "fact_ends", uuids=unread) if unread else []:
            found[r["uuid"]] = r["invalid_at"]
        ends: dict[str, datetime | None] = {}
        for uuid, invalid_at in found.items():
            end = ts(invalid_at)
            ends[uuid] = end if end is not None and (until is None or end <= as_utc(until)) else None
        ended: dict[str, datetime] = {}
        for u in hits:
            mine = [ends.get(e) for e in rows[u]["entity_edges"] or [] if e in ends]
            if mine and all(mine):
                ended[u] = max(mine)
        if not past:
            hits.sort(key=lambda u: u in ended)      # stable: the index's order otherwise
        # content "" (a stored turn is never empty): fusion reads the text of those it shows;
        # created_at is not read there
        return [(EpisodicNode(uuid=u, name=rows[u]["name"], group_id=bank.slug, labels=[],
                              source=EpisodeType.message, content=rows[u].get("content") or "",
                              source_description="", created_at=ts(rows[u]["valid_at"]),
                              valid_at=ts(rows[u]["valid_at"])), 1 / rank)
                for rank, u in enumerate(hits, 1)], ended

    async def _superseded(self, bank: Bank, edges: list, found: list[SearchResult]) -> list[SearchResult]:
        """For a question about the past: the facts that the current facts found replaced
        ("Ravi lives in Osaka" before "Ravi lives in Valencia"), ranked just above them."""
        by_id = {r.id: r for r in found}
        current = [e for e in edges if e.invalid_at is None and e.uuid in by_id]
        if not current:
            return []
        sources, names = list({e.source_node_uuid for e in current}), list({e.name for e in current})
        ended = await bank.graph_index.ended_named(sources, names) if bank.graph_index is not None else None
        if ended is None:
            ended = await self.pool.query(bank, "ended_facts_named", sources=sources, names=names)
        picked: dict[str, tuple[dict, float]] = {}
        for edge in current:
            for r in (r for r in ended if r["source"] == edge.source_node_uuid and r["name"] == edge.name):
                s = by_id[edge.uuid].score * 1.1
                if r["uuid"] in by_id:          # found already, ranked as any match: lift it
                    by_id[r["uuid"]].score = max(by_id[r["uuid"]].score, round(s, 6))
                elif r["uuid"] not in picked:
                    picked[r["uuid"]] = (r, s)
        rows = list(picked.values())
        metas = await turn_metas(self.pool, bank, [u for r, _ in rows for u in r["episodes"] or []])
        out = []
        for r, s in rows:
            known_eps = [metas[u] for u in reversed(r["episodes"] or []) if u in metas and metas[u].state == COMPLETE]
            if known_eps:
                out.append(SearchResult(id=r["uuid"], kind="fact", text=r["fact"], name=r["name"],
                                        valid_at=ts(r["valid_at"]), invalid_at=ts(r["invalid_at"]),
                                        tags=list(dict.fromkeys(t for m in known_eps for t in m.tags)),
                                        sources=[m.id for m in known_eps], score=round(s, 6)))
        return out

    async def _may_name_someone(self, bank: Bank, query: str) -> bool:
        """Whether a word of the query begins the name of one of the bank's entities (a name
        of the user's is one: "User is called Mira"); if not, no query of the user's names."""
        index = await self.pool.entity_index(bank)
        known = self._first_words.get(bank.slug)
        if known is None or known[0] is not index or known[1] != len(index):
            firsts = frozenset(k.split(" ", 1)[0] for k in index) - {"user", "assistant"}
            if len(self._first_words) >= 64:        # banks closed or deleted keep no entry
                self._first_words.clear()
            known = self._first_words[bank.slug] = (index, len(index), firsts)
        return not known[2].isdisjoint(w.lower() for w in WORD.findall(query))

    async def prime(self, bank_name: str) -> None:
        """Read the user's names ahead of the next search (after a write: every search of a bank
        whose entities' names begin with a query word asks for them, and a chat writes between
        any two searches). Costs the writer ~2 ms, saves the search as much, 10–50 ms on pages
        not read since the bank opened."""
        bank = self.pool.banks.get(bank_name)
        if bank is None or bank.provider != GraphProvider.KUZU:
            return
        async with self.pool.reading(bank):
            await self.pool.run(bank, self._user_facts(bank, {IS_CALLED}))

    async def _user_facts(self, bank: Bank, relations: set[str]) -> list[dict]:
        """The user's current facts under `relations` (their names, the people of their roles).
        Kept per bank until its next write (a Kuzu bank is written by this process only; most
        searches ask for the user's names, ~2–4 ms a query on a dev-split bank)."""
        user = (await self.pool.entity_index(bank)).get("user")
        if user is None or not relations:
            return []
        key = (user[0], frozenset(relations))
        writes = bank.driver.writes
        kept = bank.user_facts
        if kept is not None and kept[0] == writes and key in kept[1]:
            return list(kept[1][key])
        rows = await self.pool.query(bank, "current_facts_named", source=user[0],
                                     relations=sorted(relations))
        if bank.provider == GraphProvider.KUZU and bank.driver.writes == writes:
            if kept is None or kept[0] != writes:
                kept = bank.user_facts = (writes, {})
            kept[1][key] = rows
        return list(rows)

    @staticmethod
    def _roles(refs: list[tuple[str, str]], rows: list[dict]) -> list[tuple[str, list[str]]]:
        """The people the user's facts (`rows`) name for the roles a query mentions ("my
        boss"), the first relation of a mention that names someone (local_extract.role_references)."""
        out: list[tuple[str, list[str]]] = []
        for phrase, relation in refs:
            if any(phrase.lower().startswith(p.lower()) for p, _ in out):
                continue          # "my little sister" resolved: not "my little" too
            names = list(dict.fromkeys(r["target_name"] for r in rows if r["name"] == relation))[:2]
            if names:
                out.append((phrase, names))
        return out
