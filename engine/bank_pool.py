"""The open banks: opening (embedder check, database, recovery), closing, idle maintenance,
flushing, and the queries every operation runs through.

All methods are coroutines meant to run on one event loop (the worker's). Writes to a bank
are serialized by that bank's lock; searches take no lock, so they interleave between the
queries of a running ingest instead of waiting for the whole batch. The operations classes
(ingest_ops, search_ops, forget_ops, admin_ops, removal, local_writer) each take this pool.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from graphiti_core import Graphiti
from graphiti_core.driver.driver import GraphDriver, GraphProvider
from graphiti_core.embedder.client import EmbedderClient
from graphiti_core.llm_client import LLMClient

from memoryplus.common import redact
from memoryplus.config.schema import Settings
from memoryplus.engine import graph_index, store
from memoryplus.engine.errors import EmbeddingMismatchError, UnknownBankError
from memoryplus.engine.modes import ModeSpec, mode_spec
from memoryplus.engine.providers import (
    EmbedderChoice, LLMUsage, OverlapReranker, ProviderError, build_embedder, build_llm, count_usage,
    embeddings_unserved, llm_available, local_choice, resolve_embedder,
)
from memoryplus.engine.kuzu_statements import lookups_cheaper
from memoryplus.engine.kuzu_repair import compact_if_grown
from memoryplus.engine.queries import q
from memoryplus.engine.store import (StoreError, close_kuzu, ensure_turn_vectors,
                                     open_kuzu, open_neo4j)
from memoryplus.engine.turn_index import TurnIndex
from memoryplus.wire.banks import BankDirectory, BankManifest, check_name, slug
from memoryplus.wire.records import Credentials, utc_now

os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
log = logging.getLogger("memoryplus.engine")

# How many queries a Kuzu bank serves before it is reopened (when idle). A safety net: the
# native growth per query (reference/graphiti-kuzu.md §5) is gone with prepared statements
# (kuzu_statements.py), and a reopen empties the bank's caches, so not often.
RECYCLE_AFTER_QUERIES = 50_000
# A search waits at most this long for a checkpoint to start: searches under way go first.
READS_FIRST_S = 1.0


class UsageBook:
    """LLM calls and tokens spent on one bank, by day, kept beside the bank."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.data = json.loads(path.read_text())
        except (OSError, ValueError):
            self.data = {}
        for k in ("llm_calls", "llm_input_tokens", "llm_output_tokens", "skipped_by_gate", "pruned"):
            self.data.setdefault(k, 0)
        self.data.setdefault("days", {})

    def add(self, calls: int = 0, input_tokens: int = 0, output_tokens: int = 0, **counters: int):
        if not (calls or input_tokens or output_tokens or any(counters.values())):
            return
        self.data["llm_calls"] += calls
        self.data["llm_input_tokens"] += input_tokens
        self.data["llm_output_tokens"] += output_tokens
        for k, v in counters.items():
            self.data[k] = self.data.get(k, 0) + v
        day = self.data["days"].setdefault(utc_now().date().isoformat(), {"calls": 0, "tokens": 0})
        day["calls"] += calls
        day["tokens"] += input_tokens + output_tokens
        self.save()

    def today(self) -> int:
        return self.data["days"].get(utc_now().date().isoformat(), {}).get("calls", 0)

    def save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            os.replace(tmp, self.path)
        except OSError as exc:  # the counters are informative; never fail a write for them
            log.warning("cannot save usage counters: %s", exc)


class NoLLM(LLMClient):
    """Stands in for an LLM when extraction is local: any call is a bug, said loudly."""

    def __init__(self):
        super().__init__(config=None)

    async def _generate_response(self, *args, **kwargs):
        raise ProviderError("the local extraction engine makes no LLM calls")


def _file_state(bank_dir: Path) -> tuple[int, int]:
    """The Kuzu file's size and modification time: a kept turn index is for this file only."""
    try:
        st = (bank_dir / "graph.kuzu").stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


def _set(event: asyncio.Event) -> asyncio.Event:
    event.set()
    return event


@dataclass
class Bank:
    name: str
    slug: str
    dir: Path
    manifest: BankManifest
    driver: GraphDriver
    graphiti: Graphiti
    embedder: EmbedderClient
    usage: UsageBook
    llm_usage: LLMUsage
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    entities: dict[str, tuple[str, str]] | None = None  # lower name -> (uuid, name)
    # the user's facts a search read, by (user, relations), valid at the driver's write count
    user_facts: tuple[int, dict] | None = None
    active: int = 0
    opened_at: float = field(default_factory=time.monotonic)
    searching: int = 0          # reads under way (see BankPool.reading)
    in_transaction: bool = False  # a Kuzu transaction is open: new reads wait (see all_or_nothing)
    reads_waiting: int = 0      # reads waiting for the transaction to end: they go before the next
    no_transaction: asyncio.Event = field(default_factory=lambda: _set(asyncio.Event()))
    unflushed: int = 0          # turns written since the last checkpoint (deferred flushes)
    turns: TurnIndex | None = None  # the stored turns as an index (built on the first search)
    turns_pending: list | None = None  # while it is built: the writes to apply to it after
    graph_index: graph_index.GraphIndex | None = None  # Kuzu: the fact and entity vectors
    used_at: float = field(default_factory=time.monotonic)  # when an operation last ended
    # Kuzu: the file's MB and whether the indexes had read it, when its pages were last given
    # back (or at open): what its buffer pool may hold since (BankPool.maintain)
    pages_mark: tuple[float, bool] = (0.0, False)

    @property
    def provider(self) -> GraphProvider:
        return self.driver.provider


class BankPool:
    """The settings and the open banks of one engine; one instance per process, one event loop.

    `recover` is called with each bank as it opens (the engine gives IngestOps.recover: the
    ingest redoes what a crash left pending, and the pool does not depend on it)."""

    def __init__(self, settings: Settings, data_dir: Path | str, credentials: Credentials | None = None,
                 *, embedder: EmbedderChoice | None = None, app: str = "memoryplus"):
        self.settings = settings
        self.data_dir = Path(data_dir)
        self.credentials = credentials or Credentials()
        self.embedder_override = embedder
        self.app = app
        self.instance = uuid.uuid4().hex    # names this engine in unflushed ingest answers
        self.banks: dict[str, Bank] = {}
        self.recover: Callable[[Bank], Awaitable[None]] | None = None
        self._open_lock = asyncio.Lock()
        self._neo4j: GraphDriver | None = None
        # by bank: the turn index of a bank maintenance closed, and its file as it was then.
        # Rebuilding it embeds every stored turn again (~0.35 s at 5,000 turns, seconds at
        # 20,000): the first turn after a pause would go without its memories.
        self._kept_turns: dict[str, tuple[TurnIndex, tuple[int, int]]] = {}
        self.dir = BankDirectory(self.data_dir, settings.backend)
        self._register_secrets()

    def _register_secrets(self) -> None:
        redact.register_config(self.settings, self.credentials)

    # ── configuration ──────────────────────────────────────────────────────────────────
    @property
    def extraction(self) -> str:
        e = self.settings.extraction_engine
        if e == "auto":
            return "llm" if llm_available(self.settings, self.credentials) else "local"
        return e

    def spec(self) -> ModeSpec:
        s = self.settings
        return mode_spec(s.memory_mode, s.custom_analysis_prompt, emotion_tagging=s.emotion_tagging,
                         topic_tagging=s.topic_tagging, emotion_sensitivity=s.emotion_sensitivity)

    async def update_settings(self, settings: Settings, credentials: Credentials | None = None) -> None:
        """Apply new settings; banks reopen when what they were opened with changed."""
        reopen = (settings.backend != self.settings.backend
                  or settings.kuzu_buffer_pool_mb != self.settings.kuzu_buffer_pool_mb
                  or (settings.neo4j_uri, settings.neo4j_user, settings.neo4j_password,
                      settings.neo4j_database) != (self.settings.neo4j_uri, self.settings.neo4j_user,
                                                   self.settings.neo4j_password,
                                                   self.settings.neo4j_database)
                  or any(getattr(settings, k) != getattr(self.settings, k) for k in (
                      "llm_provider", "graphiti_model", "override_base_url", "override_api_key",
                      "embedding_provider", "embedding_model", "embedding_base_url",
                      "embedding_api_key", "extraction_engine", "graphiti_temperature",
                      "max_context_tokens"))
                  or (credentials is not None and credentials != self.credentials))
        if reopen:
            await self.close()
        self.settings = settings
        if credentials is not None:
            self.credentials = credentials
        self.dir = BankDirectory(self.data_dir, settings.backend)
        self._register_secrets()

    # ── opening and closing banks ──────────────────────────────────────────────────────
    def known(self, name: str) -> bool:
        return name in self.banks or self.dir.exists(name)

    async def existing(self, name: str) -> Bank:
        """An existing bank, opened if need be; UnknownBankError for any other name."""
        if not self.known(name):
            raise UnknownBankError(f"unknown bank {name!r} (see `memoryplus banks`)")
        return await self.bank(name, create=False)

    async def bank(self, name: str, *, create: bool = True) -> Bank:
        check_name(name)
        bank = self.banks.get(name)
        if bank is not None:
            bank.used_at = time.monotonic()
            return bank
        async with self._open_lock:
            bank = self.banks.get(name)
            if bank is None:
                if not create and not self.dir.exists(name):
                    raise UnknownBankError(f"unknown bank {name!r} (see `memoryplus banks`)")
                bank = await self._open(name)
                self.banks[name] = bank
        return bank

    async def bank_to_write(self, name: str) -> Bank:
        """The bank, first reopened with a bigger buffer pool if its file has outgrown the one
        it was opened with and nothing uses it. Kuzu fixes the pool at open and a checkpoint
        needs pool in proportion to the file; maintenance reopens such a bank when idle, but a
        bank written to without a pause (an import) was never idle: at 8,900 turns its 128 MB
        pool was full, the part failed and the worker crashed (measured 2026-12-06)."""
        bank = await self.bank(name)
        if (bank.provider == GraphProvider.KUZU and self._unused(bank)
                and store.outgrown(bank.driver, bank.dir, self.settings.kuzu_buffer_pool_mb)):
            if bank.unflushed:
                async with bank.write_lock:
                    await self.checkpoint(bank)
            await self.close_bank(bank, keep_turns=True)
            bank = await self.bank(name)
        return bank

    @staticmethod
    def _unused(bank: Bank) -> bool:
        return bank.active == 0 and not bank.searching and not bank.write_lock.locked()

    async def _open(self, name: str) -> Bank:
        kept = self._kept_turns.pop(name, None)
        state = _file_state(self.dir.path(name))    # before opening writes to it
        manifest = self.dir.manifest(name)
        choice = self.embedder_override or resolve_embedder(
            self.settings, self.credentials, manifest.embedder if manifest else "")
        if manifest is not None and manifest.embedder and manifest.embedder != choice.id:
            raise EmbeddingMismatchError(
                f"bank {name!r} was built with the embedder {manifest.embedder} "
                f"({manifest.embedding_dim} dimensions) but the settings now give {choice.id}: "
                f"switch the embedding settings back, or re-embed the bank "
                f"(`memoryplus reembed --bank {name}` or Re-embed in the memory browser)")
        embedder = build_embedder(choice)
        if manifest is None:
            # Record the size the embedder really returns (servers may ignore the requested one).
            try:
                choice.dim = len(await embedder.create("dimension probe"))
            except Exception as exc:
                if not (choice.local_if_unserved and embeddings_unserved(exc)):
                    raise
                # `auto` followed PyGPT's endpoint, which does not serve embeddings: decided
                # once, for this bank, and recorded (the bank keeps it; see resolve_embedder).
                status = getattr(exc, "status_code", "?")
                choice = local_choice(f"{choice.why}, which does not serve embeddings "
                                      f"(HTTP {status} for {choice.model})")
                embedder = build_embedder(choice)
                choice.dim = len(await embedder.create("dimension probe"))
            manifest = self.dir.create(name, choice.id, choice.dim, note=choice.why)
            log.info("bank %r: embedder %s (%s)", name, choice.id, choice.why)
        bank_dir = self.dir.path(name)
        if self.settings.backend == "kuzu":
            driver = await asyncio.to_thread(open_kuzu, bank_dir, name,
                                             buffer_pool_mb=self.settings.kuzu_buffer_pool_mb,
                                             app=self.app)
            try:
                await ensure_turn_vectors(driver)
            except Exception:
                close_kuzu(driver, bank_dir)
                raise
        else:
            driver = await self._neo4j_driver()
        usage = LLMUsage()
        llm: LLMClient
        if self.extraction == "llm":
            llm = count_usage(build_llm(self.settings, self.credentials), usage)
        else:
            llm = NoLLM()
        graphiti = Graphiti(graph_driver=driver, llm_client=llm, embedder=embedder,
                            cross_encoder=OverlapReranker(), max_coroutines=4)
        bank = Bank(name=name, slug=slug(name), dir=bank_dir, manifest=manifest, driver=driver,
                    graphiti=graphiti, embedder=graphiti.embedder,
                    usage=UsageBook(bank_dir / "usage.json"), llm_usage=usage,
                    graph_index=graph_index.attach(driver, slug(name)))
        bank.pages_mark = (store.file_mb(bank_dir), False)
        if kept is not None and kept[1] == state:
            bank.turns = kept[0]    # nobody wrote the bank while it was closed
        if self.recover is not None:
            await self.recover(bank)
        return bank

    async def _neo4j_driver(self) -> GraphDriver:
        if self._neo4j is None:
            s = self.settings
            driver = open_neo4j(s.neo4j_uri, s.neo4j_user, s.neo4j_password, s.neo4j_database)
            try:   # the first round trip: a server that is down or not Neo4j fails here
                await driver.build_indices_and_constraints()
            except Exception as exc:
                await driver.close()
                # the driver's own text names the address only; ours names the URI set, never the password
                raise StoreError(f"cannot connect to Neo4j at {s.neo4j_uri}: {type(exc).__name__}") from None
            self._neo4j = driver
        return self._neo4j

    async def close_bank(self, bank: Bank, *, keep_turns: bool = False) -> None:
        """`keep_turns`: the bank closes only to free memory (maintenance) and reopens as it
        was: its turn index is kept for the reopening, unless the file changes meanwhile."""
        self.banks.pop(bank.name, None)
        self._kept_turns.pop(bank.name, None)
        if bank.provider == GraphProvider.KUZU:
            async with bank.write_lock:
                await asyncio.to_thread(close_kuzu, bank.driver, bank.dir)
            if keep_turns and bank.turns is not None and bank.turns_pending is None:
                self._kept_turns[bank.name] = (bank.turns, _file_state(bank.dir))
        if bank.name not in self._kept_turns and bank.turns is not None and bank.turns.texts is not None:
            bank.turns.texts.close()    # its file is in the bank's folder, which may go next

    async def close(self) -> None:
        self._kept_turns.clear()
        for bank in list(self.banks.values()):
            await self.close_bank(bank)
        if self._neo4j is not None:
            await self._neo4j.close()
            self._neo4j = None

    async def maintain(self) -> bool:
        """Close Kuzu banks unused for `bank_idle_close_s` (a Kuzu database holds ~20 MB
        however small; the bank reopens on its next use), and those whose Kuzu memory has
        grown or whose file outgrew their buffer pool (they reopen with a bigger one), when
        nothing is using them; the others give back the pool pages they hold without need
        (see store.RELEASE_PAGES_MB). Returns whether any bank was closed. The worker calls this
        when idle."""
        closed = False
        idle_s = self.settings.bank_idle_close_s
        for bank in list(self.banks.values()):
            if bank.unflushed and bank.active == 0 and not bank.write_lock.locked():
                async with bank.write_lock:
                    await self.checkpoint(bank)
            if bank.provider != GraphProvider.KUZU or not self._unused(bank) or bank.unflushed:
                continue
            if (getattr(bank.driver, "queries", 0) > RECYCLE_AFTER_QUERIES
                    or (idle_s and time.monotonic() - bank.used_at >= idle_s)
                    or store.outgrown(bank.driver, bank.dir, self.settings.kuzu_buffer_pool_mb)):
                await self.close_bank(bank, keep_turns=True)
                await self._compact(bank)
                closed = True
            elif self._stale_pages(bank):
                await self._give_pages_back(bank)
        return closed

    async def _compact(self, bank: Bank) -> None:
        """Compact a Kuzu bank maintenance just closed, if its file has grown
        (kuzu_repair.compact_if_grown), so that its next use need not wait for it: a use
        meanwhile waits to open it. The turn index kept for the reopening stays valid: the
        rows are the same."""
        async with self._open_lock:
            if bank.name in self.banks:
                return
            kept = self._kept_turns.get(bank.name)
            valid = kept is not None and kept[1] == _file_state(bank.dir)
            pool = store.pool_mb_for(bank.dir, self.settings.kuzu_buffer_pool_mb)
            if await asyncio.to_thread(compact_if_grown, bank.dir, bank.name, pool) and valid:
                self._kept_turns[bank.name] = (kept[0], _file_state(bank.dir))

    @staticmethod
    def _pages_mark(bank: Bank) -> tuple[float, bool]:
        index = bank.graph_index
        return store.file_mb(bank.dir), index is not None and index.sets is not None

    @classmethod
    def _stale_pages(cls, bank: Bank) -> bool:
        """Whether a Kuzu bank's pool may hold RELEASE_PAGES_MB of pages it no longer needs:
        what it wrote since, or its whole file read by the first search's index build."""
        (was_mb, was_read), (mb, read) = bank.pages_mark, cls._pages_mark(bank)
        return (mb - was_mb >= store.RELEASE_PAGES_MB
                or (read and not was_read and mb >= store.RELEASE_PAGES_MB))

    async def _give_pages_back(self, bank: Bank) -> None:
        """Reopen an unused, flushed Kuzu bank in place (store.reopen_in_place): its indexes
        and caches stay; reads wait meanwhile as for a transaction."""
        async with bank.write_lock:
            bank.in_transaction = True
            bank.no_transaction.clear()
            try:
                await asyncio.to_thread(store.reopen_in_place, bank.driver, bank.dir)
                bank.pages_mark = self._pages_mark(bank)
            except StoreError as exc:
                log.warning("%s", exc)
                self.banks.pop(bank.name, None)
            finally:
                bank.in_transaction = False
                bank.no_transaction.set()

    @staticmethod
    async def run(bank: Bank, coro):
        """Run an operation on a bank, counted as using it (maintenance leaves it open)."""
        bank.active += 1
        try:
            return await coro
        finally:
            bank.active -= 1
            bank.used_at = time.monotonic()

    # ── queries and the bank's caches ──────────────────────────────────────────────────
    async def query(self, bank: Bank, query_name: str, /, **params) -> list[dict]:
        records, _, _ = await bank.driver.execute_query(q(query_name, bank.provider), **params)
        return list(records or [])

    async def episodes(self, bank: Bank, uuids: list[str]) -> dict[str, dict]:
        if not uuids:
            return {}
        uuids = list(dict.fromkeys(uuids))
        each = getattr(bank.driver, "execute_each", None)       # Kuzu: by key when cheaper
        if each is not None and bank.turns is not None and lookups_cheaper(len(uuids), len(bank.turns)):
            rows = await each(q("episode_by_uuid", bank.provider), [{"uuid": u} for u in uuids])
        else:
            rows = await self.query(bank, "episodes_by_uuid", uuids=uuids)
        return {r["uuid"]: r for r in rows}

    async def entity_index(self, bank: Bank) -> dict[str, tuple[str, str]]:
        if bank.entities is None:
            rows = await self.query(bank, "entities_all", gid=bank.slug)
            bank.entities = {r["name"].lower(): (r["uuid"], r["name"]) for r in rows}
        return bank.entities

    @staticmethod
    def settle_usage(bank: Bank, **counters: int) -> int:
        u = bank.llm_usage
        calls, tin, tout = u.calls, u.input_tokens, u.output_tokens
        u.calls = u.input_tokens = u.output_tokens = 0
        bank.usage.add(calls, tin, tout, **counters)
        return calls

    # ── flushing and transactions ──────────────────────────────────────────────────────
    async def flush(self, bank: Bank) -> None:
        """Flush before answering: Kuzu 0.11.3 can crash replaying a killed worker's log, and
        what it cannot replay is lost (see store.py), so an answer must not depend on a replay
        unless it says so (`flushed=False`, kept by the queue). A checkpoint blocks every
        query of the bank: searches already under way finish first."""
        await self.searches_under_way_finish(bank)
        await self.checkpoint(bank)

    @staticmethod
    async def searches_under_way_finish(bank: Bank) -> None:
        """Wait (at most READS_FIRST_S) until the bank's searches under way have finished."""
        deadline = time.monotonic() + READS_FIRST_S
        while bank.searching and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    @staticmethod
    async def checkpoint(bank: Bank) -> None:
        await store.checkpoint(bank.driver)
        bank.unflushed = 0

    @staticmethod
    @contextlib.asynccontextmanager
    async def reading(bank: Bank):
        """A read of the bank (a search, a timeline) never runs inside a transaction: it would
        run in it, on the bank's one connection, and a failing read would end it. It waits
        for the open one to end, and goes before the next: an ingest writes one transaction
        per turn, and a read left to poll between them could wait for the whole batch."""
        bank.reads_waiting += 1
        try:
            while bank.in_transaction:
                await bank.no_transaction.wait()
        finally:
            bank.reads_waiting -= 1
        bank.searching += 1
        try:
            yield
        finally:
            bank.searching -= 1

    @contextlib.asynccontextmanager
    async def all_or_nothing(self, bank: Bank):
        """Kuzu: the writes inside run as one transaction, so an error or a kill part-way leaves
        the bank as it was. New searches wait until it ends (they would run inside it on the
        bank's one connection, and a failing one would end it); searches under way finish first."""
        if bank.provider != GraphProvider.KUZU or bank.in_transaction:
            yield
            return
        while bank.reads_waiting:       # woken by the last transaction's end: they go first
            await asyncio.sleep(0)
        bank.in_transaction = True
        bank.no_transaction.clear()
        try:
            await self.searches_under_way_finish(bank)
            await bank.driver.execute_query("BEGIN TRANSACTION")
            try:
                yield
            except BaseException:
                try:
                    await bank.driver.execute_query("ROLLBACK")
                except Exception as exc:   # Kuzu may have rolled it back itself
                    log.debug("bank %r: rollback: %s", bank.name, exc)
                raise
            await bank.driver.execute_query("COMMIT")
        finally:
            bank.in_transaction = False
            bank.no_transaction.set()
