"""Removing episodes with what only they hold, all or nothing: what a forget, a prune, an
expiry, a replaced turn and the recovery of an interrupted write all do."""
from __future__ import annotations

from graphiti_core.edges import EntityEdge
from graphiti_core.nodes import EntityNode, EpisodicNode

from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.episodes import rule_summary, ts


class RemovalOps:
    def __init__(self, pool: BankPool):
        self.pool = pool

    async def remove_episodes(self, bank: Bank, ep_uuids: list[str]) -> int:
        """Remove episodes and what only they hold, all or nothing (see cascade)."""
        if not ep_uuids:
            return 0
        async with self.pool.all_or_nothing(bank):
            return await self.cascade(bank, ep_uuids)

    async def cascade(self, bank: Bank, ep_uuids: list[str]) -> int:
        """graphiti's remove_episode cascade (facts only they support, entities only they
        mention), then summaries of surviving entities rebuilt from their remaining facts by
        rules, so no summary keeps forgotten text and forgetting costs no LLM call."""
        query = self.pool.query
        eps = await self.pool.episodes(bank, ep_uuids)
        if not eps:
            return 0
        gone = set(eps)
        edge_uuids = list({u for r in eps.values() for u in (r["entity_edges"] or [])})
        facts = await query(bank, "facts_by_uuid", uuids=edge_uuids) if edge_uuids else []
        # Facts that list a removed episode without it being in entity_edges (local dedupe).
        mention_rows = await query(bank, "mentions_of_episodes", uuids=list(gone))
        entity_uuids = list({r["entity"] for r in mention_rows})
        facts += await query(bank, "facts_touching", uuids=entity_uuids) if entity_uuids else []
        delete_edges, touched = set(), set(entity_uuids)
        for f in {f["uuid"]: f for f in facts}.values():
            remaining = [u for u in (f["episodes"] or []) if u not in gone]
            if len(remaining) == len(f["episodes"] or []):
                continue
            touched |= {f["source"], f["target"]}
            if remaining:
                await query(bank, "set_fact_episodes", uuid=f["uuid"], episodes=remaining)
            else:
                delete_edges.add(f["uuid"])
        if delete_edges:
            await EntityEdge.delete_by_uuids(bank.driver, list(delete_edges))
            await self.restore_superseded(bank, [f for f in facts if f["uuid"] in delete_edges])
        counts = {r["uuid"]: r["n"] for r in await query(bank, "mention_counts", uuids=list(touched))}
        mentioned_only_here: dict[str, int] = {}
        for r in mention_rows:
            mentioned_only_here[r["entity"]] = mentioned_only_here.get(r["entity"], 0) + 1
        orphans = [u for u in touched if counts.get(u, 0) <= mentioned_only_here.get(u, 0)]
        # An entity still holding a surviving fact stays even without mentions.
        if orphans:
            still = await query(bank, "facts_touching", uuids=orphans)
            holding = {u for f in still if f["uuid"] not in delete_edges for u in (f["source"], f["target"])}
            orphans = [u for u in orphans if u not in holding]
            await EntityNode.delete_by_uuids(bank.driver, orphans)
        for ep in await EpisodicNode.get_by_uuids(bank.driver, list(gone)):
            await ep.delete(bank.driver)
        survivors = [u for u in touched if u not in set(orphans)]
        if survivors:
            remaining = await query(bank, "facts_touching", uuids=survivors)
            for u in survivors:
                mine = [f for f in remaining if u in (f["source"], f["target"]) and f["expired_at"] is None]
                await query(bank, "set_summary", uuid=u, summary=rule_summary(mine))
        bank.entities = None
        if bank.turns is not None:
            bank.turns.remove(ep_uuids)
        elif bank.turns_pending is not None:
            bank.turns_pending.append(("remove", (list(ep_uuids),)))
        return len(gone)

    async def restore_superseded(self, bank: Bank, deleted: list[dict]) -> None:
        """"I moved to Paris", forgotten: "I live in Berlin" is current again. A deleted current
        fact gives its place back to the fact it ended, unless another current one holds it."""
        query = self.pool.query
        for f in {f["uuid"]: f for f in deleted}.values():
            ended_at = ts(f["valid_at"])
            if f["expired_at"] is not None or ended_at is None:
                continue
            if await query(bank, "current_facts_from", source=f["source"], relation=f["name"]):
                continue
            ended = [r for r in await query(bank, "ended_facts_from", sources=[f["source"]])
                     if r["name"] == f["name"] and ts(r["invalid_at"]) == ended_at]
            if ended:
                latest = max(ended, key=lambda r: ts(r["valid_at"]) or ended_at)
                await query(bank, "restore_fact", uuid=latest["uuid"])
