"""How our Kuzu driver runs graphiti's queries: prepared statements reused, timestamps read
as text, mentions saved without a uuid, and one slow query shape rewritten.

Prepared statements:

Kuzu 0.11.3's Python binding prepares a statement for every `execute(query, parameters)` and
never frees its native memory: 6–40 KB per call. A search runs 7 queries, so a worker that
answered 2,000 searches on one open bank held 1.4 GB (measured; closing the bank gave it
back). Executing one prepared statement per distinct query text leaks nothing.

Timestamps read as text:

Kuzu 0.11.3's Python binding keeps a reference to every TIMESTAMP (and DATE) value it returns,
so each `datetime` read stays in the process for good (~90 B of RSS each: 400,000 reads grew
a process by 35.6 MB; text, numbers, lists and uuids leak nothing). A stored turn reads the
facts of the entities it touches, hundreds for a hub such as User, four timestamps each:
over 10,000 bench turns ~1.8 million datetimes, 74 MB of a worker's growth (tracemalloc,
2026-12-08). So a top-level RETURN of a timestamp column (`e.valid_at AS valid_at`) returns
it cast to text, and the rows get their `datetime` back here (`timestamps_as_text`), equal
to the binding's own (naive, to the microsecond).

Mentions without a uuid:

A mention (an episode names an entity) is known by its two ends: graphiti deletes mentions
with their episode or entity, and neither it nor we read or match one by its uuid. A
distinct uuid per mention made MENTIONS the bulk of a bank's file and of each checkpoint:
on a 15,000-turn bank, Kuzu 0.11.3 held its 35,382 mentions' uuids (1.3 MB of text) in
40,960 pages of 4 KB (`CALL storage_info('MENTIONS')`). In process, 5,000 bench turns:
MENTIONS 14,578 pages against 1,093 with one blank uuid for all, the file 176 against
83 MB, a chat turn's checkpoint 79 against 27 ms p50. So every mention is written with
the same uuid, MENTION_UUID: graphiti's saves are rewritten here, ours write it
(queries.py).

Lookups by key:

Kuzu 0.11.3 answers `WHERE e.uuid IN $uuids` by scanning the whole table, and
`MATCH (e:Episodic {uuid: $uuid})` from its primary-key index. Measured on the bench's bank
(2026-12-05, 10 turns asked, one thread hop): the IN list 0.63 ms at 2,000 turns and 3.26 ms
at 20,000, the keys one by one 1.0 ms at both. `lookups_cheaper` picks the cheaper way.
"""
from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from functools import lru_cache
from typing import Any

from memoryplus.common.isodates import parse_iso

STATEMENTS_KEPT = 256      # distinct query texts: ours and graphiti's are a few dozen
LOOKUP_MS = 0.1            # one key through the primary-key index (see the module's docstring)
SCAN_MS, SCAN_MS_PER_1000_ROWS = 0.45, 0.13     # an IN list: a scan of the table


def lookups_cheaper(keys: int, rows: int) -> bool:
    """Whether `keys` lookups by key cost less than one scan of a table of `rows` rows."""
    return keys * LOOKUP_MS < SCAN_MS + SCAN_MS_PER_1000_ROWS * rows / 1000


# graphiti's TIMESTAMP columns (driver/kuzu_driver.py's schema; ours adds none)
TIMESTAMP_COLUMNS = ("created_at", "valid_at", "invalid_at", "expired_at", "reference_time",
                     "last_summarized_episode_valid_at")
_PROJECTED = re.compile(r"(?<![\w.$`])([A-Za-z_]\w*)\.(" + "|".join(TIMESTAMP_COLUMNS)
                        + r")\s+AS\s+([A-Za-z_]\w*)\b")
_CLAUSE = re.compile(r"\b(RETURN|WITH|UNION)\b", re.I)


def _top_level(cypher: str) -> list[bool]:
    """For each character: whether it is outside every bracket and quoted text."""
    out, depth, quote = [], 0, ""
    for ch in cypher:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        out.append(not quote and depth == 0)
    return out


@lru_cache(maxsize=256)      # it runs for every query; the query texts are a few dozen
def timestamps_as_text(cypher: str) -> tuple[str, tuple[str, ...]]:
    """`cypher` with each timestamp column its top-level RETURN projects (`x.valid_at AS v`)
    cast to text, and those columns' names (see the module's docstring). A projection of a
    WITH, or inside a bracket (a subquery, a map, a list), is left as it is: what reads it
    next expects a timestamp."""
    top = _top_level(cypher)
    clause = {m.start(): m.group(1).upper() for m in _CLAUSE.finditer(cypher) if top[m.start()]}
    names: list[str] = []

    def cast(m: re.Match) -> str:
        last = max((at for at in clause if at < m.start()), default=None)
        if not top[m.start()] or last is None or clause[last] != "RETURN":
            return m.group(0)
        names.append(m.group(3))
        return f"CAST({m.group(1)}.{m.group(2)} AS STRING) AS {m.group(3)}"
    text = _PROJECTED.sub(cast, cypher)
    return text, tuple(dict.fromkeys(names))


def with_timestamps(rows: list, names: tuple[str, ...]) -> list:
    """`rows` (dicts, or lists of them for several statements) with the columns `names` read
    as text turned back into datetimes, in place: Kuzu's text of a TIMESTAMP ('2025-01-01
    08:30:00.12') read as the naive datetime the binding returns."""
    if names:
        for row in rows:
            for r in (row if isinstance(row, list) else (row,)):
                for name in names:
                    v = r.get(name)
                    if isinstance(v, str):
                        r[name] = parse_iso(v)
    return rows


class PreparedStatementsMixin:
    """For a graphiti KuzuDriver subclass: `execute_query` through cached prepared statements,
    timestamps read as text."""

    async def _statement(self, cypher_query_: str):
        cache: OrderedDict = self.__dict__.setdefault("_statements", OrderedDict())
        statement = cache.get(cypher_query_)
        if statement is None:
            statement = await self.client.prepare(cypher_query_)  # type: ignore[attr-defined]
            cache[cypher_query_] = statement
            if len(cache) > STATEMENTS_KEPT:
                cache.popitem(last=False)
        else:
            cache.move_to_end(cypher_query_)
        return statement

    async def execute_each(self, cypher_query_: str, param_sets: list[dict]) -> list[dict]:
        """A read run once per parameter set, in one hop to Kuzu's thread: the rows of all,
        in turn (for lookups by key, see `lookups_cheaper`)."""
        if not param_sets:
            return []
        text, stamps = timestamps_as_text(cypher_query_)
        statement = await self._statement(text)
        conn = statement._connection        # a statement runs on the connection that prepared it

        def run() -> list[dict]:
            out: list[dict] = []
            for params in param_sets:
                out += conn.execute(statement, params).rows_as_dict()
            return out
        try:
            return with_timestamps(await asyncio.get_running_loop().run_in_executor(
                self.client.executor, run), stamps)  # type: ignore[attr-defined]
        except asyncio.CancelledError:
            conn.interrupt()                # as Kuzu's AsyncConnection does
            raise
        except Exception:
            # as execute_query: forget the statement, and run the plain path (which raises)
            self.__dict__["_statements"].pop(text, None)
            out = []
            for params in param_sets:
                records, _, _ = await self.execute_query(cypher_query_, **params)
                out += records
            return out

    async def execute_query(self, cypher_query_: str, **kwargs: Any):  # type: ignore[override]
        cypher_query_, stamps = timestamps_as_text(faster_query(cypher_query_))
        if _MENTION_BLANK in cypher_query_:
            kwargs.pop("uuid", None)        # Kuzu refuses a parameter its query does not name
        params = {k: v for k, v in kwargs.items() if v is not None}
        params.pop("database_", None)       # what graphiti's KuzuDriver drops too
        params.pop("routing_", None)
        if not params:                      # no parameters: Kuzu runs it without preparing
            records, _, _ = await super().execute_query(cypher_query_, **kwargs)  # type: ignore[misc]
            return with_timestamps(records, stamps), None, None
        statement = await self._statement(cypher_query_)
        try:
            results = await self.client.execute(statement, parameters=params)  # type: ignore[attr-defined]
        except Exception:
            # e.g. a statement prepared before an index was rebuilt: forget it, and let the
            # plain path run the query (and log and raise as graphiti does if it fails again)
            self.__dict__["_statements"].pop(cypher_query_, None)
            records, _, _ = await super().execute_query(cypher_query_, **kwargs)  # type: ignore[misc]
            return with_timestamps(records, stamps), None, None
        if not results:
            return [], None, None
        if isinstance(results, list):
            return with_timestamps([list(r.rows_as_dict()) for r in results], stamps), None, None
        return with_timestamps(list(results.rows_as_dict()), stamps), None, None


# graphiti's fact similarity search on Kuzu joins every fact to both its entities before it
# scores them: 35 of a search's ~75 ms on a 2,000-turn bank. Scoring the fact nodes alone,
# keeping the best `limit`, then joining those few gives the same rows (a fact node always has
# its two entities). Only this exact shape is rewritten, and only when its filter reads the
# fact alone (no n./m.: graphiti adds those for a source/target-bound search).
_EDGE_SIMILARITY = re.compile(
    r"^\s*MATCH \(n:Entity\)-\[:RELATES_TO\]->\(e:RelatesToNode_\)-\[:RELATES_TO\]->\(m:Entity\)\s*"
    r"(?P<where>WHERE .*?)?\s*"
    r"WITH DISTINCT e, n, m, (?P<score>array_cosine_similarity\(e\.fact_embedding, CAST\(\$search_vector AS FLOAT\[\d+\]\)\)) AS score\s*"
    r"WHERE score > \$min_score\s*RETURN(?P<fields>.*?)ORDER BY score DESC\s*LIMIT \$limit\s*$", re.S)


MENTION_UUID = ""       # every mention's (see the module's docstring)
# graphiti's save of one mention, one by one and in bulk alike on Kuzu
_MENTION_MERGE = "MERGE (episode)-[e:MENTIONS {uuid: $uuid}]->(node)"
_MENTION_BLANK = f"MERGE (episode)-[e:MENTIONS {{uuid: '{MENTION_UUID}'}}]->(node)"


@lru_cache(maxsize=256)      # it runs for every query; the query texts are a few dozen
def faster_query(cypher: str) -> str:
    """The query to run for graphiti's `cypher`: itself, or its faster equivalent."""
    if _MENTION_MERGE in cypher:
        return cypher.replace(_MENTION_MERGE, _MENTION_BLANK)
    m = _EDGE_SIMILARITY.match(cypher)
    if m is None or re.search(r"\b[nm]\.", m.group("where") or ""):
        return cypher
    return (f"MATCH (e:RelatesToNode_) {m.group('where') or ''} "
            f"WITH e, {m.group('score')} AS score WHERE score > $min_score "
            f"WITH e, score ORDER BY score DESC LIMIT $limit "
            f"MATCH (n:Entity)-[:RELATES_TO]->(e)-[:RELATES_TO]->(m:Entity) "
            f"RETURN {m.group('fields').strip()} ORDER BY score DESC")
