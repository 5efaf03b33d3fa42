"""The local graph writer: what local extraction found in a turn, written as the same nodes
and edges graphiti writes, so search, forget, the browser and a later switch to llm all just
work."""
from __future__ import annotations

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.edges import EntityEdge, EpisodicEdge
from graphiti_core.nodes import EntityNode, EpisodicNode
from graphiti_core.utils.bulk_utils import add_nodes_and_edges_bulk

from memoryplus.engine import extract as local_extract
from memoryplus.engine.bank_pool import Bank, BankPool
from memoryplus.engine.embedders import embed_all
from memoryplus.engine.episodes import FACT_TAGS, EpisodeMeta, append_summary, rule_summary, ts
from memoryplus.wire.records import utc_now


class LocalGraphWriter:
    def __init__(self, pool: BankPool):
        self.pool = pool

    async def write(self, bank: Bank, episode: EpisodicNode, meta: EpisodeMeta) -> list[str]:
        """Rules and lexicons instead of an LLM: the turn's entities, facts (a functional fact
        ends the one it replaces) and mentions; returns the uuids of the episode's facts."""
        query = self.pool.query
        spec = self.pool.spec()
        found = local_extract.extract(episode.content, spec)
        index = await self.pool.entity_index(bank)
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
                       await query(bank, "current_facts_from", source=src, relation=fact.relation))
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
                    await query(bank, "set_fact_episodes", uuid=same["uuid"], episodes=eps)
                    kept_edges.append(same["uuid"])
                continue
            edge = EntityEdge(group_id=bank.slug, source_node_uuid=src, target_node_uuid=tgt,
                              created_at=now, name=fact.relation, fact=fact.fact,
                              episodes=[episode.uuid], valid_at=episode.valid_at, reference_time=episode.valid_at,
                              # the tags of the sentence it was said in, not of the whole turn
                              attributes={FACT_TAGS: list(fact.tags)})
            if fact.functional:
                for old in current:
                    old_valid = ts(old["valid_at"])
                    if old_valid and old_valid > episode.valid_at:
                        # An older turn arriving late (an import): it was already superseded.
                        edge.invalid_at, edge.expired_at = old_valid, now
                    else:
                        await query(bank, "expire_fact", uuid=old["uuid"],
                                    invalid_at=episode.valid_at, expired_at=now)
                        replaced |= {src, old["target"]}
            new_edges.append(edge)

        texts = [n.name for n in new_nodes.values()] + [e.fact for e in new_edges]
        vectors = await embed_all(bank.embedder, texts)     # a long turn can name many
        for node, vec in zip(new_nodes.values(), vectors):
            node.name_embedding = vec
        for edge, vec in zip(new_edges, vectors[len(new_nodes):]):
            edge.fact_embedding = vec
        for node in new_nodes.values():
            node.summary = rule_summary([e for e in new_edges
                                         if node.uuid in (e.source_node_uuid, e.target_node_uuid)])
        mentions = [EpisodicEdge(source_node_uuid=episode.uuid, target_node_uuid=u, group_id=bank.slug,
                                 created_at=now) for u in touched]
        if bank.provider == GraphProvider.KUZU:
            # graphiti saves Kuzu rows one query each, and so must we: entities made by one
            # multi-row UNWIND crash Kuzu 0.11.3 (a segfault) when a later query sets a
            # full-text-indexed column (the summary) of any but the first of them. Mentions
            # are in no full-text index, so they go in one query.
            await add_nodes_and_edges_bulk(bank.driver, [], [], list(new_nodes.values()), new_edges,
                                           bank.embedder)
            if mentions:        # known by their two ends, without a uuid (queries.py)
                await query(bank, "save_mentions", source=episode.uuid, rows=[
                    {"target": m.target_node_uuid, "group_id": m.group_id, "created_at": m.created_at}
                    for m in mentions])
        else:
            await add_nodes_and_edges_bulk(bank.driver, [], mentions, list(new_nodes.values()), new_edges,
                                           bank.embedder)
        # Existing entities learn the new facts in their summaries (appended, bounded).
        learned = {u: [e.fact for e in new_edges if u in (e.source_node_uuid, e.target_node_uuid)]
                   for u in touched if u not in new_nodes}
        learned = {u: facts for u, facts in learned.items() if facts}
        if learned:
            rows = await query(bank, "entities_by_uuid", uuids=list(learned))
            await query(bank, "set_summaries", rows=[
                {"uuid": r["uuid"], "summary": append_summary(r["summary"] or "", learned[r["uuid"]])}
                for r in rows])
        # A summary must not keep telling what was replaced ("lives in Berlin" beside "lives
        # in Lisbon"): rebuilt from the current facts, oldest first, as a forget rebuilds it.
        replaced -= set(new_nodes)
        if replaced:
            facts = sorted((f for f in await query(bank, "facts_touching", uuids=list(replaced))
                            if f["expired_at"] is None), key=lambda f: ts(f["valid_at"]) or now)
            await query(bank, "set_summaries", rows=[
                {"uuid": u, "summary": rule_summary([f for f in facts if u in (f["source"], f["target"])])}
                for u in replaced])
        return [e.uuid for e in new_edges] + kept_edges
