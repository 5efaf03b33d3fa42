"""Storing chat turns: sanitized length, tags, pruning and the memory gate, then extraction by
graphiti's LLM route or the local graph writer; and redoing what a crash left pending."""
from __future__ import annotations

import hashlib
import logging
from datetime import datetime

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.nodes import EpisodeType, EpisodicNode

from memoryplus.common.text import truncate_tokens
from memoryplus.engine import insights as insight_rules
from memoryplus.engine import llm_combined
from memoryplus.engine import extract as local_extract
from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.episodes import COMPLETE, PENDING, PENDING_PREFIX, TAG_LABELS, EpisodeMeta, content_hash, ts
from memoryplus.engine.errors import EngineError
from memoryplus.engine.local_writer import LocalGraphWriter
from memoryplus.engine.providers import TurnBudget, turn_budget, unusable_answer
from memoryplus.engine.removal import RemovalOps
from memoryplus.engine.turn_index import compact, pack_vectors, reply_vectors, split_body, vectors_tag
from memoryplus.wire.banks import episode_uuid
from memoryplus.wire.records import IngestReport, Turn, utc_now

log = logging.getLogger("memoryplus.engine")


class IngestOps:
    def __init__(self, pool: BankPool, removal: RemovalOps, writer: LocalGraphWriter):
        self.pool = pool
        self.removal = removal
        self.writer = writer

    async def ingest(self, bank_name: str, turns: list[Turn], *, defer_flush: bool = False) -> IngestReport:
        bank = await self.pool.bank_to_write(bank_name)
        turns = [t if isinstance(t, Turn) else Turn.model_validate(t) for t in turns]
        return await self.pool.run(bank, self.store_turns(bank, turns, defer_flush))

    async def remember(self, bank_name: str, text: str, key: str | None = None,
                       tags: list[str] | None = None) -> IngestReport:
        if not text or not text.strip():
            raise EngineError("nothing to remember: the text is empty")
        key = key or "remember:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return await self.ingest(bank_name, [Turn(id=key, user=text, tags=tags or [], explicit=True)])

    async def store_turns(self, bank: Bank, turns: list[Turn], defer_flush: bool = False) -> IngestReport:
        pool = self.pool
        report = IngestReport(engine=pool.extraction, instance=pool.instance,  # type: ignore[arg-type]
                              embedder={"id": bank.manifest.embedder, "why": bank.manifest.embedder_note})
        s = pool.settings
        custom = [t.strip() for t in s.custom_memory_tags.split(",") if t.strip()]
        async with bank.write_lock:
            report.flushed_before = bank.unflushed == 0
            uuids = {t.id: episode_uuid(bank.slug, t.id) for t in turns}
            existing = await pool.episodes(bank, list(uuids.values()))
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
                    await self.removal.remove_episodes(bank, [ep_uuid])
                    if meta.state == COMPLETE:
                        report.replaced.append(turn.id)
                # Each turn's own LLM budget (graphiti's calls, the gate's): see TurnBudget.
                turn_budget.set(TurnBudget() if pool.extraction == "llm" else None)
                if not turn.explicit:
                    if s.auto_prune and local_extract.is_low_value(body, s.low_value_threshold):
                        report.skipped[turn.id] = "pruned: low value"
                        pruned += 1
                        continue
                    if pool.spec().gate:
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
            report.llm_calls = pool.settle_usage(bank, pruned=pruned, skipped_by_gate=gated,
                                                 llm_fallbacks=len(report.fallbacks))
            written = len(report.stored) + len(report.replaced)
            bank.unflushed += written
            if written and defer_flush and bank.unflushed < max(20, s.kuzu_buffer_pool_mb):
                report.flushed = False   # Kuzu keeps unflushed pages in its pool (~4 turns per MB)
            elif bank.unflushed:
                await pool.flush(bank)
        return report

    def _insights(self, body: str) -> insight_rules.Insights:
        s = self.pool.settings
        return insight_rules.analyze(body, emotions=s.emotion_tagging, sensitivity=s.emotion_sensitivity,
                                     topics=s.topic_tagging, vibe=s.vibe_scoring)

    async def _gate(self, bank: Bank, body: str) -> tuple[bool, str]:
        """MemoryGate: rules decide the clear cases for free; the Insight Model the rest."""
        keep, reason = local_extract.gate_decision(body)
        if keep is not None or self.pool.extraction != "llm":
            return (keep is not False), reason
        from memoryplus.engine.llm_calls import gate_with_llm
        return await gate_with_llm(self.pool.settings, self.pool.credentials, bank.llm_usage, body)

    async def _store(self, bank: Bank, ep_uuid: str, body: str, when: datetime, meta: EpisodeMeta) -> None:
        episode = EpisodicNode(uuid=ep_uuid, name=meta.dump(), group_id=bank.slug, labels=[],
                               source=EpisodeType.message, content=body,
                               source_description=meta.description(),
                               created_at=utc_now(), valid_at=when)
        # the turn index's vectors of it, kept on its row too (turn_index.pack_vectors)
        vec = (await bank.embedder.create_batch([split_body(body)[0] or "-"]))[0]
        replies = compact(reply_vectors(bank.embedder, body))
        vectors = pack_vectors(vectors_tag(bank.manifest.embedder, bank.embedder), vec, replies)
        if self.pool.extraction == "llm":
            await self._save_turn(bank, episode, vectors)  # pending: visible to recovery, not yet complete
            edges = await self._store_llm(bank, episode, meta, vectors)
            meta.state = COMPLETE
            await self._complete(bank, ep_uuid, meta, edges, vectors)
        else:
            edges = await self._store_local(bank, episode, meta, vectors)
        args = (ep_uuid, body, when, vec, replies, meta.dump(), edges)  # the name and facts _complete stored
        if bank.turns is not None:
            bank.turns.add(*args)
        elif bank.turns_pending is not None:    # the index is being built from a read that may miss it
            bank.turns_pending.append(("add", args))

    async def _complete(self, bank: Bank, ep_uuid: str, meta: EpisodeMeta, edges: list[str],
                        vectors: str | None = None) -> None:
        """The turn's final metadata. After graphiti's `add_episode` (`vectors` given), a backend
        whose save replaces the whole row (Neo4j) gets the vectors back too; Kuzu's save sets
        fields one by one and keeps them, and a long text set again there costs buffer pool."""
        if vectors is not None and bank.provider != GraphProvider.KUZU:
            await self.pool.query(bank, "set_episode_meta_and_vectors", uuid=ep_uuid, name=meta.dump(),
                                  entity_edges=edges, description=meta.description(), turn_vectors=vectors)
            return
        await self.pool.query(bank, "set_episode_meta", uuid=ep_uuid, name=meta.dump(), entity_edges=edges,
                              description=meta.description())

    async def _save_turn(self, bank: Bank, episode: EpisodicNode, vectors: str) -> None:
        """The turn's row as graphiti's `EpisodicNode.save` writes it, with its vectors in the
        same query: one query, not two (~0.7 ms of a long turn's ~17 ms), and in the write
        of the row. Kuzu sets a long text on a row it has already committed at a cost in
        buffer pool: a bank of 400 turns stored by the LLM failed with "the buffer pool is
        full" when the vectors were set with the turn's metadata."""
        await self.pool.query(bank, "save_turn", uuid=episode.uuid, name=episode.name, group_id=episode.group_id,
                              source_description=episode.source_description, content=episode.content,
                              entity_edges=episode.entity_edges, created_at=episode.created_at,
                              valid_at=episode.valid_at, source=episode.source.value, turn_vectors=vectors)

    async def _store_local(self, bank: Bank, episode: EpisodicNode, meta: EpisodeMeta, vectors: str) -> list[str]:
        """The local route writes a turn in one Kuzu transaction: one commit for its dozens of
        rows, not one each (long turns: ~15 -> ~22 turns/s), and a failure leaves nothing of
        it. The LLM route cannot: searches wait while a transaction is open, and it waits on
        the network."""
        try:
            async with self.pool.all_or_nothing(bank):
                await self._save_turn(bank, episode, vectors)
                edges = await self.writer.write(bank, episode, meta)
                meta.state = COMPLETE
                await self._complete(bank, episode.uuid, meta, edges)
        except BaseException:
            bank.entities = None     # the writer added the rolled-back entities to the index
            raise
        return edges

    async def _store_llm(self, bank: Bank, episode: EpisodicNode, meta: EpisodeMeta, vectors: str) -> list[str]:
        """graphiti's extraction; where the model's answer is unusable, the rules'."""
        ep_uuid = episode.uuid
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
            await self.removal.remove_episodes(bank, [ep_uuid])
            await self._save_turn(bank, episode, vectors)
            edges = await self.writer.write(bank, episode, meta)
            found_tags = []
        if found_tags:  # the LLM's Emotion/Topic entities become the turn's tags too
            meta.tags = list(dict.fromkeys([*meta.tags, *found_tags]))
            if self.pool.settings.vibe_scoring:
                meta.vibe = insight_rules.vibe_from_emotions(
                    [t[8:] for t in meta.tags if t.startswith("emotion:")])
        return edges

    async def _extract_llm(self, bank: Bank, episode: EpisodicNode) -> tuple[list[str], list[str]]:
        spec = self.pool.spec()
        previous = await bank.graphiti.retrieve_episodes(episode.valid_at, last_n=llm_combined.PREVIOUS_TURNS + 1,
                                                         group_ids=[bank.slug])   # + 1: this turn, pending
        previous = [p for p in previous if p.uuid != episode.uuid][-llm_combined.PREVIOUS_TURNS:]
        # entities and facts in one call (graphiti's combined prompt), dates by rule where a
        # rule knows: for this call only (context variables)
        with llm_combined.scope(spec.edge_types or None, spec.edge_type_map or None, episode.content):
            result = await bank.graphiti.add_episode(
                name=episode.name, episode_body=episode.content,
                source_description=episode.source_description, reference_time=episode.valid_at,
                source=EpisodeType.message, group_id=bank.slug, uuid=episode.uuid,
                previous_episode_uuids=[p.uuid for p in previous],
                entity_types=spec.entity_types, edge_types=spec.edge_types or None,
                edge_type_map=spec.edge_type_map or None,
                custom_extraction_instructions=spec.instructions or None)
        bank.entities = None
        tags = [f"{label.lower()}:{n.name.lower()}" for n in result.nodes for label in TAG_LABELS
                if label in n.labels]
        return [e.uuid for e in result.edges], tags

    async def recover(self, bank: Bank) -> None:
        """Remove episodes a crash left pending, with all they wrote, and redo them (the pool
        calls this as a bank opens)."""
        rows = await self.pool.query(bank, "pending_episodes", gid=bank.slug, prefix=PENDING_PREFIX)
        if not rows:
            return
        log.warning("bank %r: redoing %d incomplete episode(s) left by an interrupted write",
                    bank.name, len(rows))
        async with bank.write_lock:
            await self.removal.remove_episodes(bank, [r["uuid"] for r in rows])
        for r in rows:
            meta = EpisodeMeta.parse(r["name"], r["uuid"])
            turn_tags = [t[4:] for t in meta.tags if t.startswith("tag:")]
            text = r["content"] or ""
            user = "\n".join(line[6:] for line in text.splitlines() if line.startswith("User: "))
            asst = "\n".join(line[11:] for line in text.splitlines() if line.startswith("Assistant: "))
            if not (user or asst):
                user = text
            await self.store_turns(bank, [Turn(id=meta.id, user=user, assistant=asst,
                                               time=ts(r["valid_at"]) or utc_now(), tags=turn_tags,
                                               explicit=meta.explicit)])
