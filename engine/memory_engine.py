"""The memory engine: graphiti-core over Kuzu (or Neo4j), one asyncio loop, every operation.

All methods are coroutines meant to run on one event loop (the worker's). Writes to a bank
are serialized by that bank's lock; searches take no lock, so they interleave between the
queries of a running ingest instead of waiting for the whole batch.

Every write is idempotent: an episode's uuid is derived from the bank and the caller's id,
and the content hash is kept beside it, so a replay stores nothing twice and a regenerated
answer (same id, new content) replaces the old episode. Kuzu has no transactions, so an
episode is saved as *pending* first and marked *complete* only after all its writes; a
pending one found when a bank opens is removed with everything it wrote and redone.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from graphiti_core import Graphiti
from graphiti_core.driver.driver import GraphDriver, GraphProvider
from graphiti_core.edges import EntityEdge, EpisodicEdge
from graphiti_core.embedder.client import EmbedderClient
from graphiti_core.errors import GroupsEdgesNotFoundError, GroupsNodesNotFoundError
from graphiti_core.llm_client import LLMClient
from graphiti_core.nodes import EntityNode, EpisodeType, EpisodicNode
from graphiti_core.search.search_config import (
    EdgeReranker, EdgeSearchConfig, EdgeSearchMethod, EpisodeReranker, EpisodeSearchConfig,
    EpisodeSearchMethod, NodeReranker, NodeSearchConfig, NodeSearchMethod, SearchConfig,
)
from graphiti_core.search.search_filters import ComparisonOperator, DateFilter, SearchFilters
from graphiti_core.utils.bulk_utils import add_nodes_and_edges_bulk

from memoryplus.config.schema import Settings
from memoryplus.engine import insights as insight_rules
from memoryplus.engine import llm_savings
from memoryplus.engine import local_extract
from memoryplus.common import redact
from memoryplus.wire.banks import BankDirectory, BankManifest, check_name, episode_uuid, slug
from memoryplus.common.isodates import parse_iso
from memoryplus.engine.modes import ModeSpec, mode_spec
from memoryplus.engine.providers import (
    EmbedderChoice, LLMUsage, OverlapReranker, ProviderError, build_embedder, build_llm,
    TurnBudget, count_usage, embeddings_unserved, llm_available, local_choice, resolve_embedder,
    turn_budget, unusable_answer,
)
from memoryplus.engine.queries import q
from memoryplus.wire.records import (
    BankInfo, BankStats, Credentials, ForgetReport, IngestReport, SearchResult, Turn, as_utc, utc_now,
)
from memoryplus.engine.turn_index import TurnIndex, split_body
from memoryplus.engine.store import (
    BankLockedError, StoreError, checkpoint, close_kuzu, ensure_fulltext_indexes, open_kuzu, open_neo4j,
)

os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
log = logging.getLogger("memoryplus.engine")

META_PREFIX = '{"mp": 1'
PENDING, COMPLETE = "pending", "complete"
TAG_LABELS = ("Topic", "Emotion")          # entity labels that are tags, not memories
SUMMARY_MAX = 1000
# How many queries a Kuzu bank serves before it is reopened (when idle). A safety net: the
# native growth per query (reference/graphiti-kuzu.md §5) is gone with prepared statements
# (kuzu_statements.py), and a reopen empties the bank's caches, so not often.
RECYCLE_AFTER_QUERIES = 50_000
# A search waits at most this long for a checkpoint to start: searches under way go first.
READS_FIRST_S = 1.0
SUPERSEDED_FOR = 5          # a question about the past: the top current facts whose predecessors count
# Fusion weights, tuned on tests/data retrieval set (see tests/test_retrieval_quality.py):
# keyword hits on raw turns are the strongest single signal on chat data; facts add precision.
# Turns first: on real conversations (issue 18's dev set) the turn index finds the turn that
# holds the answer more often than a fact or summary extracted by rules does; facts and
# summaries fill in between (shorter, so the prompt is no longer for it). Chosen on a stratified
# 40-question subset of the dev split (docs/PERFORMANCE.md).
KIND_WEIGHT = {"episode": 1.0, "fact": 0.2, "entity": 0.1}
NOW_SLACK = timedelta(days=1)   # see search(): the zone of a conversation's dates is unknown
RATING_STEP, RATING_CAP = 0.15, 2   # feedback moves a score by at most ±30 %
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_QUERY_WORD = re.compile(r"\w+", re.UNICODE)


class EngineError(RuntimeError):
    """An operation failed for a reason the user can act on; the message says what to do."""


class UnknownBankError(EngineError):
    pass


class EmbeddingMismatchError(EngineError):
    pass


def _ts(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_iso(value)
    if hasattr(value, "to_native"):  # neo4j DateTime
        value = value.to_native()
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _iso(value: Any) -> str | None:
    v = _ts(value)
    return v.isoformat() if v else None


def content_hash(text: str, tags: Iterable[str]) -> str:
    h = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    h.update(("\x00" + "\x00".join(sorted(tags))).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:16]


def truncate_tokens(text: str, max_tokens: int) -> str:
    """Cut text to about `max_tokens` tokens (words and punctuation marks)."""
    count = 0
    for m in _TOKEN.finditer(text):
        count += 1
        if count > max_tokens:
            return text[:m.start()].rstrip() + " …"
    return text


def clean_query(text: str) -> str:
    """Kuzu's BM25 misses tokens with punctuation attached ('dentist?'); keep words only."""
    return " ".join(_QUERY_WORD.findall(text))[:2000]


@dataclass
class EpisodeMeta:
    id: str
    hash: str
    state: str
    tags: list[str] = field(default_factory=list)
    explicit: bool = False
    vibe: float | None = None
    # Why local extraction stored a turn meant for the LLM (its answers were unusable); "" else
    fallback: str = ""

    def dump(self) -> str:
        d = {"mp": 1, "state": self.state, "id": self.id, "hash": self.hash,
             "tags": self.tags, "explicit": self.explicit, "vibe": self.vibe}
        if self.fallback:
            d["fallback"] = self.fallback
        return json.dumps(d, ensure_ascii=False)

    @classmethod
    def parse(cls, name: str | None, fallback_id: str) -> "EpisodeMeta":
        try:
            d = json.loads(name or "")
            if d.get("mp") == 1:
                return cls(id=d["id"], hash=d.get("hash", ""), state=d.get("state", COMPLETE),
                           tags=list(d.get("tags") or []), explicit=bool(d.get("explicit")),
                           vibe=d.get("vibe"), fallback=str(d.get("fallback") or ""))
        except (ValueError, TypeError, KeyError, AttributeError):
            pass
        return cls(id=fallback_id, hash="", state=COMPLETE)


PENDING_PREFIX = '{"mp": 1, "state": "pending"'


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
    active: int = 0
    opened_at: float = field(default_factory=time.monotonic)
    searching: int = 0          # searches under way
    in_transaction: bool = False  # a Kuzu transaction is open: new searches wait (see _all_or_nothing)
    unflushed: int = 0          # turns written since the last checkpoint (deferred flushes)
    turns: TurnIndex | None = None  # the stored turns as an index (built on the first search)
    turns_pending: list | None = None  # while it is built: the writes to apply to it after

    @property
    def provider(self) -> GraphProvider:
        return self.driver.provider


class MemoryEngine:
    """Owns graphiti and the open banks. One instance per process, used from one event loop."""

    def __init__(self, settings: Settings, data_dir: Path | str, credentials: Credentials | None = None,
                 *, embedder: EmbedderChoice | None = None, app: str = "memoryplus"):
        self.settings = settings
        self.data_dir = Path(data_dir)
        self.credentials = credentials or Credentials()
        self.embedder_override = embedder
        self.app = app
        self.instance = uuid.uuid4().hex    # names this engine in unflushed ingest answers
        self.banks: dict[str, Bank] = {}
        self._open_lock = asyncio.Lock()
        self._neo4j: GraphDriver | None = None
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

    async def _bank(self, name: str, *, create: bool = True) -> Bank:
        check_name(name)
        bank = self.banks.get(name)
        if bank is not None:
            return bank
        async with self._open_lock:
            bank = self.banks.get(name)
            if bank is None:
                if not create and not self.dir.exists(name):
                    raise UnknownBankError(f"unknown bank {name!r} (see `memoryplus banks`)")
                bank = await self._open(name)
                self.banks[name] = bank
        return bank

    async def _open(self, name: str) -> Bank:
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
                await ensure_fulltext_indexes(driver)
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
                    usage=UsageBook(bank_dir / "usage.json"), llm_usage=usage)
        await self._recover(bank)
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

    async def _close_bank(self, bank: Bank) -> None:
        self.banks.pop(bank.name, None)
        if bank.provider == GraphProvider.KUZU:
            async with bank.write_lock:
                await asyncio.to_thread(close_kuzu, bank.driver, bank.dir)

    async def close(self) -> None:
        for bank in list(self.banks.values()):
            await self._close_bank(bank)
        if self._neo4j is not None:
            await self._neo4j.close()
            self._neo4j = None

    async def maintain(self) -> bool:
        """Reopen banks whose Kuzu memory has grown, when nothing is using them. Returns
        whether anything was recycled. The worker calls this when idle."""
        recycled = False
        for bank in list(self.banks.values()):
            if bank.unflushed and bank.active == 0 and not bank.write_lock.locked():
                async with bank.write_lock:
                    await self._checkpoint(bank)
            if (bank.provider == GraphProvider.KUZU and bank.active == 0
                    and not bank.write_lock.locked()
                    and getattr(bank.driver, "queries", 0) > RECYCLE_AFTER_QUERIES):
                await self._close_bank(bank)
                recycled = True
        return recycled

    async def _run(self, bank: Bank, coro):
        bank.active += 1
        try:
            return await coro
        finally:
            bank.active -= 1

    # ── low-level helpers ──────────────────────────────────────────────────────────────
    async def _query(self, bank: Bank, query_name: str, /, **params) -> list[dict]:
        records, _, _ = await bank.driver.execute_query(q(query_name, bank.provider), **params)
        return list(records or [])

    async def _episodes(self, bank: Bank, uuids: list[str]) -> dict[str, dict]:
        if not uuids:
            return {}
        rows = await self._query(bank, "episodes_by_uuid", uuids=list(dict.fromkeys(uuids)))
        return {r["uuid"]: r for r in rows}

    async def _turn_index(self, bank: Bank) -> TurnIndex:
        """The bank's turns as an index (turn_index.py), built from the bank once per open."""
        while bank.turns is None and bank.turns_pending is not None:
            await asyncio.sleep(0.005)          # another search is building it
        if bank.turns is None:
            bank.turns_pending = []             # writes while it is read go here, then in
            try:
                rows = [r for r in await self._query(bank, "episodes_all", gid=bank.slug)
                        if EpisodeMeta.parse(r["name"], r["uuid"]).state == COMPLETE]
                users = [split_body(r["content"] or "")[0] or "-" for r in rows]
                vectors = await bank.embedder.create_batch(users) if users else []
                index = TurnIndex(dim=len(vectors[0]) if vectors else bank.manifest.embedding_dim or 1)
                for r, v in zip(rows, vectors):
                    index.add(r["uuid"], r["content"] or "", _ts(r["valid_at"]), v)
                for op, args in bank.turns_pending:
                    index.add(*args) if op == "add" else index.remove(*args)
                bank.turns = index
            finally:
                bank.turns_pending = None
        return bank.turns

    async def _entity_index(self, bank: Bank) -> dict[str, tuple[str, str]]:
        if bank.entities is None:
            rows = await self._query(bank, "entities_all", gid=bank.slug)
            bank.entities = {r["name"].lower(): (r["uuid"], r["name"]) for r in rows}
        return bank.entities

    def _settle_usage(self, bank: Bank, **counters: int) -> int:
        u = bank.llm_usage
        calls, tin, tout = u.calls, u.input_tokens, u.output_tokens
        u.calls = u.input_tokens = u.output_tokens = 0
        bank.usage.add(calls, tin, tout, **counters)
        return calls

    # ── ingestion ──────────────────────────────────────────────────────────────────────
    async def ingest(self, bank_name: str, turns: list[Turn], *, defer_flush: bool = False) -> IngestReport:
        """Store chat turns. Idempotent per turn id; a changed turn replaces its episode.

        The batch is flushed from Kuzu's log before the answer, unless `defer_flush` (more
        turns follow) and the unflushed turns still fit the buffer pool: then the report says
        `flushed=False` and a later batch, or the idle maintenance, flushes it."""
        bank = await self._bank(bank_name)
        turns = [t if isinstance(t, Turn) else Turn.model_validate(t) for t in turns]
        return await self._run(bank, self._ingest(bank, turns, defer_flush))

    async def remember(self, bank_name: str, text: str, key: str | None = None,
                       tags: list[str] | None = None) -> IngestReport:
        """An explicit memory: stored even when pruning or the memory gate would skip it."""
        if not text or not text.strip():
            raise EngineError("nothing to remember: the text is empty")
        key = key or "remember:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return await self.ingest(bank_name, [Turn(id=key, user=text, tags=tags or [], explicit=True)])

    async def _ingest(self, bank: Bank, turns: list[Turn], defer_flush: bool = False) -> IngestReport:
        report = IngestReport(engine=self.extraction, instance=self.instance,  # type: ignore[arg-type]
                              embedder={"id": bank.manifest.embedder, "why": bank.manifest.embedder_note})
        s = self.settings
        custom = [t.strip() for t in s.custom_memory_tags.split(",") if t.strip()]
        async with bank.write_lock:
            uuids = {t.id: episode_uuid(bank.slug, t.id) for t in turns}
            existing = await self._episodes(bank, list(uuids.values()))
            pruned = gated = 0
            for turn in turns:
                body = truncate_tokens(turn.body(), s.max_memory_length)
                if not body.strip():
                    report.skipped[turn.id] = "empty"
                    continue
                info = self._insights(body)
                tags = list(dict.fromkeys(
                    [f"tag:{t}" for t in [*custom, *turn.tags]]
                    + [f"emotion:{e}" for e in info.emotions] + [f"topic:{t}" for t in info.topics]))
                digest = content_hash(body, tags)
                ep_uuid = uuids[turn.id]
                old = existing.get(ep_uuid)
                if old is not None:
                    meta = EpisodeMeta.parse(old["name"], ep_uuid)
                    if meta.state == COMPLETE and meta.hash == digest:
                        report.unchanged.append(turn.id)
                        continue
                    await self._remove_episodes(bank, [ep_uuid])
                    if meta.state == COMPLETE:
                        report.replaced.append(turn.id)
                # Each turn's own LLM budget (graphiti's calls, the gate's): see TurnBudget.
                turn_budget.set(TurnBudget() if self.extraction == "llm" else None)
                if not turn.explicit:
                    if s.auto_prune and local_extract.is_low_value(body, s.low_value_threshold):
                        report.skipped[turn.id] = "pruned: low value"
                        pruned += 1
                        continue
                    if self.spec().gate:
                        keep, reason = await self._gate(bank, body)
                        if not keep:
                            report.skipped[turn.id] = f"memory gate: {reason}"
                            gated += 1
                            continue
                meta = EpisodeMeta(id=turn.id, hash=digest, state=PENDING, tags=tags,
                                   explicit=turn.explicit, vibe=info.vibe)
                await self._store(bank, ep_uuid, body, turn.time, meta)
                report.stored.append(turn.id)
                if meta.fallback:
                    report.fallbacks[turn.id] = meta.fallback
            turn_budget.set(None)
            report.llm_calls = self._settle_usage(bank, pruned=pruned, skipped_by_gate=gated,
                                                  llm_fallbacks=len(report.fallbacks))
            written = len(report.stored) + len(report.replaced)
            bank.unflushed += written
            if written and defer_flush and bank.unflushed < max(20, s.kuzu_buffer_pool_mb):
                report.flushed = False   # Kuzu keeps unflushed pages in its pool (~4 turns per MB)
            elif bank.unflushed:
                await self._written(bank)
        return report

    async def _written(self, bank: Bank) -> None:
        """Flush before answering: Kuzu 0.11.3 can crash replaying a killed worker's log, and
        what it cannot replay is lost (see store.py), so an answer must not depend on a replay
        unless it says so (`flushed=False`, kept by the queue). A checkpoint blocks every
        query of the bank: searches already under way finish first."""
        await self._searches_under_way_finish(bank)
        await self._checkpoint(bank)

    @staticmethod
    async def _searches_under_way_finish(bank: Bank) -> None:
        """Wait (at most READS_FIRST_S) until the bank's searches under way have finished."""
        deadline = time.monotonic() + READS_FIRST_S
        while bank.searching and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def _checkpoint(self, bank: Bank) -> None:
        await checkpoint(bank.driver)
        bank.unflushed = 0

    def _insights(self, body: str) -> insight_rules.Insights:
        s = self.settings
        return insight_rules.analyze(body, emotions=s.emotion_tagging, sensitivity=s.emotion_sensitivity,
                                     topics=s.topic_tagging, vibe=s.vibe_scoring)

    async def _gate(self, bank: Bank, body: str) -> tuple[bool, str]:
        """MemoryGate: rules decide the clear cases for free; the Insight Model the rest."""
        keep, reason = local_extract.gate_decision(body)
        if keep is not None or self.extraction != "llm":
            return (keep is not False), reason
        from memoryplus.engine.llm_calls import gate_with_llm
        return await gate_with_llm(self.settings, self.credentials, bank.llm_usage, body)

    async def _store(self, bank: Bank, ep_uuid: str, body: str, when: datetime, meta: EpisodeMeta) -> None:
        episode = EpisodicNode(uuid=ep_uuid, name=meta.dump(), group_id=bank.slug, labels=[],
                               source=EpisodeType.message, content=body,
                               source_description=self._description(meta),
                               created_at=utc_now(), valid_at=when)
        await episode.save(bank.driver)          # pending: visible to recovery, not yet complete
        if self.extraction == "llm":
            try:
                edges, found_tags = await self._extract_llm(bank, episode)
            except Exception as exc:
                if not unusable_answer(exc):
                    raise     # an outage, a bad key, a rate limit: retried, and said to the user
                budget = turn_budget.get()
                meta.fallback = (budget.gave_up if budget is not None and budget.gave_up else
                                 f"the model's answer did not fit the requested shape ({type(exc).__name__})")
                log.warning("bank %r: the LLM could not extract a turn (%s); stored by local extraction",
                            bank.name, meta.fallback)
                # Whatever graphiti wrote before it gave up goes; the turn is stored by rules.
                await self._remove_episodes(bank, [ep_uuid])
                await episode.save(bank.driver)
                edges = await self._extract_local(bank, episode, meta)
                found_tags = []
            if found_tags:  # the LLM's Emotion/Topic entities become the turn's tags too
                meta.tags = list(dict.fromkeys([*meta.tags, *found_tags]))
                if self.settings.vibe_scoring:
                    meta.vibe = insight_rules.vibe_from_emotions(
                        [t[8:] for t in meta.tags if t.startswith("emotion:")])
        else:
            edges = await self._extract_local(bank, episode, meta)
        meta.state = COMPLETE
        await self._query(bank, "set_episode_meta", uuid=ep_uuid, name=meta.dump(), entity_edges=edges,
                          description=self._description(meta))
        if bank.turns is not None or bank.turns_pending is not None:
            vec = (await bank.embedder.create_batch([split_body(body)[0] or "-"]))[0]
            if bank.turns is not None:
                bank.turns.add(ep_uuid, body, when, vec)
            else:                   # the index is being built from a read that may miss it
                bank.turns_pending.append(("add", (ep_uuid, body, when, vec)))

    @staticmethod
    def _description(meta: EpisodeMeta) -> str:
        """Indexed for keyword search with the content, so tags are searchable words."""
        return " ".join(["chat turn", *(t.partition(":")[2] for t in meta.tags)])

    async def _extract_llm(self, bank: Bank, episode: EpisodicNode) -> tuple[list[str], list[str]]:
        spec = self.spec()
        previous = await bank.graphiti.retrieve_episodes(episode.valid_at, last_n=10,
                                                         group_ids=[bank.slug])
        llm_savings.install()     # graphiti's per-fact dating call, skipped when a rule knows
        token = llm_savings.active.set(True)   # for this call only (context variables)
        try:
            result = await bank.graphiti.add_episode(
                name=episode.name, episode_body=episode.content,
                source_description=episode.source_description, reference_time=episode.valid_at,
                source=EpisodeType.message, group_id=bank.slug, uuid=episode.uuid,
                previous_episode_uuids=[p.uuid for p in previous if p.uuid != episode.uuid],
                entity_types=spec.entity_types, edge_types=spec.edge_types or None,
                edge_type_map=spec.edge_type_map or None,
                custom_extraction_instructions=spec.instructions or None)
        finally:
            llm_savings.active.reset(token)
        bank.entities = None
        tags = [f"{label.lower()}:{n.name.lower()}" for n in result.nodes for label in TAG_LABELS
                if label in n.labels]
        return [e.uuid for e in result.edges], tags

    async def _extract_local(self, bank: Bank, episode: EpisodicNode, meta: EpisodeMeta) -> list[str]:
        """Rules and lexicons instead of an LLM, written as the same nodes and edges graphiti
        writes, so search, forget, the browser and a later switch to llm all just work."""
        spec = self.spec()
        found = local_extract.extract(episode.content, spec)
        index = await self._entity_index(bank)
        now = utc_now()
        new_nodes: dict[str, EntityNode] = {}
        touched: dict[str, str] = {}          # entity uuid -> name, for mentions

        def entity(name: str, etype: str) -> str:
            key = name.lower()
            hit = index.get(key)
            if hit is None and spec.name == "ResolveEntities":
                alias = local_extract.canonical_entity(name, (n for _, n in index.values()))
                hit = index.get(alias.lower()) if alias else None
            if hit is None:
                labels = ["Entity"] + ([etype] if etype and etype != "Entity" else [])
                # dated by the turn it was built from, not by when it was stored: a search
                # with the conversation's time (`now`, `as_of`) must see it
                node = EntityNode(name=name, group_id=bank.slug, labels=labels, summary="",
                                  created_at=episode.valid_at)
                new_nodes[node.uuid] = node
                hit = (node.uuid, name)
                index[key] = hit
            touched[hit[0]] = hit[1]
            return hit[0]

        for ent in found.entities:
            entity(ent.name, ent.type)
        for tag in meta.tags:
            kind, _, value = tag.partition(":")
            if kind in ("emotion", "topic") and value:
                entity(value, kind.capitalize())

        new_edges: list[EntityEdge] = []
        kept_edges: list[str] = []
        replaced: set[str] = set()            # entities whose summaries told a fact now replaced
        for fact in found.facts:
            src = entity(fact.subject, "Entity")
            tgt = entity(fact.object, "Entity")
            current = ([] if src in new_nodes else
                       await self._query(bank, "current_facts_from", source=src, relation=fact.relation))
            current += [{"uuid": e.uuid, "target": e.target_node_uuid, "episodes": e.episodes,
                         "valid_at": e.valid_at} for e in new_edges
                        if e.source_node_uuid == src and e.name == fact.relation]
            same = next((c for c in current if c["target"] == tgt), None)
            if same is not None:           # the same fact again: one more source for it
                eps = list(dict.fromkeys([*(same["episodes"] or []), episode.uuid]))
                pending = next((e for e in new_edges if e.uuid == same["uuid"]), None)
                if pending is not None:
                    pending.episodes = eps
                else:
                    await self._query(bank, "set_fact_episodes", uuid=same["uuid"], episodes=eps)
                    kept_edges.append(same["uuid"])
                continue
            edge = EntityEdge(group_id=bank.slug, source_node_uuid=src, target_node_uuid=tgt,
                              created_at=now, name=fact.relation, fact=fact.fact,
                              episodes=[episode.uuid], valid_at=episode.valid_at, reference_time=episode.valid_at)
            if fact.functional:
                for old in current:
                    old_valid = _ts(old["valid_at"])
                    if old_valid and old_valid > episode.valid_at:
                        # An older turn arriving late (an import): it was already superseded.
                        edge.invalid_at, edge.expired_at = old_valid, now
                    else:
                        await self._query(bank, "expire_fact", uuid=old["uuid"],
                                          invalid_at=episode.valid_at, expired_at=now)
                        replaced |= {src, old["target"]}
            new_edges.append(edge)

        texts = [n.name for n in new_nodes.values()] + [e.fact for e in new_edges]
        vectors = await bank.embedder.create_batch(texts) if texts else []
        for node, vec in zip(new_nodes.values(), vectors):
            node.name_embedding = vec
        for edge, vec in zip(new_edges, vectors[len(new_nodes):]):
            edge.fact_embedding = vec
        for node in new_nodes.values():
            node.summary = self._rule_summary(node.name, [e for e in new_edges
                                                          if node.uuid in (e.source_node_uuid, e.target_node_uuid)])
        mentions = [EpisodicEdge(source_node_uuid=episode.uuid, target_node_uuid=u, group_id=bank.slug,
                                 created_at=now) for u in touched]
        if bank.provider == GraphProvider.KUZU:
            # graphiti saves Kuzu rows one query each (its UNWIND cannot carry Kuzu's STRUCT
            # lists); mentions are flat, so they go in one query.
            await add_nodes_and_edges_bulk(bank.driver, [], [], list(new_nodes.values()), new_edges,
                                           bank.embedder)
            if mentions:
                await self._query(bank, "save_mentions", rows=[
                    {"source": m.source_node_uuid, "target": m.target_node_uuid, "uuid": m.uuid,
                     "group_id": m.group_id, "created_at": m.created_at} for m in mentions])
        else:
            await add_nodes_and_edges_bulk(bank.driver, [], mentions, list(new_nodes.values()), new_edges,
                                           bank.embedder)
        # Existing entities learn the new facts in their summaries (appended, bounded).
        learned = {u: [e.fact for e in new_edges if u in (e.source_node_uuid, e.target_node_uuid)]
                   for u in touched if u not in new_nodes}
        learned = {u: facts for u, facts in learned.items() if facts}
        if learned:
            rows = await self._query(bank, "entities_by_uuid", uuids=list(learned))
            await self._query(bank, "set_summaries", rows=[
                {"uuid": r["uuid"], "summary": self._append_summary(r["summary"] or "", learned[r["uuid"]])}
                for r in rows])
        # A summary must not keep telling what was replaced ("lives in Berlin" beside "lives
        # in Lisbon"): rebuilt from the current facts, oldest first, as a forget rebuilds it.
        replaced -= set(new_nodes)
        if replaced:
            facts = sorted((f for f in await self._query(bank, "facts_touching", uuids=list(replaced))
                            if f["expired_at"] is None), key=lambda f: _ts(f["valid_at"]) or now)
            await self._query(bank, "set_summaries", rows=[
                {"uuid": u, "summary": self._rule_summary("", [f for f in facts if u in (f["source"], f["target"])])}
                for u in replaced])
        return [e.uuid for e in new_edges] + kept_edges

    @staticmethod
    def _append_summary(summary: str, facts: list[str]) -> str:
        for f in facts:
            if f not in summary:
                summary = f"{summary} {f}." if summary else f"{f}."
        if len(summary) > SUMMARY_MAX:  # keep the newest facts
            summary = "…" + summary[-(SUMMARY_MAX - 1):]
        return summary

    @classmethod
    def _rule_summary(cls, name: str, edges: list) -> str:
        facts = [e.fact if hasattr(e, "fact") else e["fact"] for e in edges]
        return cls._append_summary("", facts)

    async def _recover(self, bank: Bank) -> None:
        """Remove episodes a crash left pending, with all they wrote, and redo them."""
        rows = await self._query(bank, "pending_episodes", gid=bank.slug, prefix=PENDING_PREFIX)
        if not rows:
            return
        log.warning("bank %r: redoing %d incomplete episode(s) left by an interrupted write",
                    bank.name, len(rows))
        async with bank.write_lock:
            await self._remove_episodes(bank, [r["uuid"] for r in rows])
        for r in rows:
            meta = EpisodeMeta.parse(r["name"], r["uuid"])
            turn_tags = [t[4:] for t in meta.tags if t.startswith("tag:")]
            text = r["content"] or ""
            user = "\n".join(line[6:] for line in text.splitlines() if line.startswith("User: "))
            asst = "\n".join(line[11:] for line in text.splitlines() if line.startswith("Assistant: "))
            if not (user or asst):
                user = text
            await self._ingest(bank, [Turn(id=meta.id, user=user, assistant=asst,
                                           time=_ts(r["valid_at"]) or utc_now(), tags=turn_tags,
                                           explicit=meta.explicit)])

    # ── search ─────────────────────────────────────────────────────────────────────────
    async def search(self, bank_name: str, query: str, limit: int = 10,
                     as_of: datetime | None = None, now: datetime | None = None) -> list[SearchResult]:
        """Current memories for a query (facts valid at `as_of` when given), best first.

        `now` is the conversation's time (an import, a replayed chat, a benchmark's question
        date), not `as_of`: what is current stays current and questions about the past still
        find what was replaced, but nothing said after `now` is known yet."""
        if not self.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r} (see `memoryplus banks`)")
        bank = await self._bank(bank_name, create=False)
        while bank.in_transaction:
            await asyncio.sleep(0.005)
        bank.searching += 1
        try:
            # Conversations come with dates but no zone (imports, LongMemEval): a turn up to a
            # day "after" now may have been said before it.
            horizon = as_utc(now) + NOW_SLACK if now is not None else None
            return await self._run(bank, self._search(bank, query, limit, as_of, horizon))
        finally:
            bank.searching -= 1

    def _search_config(self, depth: int) -> SearchConfig:
        return SearchConfig(
            edge_config=EdgeSearchConfig(search_methods=[EdgeSearchMethod.bm25,
                                                         EdgeSearchMethod.cosine_similarity],
                                         reranker=EdgeReranker.rrf),
            node_config=NodeSearchConfig(search_methods=[NodeSearchMethod.bm25,
                                                         NodeSearchMethod.cosine_similarity],
                                         reranker=NodeReranker.rrf),
            episode_config=EpisodeSearchConfig(search_methods=[EpisodeSearchMethod.bm25],
                                               reranker=EpisodeReranker.rrf),
            limit=depth)

    @staticmethod
    def _search_filter(as_of: datetime | None, now: datetime | None = None) -> SearchFilters:
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

    async def _search(self, bank: Bank, query: str, limit: int, as_of: datetime | None,
                      now: datetime | None = None) -> list[SearchResult]:
        text = clean_query(query)
        if not text:
            return []
        limit = max(1, min(int(limit), 100))
        # "Where did Ravi live before…?": the superseded facts are the answer, so keep them
        past = as_of is None and local_extract.asks_about_past(query)
        # "my boss" is Tomasz: search for both (one search, not two: latency)
        for phrase, names in await self._resolve_roles(bank, query):
            query = re.sub(re.escape(phrase), lambda m: f"{m.group(0)} {' '.join(names)}", query,
                           count=1, flags=re.I)
        out = await self._search_once(bank, clean_query(query), as_of, past, limit, now)
        return self._covering(out, limit)

    async def _search_once(self, bank: Bank, text: str, as_of: datetime | None, past: bool,
                           limit: int, now: datetime | None = None) -> list[SearchResult]:
        depth = self.settings.search_depth   # candidates per kind (facts, entities, turns)
        if past:        # replaced facts too, but none that began after `now`
            flt = SearchFilters() if now is None else SearchFilters(valid_at=[[DateFilter(
                date=as_utc(now), comparison_operator=ComparisonOperator.less_than_equal)]])
        else:
            flt = self._search_filter(as_of, now)
        results = await bank.graphiti.search_(text, config=self._search_config(depth),
                                              group_ids=[bank.slug], search_filter=flt)
        turns, ended = await self._turn_hits(bank, text, as_of or now, depth, past)
        # a question about the past ranks the replaced facts by the current ones: all of those
        out = await self._fuse(bank, results, as_of or now, None if past else limit, turns, ended)
        if past:
            out += await self._superseded(bank, results.edges[:SUPERSEDED_FOR], out)
        return out

    async def _turn_hits(self, bank: Bank, text: str, until: datetime | None, depth: int,
                         past: bool = False) -> tuple[list[tuple[Any, float]], dict[str, datetime]]:
        """The turn index's best `depth` turns as (episode, score), standing in for graphiti's
        keyword-only turn search, scored by rank as graphiti's RRF scores its single list
        (1, 1/2, 1/3 …), so the weights between kinds keep their meaning.

        Also, by episode uuid, when a turn stopped being true: every fact drawn from it was
        replaced ("I live in Berlin" after "I live in Lisbon now"). Such a turn is no answer
        to a question about now: it follows the turns still true (not for a question about
        the past, where it is the answer), and its result says when it ended."""
        index = await self._turn_index(bank)
        if not len(index):
            return [], {}
        vec = await bank.embedder.create(text)
        hits = index.search(text, vec, depth, as_utc(until) if until else None)
        rows = await self._episodes(bank, [u for u, _ in hits])
        hits = [u for u, _ in hits if u in rows]
        edges = list({e for u in hits for e in rows[u]["entity_edges"] or []})
        ends: dict[str, datetime | None] = {}
        for r in await self._query(bank, "facts_by_uuid", uuids=edges) if edges else []:
            end = _ts(r["invalid_at"])
            ends[r["uuid"]] = end if end is not None and (until is None or end <= as_utc(until)) else None
        ended: dict[str, datetime] = {}
        for u in hits:
            mine = [ends.get(e) for e in rows[u]["entity_edges"] or [] if e in ends]
            if mine and all(mine):
                ended[u] = max(mine)
        if not past:
            hits.sort(key=lambda u: u in ended)      # stable: the index's order otherwise
        return [(EpisodicNode(uuid=u, name=rows[u]["name"], group_id=bank.slug, labels=[],
                              source=EpisodeType.message, content=rows[u]["content"] or "",
                              source_description="", created_at=_ts(rows[u]["created_at"]),
                              valid_at=_ts(rows[u]["valid_at"])), 1 / rank)
                for rank, u in enumerate(hits, 1)], ended

    async def _superseded(self, bank: Bank, edges: list, found: list[SearchResult]) -> list[SearchResult]:
        """For a question about the past: the facts that the current facts found replaced
        ("Ravi lives in Osaka" before "Ravi lives in Valencia"), ranked just above them."""
        by_id = {r.id: r for r in found}
        current = [e for e in edges if e.invalid_at is None and e.uuid in by_id]
        if not current:
            return []
        ended = await self._query(bank, "ended_facts_from", sources=list({e.source_node_uuid for e in current}))
        picked: dict[str, tuple[dict, float]] = {}
        for edge in current:
            for r in (r for r in ended if r["source"] == edge.source_node_uuid and r["name"] == edge.name):
                s = by_id[edge.uuid].score * 1.1
                if r["uuid"] in by_id:          # found already, ranked as any match: lift it
                    by_id[r["uuid"]].score = max(by_id[r["uuid"]].score, round(s, 6))
                elif r["uuid"] not in picked:
                    picked[r["uuid"]] = (r, s)
        rows = list(picked.values())
        metas = {u: EpisodeMeta.parse(e["name"], u)
                 for u, e in (await self._episodes(bank, [u for r, _ in rows for u in r["episodes"] or []])).items()}
        out = []
        for r, s in rows:
            known_eps = [metas[u] for u in reversed(r["episodes"] or []) if u in metas and metas[u].state == COMPLETE]
            if known_eps:
                out.append(SearchResult(id=r["uuid"], kind="fact", text=r["fact"], name=r["name"],
                                        valid_at=_ts(r["valid_at"]), invalid_at=_ts(r["invalid_at"]),
                                        tags=list(dict.fromkeys(t for m in known_eps for t in m.tags)),
                                        sources=[m.id for m in known_eps], score=round(s, 6)))
        return out

    async def _resolve_roles(self, bank: Bank, query: str) -> list[tuple[str, list[str]]]:
        """The people the user's own facts name for a role the query mentions ("my boss")."""
        refs = local_extract.role_references(query)
        if not refs:
            return []
        user = (await self._entity_index(bank)).get("user")
        if user is None:
            return []
        rows = await self._query(bank, "current_facts_named", source=user[0],
                                 relations=list({rel for _, rel in refs}))
        out: list[tuple[str, list[str]]] = []
        for phrase, relation in refs:
            if any(phrase.lower().startswith(p.lower()) for p, _ in out):
                continue          # "my little sister" resolved: not "my little" too
            names = list(dict.fromkeys(r["target_name"] for r in rows if r["name"] == relation))[:2]
            if names:
                out.append((phrase, names))
        return out

    @staticmethod
    def _scaled(scores: list[float], n: int) -> list[float]:
        scores = list(scores)[:n] + [0.0] * max(0, n - len(scores))
        top = max(scores) if scores and max(scores) > 0 else 1.0
        return [s / top for s in scores]

    @staticmethod
    def _rating(attributes: dict | None) -> int:
        try:
            return max(-RATING_CAP, min(RATING_CAP, int((attributes or {}).get("mp_rating", 0))))
        except (TypeError, ValueError):
            return 0

    async def _fuse(self, bank: Bank, res, as_of: datetime | None,
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
                 and (t is None or _ts(n.created_at) <= t)]
        node_scores = self._scaled([s for n, s in zip(res.nodes, res.node_reranker_scores)
                                    if n in nodes], len(nodes))
        # the turn index's ranking (scaled already) replaces graphiti's keyword-only turn search
        pairs = list(turns) if turns is not None else list(zip(res.episodes, res.episode_reranker_scores))
        known = {e.uuid: EpisodeMeta.parse(e.name, e.uuid) for e, _ in pairs}   # turns: no lookup
        pairs = [(e, s) for e, s in pairs
                 if known[e.uuid].state == COMPLETE and (t is None or _ts(e.valid_at) <= t)]
        episodes = [e for e, _ in pairs]
        ep_scores = [s for _, s in pairs] if turns is not None else self._scaled([s for _, s in pairs], len(pairs))
        edges = list(res.edges)
        edge_scores = self._scaled(res.edge_reranker_scores, len(edges))
        candidates = sorted(   # stable: on a tie, facts before entities before turns
            [("fact", e, round(KIND_WEIGHT["fact"] * s * (1 + RATING_STEP * self._rating(e.attributes)), 6))
             for e, s in zip(edges, edge_scores)]
            + [("entity", n, round(KIND_WEIGHT["entity"] * s * (1 + RATING_STEP * self._rating(n.attributes)), 6))
               for n, s in zip(nodes, node_scores)]
            + [("episode", e, round(KIND_WEIGHT["episode"] * s, 6)) for e, s in zip(episodes, ep_scores)],
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
            sources = await self._sources(bank, [c for kind, c, _ in chunk if kind == "fact"],
                                          [c for kind, c, _ in chunk if kind == "entity"], known,
                                          t, latest)
            for kind, c, score in chunk:
                first = len(out)
                if kind == "episode":
                    meta = known[c.uuid]
                    out.append(SearchResult(id=c.uuid, kind="episode", text=c.content,
                                            valid_at=_ts(c.valid_at), invalid_at=(ended or {}).get(c.uuid),
                                            tags=meta.tags, sources=[meta.id], score=score))
                else:
                    behind = sources.get(c.uuid)
                    if not behind:
                        continue
                    self._append_result(out, kind, c, behind, score, latest)
                if len(out) > first:
                    if out[-1].sources[0] in covered:
                        repeats += 1
                    covered.add(out[-1].sources[0])
        out.sort(key=lambda r: r.score, reverse=True)
        return out

    @staticmethod
    def _append_result(out: list[SearchResult], kind: str, c, behind: list[EpisodeMeta], score: float,
                       latest: dict[str, datetime]) -> None:
        """A fact or entity candidate as a result, with the turns behind it."""
        ids, tags = [m.id for m in behind], list(dict.fromkeys(x for m in behind for x in m.tags))
        if kind == "fact":
            out.append(SearchResult(id=c.uuid, kind="fact", text=c.fact, name=c.name,
                                    valid_at=_ts(c.valid_at), invalid_at=_ts(c.invalid_at),
                                    tags=tags, sources=ids, score=score))
        else:
            out.append(SearchResult(id=c.uuid, kind="entity", name=c.name, tags=tags,
                                    text=f"{c.name}: {c.summary}" if c.summary else c.name,
                                    valid_at=latest.get(c.uuid) or _ts(c.created_at), sources=ids,
                                    score=score))

    @staticmethod
    def _covering(results: list[SearchResult], limit: int) -> list[SearchResult]:
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

    async def _sources(self, bank: Bank, facts: list, entities: list,
                       metas: dict[str, EpisodeMeta], t: datetime | None = None,
                       latest: dict[str, datetime] | None = None) -> dict[str, list[EpisodeMeta]]:
        """The completed turns behind facts (theirs, newest first) and entities (the newest
        five that mention them, up to `t`), by fact or entity uuid. `metas`: turns known already
        (the search's own turn hits, often the very turns behind its facts); grows with the rest.
        `latest` gets each entity's newest turn time: the date of what its summary says."""
        mentions: dict[str, list[tuple[datetime, str]]] = {}
        if entities:
            for r in await self._query(bank, "episode_uuids_mentioning", uuids=[n.uuid for n in entities]):
                when = _ts(r["valid_at"])
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
        wanted = list(dict.fromkeys(u for uuids in behind.values() for u in uuids if u not in metas))
        for r in await self._query(bank, "episode_names", uuids=wanted) if wanted else []:
            metas[r["uuid"]] = EpisodeMeta.parse(r["name"], r["uuid"])
        return {uuid: [metas[u] for u in uuids if u in metas and metas[u].state == COMPLETE]
                for uuid, uuids in behind.items()}

    # ── forgetting ─────────────────────────────────────────────────────────────────────
    async def forget(self, bank_name: str, *, last: bool = False, ids: list[str] | None = None,
                     text: str | None = None, confirm: bool = True) -> ForgetReport:
        """Forget the last turn, results by id, or memories strongly matching a text, with the
        episodes behind them, so that the text is found nowhere in the bank afterwards. An id
        is a result's id or the caller's id of a turn (Turn.id: a PyGPT or ingest-file id).

        `confirm=False` only tells what would go (nothing is removed): for `text` the strong
        matches; for the last turn or ids, `forgotten` (the ids found), `sources` and, in
        `matches`, the stored turns that would be removed."""
        if sum(bool(x) for x in (last, ids, text)) != 1:
            raise EngineError("forget needs exactly one of: the last turn, ids, or a text")
        if not self.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r} (see `memoryplus banks`)")
        bank = await self._bank(bank_name, create=False)
        return await self._run(bank, self._forget(bank, last, ids or [], text, confirm))

    async def _forget(self, bank: Bank, last: bool, ids: list[str], text: str | None,
                      confirm: bool) -> ForgetReport:
        report = ForgetReport()
        if text:
            report.matches = await self.strong_matches(bank, text)
            if not confirm:
                report.dry_run = True
                return report
            ids = [m.id for m in report.matches]
        if not confirm:
            episodes, report.forgotten = await self._forget_targets(bank, last, ids)
            rows = await self._episodes(bank, episodes)
            report.sources = [EpisodeMeta.parse(r["name"], u).id for u, r in rows.items()]
            report.matches = [SearchResult(id=u, kind="episode", text=r["content"] or "",
                                           valid_at=_ts(r["valid_at"]),
                                           sources=[EpisodeMeta.parse(r["name"], u).id])
                              for u, r in rows.items()]
            report.dry_run = True
            return report
        async with bank.write_lock:
            episodes, report.forgotten = await self._forget_targets(bank, last, ids)
            if episodes:
                rows = await self._episodes(bank, episodes)
                report.sources = [EpisodeMeta.parse(r["name"], u).id for u, r in rows.items()]
                report.episodes_removed = await self._remove_episodes(bank, list(rows))
                await self._checkpoint(bank)
        return report

    async def _forget_targets(self, bank: Bank, last: bool, ids: list[str]) -> tuple[list[str], list[str]]:
        """The episodes a forget removes, and the ids it found (in the caller's order)."""
        if last:
            rows = await self._query(bank, "episodes_page", gid=bank.slug, skip=0, limit=1)
            episodes = [r["uuid"] for r in rows]
            return episodes, episodes
        episodes, resolved = await self._episodes_behind(bank, ids)
        return episodes, [i for i in ids if i in resolved]

    async def _episodes_behind(self, bank: Bank, ids: list[str]) -> tuple[list[str], set[str]]:
        """The episodes behind result ids (episode, fact or entity ids) or turn ids (a turn's
        caller id), and which of the ids exist."""
        ids = list(dict.fromkeys(ids))
        episodes = list((await self._episodes(bank, ids)).keys())
        resolved = set(episodes)
        by_turn = {episode_uuid(bank.slug, i): i for i in ids if i not in resolved}
        for uuid_ in (await self._episodes(bank, list(by_turn))).keys():
            episodes.append(uuid_)
            resolved.add(by_turn[uuid_])
        for r in await self._query(bank, "facts_by_uuid", uuids=ids):
            episodes.extend(r["episodes"] or [])
            resolved.add(r["uuid"])
        for r in await self._query(bank, "episode_uuids_mentioning", uuids=ids):
            episodes.append(r["episode"])
            resolved.add(r["entity"])
        return list(dict.fromkeys(episodes)), resolved

    async def strong_matches(self, bank: Bank | str, text: str) -> list[SearchResult]:
        """Memories that match a text strongly: most of its words are in them. A weak, vague
        match is never offered for forgetting."""
        if isinstance(bank, str):
            bank = await self._bank(bank, create=False)
        words = {w.lower() for w in _QUERY_WORD.findall(text) if len(w) > 2} - STOPWORDS
        if not words:
            return []
        results = await self._search(bank, text, 50, None)
        strong = []
        for r in results:
            # An entity matches by its name, not its summary: a hub such as "User" sums up
            # everything, and forgetting it would take every turn with it.
            have = {w.lower() for w in _QUERY_WORD.findall(r.name if r.kind == "entity" else r.text)}
            if len(words & have) / len(words) >= 0.75:
                strong.append(r)
        return strong

    @contextlib.asynccontextmanager
    async def _all_or_nothing(self, bank: Bank):
        """Kuzu: the writes inside run as one transaction, so an error or a kill part-way leaves
        the bank as it was. New searches wait until it ends (they would run inside it on the
        bank's one connection, and a failing one would end it); searches under way finish first."""
        if bank.provider != GraphProvider.KUZU or bank.in_transaction:
            yield
            return
        bank.in_transaction = True
        try:
            await self._searches_under_way_finish(bank)
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

    async def _remove_episodes(self, bank: Bank, ep_uuids: list[str]) -> int:
        """Remove episodes and what only they hold, all or nothing (see _cascade)."""
        if not ep_uuids:
            return 0
        async with self._all_or_nothing(bank):
            return await self._cascade(bank, ep_uuids)

    async def _cascade(self, bank: Bank, ep_uuids: list[str]) -> int:
        """graphiti's remove_episode cascade (facts only they support, entities only they
        mention), then summaries of surviving entities rebuilt from their remaining facts by
        rules, so no summary keeps forgotten text and forgetting costs no LLM call."""
        eps = await self._episodes(bank, ep_uuids)
        if not eps:
            return 0
        gone = set(eps)
        edge_uuids = list({u for r in eps.values() for u in (r["entity_edges"] or [])})
        facts = await self._query(bank, "facts_by_uuid", uuids=edge_uuids) if edge_uuids else []
        # Facts that list a removed episode without it being in entity_edges (local dedupe).
        mention_rows = await self._query(bank, "mentions_of_episodes", uuids=list(gone))
        entity_uuids = list({r["entity"] for r in mention_rows})
        facts += await self._query(bank, "facts_touching", uuids=entity_uuids) if entity_uuids else []
        delete_edges, touched = set(), set(entity_uuids)
        for f in {f["uuid"]: f for f in facts}.values():
            remaining = [u for u in (f["episodes"] or []) if u not in gone]
            if len(remaining) == len(f["episodes"] or []):
                continue
            touched |= {f["source"], f["target"]}
            if remaining:
                await self._query(bank, "set_fact_episodes", uuid=f["uuid"], episodes=remaining)
            else:
                delete_edges.add(f["uuid"])
        if delete_edges:
            await EntityEdge.delete_by_uuids(bank.driver, list(delete_edges))
            await self._restore_superseded(bank, [f for f in facts if f["uuid"] in delete_edges])
        counts = {r["uuid"]: r["n"] for r in await self._query(bank, "mention_counts", uuids=list(touched))}
        mentioned_only_here: dict[str, int] = {}
        for r in mention_rows:
            mentioned_only_here[r["entity"]] = mentioned_only_here.get(r["entity"], 0) + 1
        orphans = [u for u in touched if counts.get(u, 0) <= mentioned_only_here.get(u, 0)]
        # An entity still holding a surviving fact stays even without mentions.
        if orphans:
            still = await self._query(bank, "facts_touching", uuids=orphans)
            holding = {u for f in still if f["uuid"] not in delete_edges for u in (f["source"], f["target"])}
            orphans = [u for u in orphans if u not in holding]
            await EntityNode.delete_by_uuids(bank.driver, orphans)
        for ep in await EpisodicNode.get_by_uuids(bank.driver, list(gone)):
            await ep.delete(bank.driver)
        survivors = [u for u in touched if u not in set(orphans)]
        if survivors:
            remaining = await self._query(bank, "facts_touching", uuids=survivors)
            for u in survivors:
                mine = [f for f in remaining if u in (f["source"], f["target"]) and f["expired_at"] is None]
                await self._query(bank, "set_summary", uuid=u, summary=self._rule_summary("", mine))
        bank.entities = None
        if bank.turns is not None:
            bank.turns.remove(ep_uuids)
        elif bank.turns_pending is not None:
            bank.turns_pending.append(("remove", (list(ep_uuids),)))
        return len(gone)

    async def _restore_superseded(self, bank: Bank, deleted: list[dict]) -> None:
        """"I moved to Paris", forgotten: "I live in Berlin" is current again. A deleted current
        fact gives its place back to the fact it ended, unless another current one holds it."""
        for f in {f["uuid"]: f for f in deleted}.values():
            ended_at = _ts(f["valid_at"])
            if f["expired_at"] is not None or ended_at is None:
                continue
            if await self._query(bank, "current_facts_from", source=f["source"], relation=f["name"]):
                continue
            ended = [r for r in await self._query(bank, "ended_facts_from", sources=[f["source"]])
                     if r["name"] == f["name"] and _ts(r["invalid_at"]) == ended_at]
            if ended:
                latest = max(ended, key=lambda r: _ts(r["valid_at"]) or ended_at)
                await self._query(bank, "restore_fact", uuid=latest["uuid"])

    # ── feedback, lifecycle, maintenance ───────────────────────────────────────────────
    async def rate(self, bank_name: str, result_id: str, value: int) -> int:
        """👍 (+1) / 👎 (-1) on a fact or entity; returns its new rating, bounded to ±2."""
        if value not in (-1, 1):
            raise EngineError("a rating is +1 or -1")
        bank = await self._bank(bank_name, create=False)
        async with bank.write_lock:
            for kind in ("fact", "entity"):
                rows = await self._query(bank, "facts_by_uuid" if kind == "fact" else "entities_by_uuid",
                                         uuids=[result_id])
                if not rows:
                    continue
                attrs = rows[0].get("attributes")
                attrs = json.loads(attrs) if isinstance(attrs, str) and attrs else dict(attrs or {})
                rating = max(-RATING_CAP, min(RATING_CAP, self._rating(attrs) + value))
                attrs["mp_rating"] = rating
                value_param = ({"attributes": json.dumps(attrs)} if bank.provider == GraphProvider.KUZU
                               else {"rating": rating})
                await self._query(bank, f"set_{kind}_rating", uuid=result_id, **value_param)
                return rating
        raise EngineError(f"no fact or entity with id {result_id!r} in bank {bank_name!r}")

    async def prune(self, bank_name: str, threshold: int | None = None) -> int:
        """Remove stored turns with fewer words than the threshold (role labels not counted)."""
        bank = await self._bank(bank_name, create=False)
        threshold = threshold or self.settings.low_value_threshold
        async with bank.write_lock:
            rows = await self._query(bank, "episodes_all", gid=bank.slug)
            low = [r["uuid"] for r in rows if not EpisodeMeta.parse(r["name"], r["uuid"]).explicit
                   and local_extract.is_low_value(r["content"] or "", threshold)]
            removed = await self._remove_episodes(bank, low)
            bank.usage.add(pruned=removed)
        return removed

    async def expire(self, bank_name: str, days: int | None = None) -> int:
        """Remove memories stored more than `days` ago (by when they were stored)."""
        days = self.settings.memory_expiry_days if days is None else days
        if days <= 0:
            return 0
        bank = await self._bank(bank_name, create=False)
        async with bank.write_lock:
            rows = await self._query(bank, "episodes_before", gid=bank.slug,
                                     before=utc_now() - timedelta(days=days))
            return await self._remove_episodes(bank, [r["uuid"] for r in rows])

    async def clear(self, bank_name: str) -> None:
        """Delete every memory of a bank, and the bank itself."""
        if not self.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r}")
        if self.settings.backend == "kuzu":
            bank = self.banks.get(bank_name)
            path = self.dir.path(bank_name)
            if bank is not None:
                await self._close_bank(bank)
            else:
                # A bank that does not open (built with another embedder, or damaged) can be
                # cleared too; one that another process holds cannot (BankLockedError).
                try:
                    driver = await asyncio.to_thread(open_kuzu, path, bank_name, app=self.app,
                                                     buffer_pool_mb=self.settings.kuzu_buffer_pool_mb)
                except BankLockedError:
                    raise
                except StoreError as exc:
                    log.warning("clearing bank %r, which does not open: %s", bank_name, exc)
                else:
                    await asyncio.to_thread(close_kuzu, driver, path)
            await asyncio.to_thread(shutil.rmtree, path, True)
        else:
            bank = await self._bank(bank_name, create=False)
            from graphiti_core.utils.maintenance.graph_data_operations import clear_data
            async with bank.write_lock:
                await clear_data(bank.driver, group_ids=[bank.slug])
            self.banks.pop(bank_name, None)
            shutil.rmtree(bank.dir, ignore_errors=True)

    async def reembed(self, bank_name: str) -> int:
        """Recompute every vector of a bank with the embedder the settings give now."""
        if not self.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r}")
        if bank_name in self.banks:
            await self._close_bank(self.banks[bank_name])
        manifest = self.dir.manifest(name=bank_name)
        choice = self.embedder_override or resolve_embedder(self.settings, self.credentials)
        choice.dim = len(await build_embedder(choice).create("dimension probe"))
        manifest.embedder, manifest.embedding_dim = choice.id, choice.dim
        manifest.write(self.dir.manifest_path(bank_name))
        bank = await self._bank(bank_name, create=False)
        count = 0
        async with bank.write_lock:
            ents = await self._query(bank, "entities_all", gid=bank.slug)
            facts = await self._query(bank, "facts_all", gid=bank.slug)
            for rows, text_key, query in ((ents, "name", "set_entity_embedding"),
                                          (facts, "fact", "set_fact_embedding")):
                for i in range(0, len(rows), 64):
                    chunk = rows[i:i + 64]
                    vecs = await bank.embedder.create_batch([r[text_key] or "" for r in chunk])
                    for r, v in zip(chunk, vecs):
                        await self._query(bank, query, uuid=r["uuid"], embedding=v)
                        count += 1
        return count

    # ── reading ────────────────────────────────────────────────────────────────────────
    async def stats(self, bank_name: str) -> BankStats:
        if not self.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r} (see `memoryplus banks`)")
        bank = await self._bank(bank_name, create=False)
        g = bank.slug

        async def n(name: str) -> int:
            rows = await self._query(bank, name, gid=g)
            return int(rows[0]["n"]) if rows else 0

        u = bank.usage.data
        return BankStats(name=bank.name, backend=self.settings.backend, episodes=await n("count_episodes"),
                         entities=await n("count_entities"), facts=await n("count_facts"),
                         current_facts=await n("count_current_facts"), llm_calls=u["llm_calls"],
                         llm_input_tokens=u["llm_input_tokens"], llm_output_tokens=u["llm_output_tokens"],
                         llm_calls_today=bank.usage.today(), skipped_by_gate=u["skipped_by_gate"],
                         pruned=u["pruned"], embedder=bank.manifest.embedder,
                         embedder_note=bank.manifest.embedder_note,
                         embedding_dim=bank.manifest.embedding_dim, engine=self.extraction,
                         llm_fallbacks=u.get("llm_fallbacks", 0))

    async def banks_info(self) -> list[BankInfo]:
        out = []
        for m in self.dir.all():
            try:
                st = await self.stats(m.name)
                out.append(BankInfo(name=m.name, episodes=st.episodes, entities=st.entities,
                                    facts=st.facts, backend=m.backend))
            except (StoreError, EngineError) as exc:
                log.warning("bank %r: %s", m.name, exc)
                out.append(BankInfo(name=m.name, backend=m.backend))
        return out

    async def browse(self, bank_name: str, what: str = "episodes", offset: int = 0,
                     limit: int = 50) -> list[dict]:
        """Pages for the memory browser: episodes newest first, facts, or entities with relations."""
        bank = await self._bank(bank_name, create=False)
        if what == "episodes":
            rows = await self._query(bank, "episodes_page", gid=bank.slug, skip=offset, limit=limit)
            out = []
            for r in rows:
                m = EpisodeMeta.parse(r["name"], r["uuid"])
                out.append({"id": r["uuid"], "source": m.id, "text": r["content"], "tags": m.tags,
                            "vibe": m.vibe, "explicit": m.explicit, "fallback": m.fallback,
                            "valid_at": _iso(r["valid_at"]), "stored_at": _iso(r["created_at"]),
                            "facts": len(r["entity_edges"] or []), "complete": m.state == COMPLETE})
            return out
        if what == "facts":
            rows = await self._query(bank, "facts_all", gid=bank.slug)
            rows.sort(key=lambda r: (_ts(r["valid_at"]) or _ts(r["created_at"])), reverse=True)
            return [self._fact_record(r) for r in rows[offset:offset + limit]]
        if what == "entities":
            rows = await self._query(bank, "entities_all", gid=bank.slug)
            rows.sort(key=lambda r: r["name"].lower())
            page = rows[offset:offset + limit]
            facts = await self._query(bank, "facts_touching", uuids=[r["uuid"] for r in page]) if page else []
            return [{"id": r["uuid"], "name": r["name"], "labels": list(r["labels"] or []),
                     "summary": r["summary"] or "",
                     "relations": [self._fact_record(f) for f in facts
                                   if r["uuid"] in (f["source"], f["target"])]} for r in page]
        raise EngineError(f"cannot browse {what!r}: choose episodes, facts or entities")

    @staticmethod
    def _fact_record(r: dict) -> dict:
        return {"id": r["uuid"], "relation": r["name"], "text": r["fact"], "source": r["source_name"],
                "target": r["target_name"], "valid_at": _iso(r["valid_at"]),
                "invalid_at": _iso(r["invalid_at"]), "current": r["expired_at"] is None}

    # ── export and import ──────────────────────────────────────────────────────────────
    async def export(self, bank_name: str) -> list[dict]:
        """Every record of a bank, lossless (vectors included), as JSON-ready dicts."""
        if not self.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r} (see `memoryplus banks`)")
        bank = await self._bank(bank_name, create=False)
        g = bank.slug
        out: list[dict] = [{"type": "bank", "name": bank.name, "embedder": bank.manifest.embedder,
                            "embedding_dim": bank.manifest.embedding_dim, "format": 1}]
        for r in await self._query(bank, "episodes_all", gid=g):
            out.append({"type": "episode", "uuid": r["uuid"], "name": r["name"], "content": r["content"],
                        "source_description": r["source_description"], "valid_at": _iso(r["valid_at"]),
                        "created_at": _iso(r["created_at"]), "entity_edges": list(r["entity_edges"] or [])})
        try:
            nodes = await EntityNode.get_by_group_ids(bank.driver, [g], with_embeddings=True)
        except GroupsNodesNotFoundError:
            nodes = []
        for n in nodes:
            out.append({"type": "entity", "uuid": n.uuid, "name": n.name, "labels": n.labels,
                        "summary": n.summary, "attributes": n.attributes,
                        "created_at": _iso(n.created_at), "name_embedding": n.name_embedding})
        try:
            edges = await EntityEdge.get_by_group_ids(bank.driver, [g], with_embeddings=True)
        except GroupsEdgesNotFoundError:
            edges = []
        for e in edges:
            out.append({"type": "fact", "uuid": e.uuid, "source": e.source_node_uuid,
                        "target": e.target_node_uuid, "name": e.name, "fact": e.fact,
                        "episodes": e.episodes, "valid_at": _iso(e.valid_at),
                        "invalid_at": _iso(e.invalid_at), "expired_at": _iso(e.expired_at),
                        "created_at": _iso(e.created_at), "attributes": e.attributes,
                        "fact_embedding": e.fact_embedding})
        for r in await self._query(bank, "mentions_all", gid=g):
            out.append({"type": "mention", "episode": r["episode"], "entity": r["entity"]})
        return out

    async def import_(self, bank_name: str, records: list[dict]) -> dict:
        """Merge an export into a bank by id. Bad lines are reported with their number, good
        ones kept; vectors of another dimension are refused (re-embed after importing)."""
        bank = await self._bank(bank_name)
        problems: list[str] = []
        eps, ents, facts, mentions = [], [], [], []
        dim = bank.manifest.embedding_dim
        for i, rec in enumerate(records, 1):
            try:
                kind = rec.get("type")
                if kind == "bank":
                    if rec.get("embedding_dim") not in (None, dim):
                        raise ValueError(f"vectors of {rec.get('embedding_dim')} dimensions, the bank "
                                         f"has {dim}: re-embed one side first")
                elif kind == "episode":
                    eps.append(EpisodicNode(uuid=rec["uuid"], name=rec["name"], group_id=bank.slug, labels=[],
                                            source=EpisodeType.message, content=rec["content"],
                                            source_description=rec.get("source_description") or "",
                                            created_at=_ts(rec.get("created_at")) or utc_now(),
                                            valid_at=_ts(rec.get("valid_at")) or utc_now(),
                                            entity_edges=list(rec.get("entity_edges") or [])))
                elif kind == "entity":
                    vec = rec.get("name_embedding")
                    if vec is not None and len(vec) != dim:
                        raise ValueError(f"an entity vector of {len(vec)} dimensions (bank: {dim})")
                    ents.append(EntityNode(uuid=rec["uuid"], name=rec["name"], group_id=bank.slug,
                                           labels=list(rec.get("labels") or ["Entity"]),
                                           summary=rec.get("summary") or "",
                                           attributes=dict(rec.get("attributes") or {}),
                                           created_at=_ts(rec.get("created_at")) or utc_now(),
                                           name_embedding=vec))
                elif kind == "fact":
                    vec = rec.get("fact_embedding")
                    if vec is not None and len(vec) != dim:
                        raise ValueError(f"a fact vector of {len(vec)} dimensions (bank: {dim})")
                    facts.append(EntityEdge(uuid=rec["uuid"], group_id=bank.slug,
                                            source_node_uuid=rec["source"], target_node_uuid=rec["target"],
                                            name=rec["name"], fact=rec["fact"],
                                            episodes=list(rec.get("episodes") or []),
                                            valid_at=_ts(rec.get("valid_at")),
                                            invalid_at=_ts(rec.get("invalid_at")),
                                            expired_at=_ts(rec.get("expired_at")),
                                            created_at=_ts(rec.get("created_at")) or utc_now(),
                                            attributes=dict(rec.get("attributes") or {}),
                                            fact_embedding=vec))
                elif kind == "mention":
                    mentions.append(EpisodicEdge(source_node_uuid=rec["episode"], target_node_uuid=rec["entity"],
                                                 group_id=bank.slug, created_at=utc_now()))
                else:
                    raise ValueError(f"unknown record type {kind!r}")
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                problems.append(f"line {i}: {type(exc).__name__}: {exc}"[:300])
        async with bank.write_lock:
            await add_nodes_and_edges_bulk(bank.driver, eps, mentions, ents, facts, bank.embedder)
            await self._checkpoint(bank)
            bank.entities = None
            bank.turns = None
        return {"episodes": len(eps), "entities": len(ents), "facts": len(facts),
                "mentions": len(mentions), "problems": problems}

    async def health(self) -> dict:
        return {"ok": True, "pid": os.getpid(), "backend": self.settings.backend,
                "extraction": self.extraction, "mode": self.settings.memory_mode,
                "banks_open": sorted(self.banks), "embedder": self.embedder_status()}

    def embedder_status(self) -> dict:
        """What the settings page shows: the embedder a new bank gets, and why, and the one
        each open bank was built with (a bank keeps its own)."""
        try:
            choice = self.embedder_override or resolve_embedder(self.settings, self.credentials)
            new = {"id": choice.id, "why": choice.why, "provider": choice.provider}
        except Exception as exc:    # informative only: never fail a health check (or the start) for it
            new = {"id": "", "why": redact.redact(str(exc))[:300], "provider": ""}
        return {"new_banks": new, "banks": {b.name: {"id": b.manifest.embedder, "why": b.manifest.embedder_note}
                                            for b in self.banks.values()}}


STOPWORDS = frozenset("""the and for that this with you your are was were have has had not but
what when where which who how why about from into they them their there here then than
just also very can could would should will shall may might does did done its it's i'm
my me mine our ours his her hers him she he we us of to in on at by an a is be been it
""".split())
