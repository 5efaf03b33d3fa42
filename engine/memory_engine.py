"""The memory engine: graphiti-core over Kuzu (or Neo4j), one asyncio loop, every operation.

A facade: the open banks are a BankPool (bank_pool.py), and each concern is an operations
class that takes the pool, as graphiti's drivers have theirs: IngestOps (ingest_ops.py, with
the LocalGraphWriter of local_writer.py), SearchOps (search_ops.py, fusion.py), ForgetOps
(forget_ops.py), AdminOps (admin_ops.py) and RemovalOps (removal.py, what they all remove
with). No operations module imports this one. All methods are coroutines meant to run on one
event loop (the worker's); see bank_pool.py for locking and episodes.py for idempotence.
"""
from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

from memoryplus.config.schema import Settings
from memoryplus.engine.admin_ops import AdminOps
from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.forget_ops import ForgetOps
from memoryplus.engine.ingest_ops import IngestOps
from memoryplus.engine.local_writer import LocalGraphWriter
from memoryplus.engine.modes import ModeSpec
from memoryplus.engine.providers import EmbedderChoice
from memoryplus.engine.removal import RemovalOps
from memoryplus.engine.search_ops import SearchOps
from memoryplus.engine.timeline_ops import TimelineOps
from memoryplus.wire.banks import BankDirectory
from memoryplus.wire.records import (
    BankInfo, BankStats, Credentials, ForgetReport, IngestReport, SearchResult, Timeline, Turn,
)

log = logging.getLogger("memoryplus.engine")


class MemoryEngine:
    """Owns graphiti and the open banks. One instance per process, used from one event loop."""

    def __init__(self, settings: Settings, data_dir: Path | str, credentials: Credentials | None = None,
                 *, embedder: EmbedderChoice | None = None, app: str = "memoryplus"):
        self.pool = BankPool(settings, data_dir, credentials, embedder=embedder, app=app)
        self.removal = RemovalOps(self.pool)
        self.local_writer = LocalGraphWriter(self.pool)
        self.ingest_ops = IngestOps(self.pool, self.removal, self.local_writer)
        self.search_ops = SearchOps(self.pool)
        self.forget_ops = ForgetOps(self.pool, self.search_ops, self.removal)
        self.admin_ops = AdminOps(self.pool, self.removal)
        self.timeline_ops = TimelineOps(self.pool)
        self.pool.recover = self.ingest_ops.recover   # a bank that opens redoes interrupted writes

    # ── configuration ──────────────────────────────────────────────────────────────────
    @property
    def settings(self) -> Settings:
        return self.pool.settings

    @property
    def credentials(self) -> Credentials:
        return self.pool.credentials

    @property
    def data_dir(self) -> Path:
        return self.pool.data_dir

    @property
    def embedder_override(self) -> EmbedderChoice | None:
        """The embedder every bank gets whatever the settings say (tests, benchmarks)."""
        return self.pool.embedder_override

    @embedder_override.setter
    def embedder_override(self, choice: EmbedderChoice | None) -> None:
        self.pool.embedder_override = choice

    @property
    def dir(self) -> BankDirectory:
        return self.pool.dir

    @property
    def banks(self) -> dict[str, Bank]:
        return self.pool.banks

    @property
    def instance(self) -> str:
        """Names this engine in unflushed ingest answers."""
        return self.pool.instance

    @property
    def extraction(self) -> str:
        """The extraction engine in use: "llm" or "local" (`auto` decided)."""
        return self.pool.extraction

    def spec(self) -> ModeSpec:
        return self.pool.spec()

    async def update_settings(self, settings: Settings, credentials: Credentials | None = None) -> None:
        """Apply new settings; banks reopen when what they were opened with changed."""
        await self.pool.update_settings(settings, credentials)

    # ── banks ──────────────────────────────────────────────────────────────────────────
    def known(self, name: str) -> bool:
        return self.pool.known(name)

    async def close(self) -> None:
        await self.pool.close()

    async def maintain(self) -> bool:
        """Reopen banks whose Kuzu memory has grown, when nothing is using them. Returns
        whether anything was recycled. The worker calls this when idle."""
        return await self.pool.maintain()

    # ── ingestion ──────────────────────────────────────────────────────────────────────
    async def ingest(self, bank_name: str, turns: list[Turn], *, defer_flush: bool = False,
                     backlog: bool | None = None) -> IngestReport:
        """Store chat turns. Idempotent per turn id; a changed turn replaces its episode.

        The batch is flushed from Kuzu's log before the answer, unless `defer_flush` and the
        unflushed turns still fit the buffer pool: then the report says `flushed=False` and a
        later batch, or the idle maintenance, flushes it. A Kuzu checkpoint blocks the bank's
        searches and grows with the bank (a chat turn's: 27 ms p50 at 5,000 turns; 79 ms while
        each mention had a uuid: it rewrites the columns it changed), so a chat turn's flush
        waits for the worker's idle time rather than delay the next turn's search. `backlog`
        (default: `defer_flush`): more turns follow at once, so the next search is not primed
        now (they would undo it)."""
        report = await self.ingest_ops.ingest(bank_name, turns, defer_flush=defer_flush)
        if not (defer_flush if backlog is None else backlog):
            await self._prime(bank_name)
        return report

    async def remember(self, bank_name: str, text: str, key: str | None = None,
                       tags: list[str] | None = None) -> IngestReport:
        """An explicit memory: stored even when pruning or the memory gate would skip it."""
        return await self.ingest_ops.remember(bank_name, text, key, tags)

    async def _prime(self, bank_name: str) -> None:
        """What the next search reads first, read now (SearchOps.prime); a failure here is the
        search's to report, not the stored turns'."""
        try:
            await self.search_ops.prime(bank_name)
        except Exception as exc:
            log.debug("bank %r: priming the next search: %s", bank_name, exc)

    # ── search ─────────────────────────────────────────────────────────────────────────
    async def search(self, bank_name: str, query: str, limit: int = 10,
                     as_of: datetime | None = None, now: datetime | None = None) -> list[SearchResult]:
        """Current memories for a query (facts valid at `as_of` when given), best first.

        `now` is the conversation's time (an import, a replayed chat, a benchmark's question
        date), not `as_of`: what is current stays current and questions about the past still
        find what was replaced, but nothing said after `now` is known yet."""
        return await self.search_ops.search(bank_name, query, limit, as_of, now)

    async def timeline(self, bank_name: str, entity: str, limit: int = 50,
                       as_of: datetime | None = None) -> Timeline:
        """What the bank knows about one person, place or thing, ordered by validity, replaced
        facts included with their end (`as_of`: only what had begun by then)."""
        return await self.timeline_ops.timeline(bank_name, entity, limit, as_of)

    # ── forgetting ─────────────────────────────────────────────────────────────────────
    async def forget(self, bank_name: str, *, last: bool = False, ids: list[str] | None = None,
                     text: str | None = None, confirm: bool = True) -> ForgetReport:
        """Forget the last turn, results by id, or memories strongly matching a text, with the
        episodes behind them, so that the text is found nowhere in the bank afterwards. An id
        is a result's id or the caller's id of a turn (Turn.id: a PyGPT or ingest-file id).

        `confirm=False` only tells what would go (nothing is removed): for `text` the strong
        matches; for the last turn or ids, `forgotten` (the ids found), `sources` and, in
        `matches`, the stored turns that would be removed."""
        return await self.forget_ops.forget(bank_name, last=last, ids=ids, text=text, confirm=confirm)

    async def strong_matches(self, bank: Bank | str, text: str) -> list[SearchResult]:
        """Memories that match a text strongly: most of its words are in them. A weak, vague
        match is never offered for forgetting."""
        return await self.forget_ops.strong_matches(bank, text)

    # ── feedback, lifecycle, maintenance ───────────────────────────────────────────────
    async def rate(self, bank_name: str, result_id: str, value: int) -> int:
        """👍 (+1) / 👎 (-1) on a fact or entity; returns its new rating, bounded to ±2."""
        return await self.admin_ops.rate(bank_name, result_id, value)

    async def prune(self, bank_name: str, threshold: int | None = None) -> int:
        """Remove stored turns with fewer words than the threshold (role labels not counted)."""
        return await self.admin_ops.prune(bank_name, threshold)

    async def expire(self, bank_name: str, days: int | None = None) -> int:
        """Remove memories stored more than `days` ago (by when they were stored)."""
        return await self.admin_ops.expire(bank_name, days)

    async def clear(self, bank_name: str) -> None:
        """Delete every memory of a bank, and the bank itself."""
        await self.admin_ops.clear(bank_name)

    async def reembed(self, bank_name: str) -> int:
        """Recompute every vector of a bank with the embedder the settings give now."""
        return await self.admin_ops.reembed(bank_name)

    # ── reading ────────────────────────────────────────────────────────────────────────
    async def stats(self, bank_name: str) -> BankStats:
        return await self.admin_ops.stats(bank_name)

    async def banks_info(self) -> list[BankInfo]:
        return await self.admin_ops.banks_info()

    async def browse(self, bank_name: str, what: str = "episodes", offset: int = 0,
                     limit: int = 50) -> list[dict]:
        """Pages for the memory browser: episodes newest first, facts, or entities with relations."""
        return await self.admin_ops.browse(bank_name, what, offset, limit)

    # ── export and import ──────────────────────────────────────────────────────────────
    async def export(self, bank_name: str) -> list[dict]:
        """Every record of a bank, lossless (vectors included), as JSON-ready dicts."""
        return await self.admin_ops.export(bank_name)

    async def import_(self, bank_name: str, records: list[dict]) -> dict:
        """Merge an export into a bank by id. Bad lines are reported with their number, good
        ones kept; vectors of another dimension are refused (re-embed after importing)."""
        return await self.admin_ops.import_(bank_name, records)

    async def health(self) -> dict:
        return await self.admin_ops.health()

    def embedder_status(self) -> dict:
        """What the settings page shows: the embedder a new bank gets, and why, and the one
        each open bank was built with (a bank keeps its own)."""
        return self.admin_ops.embedder_status()
