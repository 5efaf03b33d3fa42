"""A bank's fact and entity vectors, rows and words in memory: graphiti's searches, no scans.

graphiti 0.31.2 scores every fact and entity embedding of a Kuzu bank on each search (its
schema keeps them as FLOAT[], which Kuzu's HNSW index cannot take): the search grows with
the bank. Here each open Kuzu bank keeps its vectors as one float32 matrix per kind (1 KB a
vector with the 256-d local embedder: ~20 MB for a 20,000-turn bank), built on its first
search and kept in step with every write by watching the driver's queries (store.py's
CountingMixin hands each finished query to `observe`): graphiti's saves and ours carry
`uuid` and the vector, deletions their uuids; a rollback, or a write of vectors in a form
not read here, reloads it on the next search.

The search itself stays graphiti's (`search_` with our driver, whose `search_interface`
answers the two cosine searches and the two fulltext searches of facts and entities (their
words kept here too: engine/word_index.py), reads the facts both fact searches found in one
query, and hands everything else to graphiti's own queries), so the results are graphiti's
SearchResults: the index picks the best-scoring uuids, and graphiti's filters (expired,
valid_at …) run on those few, in score order, until `limit` rows pass. The fulltext hits
are Kuzu's BM25 scores, except that every row is scored where Kuzu's own scan of a word
held by 1,000 rows or more skips some (word_index.py). The facts' and entities' rows as
graphiti's queries return them are kept here too (`rows`, `entity_rows`, dropped at each
write that names them), since Kuzu 0.11.3 reads every returned column of every fact, and
joins each with every entity, to return a few; graphiti's date, group and label filters
are tested on those rows as Kuzu evaluates them (`_row_test`, `_node_filters`), other
filters and rows not kept are Kuzu's. An entry the database no longer has is skipped,
never returned, so the answer is the scan's whatever the index holds extra. Neo4j keeps
graphiti's path (its own vector and fulltext indexes).
"""
from __future__ import annotations

import asyncio
import contextvars
import logging
import operator
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from graphiti_core.driver.driver import GraphProvider
from graphiti_core.driver.search_interface.search_interface import SearchInterface
from graphiti_core.helpers import SEMAPHORE_LIMIT
from graphiti_core.edges import get_entity_edge_from_record
from graphiti_core.models.edges.edge_db_queries import get_entity_edge_return_query
from graphiti_core.models.nodes.node_db_queries import get_entity_node_return_query
from graphiti_core.nodes import get_entity_node_from_record
from graphiti_core.search import search_utils
from graphiti_core.search.search_config import EdgeSearchMethod, SearchConfig, SearchResults
from graphiti_core.search.search_filters import (
    ComparisonOperator, SearchFilters, edge_search_filter_query_constructor,
    node_search_filter_query_constructor,
)
from pydantic import PrivateAttr

from memoryplus.engine.store import WRITE
from memoryplus.engine.stopwords import KUZU_STOPWORDS
from memoryplus.engine.word_index import STEMS_QUERY, WordIndex

log = logging.getLogger("memoryplus.graph_index")

_DELETE = re.compile(r"\b(DELETE|DETACH)\b", re.I)
_FACT_TABLES = re.compile(r"RelatesToNode_|RELATES_TO")    # a query that touches facts
FIRST_FETCH = 20            # candidates read from the database at first (doubling while short)

_LOAD = {
    "facts": "MATCH (e:RelatesToNode_) WHERE e.group_id = $gid RETURN e.uuid AS uuid, e.fact_embedding AS v",
    "entities": "MATCH (n:Entity) WHERE n.group_id = $gid RETURN n.uuid AS uuid, n.name_embedding AS v",
}
_UUIDS = {
    "facts": "MATCH (e:RelatesToNode_) WHERE e.group_id = $gid RETURN e.uuid AS uuid",
    "entities": "MATCH (n:Entity) WHERE n.group_id = $gid RETURN n.uuid AS uuid",
}
# the texts graphiti's two full-text indexes would hold (every row of the database, all groups)
_TEXTS = {"facts": "MATCH (x:RelatesToNode_) {} RETURN x.uuid AS uuid, x.name AS name, x.fact AS text",
          "entities": "MATCH (x:Entity) {} RETURN x.uuid AS uuid, x.name AS name, x.summary AS text"}
_ALL_UUIDS = {"facts": "MATCH (x:RelatesToNode_) RETURN x.uuid AS uuid",
              "entities": "MATCH (x:Entity) RETURN x.uuid AS uuid"}
# graphiti's MATCH of facts (joined with their two entities) and its rows, and the facts
# alone, for Kuzu's filters (GraphIndex.fact_rows)
_JOINED = "MATCH (n:Entity)-[:RELATES_TO]->(e:RelatesToNode_)-[:RELATES_TO]->(m:Entity) "
_ALONE = "MATCH (e:RelatesToNode_) "
_RETURN = get_entity_edge_return_query(GraphProvider.KUZU)
_RETURNED = tuple(re.findall(r"\bAS (\w+)", _RETURN))       # a kept row's fields, in order
_INVALID_AT = _RETURNED.index("invalid_at")
_SOURCE, _NAME = _RETURNED.index("source_node_uuid"), _RETURNED.index("name")
_GROUP_ID = _RETURNED.index("group_id")
_ROWS = _JOINED + "WHERE e.group_id = $gid RETURN DISTINCT " + _RETURN
_ROWS_BY_UUID = _JOINED + "WHERE e.uuid IN $uuids RETURN DISTINCT " + _RETURN
_NODE_FILTER = re.compile(r"\b[nm]\s*[.:]")     # a filter on the facts' entities: joined only
# graphiti's entity rows (node_similarity_search's RETURN), kept like the facts' rows
_NODE_RETURN = get_entity_node_return_query(GraphProvider.KUZU)
_NODE_RETURNED = tuple(re.findall(r"\bAS (\w+)", _NODE_RETURN))
_NODE_LABELS = _NODE_RETURNED.index("labels")
_NODE_GROUP_ID = _NODE_RETURNED.index("group_id")
_NODE_NAME, _NODE_SUMMARY = _NODE_RETURNED.index("name"), _NODE_RETURNED.index("summary")
_NODE_ROWS = "MATCH (n:Entity) WHERE n.group_id = $gid RETURN " + _NODE_RETURN
_LABELS_FILTER = "list_has_all(n.labels, $labels)"      # node_search_filter_query_constructor's
_VECTORS = {
    "facts": "MATCH (e:RelatesToNode_) WHERE e.uuid IN $uuids RETURN e.uuid AS uuid, e.fact_embedding AS v",
    "entities": "MATCH (n:Entity) WHERE n.uuid IN $uuids RETURN n.uuid AS uuid, n.name_embedding AS v",
}


# Each row is kept as two matrices: its first HEAD_DIMS dimensions (half of the local
# embedder's 256, where it is trained to be cut) and the rest. A scan reads the first, bounds
# each row's full cosine by it plus the product of the rest's norms (Cauchy-Schwarz), and reads
# the rest only of the rows whose bound passes the floor. With the local embedder ~250 of
# 15,209 facts pass at 20,000 turns: the scan reads half the bytes (a strided view of one
# matrix saved a quarter: the memory brings in more than it is asked for). When more than
# BOUND_SHARE of the rows pass (an embedder not made to be cut), both are read whole.
HEAD_DIMS, BOUND_SHARE = 128, 0.125


class VectorSet:
    """uuid → one row of float32 vectors (rows of removed uuids are reused)."""

    def __init__(self, dim: int = 0):
        self.rows: dict[str, int] = {}
        self.uuids: list[str | None] = []
        self._shape(dim, 0)     # head, rest; norms (0: a free row); tails (each row's `rest` norm)
        self.free: list[int] = []
        self.lent = False           # `uuids` is read by a Ranking: copy it before a row changes

    def _shape(self, dim: int, cap: int, kept: int = 0) -> None:
        """Room for `cap` rows of `dim`, the first `kept` rows carried over."""
        split = min(dim, HEAD_DIMS)
        head, rest = np.zeros((cap, split), np.float32), np.zeros((cap, dim - split), np.float32)
        norms, tails = np.zeros(cap, np.float32), np.zeros(cap, np.float32)
        if kept:
            head[:kept], rest[:kept] = self.head[:kept], self.rest[:kept]
            norms[:kept], tails[:kept] = self.norms[:kept], self.tails[:kept]
        self.dim, self.head, self.rest, self.norms, self.tails = dim, head, rest, norms, tails

    def __len__(self) -> int:
        return len(self.rows)

    def vector(self, uuid: str) -> np.ndarray | None:
        """The vector kept for `uuid` (None: none)."""
        row = self.rows.get(uuid)
        return None if row is None else np.concatenate([self.head[row], self.rest[row]])

    def put(self, uuid: str, vec) -> bool:
        """Store a vector; False when its size is not the set's (the caller reloads)."""
        if vec is None:
            self.drop(uuid)
            return True
        v = np.asarray(vec, np.float32)
        if not self.dim and not self.rows:
            self._shape(len(v), 0)
        if v.ndim != 1 or len(v) != self.dim:
            return False
        row = self.rows.get(uuid)
        if row is None:
            if self.free:
                self._own_uuids()
                row = self.free.pop()
            else:
                row = len(self.uuids)
                if row >= len(self.head):        # grow by half: amortized, little slack
                    self._shape(self.dim, max(64, row + row // 2), kept=row)
                self.uuids.append(None)
            self.rows[uuid] = row
            self.uuids[row] = uuid
        split = self.head.shape[1]
        self.head[row], self.rest[row] = v[:split], v[split:]
        self.norms[row] = float(np.linalg.norm(v))
        self.tails[row] = float(np.linalg.norm(v[split:]))
        if not self.norms[row]:            # a zero vector scores nothing in Kuzu either
            self.drop(uuid)
        return True

    def drop(self, uuid: str) -> None:
        row = self.rows.pop(uuid, None)
        if row is not None:
            self._own_uuids()
            self.uuids[row] = None
            self.norms[row] = 0.0
            self.free.append(row)

    def ranked(self, query, min_score: float) -> Sequence[str]:
        """Every uuid whose cosine to `query` is above `min_score`, best first (Kuzu's
        array_cosine_similarity, as graphiti's scan scores them): a Ranking."""
        n = len(self.uuids)
        if not n or not self.rows:
            return []
        q = np.asarray(query, np.float32)
        if len(q) != self.dim:
            return []
        qn = float(np.linalg.norm(q))
        if not qn:
            return []
        split = self.head.shape[1]
        qh, qr = q[:split], q[split:]
        norms = self.norms[:n]
        head = self.head[:n] @ qh
        hit = None
        if self.rest.shape[1]:
            with np.errstate(divide="ignore", invalid="ignore"):
                bound = (head + self.tails[:n] * float(np.linalg.norm(qr))) / (norms * qn)
            # a margin for float32 rounding: a row at the floor is read in full, never lost
            hit = np.flatnonzero((bound > min_score - 1e-4) & (norms > 0))
            if len(hit) > BOUND_SHARE * n:
                hit = None
        if hit is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                scores = (head + self.rest[:n] @ qr) / (norms * qn)
            scores[norms == 0] = -np.inf
            hit = np.flatnonzero(scores > min_score)
            scores = scores[hit]
        else:
            scores = (head[hit] + self.rest[hit] @ qr) / (norms[hit] * qn)
            keep = scores > min_score
            hit, scores = hit[keep], scores[keep]
        self.lent = True
        return Ranking(self.uuids, hit, scores)

    def _own_uuids(self) -> None:
        """Before a row's uuid changes: a copy of the list, if a Ranking reads this one (a
        search reads down its order across awaits; a copy per search cost 40 µs at 20,000
        turns, per write only when a search came between)."""
        if self.lent:
            self.uuids, self.lent = list(self.uuids), False


class Ranking(Sequence[str]):
    """uuids best score first, ties in row order: sorted only as far as it is read (a search
    reads the best few dozen). With an embedder that scores unrelated texts above graphiti's
    floor (0.6), every fact can be a hit: sorting and listing 15,196 of them took 2.9 ms a
    search, this 0.8 ms (the local embedder leaves about one hit)."""

    def __init__(self, uuids: list[str | None], hit: np.ndarray, scores: np.ndarray):
        # the set's list, lent: the set copies it before a row changes (rows appended later
        # are past every hit)
        self._uuids, self._hit, self._scores = uuids, hit, scores
        self._order = hit[:0]         # the first len(_order) rows of the full order

    def __len__(self) -> int:
        return len(self._hit)

    def __getitem__(self, at):
        if isinstance(at, slice):
            _, stop, step = at.indices(len(self))
            self._sort_to(stop if step > 0 else len(self))
            return [self._uuids[i] for i in self._order[at]]
        i = range(len(self))[at]        # IndexError as a list's
        self._sort_to(i + 1)
        return self._uuids[self._order[i]]

    def _sort_to(self, k: int) -> None:
        """The full order's first `k` (or more): every hit scoring at least the k-th best,
        ties included, stably sorted (what a stable sort of all would put first)."""
        k = min(k, len(self._hit))
        if k <= len(self._order):
            return
        k = max(k, 2 * len(self._order))    # read further: the next chunk is twice as big
        s = -self._scores
        if k < len(s):
            cut = np.partition(s, k - 1)[k - 1]
            top = np.flatnonzero(s <= cut)
        else:
            top = np.arange(len(s))
        self._order = self._hit[top[np.argsort(s[top], kind="stable")]]


class SharedFactRead:
    """The facts' full-text and cosine searches of one graphiti search run at once, and both
    end in graphiti's MATCH of facts by uuid, which Kuzu 0.11.3 answers by scanning every
    fact of the bank (9-11 ms at 20,000 turns): their first reads are one query.

    Each of the `expected` searches calls `rows` once (with no uuids when it found none),
    or `leave` when it fails before it reads: the last to come reads for all, by `read`
    (query, uuids=..., **params) -> rows."""

    def __init__(self, expected: int, read):
        self.expected, self.read = expected, read
        self.waiting: list[tuple[str, dict, list[str], asyncio.Future]] = []

    async def rows(self, query: str, params: dict, uuids: list[str]) -> list[dict]:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((query, params, uuids, future))
        await self._read_if_all_came()
        return await future

    async def leave(self) -> None:
        self.expected -= 1
        await self._read_if_all_came()

    async def _read_if_all_came(self) -> None:
        if len(self.waiting) < self.expected or not self.waiting:
            return
        waiting, self.waiting, self.expected = self.waiting, [], 0   # later reads: alone
        try:
            groups: dict[str, list] = {}        # same query and filters (one search: always)
            for w in waiting:
                groups.setdefault(w[0] + repr(sorted(w[1].items())), []).append(w)
            for group in groups.values():
                query, params = group[0][0], group[0][1]
                wanted = list(dict.fromkeys(u for w in group for u in w[2]))
                rows = await self.read(query, uuids=wanted, **params) if wanted else []
                for _, _, uuids, future in group:
                    if not future.done():       # done: that search was cancelled meanwhile
                        mine = set(uuids)
                        future.set_result([r for r in rows if r["uuid"] in mine])
        except asyncio.CancelledError:      # no search may wait for ever
            for *_, future in waiting:
                future.cancel()
            raise
        except Exception as exc:            # each search raises it from its own future
            for *_, future in waiting:
                if not future.done():
                    future.set_exception(exc)


# the search under way's shared read (set by `candidates`; tasks that graphiti's gather
# creates copy the context, so its edge searches see the same one)
_SHARED: contextvars.ContextVar[SharedFactRead | None] = contextvars.ContextVar("shared_fact_read",
                                                                                default=None)


class FactRows(dict):
    """fact uuid -> its kept row (GraphIndex.rows), with the ended facts (invalid_at set)
    by source entity and name, kept in step with every row put or dropped, and whether
    every fact graphiti's MATCH returns has its row here (`whole`): then a question about
    the past finds the facts its current facts replaced here, where Kuzu followed every
    fact of the entity (User had thousands at 20,000 turns: 4.4 ms a question)."""

    def __init__(self, rows: dict[str, tuple] | None = None, whole: bool = False):
        super().__init__()
        self.ended: dict[tuple[str, str], set[str]] = {}
        self.whole = whole
        for uuid, row in (rows or {}).items():
            self[uuid] = row

    def __setitem__(self, uuid: str, row: tuple) -> None:
        self._unlist(uuid)
        super().__setitem__(uuid, row)
        if row[_INVALID_AT] is not None:
            self.ended.setdefault((row[_SOURCE], row[_NAME]), set()).add(uuid)

    def pop(self, uuid: str, default=None):       # type: ignore[override]
        self._unlist(uuid)
        return super().pop(uuid, default)

    def __delitem__(self, uuid: str) -> None:
        self._unlist(uuid)
        super().__delitem__(uuid)

    def clear(self) -> None:
        super().clear()
        self.ended.clear()
        self.whole = False

    def __ior__(self, rows):                      # type: ignore[override]
        for uuid, row in rows.items():
            self[uuid] = row
        return self

    def _unlist(self, uuid: str) -> None:
        row = self.get(uuid)
        if row is not None and row[_INVALID_AT] is not None:
            key = (row[_SOURCE], row[_NAME])
            self.ended[key].discard(uuid)
            if not self.ended[key]:
                del self.ended[key]


class GraphIndex:
    """One Kuzu bank's fact and entity vectors (see the module's docstring)."""

    def __init__(self, driver, group_id: str):
        self.driver, self.group_id = driver, group_id
        self.sets: dict[str, VectorSet] | None = None     # None: not built (or to rebuild)
        self.loading: list[tuple[str, dict]] | None = None  # writes seen while it is built
        self.reconcile = False      # a deletion whose uuids are not known: re-list them
        # fact uuid -> its row as graphiti's MATCH returns it (_RETURNED, a tuple: ~0.8 KB a
        # fact), dropped at any write naming the fact or deleting one of its entities, read
        # again when needed. Kuzu reads every returned column of every fact before it keeps
        # the few asked for, and joins each with every entity: here graphiti's date filters
        # are tested on them (_row_test), and Kuzu's pick among the facts not kept
        self.rows = FactRows()
        # entity uuid -> its row as graphiti's entity search returns it (_NODE_RETURNED,
        # labels as a tuple): Kuzu scans every entity to return the few asked (3.4 ms of
        # its time at 20,000 turns). Dropped at any write that sets or deletes the entity,
        # all of them at one that changes entities it picks otherwise (_entity_change)
        self.entity_rows: dict[str, tuple] = {}
        # the facts' and entities' words, for graphiti's fulltext searches (word_index.py);
        # None: read again at the next search (a write of their texts not followed here)
        self.words: dict[str, WordIndex | None] = {"facts": None, "entities": None}
        self.unread: dict[str, set[str] | None] = {"facts": set(), "entities": set()}
        # ^ texts to read again at the next search (None: list which rows are left first)
        # Kuzu's stems of the words seen, shared by both word indexes and kept when they are
        # built again: a new query word was asked of Kuzu once for each (0.9–2.0 ms a query)
        self.stems: dict[str, str] = {}
        self._stemming = asyncio.Lock()     # the fact and entity searches run at once
        self._lock = asyncio.Lock()

    # ── kept in step with the writes ───────────────────────────────────────────────────
    def observe(self, query: str, params: dict) -> None:
        """A query the driver ran (successfully): apply what it wrote."""
        if self.loading is not None:
            self.loading.append((query, params))
        elif self.sets is not None:
            self._apply(query, params)

    def _apply(self, query: str, params: dict) -> None:
        sets = self.sets
        if sets is None:
            return
        text = str(query or "")
        if text.strip().upper().startswith("ROLLBACK"):
            self.sets = None            # what the transaction wrote is undone: reload
            return
        if not WRITE.search(text):
            return
        named = _named_uuids(params)
        kept_facts = self._keep_written("facts", text, params) if named else set()
        for u in named:
            if u not in kept_facts:
                self.rows.pop(u, None)
        if named and _FACT_TABLES.search(text) and not _DELETE.search(text) and not set(named) <= kept_facts:
            self.rows.whole = False     # a fact written and not kept: it may have no row here
        if not named and _FACT_TABLES.search(text):
            self.rows.clear()           # facts written, which ones not said: read again
        for kind, column in (("facts", "fact_embedding"), ("entities", "name_embedding")):
            if not re.search(rf"\.{column}\s*=", text):
                continue
            key = column if column in params else "embedding"
            uuid = params.get("uuid")
            if not isinstance(uuid, str) or key not in params or not sets[kind].put(uuid, params[key]):
                self.sets = None        # a write of vectors in another form: reload
                return
        change = _entity_change(text)
        if change == "any" or re.search(r"\bCOPY\b|:\s*Entity\s*\{[^}]*\b(?:name|summary)\s*:", text):
            self.entity_rows.clear()
            self.words["entities"] = None
        elif change == "named":
            kept = self._keep_written("entities", text, params)
            entities = self.words["entities"]
            for u in named:
                if u not in kept:
                    self.entity_rows.pop(u, None)
                row = self.entity_rows.get(u)
                if entities is not None and row is not None:
                    entities.put(u, [row[_NODE_NAME], row[_NODE_SUMMARY]])
                elif entities is not None:
                    self._unread("entities", u)
        if self.words["facts"] is not None and _FACT_TABLES.search(text):
            self._follow_fact_texts(text, params)
        if _DELETE.search(text):
            gone = _uuid_params(params)
            if _FACT_TABLES.search(text) and not _names_facts_or_entities(text):
                self.rows.clear()       # facts deleted by what else they hold: read again,
                self.reconcile = True   # their vectors listed again
            for u in gone:
                sets["facts"].drop(u)
                sets["entities"].drop(u)
            if gone:        # a fact whose entity went is no longer graphiti's (its join)
                gone_set = set(gone)
                for f in [f for f, r in self.rows.items() if not gone_set.isdisjoint(r[1:3])]:
                    self.rows.pop(f)
            else:
                self.reconcile = True

    def _follow_fact_texts(self, query: str, params: dict) -> None:
        """The word index after a write touching facts: a fact's name and fact set from
        parameters (graphiti's save) indexed again; deleted facts dropped (the others
        listed again at the next search); any other write of fact texts: all read again."""
        facts = self.words["facts"]
        assert facts is not None
        if _DELETE.search(query):
            for u in _uuid_params(params):
                facts.remove(u)
            self.unread["facts"] = None
        written = _fact_texts(query, params)
        if written is None:
            self.words["facts"] = None
        elif written:
            facts.put(params["uuid"], written)

    def _unread(self, kind: str, uuid: str) -> None:
        unread = self.unread[kind]
        if unread is not None:
            unread.add(uuid)

    def _keep_written(self, kind: str, query: str, params: dict) -> set[str]:
        """Keep the rows a write of facts or entities (`kind`) gives them, when every value
        it sets comes from a parameter or the row's UNWIND row (graphiti's saves, its
        `SET r.episodes` of a fact told again, its end set or taken back, our summaries):
        the next search after a chat turn then reads none of them from Kuzu. The uuids kept
        so (a row not kept before needs every column: a new fact's ends from graphiti's
        MERGE)."""
        label, returned, keep = (("RelatesToNode_", _RETURNED, _kept) if kind == "facts"
                                 else ("Entity", _NODE_RETURNED, _entity_kept))
        rows = self.rows if kind == "facts" else self.entity_rows
        ends = _merged_ends(query, params) if kind == "facts" else {}
        kept = set()
        for uuid, values in (_written_values(query, params, label, returned) or {}).items():
            values |= ends
            row = rows.get(uuid)
            if row is None and not set(returned[1:]) <= values.keys():
                continue
            record = dict(zip(returned, row)) if row is not None else {"uuid": uuid}
            record |= {k: v for k, v in values.items() if k in returned}
            rows[uuid] = keep(record)
            kept.add(uuid)
        return kept

    # ── building ───────────────────────────────────────────────────────────────────────
    async def ready(self) -> dict[str, VectorSet]:
        """The sets, built (or brought up to date) first if need be."""
        async with self._lock:      # the edge and node searches of one search_ run together
            if self.sets is None:
                await self._load()
            elif self.reconcile:
                await self._reconcile()
            for kind, words in self.words.items():
                if words is None or self.unread[kind] != set():
                    await self._load_words(kind)
                elif words.waiting:
                    await self._stem(words)
            assert self.sets is not None
            return self.sets

    async def _rows(self, query: str, **params) -> list[dict]:
        records, _, _ = await self.driver.execute_query(query, **params)
        return list(records or [])

    async def _load(self) -> None:
        self.loading, self.reconcile = [], False
        # one string per uuid across the vectors, rows and word indexes built here: each
        # query returns its own copy (85 B each; three or four of every fact's and entity's
        # uuid: 3.6 MB less at 20,320 turns). Kept only while loading: not sys.intern, whose
        # strings Python 3.12 never frees, past the bank's close
        shared: dict[str, str] = {}
        try:
            sets = {}
            for kind, query in _LOAD.items():
                vs = VectorSet()
                for r in await self._rows(query, gid=self.group_id):
                    if r["v"] is not None and not vs.put(shared.setdefault(r["uuid"], r["uuid"]), r["v"]):
                        log.warning("%s %s: a vector of another size, left out", kind, r["uuid"])
                sets[kind] = vs
            self.rows = FactRows(await self._load_rows(shared), whole=True)
            self.entity_rows = {}
            for r in await self._rows(_NODE_ROWS, gid=self.group_id):
                r["uuid"] = shared.setdefault(r["uuid"], r["uuid"])
                self.entity_rows[r["uuid"]] = _entity_kept(r)
            for kind in self.words:
                self.words[kind] = None
                await self._load_words(kind, shared)
            self.sets = sets
            for query, params in self.loading:
                self._apply(query, params)
        finally:
            self.loading = None

    async def _load_words(self, kind: str, shared: dict[str, str] | None = None) -> None:
        """The word index of facts or entities: built, or brought up to date (the texts
        asked again read; after deletions, the rows no longer there dropped and those not
        held read), while nothing is written meanwhile (else built again; after three tries
        it answers as built, and every row is listed again at the next search)."""
        for _ in range(3):
            writes, words, unread = self.driver.writes, self.words[kind], self.unread[kind]
            self.unread[kind] = set()
            if words is None:
                words = WordIndex(KUZU_STOPWORDS, self.stems)
                texts = await self._rows(_TEXTS[kind].format(""))
            else:
                asked = set(unread or ())
                if unread is None:
                    there = {r["uuid"] for r in await self._rows(_ALL_UUIDS[kind])}
                    for u in [u for u in words.slot if u in words and u not in there]:
                        words.remove(u)
                    asked |= {u for u in there if u not in words}
                texts = await self._rows(_TEXTS[kind].format("WHERE x.uuid IN $uuids"),
                                         uuids=list(asked)) if asked else []
                for u in asked - {r["uuid"] for r in texts}:
                    words.remove(u)
            for r in texts:
                uuid = r["uuid"] if shared is None else shared.setdefault(r["uuid"], r["uuid"])
                words.put(uuid, [r["name"], r["text"]])
            await self._stem(words)
            self.words[kind] = words
            if self.driver.writes == writes:
                return
            self.unread[kind] = None        # a write came meanwhile: list every row again

    async def _stem(self, words: WordIndex) -> None:
        """Kuzu's stems of the words waiting for one."""
        unknown = words.unknown()
        words.stemmed(await self._kuzu_stems(unknown) if unknown else {})

    async def _kuzu_stems(self, words: list[str]) -> dict[str, str]:
        return {r["word"]: r["stem"] for r in await self._rows(STEMS_QUERY, words=words)}

    async def _load_rows(self, shared: dict[str, str]) -> dict[str, tuple]:
        """Every fact's row, its uuids the strings in `shared` (_load)."""
        rows = {}
        for r in await self._rows(_ROWS, gid=self.group_id):
            for k in ("uuid", "source_node_uuid", "target_node_uuid"):
                r[k] = shared.setdefault(r[k], r[k])
            if r["episodes"]:
                r["episodes"] = [shared.setdefault(u, u) for u in r["episodes"]]
            r["group_id"] = self.group_id
            rows[r["uuid"]] = _kept(r)
        return rows

    async def _reconcile(self) -> None:
        self.reconcile = False
        assert self.sets is not None
        for kind, query in _UUIDS.items():
            vs = self.sets[kind]
            there = {r["uuid"] for r in await self._rows(query, gid=self.group_id)}
            for u in [u for u in vs.rows if u not in there]:
                vs.drop(u)
            new = [u for u in there if u not in vs.rows]
            if new:
                for r in await self._rows(_VECTORS[kind], uuids=new):
                    vs.put(r["uuid"], r["v"])
        writes = self.driver.writes             # some of their entities may have gone:
        rows = await self._load_rows({u: u for vs in self.sets.values() for u in vs.rows})
        self.rows = FactRows(rows, whole=self.driver.writes == writes)

    # ── graphiti's searches, answered here ─────────────────────────────────────────────
    async def edges(self, vector, search_filter: SearchFilters, group_ids, limit: int,
                    min_score: float) -> list:
        shared = _SHARED.get()
        try:
            ranked = (await self.ready())["facts"].ranked(vector, min_score)
            where, params = _fact_filters(search_filter, group_ids)
        except BaseException:
            if shared is not None:
                await shared.leave()
            raise
        rows = await self._in_order(ranked, where, params, limit, shared, self.fact_rows)
        return [get_entity_edge_from_record(r, GraphProvider.KUZU) for r in rows]

    async def edges_by_words(self, query: str, search_filter: SearchFilters, group_ids,
                             limit: int) -> list:
        """graphiti's fulltext search of facts: the word index's hits, then graphiti's MATCH
        on those facts (from the kept rows). Kuzu planned graphiti's single query as a join
        of its index's hits with every fact: 6.9 ms of Kuzu's time on a 2,000-turn bank,
        34 ms on a 20,000-turn one. Same hits, filters and order as graphiti's (best score
        first, at most `limit`, filtered after the top `limit`)."""
        shared = _SHARED.get()
        try:
            words = search_utils.fulltext_query(query, group_ids, self.driver)
            hits = []
            if words:
                await self.ready()
                hits = await self._word_hits("facts", words, limit)
            where, params = _fact_filters(search_filter, group_ids)
        except BaseException:
            if shared is not None:
                await shared.leave()
            raise
        ranked = [r["uuid"] for r in hits]          # best first
        rows = await self._in_order(ranked, where, params, limit, shared, self.fact_rows)
        return [get_entity_edge_from_record(r, GraphProvider.KUZU) for r in rows]

    async def _word_hits(self, kind: str, query: str, limit: int) -> list[dict]:
        """The word index's best `limit` facts or entities for `query` (uuid, score), best
        first (after `ready`)."""
        index = self.words[kind]
        assert index is not None
        asked = index.query_words(query)
        if any(w not in self.stems for w in asked):
            async with self._stemming:      # the other search may be asking for them
                unknown = [w for w in asked if w not in self.stems]
                if unknown:
                    self.stems |= await self._kuzu_stems(unknown)
        return [{"uuid": u, "score": x} for u, x in index.top([self.stems.get(w, w) for w in asked], limit)]

    async def nodes_by_words(self, query: str, search_filter: SearchFilters, group_ids,
                             limit: int) -> list:
        """graphiti's fulltext search of entities, its hits from the word index and its
        rows from the kept ones. Same hits and filters (the best `limit` words first,
        filtered after)."""
        words = search_utils.fulltext_query(query, group_ids, self.driver)
        if not words:
            return []
        await self.ready()
        hits = await self._word_hits("entities", words, limit)
        where, params = _node_filters(search_filter, group_ids)
        rows = await self._in_order([h["uuid"] for h in hits], where, params, limit, read=self.node_rows)
        return [get_entity_node_from_record(r, GraphProvider.KUZU) for r in rows]

    async def nodes(self, vector, search_filter: SearchFilters, group_ids, limit: int,
                    min_score: float) -> list:
        ranked = (await self.ready())["entities"].ranked(vector, min_score)
        query, params = _node_filters(search_filter, group_ids)
        rows = await self._in_order(ranked, query, params, limit, read=self.node_rows)
        return [get_entity_node_from_record(r, GraphProvider.KUZU) for r in rows]

    async def node_rows(self, query: str, uuids: list[str], **params) -> list[dict]:
        """graphiti's entity rows of `uuids` that pass `query`'s filters: the kept ones
        tested here when `query` carries the test (_Where), the others Kuzu's (then kept,
        if nothing was written meanwhile)."""
        await self.ready()                  # `entity_rows` in step with the writes
        test, kept = getattr(query, "test", None), self.entity_rows
        out = [_entity_record(kept[u]) for u in uuids if u in kept and test(kept[u])] if test else []
        asked = [u for u in uuids if u not in kept] if test else uuids
        if asked:
            writes = self.driver.writes
            read = await self._rows(query, uuids=asked, **params)
            if test and self.driver.writes == writes and self.sets is not None:
                kept |= {r["uuid"]: _entity_kept(r) for r in read}
            out += read
        return out

    def kept_ends(self, uuids) -> dict[str, Any]:
        """When the kept facts among `uuids` stopped being true (None: still true)."""
        if self.sets is None:               # writes not followed meanwhile
            return {}
        return {u: self.rows[u][_INVALID_AT] for u in uuids if u in self.rows}

    async def ended_named(self, sources: list[str], names: list[str]) -> list[dict] | None:
        """The ended facts (invalid_at set) of the entities `sources` named one of `names`,
        with the fields of queries.py's `ended_facts_named` a search reads (not the entities'
        names); None when a fact may have no kept row (then Kuzu's query answers)."""
        await self.ready()
        if self.sets is None or not self.rows.whole:
            return None
        out = []
        for source in dict.fromkeys(sources):
            for name in dict.fromkeys(names):
                for uuid in self.rows.ended.get((source, name), ()):
                    row = dict(zip(_RETURNED, self.rows[uuid]))
                    row["source"], row["target"] = row.pop("source_node_uuid"), row.pop("target_node_uuid")
                    out.append(row)
        return out

    async def fact_rows(self, where: str, uuids: list[str], **params) -> list[dict]:
        """graphiti's MATCH of the facts `uuids` with its filters (`where`), as graphiti's
        rows: the kept rows tested here when `where` carries the test (_Where), the others
        picked by Kuzu's filters; their rows come from `rows` (those not kept by graphiti's
        MATCH, then kept); a filter on the entities: graphiti's MATCH itself."""
        await self.ready()                  # `rows` in step with the writes
        if _NODE_FILTER.search(where):
            return await self._rows(_JOINED + where + " RETURN DISTINCT " + _RETURN, uuids=uuids, **params)
        test = getattr(where, "test", None)
        passed = [u for u in uuids if u in self.rows and test(self.rows[u])] if test else []
        asked = [u for u in uuids if u not in self.rows] if test else uuids
        if asked:
            passed += [r["uuid"] for r in await self._rows(_ALONE + where + " RETURN e.uuid AS uuid",
                                                           uuids=asked, **params)]
        out = [dict(zip(_RETURNED, self.rows[u])) for u in passed if u in self.rows]
        unread = [u for u in passed if u not in self.rows]     # written since they were read
        if unread:
            writes = self.driver.writes
            read = await self._rows(_ROWS_BY_UUID, uuids=unread)
            out += read
            if self.driver.writes == writes and self.sets is not None:
                self.rows |= {r["uuid"]: _kept(r) for r in read}
        return out

    async def _in_order(self, ranked: Sequence[str], query: str, params: dict, limit: int,
                        shared: SharedFactRead | None = None, read=None) -> list[dict]:
        """The rows of the best `limit` uuids that pass the query's filters, best first:
        read (by `read`(query, uuids=…, **params), else the query itself) in chunks down the
        ranking until `limit` rows are in (the first chunk through `shared` when given: it
        must be read, or left, once)."""
        read = read or self._rows
        out: list[dict] = []
        seen: set[str] = set()
        start, size = 0, max(FIRST_FETCH, 2 * limit)
        while start == 0 or (start < len(ranked) and len(out) < limit):
            chunk = ranked[start:start + size]
            if start == 0 and shared is not None:
                rows = await shared.rows(query, params, chunk)
            elif chunk:
                rows = await read(query, uuids=chunk, **params)
            else:
                rows = []
            by_uuid = {}
            for r in rows:
                by_uuid.setdefault(r["uuid"], r)
            for u in chunk:
                if u in by_uuid and u not in seen:
                    seen.add(u)
                    out.append(by_uuid[u])
            start += max(len(chunk), 1)
            size *= 2
        return out[:limit]


def _kept(row: dict) -> tuple:
    """A fact's row as GraphIndex.rows keeps it (the fields of _RETURNED, in order)."""
    return tuple(row[k] for k in _RETURNED)


def _entity_kept(row: dict) -> tuple:
    """An entity's row as GraphIndex.entity_rows keeps it (labels as a tuple: graphiti
    edits the list it is given)."""
    return tuple(tuple(row[k]) if k == "labels" and row[k] is not None else row[k]
                 for k in _NODE_RETURNED)


def _entity_record(row: tuple) -> dict:
    """A kept entity row as graphiti's query returns it."""
    record = dict(zip(_NODE_RETURNED, row))
    if record["labels"] is not None:
        record["labels"] = list(record["labels"])
    return record


_SETS = re.compile(r"\b(?:SET|REMOVE)\b(.*?)(?=\b(?:RETURN|WITH|MATCH|OPTIONAL|MERGE|CREATE|UNWIND|"
                   r"WHERE|DELETE|DETACH|ON|SET|REMOVE|CALL)\b|\}|$)", re.I | re.S)
_DELETES = re.compile(r"\bDELETE\s+(\w+(?:\s*,\s*\w+)*)", re.I)
_ASSIGNMENT = re.compile(r"(?:^|,)\s*(\w+)\s*\.\s*(\w+)\s*=\s*([^,]*)")


def _assignments(query: str) -> list[tuple[str, str, str]]:
    """A write's `var.column = value` assignments, in its SET clauses."""
    return [a for clause in _SETS.findall(query) for a in _ASSIGNMENT.findall(clause)]


def _entity_change(query: str) -> str:
    """Which entity rows a write changes: "none", "named" (only entities it picks by the
    uuids it names: `$uuid`, `$uuids` or an UNWIND row's `uuid`) or "any". A variable
    set, removed from or deleted counts as an entity unless its pattern labels it else."""
    written = {v for clause in _SETS.findall(query)        # each assignment's left-hand side
               for v in re.findall(r"(?:^|,)\s*(\w+)\s*\.", clause)}
    written |= {v.strip() for m in _DELETES.findall(query) for v in m.split(",")}
    labels: dict[str, set[str]] = {}
    for var, names in re.findall(r"\((\w+)\s*:\s*(\w+(?:\s*\|\s*\w+)*)", query):
        labels.setdefault(var, set()).update(n.strip() for n in names.split("|"))
    entities = [v for v in written if "Entity" in labels.get(v, {"Entity"})]
    if not entities:
        return "none"
    rows = set(re.findall(r"\bUNWIND\s+\$\w+\s+AS\s+(\w+)", query, re.I))
    key = r"(?:\$uuids?\b|(\w+)\.uuid\b)"

    def picked(v: str) -> bool:
        for pattern in (rf"\({v}\s*:[\w|\s]+\{{\s*uuid\s*:\s*{key}\s*\}}",
                        rf"\b{v}\.uuid\s*(?:=\s*{key}|IN\s+\$uuids\b)"):
            for m in re.finditer(pattern, query, re.I):
                if m.group(1) is None or m.group(1) in rows:
                    return True
        return False
    return "named" if all(picked(v) for v in entities) else "any"


def _fact_texts(query: str, params: dict) -> list | None:
    """The texts a write gives a fact: [name, fact] when it sets both, from parameters, on
    the one fact it picks by `$uuid` (graphiti's save); [] when it sets neither on any fact;
    None when it writes them otherwise (then every fact's texts are read again)."""
    labels = dict(re.findall(r"\((\w+)\s*:\s*(\w+)", query))
    if re.search(r"\bCOPY\b", query, re.I) or re.search(
            r":\s*RelatesToNode_\s*\{[^}]*\b(?:name|fact)\s*:", query):
        return None
    texts: dict[str, Any] = {}
    for var, column, value in _assignments(query):
        if column not in ("name", "fact") or labels.get(var, "RelatesToNode_") != "RelatesToNode_":
            continue
        name = re.fullmatch(r"\s*\$(\w+)\s*", value)
        if not name or not re.search(rf"\({var}\s*:\s*RelatesToNode_\s*\{{\s*uuid\s*:\s*\$uuid\s*\}}|"
                                     rf"\b{var}\.uuid\s*=\s*\$uuid\b", query):
            return None
        texts[column] = params.get(name.group(1))
    if not texts:
        return []
    if set(texts) != {"name", "fact"} or not isinstance(params.get("uuid"), str) or not all(
            v is None or isinstance(v, str) for v in texts.values()):
        return None
    return [texts["name"], texts["fact"]]


def _written_values(query: str, params: dict, label: str, returned: tuple[str, ...]
                    ) -> dict[str, dict[str, Any]] | None:
    """Per row of the table `label` (Entity, RelatesToNode_), the columns a write sets on it,
    as Kuzu returns them (a date by its wall time, naive: Kuzu 0.11.3 binds it so), when it
    picks rows by `$uuid` and sets each value from a parameter or NULL (graphiti's saves,
    our summary, a fact's end taken back), or by an UNWIND row's `uuid` and sets each from
    that row (our summaries of a turn); None for any other write (a deletion, an expression,
    a variable of another table, rows picked otherwise). `returned`: a kept row's columns."""
    if _DELETES.search(query) or re.search(r"\bREMOVE\b", query, re.I):
        return None
    unwind = dict((alias, rows) for rows, alias in re.findall(r"\bUNWIND\s+\$(\w+)\s+AS\s+(\w+)", query, re.I))
    per_row: dict[str, str] = {}    # column -> field of the UNWIND row
    single: dict[str, Any] = {}     # column -> parameter's value
    alias = None                    # the UNWIND row naming the entity
    for var, column, value in _assignments(query):
        if not re.search(rf"\({var}\s*:\s*{label}\b", query):
            return None
        by = re.search(rf"\({var}\s*:\s*{label}\s*\{{\s*uuid\s*:\s*(\$uuid|\w+\.uuid)\s*\}}|"
                       rf"\b{var}\.uuid\s*=\s*(\$uuid|\w+\.uuid)\b", query)
        key = by and (by.group(1) or by.group(2))
        source = re.fullmatch(r"\s*(\$\w+|\w+\.\w+|NULL)\s*", value, re.I)
        if not key or not source:
            return None
        source = source.group(1)
        if key == "$uuid" and source.upper() == "NULL":      # a fact's end taken back
            single[column] = None
        elif key == "$uuid" and source.startswith("$") and source[1:] in params:
            single[column] = params[source[1:]]
        elif key != "$uuid" and (row := key.split(".")[0]) in unwind and source.split(".")[0] == row \
                and alias in (None, row):
            alias = row
            per_row[column] = source.split(".")[1]
        else:
            return None
    if single and per_row or not (single or per_row):
        return None
    if single:
        found = {params.get("uuid"): single}
    else:
        rows = params.get(unwind[alias])
        if not isinstance(rows, list) or not all(isinstance(r, dict) and all(f in r for f in per_row.values())
                                                 for r in rows):
            return None
        found = {r.get("uuid"): {c: r[f] for c, f in per_row.items()} for r in rows}
    out = {}
    for uuid, values in found.items():
        if not isinstance(uuid, str):
            return None
        for column, v in values.items():
            if isinstance(v, datetime):
                values[column] = v.replace(tzinfo=None)
            elif isinstance(v, list) and all(isinstance(x, str) for x in v):
                values[column] = list(v)
            elif v is not None and not isinstance(v, (str, int, float)) and column in returned:
                return None
        out[uuid] = values
    return out


def _merged_ends(query: str, params: dict) -> dict[str, str]:
    """The source and target entities of the fact graphiti's save MERGEs between two
    entities it picks by key (`(source:Entity {uuid: $source_node_uuid})` …); {} for any
    other write."""
    m = re.search(r"\((\w+)\)\s*-\[:RELATES_TO\]->\s*"
                  r"\(\w+\s*:\s*RelatesToNode_\s*\{\s*uuid\s*:\s*\$uuid\s*\}\)"
                  r"\s*-\[:RELATES_TO\]->\s*\((\w+)\)", query)
    if not m or not re.search(r"\bMERGE\b", query):
        return {}
    out = {}
    for column, var in (("source_node_uuid", m.group(1)), ("target_node_uuid", m.group(2))):
        key = re.search(rf"\({var}\s*:\s*Entity\s*\{{\s*uuid\s*:\s*\$(\w+)\s*\}}\)", query)
        if not key or not isinstance(params.get(key.group(1)), str):
            return {}
        out[column] = params[key.group(1)]
    return out


def _uuid_params(params: dict) -> list[str]:
    """The uuids a query names in `uuid` and `uuids`."""
    out = [params["uuid"]] if isinstance(params.get("uuid"), str) else []
    return out + [u for u in params.get("uuids") or [] if isinstance(u, str)]


def _names_facts_or_entities(query: str) -> bool:
    """Whether every node `query` picks by `$uuid`/`$uuids` is a fact or an entity (and it
    picks some): then a fact it deletes is named, or has a named entity."""
    labels = dict(re.findall(r"\((\w+):(\w+)", query))
    picked = re.findall(r"\((\w+):\w+\s*\{\s*uuid:\s*\$uuids?\s*\}", query)
    picked += re.findall(r"\b(\w+)\.uuid\s*(?:=\s*\$uuid|IN\s+\$uuids)\b", query)
    return bool(picked) and all(labels.get(v) in ("RelatesToNode_", "Entity") for v in picked)


def _named_uuids(params: dict) -> list[str]:
    """The uuids a write names: `uuid`, `uuids`, and rows of an UNWIND that carry one."""
    out = _uuid_params(params)
    for value in params.values():
        if isinstance(value, list):
            out += [v["uuid"] for v in value if isinstance(v, dict) and isinstance(v.get("uuid"), str)]
    return out


class _Where(str):
    """graphiti's WHERE for its MATCH of facts (or its entity query), carrying the same
    filter as a test of a kept row (`test`), or None when only Kuzu can evaluate it."""
    test: Callable[[tuple], bool] | None = None


def _fact_filters(search_filter: SearchFilters, group_ids) -> tuple[_Where, dict]:
    """graphiti's WHERE for its MATCH of facts, on the facts `$uuids` (measured faster
    than matching them all first)."""
    filters, params = edge_search_filter_query_constructor(search_filter, GraphProvider.KUZU)
    if group_ids is not None:
        filters.append("e.group_id IN $group_ids")
        params["group_ids"] = group_ids
    where = _Where("WHERE e.uuid IN $uuids" + "".join(f" AND ({f})" for f in filters))
    where.test = _row_test(search_filter, params, group_ids)
    return where, params


def _node_filters(search_filter: SearchFilters, group_ids) -> tuple[_Where, dict]:
    """graphiti's entity search query on the entities `$uuids`, carrying its filter as a
    test of a kept row when it holds only groups and labels (list_has_all: every asked
    label among the entity's; Kuzu 0.11.3 cannot bind an empty list: its error stays)."""
    filters, params = node_search_filter_query_constructor(search_filter, GraphProvider.KUZU)
    if group_ids is not None:
        filters.append("n.group_id IN $group_ids")
        params["group_ids"] = group_ids
    query = _Where("MATCH (n:Entity) WHERE n.uuid IN $uuids" + "".join(f" AND ({f})" for f in filters) +
                   " RETURN " + _NODE_RETURN)
    labels = params.get("labels")
    if set(filters) - {_LABELS_FILTER, "n.group_id IN $group_ids"} or not (
            labels is None or isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)):
        return query, params
    groups_in = None if group_ids is None else frozenset(group_ids)
    asked = frozenset(labels or ())

    def test(row: tuple) -> bool:
        if groups_in is not None and row[_NODE_GROUP_ID] not in groups_in:
            return False
        return labels is None or row[_NODE_LABELS] is not None and asked <= set(row[_NODE_LABELS])
    query.test = test
    return query, params


_DATES = ("valid_at", "invalid_at", "created_at", "expired_at")
_COMPARE = {ComparisonOperator.equals: operator.eq, ComparisonOperator.not_equals: operator.ne,
            ComparisonOperator.greater_than: operator.gt, ComparisonOperator.less_than: operator.lt,
            ComparisonOperator.greater_than_equal: operator.ge,
            ComparisonOperator.less_than_equal: operator.le}
_NULL_TESTS = {ComparisonOperator.is_null: True, ComparisonOperator.is_not_null: False}


def _row_test(search_filter: SearchFilters, params: dict, group_ids) -> Callable[[tuple], bool] | None:
    """graphiti's fact filter as a test of a kept row, as Kuzu evaluates its WHERE: a date
    compared with NULL is not true, and only true passes; each `$name_j` bound as graphiti
    binds it (edge_search_filter_query_constructor's params). None when the filter holds
    more than dates and groups: then Kuzu evaluates it."""
    f = search_filter
    if any(v is not None for v in (f.edge_types, f.edge_uuids, f.edge_source_node_uuids,
                                   f.edge_target_node_uuids, f.node_labels, f.property_filters)):
        return None
    clauses = []        # per date field: its position in a row, and its OR of ANDs
    for name in _DATES:
        groups = getattr(f, name)
        if groups is None:
            continue
        ors = []
        for group in groups:
            ands = []
            for j, d in enumerate(group):
                op = d.comparison_operator
                if op in _NULL_TESTS:
                    ands.append((op, None))
                    continue
                value = params.get(f"{name}_{j}")
                if not isinstance(value, datetime):
                    return None
                # Kuzu 0.11.3 binds an aware datetime by its wall time (its offset dropped)
                # and returns TIMESTAMP naive: compared the same way here
                ands.append((op, value.replace(tzinfo=None)))
            ors.append(ands)
        clauses.append((_RETURNED.index(name), ors))
    groups_in = None if group_ids is None else frozenset(group_ids)

    def true(value, op, bound) -> bool:
        if op in _NULL_TESTS:
            return (value is None) == _NULL_TESTS[op]
        return value is not None and _COMPARE[op](value, bound)

    def test(row: tuple) -> bool:
        if groups_in is not None and row[_GROUP_ID] not in groups_in:
            return False
        return all(any(all(true(row[pos], op, bound) for op, bound in ands) for ands in ors)
                   for pos, ors in clauses)
    return test


class _Words(SearchInterface):
    """graphiti's seam on the bank's own driver (what `add_episode` resolves facts and
    entities with): the searches by words from the word index, since a bank has no Kuzu
    full-text index (kuzu_repair.py); the others graphiti's own."""
    _index: GraphIndex = PrivateAttr()
    _plain: Any = PrivateAttr()

    def __init__(self, index: GraphIndex, plain):
        super().__init__()
        self._index, self._plain = index, plain

    async def edge_fulltext_search(self, driver, query, search_filter, group_ids=None, limit=100):
        return await self._index.edges_by_words(query, search_filter, group_ids, limit)

    async def node_fulltext_search(self, driver, query, search_filter, group_ids=None, limit=100):
        return await self._index.nodes_by_words(query, search_filter, group_ids, limit)

    async def episode_fulltext_search(self, driver, query, search_filter, group_ids=None, limit=100):
        return await search_utils.episode_fulltext_search(self._plain, query, search_filter, group_ids, limit)

    async def edge_similarity_search(self, driver, search_vector, source_node_uuid, target_node_uuid,
                                     search_filter, group_ids=None, limit=100, min_score=0.7):
        return await search_utils.edge_similarity_search(
            self._plain, search_vector, source_node_uuid, target_node_uuid, search_filter, group_ids,
            limit, min_score)

    async def node_similarity_search(self, driver, search_vector, search_filter, group_ids=None,
                                     limit=100, min_score=0.7):
        return await search_utils.node_similarity_search(self._plain, search_vector, search_filter,
                                                         group_ids, limit, min_score)


class _Interface(_Words):
    """graphiti's search seam for our search: the cosine searches of facts and entities from
    the index too (a fact search between two given entities is graphiti's own)."""

    async def edge_similarity_search(self, driver, search_vector, source_node_uuid, target_node_uuid,
                                     search_filter, group_ids=None, limit=100, min_score=0.7):
        if source_node_uuid is not None or target_node_uuid is not None:
            shared = _SHARED.get()
            if shared is not None:
                await shared.leave()
            return await super().edge_similarity_search(driver, search_vector, source_node_uuid,
                                                        target_node_uuid, search_filter, group_ids,
                                                        limit, min_score)
        return await self._index.edges(search_vector, search_filter, group_ids, limit, min_score)

    async def node_similarity_search(self, driver, search_vector, search_filter, group_ids=None,
                                     limit=100, min_score=0.7):
        return await self._index.nodes(search_vector, search_filter, group_ids, limit, min_score)


class IndexedDriver:
    """The bank's driver with another search interface (None: graphiti's own searches,
    which would call Kuzu's full-text indexes)."""

    def __init__(self, inner, interface: SearchInterface | None):
        self.inner = inner
        self.search_interface = interface

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def attach(driver, group_id: str) -> GraphIndex | None:
    """A Kuzu bank's index, watching its driver's writes from now on; None for Neo4j. Our
    search runs on `index.search_driver` (every search seam ours); graphiti's own calls on
    the driver find their searches by words in the index too."""
    if driver.provider != GraphProvider.KUZU:
        return None
    index = GraphIndex(driver, group_id)
    driver.observers.append(index.observe)
    plain = IndexedDriver(driver, None)
    index.search_driver = IndexedDriver(driver, _Interface(index, plain))  # type: ignore[attr-defined]
    driver.search_interface = _Words(index, plain)
    return index


async def candidates(bank, text: str, config: SearchConfig, search_filter: SearchFilters) -> SearchResults:
    """graphiti's `search_` on the bank, its cosine searches answered by the bank's index,
    the facts' two searches reading their first rows in one query."""
    index = getattr(bank, "graph_index", None)
    driver = index.search_driver if index is not None else None
    methods = config.edge_config.search_methods if index is not None and config.edge_config else []
    searches = sum(m in methods for m in (EdgeSearchMethod.bm25, EdgeSearchMethod.cosine_similarity))
    # graphiti runs them at once only if its gather admits both (the first would wait for ever)
    room = getattr(bank.graphiti, "max_coroutines", None) or SEMAPHORE_LIMIT
    token = _SHARED.set(SharedFactRead(searches, index.fact_rows) if searches == 2 and room >= 2 else None)
    try:
        return await bank.graphiti.search_(text, config=config, group_ids=[bank.slug],
                                           search_filter=search_filter, driver=driver)
    finally:
        _SHARED.reset(token)
