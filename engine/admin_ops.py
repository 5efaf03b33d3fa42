"""The rest of what a bank offers: feedback ratings, pruning and expiry, clearing, re-embedding,
statistics, the memory browser's pages, export and import, and the worker's health."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
from datetime import timedelta

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.edges import EntityEdge, EpisodicEdge
from graphiti_core.errors import GroupsEdgesNotFoundError, GroupsNodesNotFoundError
from graphiti_core.nodes import EntityNode, EpisodeType, EpisodicNode
from graphiti_core.utils.bulk_utils import add_nodes_and_edges_bulk

from memoryplus.common import redact
from memoryplus.engine import extract as local_extract
from memoryplus.engine.bank_pool import BankPool
from memoryplus.engine.embedders import REQUEST_TEXTS
from memoryplus.engine.episodes import COMPLETE, EpisodeMeta, iso, ts
from memoryplus.engine.errors import EngineError, UnknownBankError
from memoryplus.engine.fusion import RATING_CAP, rating
from memoryplus.engine.providers import build_embedder, resolve_embedder
from memoryplus.engine.removal import RemovalOps
from memoryplus.engine.store import BankLockedError, StoreError, close_kuzu, open_kuzu
from memoryplus.wire.records import BankInfo, BankStats, utc_now

log = logging.getLogger("memoryplus.engine")


def _fact_record(r: dict) -> dict:
    return {"id": r["uuid"], "relation": r["name"], "text": r["fact"], "source": r["source_name"],
            "target": r["target_name"], "valid_at": iso(r["valid_at"]),
            "invalid_at": iso(r["invalid_at"]), "current": r["expired_at"] is None}


class AdminOps:
    def __init__(self, pool: BankPool, removal: RemovalOps):
        self.pool = pool
        self.removal = removal

    # ── feedback and lifecycle ─────────────────────────────────────────────────────────
    async def rate(self, bank_name: str, result_id: str, value: int) -> int:
        if value not in (-1, 1):
            raise EngineError("a rating is +1 or -1")
        bank = await self.pool.bank(bank_name, create=False)
        async with bank.write_lock:
            for kind in ("fact", "entity"):
                rows = await self.pool.query(bank, "facts_by_uuid" if kind == "fact" else "entities_by_uuid",
                                             uuids=[result_id])
                if not rows:
                    continue
                attrs = rows[0].get("attributes")
                attrs = json.loads(attrs) if isinstance(attrs, str) and attrs else dict(attrs or {})
                new = max(-RATING_CAP, min(RATING_CAP, rating(attrs) + value))
                attrs["mp_rating"] = new
                value_param = ({"attributes": json.dumps(attrs)} if bank.provider == GraphProvider.KUZU
                               else {"rating": new})
                await self.pool.query(bank, f"set_{kind}_rating", uuid=result_id, **value_param)
                return new
        raise EngineError(f"no fact or entity with id {result_id!r} in bank {bank_name!r}")

    async def prune(self, bank_name: str, threshold: int | None = None) -> int:
        bank = await self.pool.bank(bank_name, create=False)
        threshold = threshold or self.pool.settings.low_value_threshold
        async with bank.write_lock:
            rows = await self.pool.query(bank, "episodes_all", gid=bank.slug)
            low = [r["uuid"] for r in rows if not EpisodeMeta.parse(r["name"], r["uuid"]).explicit
                   and local_extract.is_low_value(r["content"] or "", threshold)]
            removed = await self.removal.remove_episodes(bank, low)
            bank.usage.add(pruned=removed)
        return removed

    async def expire(self, bank_name: str, days: int | None = None) -> int:
        days = self.pool.settings.memory_expiry_days if days is None else days
        if days <= 0:
            return 0
        bank = await self.pool.bank(bank_name, create=False)
        async with bank.write_lock:
            rows = await self.pool.query(bank, "episodes_before", gid=bank.slug,
                                         before=utc_now() - timedelta(days=days))
            return await self.removal.remove_episodes(bank, [r["uuid"] for r in rows])

    async def clear(self, bank_name: str) -> None:
        pool = self.pool
        if not pool.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r}")
        if pool.settings.backend == "kuzu":
            bank = pool.banks.get(bank_name)
            path = pool.dir.path(bank_name)
            if bank is not None:
                await pool.close_bank(bank)
            else:
                # A bank that does not open (built with another embedder, or damaged) can be
                # cleared too; one that another process holds cannot (BankLockedError).
                try:
                    driver = await asyncio.to_thread(open_kuzu, path, bank_name, app=pool.app,
                                                     buffer_pool_mb=pool.settings.kuzu_buffer_pool_mb)
                except BankLockedError:
                    raise
                except StoreError as exc:
                    log.warning("clearing bank %r, which does not open: %s", bank_name, exc)
                else:
                    await asyncio.to_thread(close_kuzu, driver, path)
            await asyncio.to_thread(shutil.rmtree, path, True)
        else:
            bank = await pool.bank(bank_name, create=False)
            from graphiti_core.utils.maintenance.graph_data_operations import clear_data
            async with bank.write_lock:
                await clear_data(bank.driver, group_ids=[bank.slug])
            pool.banks.pop(bank_name, None)
            shutil.rmtree(bank.dir, ignore_errors=True)

    async def reembed(self, bank_name: str) -> int:
        pool = self.pool
        if not pool.known(bank_name):
            raise UnknownBankError(f"unknown bank {bank_name!r}")
        if bank_name in pool.banks:
            await pool.close_bank(pool.banks[bank_name])
        manifest = pool.dir.manifest(name=bank_name)
        choice = pool.embedder_override or resolve_embedder(pool.settings, pool.credentials)
        choice.dim = len(await build_embedder(choice).create("dimension probe"))
        manifest.embedder, manifest.embedding_dim = choice.id, choice.dim
        manifest.write(pool.dir.manifest_path(bank_name))
        bank = await pool.bank(bank_name, create=False)
        count = 0
        async with bank.write_lock:
            ents = await pool.query(bank, "entities_all", gid=bank.slug)
            facts = await pool.query(bank, "facts_all", gid=bank.slug)
            for rows, text_key, query in ((ents, "name", "set_entity_embedding"),
                                          (facts, "fact", "set_fact_embedding")):
                for i in range(0, len(rows), REQUEST_TEXTS):     # written as they come
                    chunk = rows[i:i + REQUEST_TEXTS]
                    vecs = await bank.embedder.create_batch([r[text_key] or "" for r in chunk])
                    for r, v in zip(chunk, vecs):
                        await pool.query(bank, query, uuid=r["uuid"], embedding=v)
                        count += 1
        return count

    # ── reading ────────────────────────────────────────────────────────────────────────
    async def stats(self, bank_name: str) -> BankStats:
        bank = await self.pool.existing(bank_name)
        g = bank.slug

        async def n(name: str) -> int:
            rows = await self.pool.query(bank, name, gid=g)
            return int(rows[0]["n"]) if rows else 0

        u = bank.usage.data
        return BankStats(name=bank.name, backend=self.pool.settings.backend, episodes=await n("count_episodes"),
                         entities=await n("count_entities"), facts=await n("count_facts"),
                         current_facts=await n("count_current_facts"), llm_calls=u["llm_calls"],
                         llm_input_tokens=u["llm_input_tokens"], llm_output_tokens=u["llm_output_tokens"],
                         llm_calls_today=bank.usage.today(), skipped_by_gate=u["skipped_by_gate"],
                         pruned=u["pruned"], embedder=bank.manifest.embedder,
                         embedder_note=bank.manifest.embedder_note,
                         embedding_dim=bank.manifest.embedding_dim, engine=self.pool.extraction,
                         llm_fallbacks=u.get("llm_fallbacks", 0))

    async def banks_info(self) -> list[BankInfo]:
        out = []
        for m in self.pool.dir.all():
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
        query = self.pool.query
        bank = await self.pool.bank(bank_name, create=False)
        if what == "episodes":
            rows = await query(bank, "episodes_page", gid=bank.slug, skip=offset, limit=limit)
            out = []
            for r in rows:
                m = EpisodeMeta.parse(r["name"], r["uuid"])
                out.append({"id": r["uuid"], "source": m.id, "text": r["content"], "tags": m.tags,
                            "vibe": m.vibe, "explicit": m.explicit, "fallback": m.fallback,
                            "valid_at": iso(r["valid_at"]), "stored_at": iso(r["created_at"]),
                            "facts": len(r["entity_edges"] or []), "complete": m.state == COMPLETE})
            return out
        if what == "facts":
            rows = await query(bank, "facts_all", gid=bank.slug)
            rows.sort(key=lambda r: (ts(r["valid_at"]) or ts(r["created_at"])), reverse=True)
            return [_fact_record(r) for r in rows[offset:offset + limit]]
        if what == "entities":
            rows = await query(bank, "entities_all", gid=bank.slug)
            rows.sort(key=lambda r: r["name"].lower())
            page = rows[offset:offset + limit]
            facts = await query(bank, "facts_touching", uuids=[r["uuid"] for r in page]) if page else []
            return [{"id": r["uuid"], "name": r["name"], "labels": list(r["labels"] or []),
                     "summary": r["summary"] or "",
                     "relations": [_fact_record(f) for f in facts
                                   if r["uuid"] in (f["source"], f["target"])]} for r in page]
        raise EngineError(f"cannot browse {what!r}: choose episodes, facts or entities")

    # ── export and import ──────────────────────────────────────────────────────────────
    async def export(self, bank_name: str) -> list[dict]:
        bank = await self.pool.existing(bank_name)
        g = bank.slug
        out: list[dict] = [{"type": "bank", "name": bank.name, "embedder": bank.manifest.embedder,
                            "embedding_dim": bank.manifest.embedding_dim, "format": 1}]
        for r in await self.pool.query(bank, "episodes_all", gid=g):
            out.append({"type": "episode", "uuid": r["uuid"], "name": r["name"], "content": r["content"],
                        "source_description": r["source_description"], "valid_at": iso(r["valid_at"]),
                        "created_at": iso(r["created_at"]), "entity_edges": list(r["entity_edges"] or [])})
        try:
            nodes = await EntityNode.get_by_group_ids(bank.driver, [g], with_embeddings=True)
        except GroupsNodesNotFoundError:
            nodes = []
        for n in nodes:
            out.append({"type": "entity", "uuid": n.uuid, "name": n.name, "labels": n.labels,
                        "summary": n.summary, "attributes": n.attributes,
                        "created_at": iso(n.created_at), "name_embedding": n.name_embedding})
        try:
            edges = await EntityEdge.get_by_group_ids(bank.driver, [g], with_embeddings=True)
        except GroupsEdgesNotFoundError:
            edges = []
        for e in edges:
            out.append({"type": "fact", "uuid": e.uuid, "source": e.source_node_uuid,
                        "target": e.target_node_uuid, "name": e.name, "fact": e.fact,
                        "episodes": e.episodes, "valid_at": iso(e.valid_at),
                        "invalid_at": iso(e.invalid_at), "expired_at": iso(e.expired_at),
                        "created_at": iso(e.created_at), "attributes": e.attributes,
                        "fact_embedding": e.fact_embedding})
        for r in await self.pool.query(bank, "mentions_all", gid=g):
            out.append({"type": "mention", "episode": r["episode"], "entity": r["entity"]})
        return out

    async def import_(self, bank_name: str, records: list[dict]) -> dict:
        bank = await self.pool.bank(bank_name)
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
                                            created_at=ts(rec.get("created_at")) or utc_now(),
                                            valid_at=ts(rec.get("valid_at")) or utc_now(),
                                            entity_edges=list(rec.get("entity_edges") or [])))
                elif kind == "entity":
                    vec = rec.get("name_embedding")
                    if vec is not None and len(vec) != dim:
                        raise ValueError(f"an entity vector of {len(vec)} dimensions (bank: {dim})")
                    ents.append(EntityNode(uuid=rec["uuid"], name=rec["name"], group_id=bank.slug,
                                           labels=list(rec.get("labels") or ["Entity"]),
                                           summary=rec.get("summary") or "",
                                           attributes=dict(rec.get("attributes") or {}),
                                           created_at=ts(rec.get("created_at")) or utc_now(),
                                           name_embedding=vec))
                elif kind == "fact":
                    vec = rec.get("fact_embedding")
                    if vec is not None and len(vec) != dim:
                        raise ValueError(f"a fact vector of {len(vec)} dimensions (bank: {dim})")
                    facts.append(EntityEdge(uuid=rec["uuid"], group_id=bank.slug,
                                            source_node_uuid=rec["source"], target_node_uuid=rec["target"],
                                            name=rec["name"], fact=rec["fact"],
                                            episodes=list(rec.get("episodes") or []),
                                            valid_at=ts(rec.get("valid_at")),
                                            invalid_at=ts(rec.get("invalid_at")),
                                            expired_at=ts(rec.get("expired_at")),
                                            created_at=ts(rec.get("created_at")) or utc_now(),
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
            await self.pool.checkpoint(bank)
            bank.entities = None
            bank.turns = None
        return {"episodes": len(eps), "entities": len(ents), "facts": len(facts),
                "mentions": len(mentions), "problems": problems}

    # ── the worker's health ────────────────────────────────────────────────────────────
    async def health(self) -> dict:
        pool = self.pool
        return {"ok": True, "pid": os.getpid(), "backend": pool.settings.backend,
                "extraction": pool.extraction, "mode": pool.settings.memory_mode,
                "banks_open": sorted(pool.banks), "embedder": self.embedder_status()}

    def embedder_status(self) -> dict:
        pool = self.pool
        try:
            choice = pool.embedder_override or resolve_embedder(pool.settings, pool.credentials)
            new = {"id": choice.id, "why": choice.why, "provider": choice.provider}
        except Exception as exc:    # informative only: never fail a health check (or the start) for it
            new = {"id": "", "why": redact.redact(str(exc))[:300], "provider": ""}
        return {"new_banks": new, "banks": {b.name: {"id": b.manifest.embedder, "why": b.manifest.embedder_note}
                                            for b in pool.banks.values()}}
