"""The tables a Kuzu bank keeps: graphiti's schema without its communities and sagas.

graphiti-core's KuzuDriver makes five node tables. Two of them, Community and Saga (with their
relations HAS_MEMBER and HAS_EPISODE), hold what `build_communities` and sagas make, and
MemoryPlus uses neither. Yet Kuzu holds memory for every node table of an open database:
an empty bank took 30.4 MB at open with them and 19.7 MB without (measured 2026-12-06, RSS
after malloc_trim), and every open bank pays it.

So a bank is made without them, and an older bank's are dropped when it opens, if empty
(a drop frees their memory at once: measured). graphiti's statements that name them are
answered as if the tables were there and empty:
- `MATCH (n:Community {...}) [WHERE ...] DETACH DELETE n` (its deletes, `clear_data`) has
  nothing to delete;
- `[e:MENTIONS|HAS_MEMBER ...]` reads as `[e:MENTIONS ...]`;
- any other statement naming them (graphiti builds communities and sagas only when asked)
  makes the tables first, for good.
"""
from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

import kuzu
from graphiti_core.driver.kuzu_driver import SCHEMA_QUERIES

log = logging.getLogger(__name__)

# Dropped in this order: the relations before the node tables they join.
UNUSED_TABLES = ("HAS_MEMBER", "HAS_EPISODE", "Community", "Saga")
_UNUSED_NODE_TABLES = ("Community", "Saga")
_NAMES_UNUSED = re.compile(r"\b(?:%s)\b" % "|".join(UNUSED_TABLES))
_NOTHING_TO_DELETE = re.compile(
    r"^\s*MATCH\s*\((\w+):(?:Community|Saga)\s*(?:\{[^{}]*\})?\)\s*(?:WHERE\s[^;]*?)?"
    r"DETACH DELETE \1\s*$", re.S)
_IN_A_UNION = re.compile(r"\|(?:HAS_MEMBER|HAS_EPISODE)\b")


def _creates(statement: str) -> str | None:
    m = re.search(r"CREATE (?:NODE|REL) TABLE IF NOT EXISTS (\w+)", statement)
    return m.group(1) if m else None


BANK_SCHEMA = [s.strip() for s in SCHEMA_QUERIES.split(";")
               if s.strip() and _creates(s) not in UNUSED_TABLES]


@lru_cache(maxsize=256)      # it runs for every query; the query texts are a few dozen
def for_lean_bank(cypher: str) -> str | None:
    """graphiti's `cypher` for a bank without the unused tables: itself, its equivalent, or
    None when it has nothing to do. What still names them needs the tables (`names_unused`)."""
    if _NAMES_UNUSED.search(cypher) is None:
        return cypher
    if _NOTHING_TO_DELETE.match(cypher):
        return None
    return _IN_A_UNION.sub("", cypher)


@lru_cache(maxsize=256)      # asked of every query a lean bank runs
def names_unused(cypher: str) -> bool:
    return _NAMES_UNUSED.search(cypher) is not None


class LeanSchemaMixin:
    """For a graphiti KuzuDriver subclass: the bank's schema without the unused tables."""
    lean = False        # True while the bank has none of them

    def setup_schema(self) -> None:
        """Called by KuzuDriver.__init__, before any query."""
        conn = kuzu.Connection(self.db)  # type: ignore[attr-defined]
        try:
            for statement in BANK_SCHEMA:
                conn.execute(statement)
            tables = {r[0] for r in conn.execute("CALL SHOW_TABLES() RETURN name").get_all()}
            present = [t for t in UNUSED_TABLES if t in tables]
            if present and not any(
                    conn.execute(f"MATCH (n:{t}) RETURN count(n)").get_all()[0][0]
                    for t in _UNUSED_NODE_TABLES if t in tables):
                try:
                    for table in present:   # names from our constant, never from input
                        conn.execute(f"DROP TABLE {table}")
                    present = []
                except RuntimeError as exc:     # e.g. an index on one: keep them all
                    log.warning("kept the community and saga tables: %s", str(exc)[:200])
                    conn.execute(SCHEMA_QUERIES)
            self.lean = not present
        finally:
            conn.close()

    async def execute_query(self, cypher_query_: str, **kwargs: Any):
        if self.lean:
            lean = for_lean_bank(cypher_query_)
            if lean is None:
                return [], None, None
            if names_unused(lean):
                log.info("a graphiti statement needs its community and saga tables: made")
                self.lean = False
                await super().execute_query(SCHEMA_QUERIES)  # type: ignore[misc]
            else:
                cypher_query_ = lean
        return await super().execute_query(cypher_query_, **kwargs)  # type: ignore[misc]
