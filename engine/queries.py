"""The few graph queries graphiti has no method for, for each backend.

Kuzu stores a fact as a node (`RelatesToNode_`) between two entities, because it has no
full-text search on relationship properties; Neo4j stores it as a `RELATES_TO` relationship.
Every query is parameterized: no user text or bank name is ever spliced into Cypher.
"""
from __future__ import annotations

from functools import lru_cache

from graphiti_core.driver.driver import GraphProvider
from graphiti_core.models.nodes.node_db_queries import get_episode_node_save_query

from memoryplus.engine.kuzu_statements import MENTION_UUID

K, N = GraphProvider.KUZU, GraphProvider.NEO4J

_FACT = {K: "(s:Entity)-[:RELATES_TO]->(r:RelatesToNode_)-[:RELATES_TO]->(t:Entity)",
         N: "(s:Entity)-[r:RELATES_TO]->(t:Entity)"}
_FACT_ALONE = {K: "(r:RelatesToNode_)", N: "()-[r:RELATES_TO]->()"}
_FACT_FIELDS = ("r.uuid AS uuid, r.name AS name, r.fact AS fact, r.episodes AS episodes, "
                "r.valid_at AS valid_at, r.invalid_at AS invalid_at, r.expired_at AS expired_at, "
                "r.created_at AS created_at, r.attributes AS attributes, "
                "s.uuid AS source, s.name AS source_name, t.uuid AS target, t.name AS target_name")
_EPISODE_FIELDS = ("e.uuid AS uuid, e.name AS name, e.content AS content, e.valid_at AS valid_at, "
                   "e.created_at AS created_at, e.entity_edges AS entity_edges, "
                   "e.source_description AS source_description")


def q(name: str, provider: GraphProvider) -> str:
    return _queries(K if provider == K else N)[name]


def _with_vectors(save: str) -> str:
    head, sep, tail = save.rpartition("RETURN")
    if not sep:
        raise RuntimeError("graphiti's episode save query has changed: it returns nothing")
    return f"{head}SET n.turn_vectors = $turn_vectors\n{sep}{tail}"


@lru_cache(maxsize=None)
def _queries(p: GraphProvider) -> dict[str, str]:
    fact = _FACT[p]
    queries = {
        "episodes_by_uuid": f"MATCH (e:Episodic) WHERE e.uuid IN $uuids RETURN {_EPISODE_FIELDS}",
        "episode_by_uuid": f"MATCH (e:Episodic {{uuid: $uuid}}) RETURN {_EPISODE_FIELDS}",  # by key
        # what a search result needs of its turns (their metadata lives in the name)
        "episode_names": "MATCH (e:Episodic) WHERE e.uuid IN $uuids RETURN e.uuid AS uuid, e.name AS name",
        "episodes_page": (f"MATCH (e:Episodic) WHERE e.group_id = $gid RETURN {_EPISODE_FIELDS} "
                          "ORDER BY e.created_at DESC, e.uuid SKIP $skip LIMIT $limit"),
        "episodes_before": (f"MATCH (e:Episodic) WHERE e.group_id = $gid AND e.created_at < $before "
                            f"RETURN {_EPISODE_FIELDS}"),
        "episodes_all": f"MATCH (e:Episodic) WHERE e.group_id = $gid RETURN {_EPISODE_FIELDS}",
        # what the turn index is built from (turn_index.pack_vectors: the vectors kept)
        "turns_for_index": ("MATCH (e:Episodic) WHERE e.group_id = $gid RETURN e.uuid AS uuid, "
                            "e.name AS name, e.content AS content, e.valid_at AS valid_at, "
                            "e.entity_edges AS entity_edges, e.turn_vectors AS turn_vectors"),
        # a turn's row as graphiti's EpisodicNode.save writes it, and its vectors
        "save_turn": _with_vectors(get_episode_node_save_query(p)),
        "set_turn_vectors": ("UNWIND $rows AS r MATCH (e:Episodic) WHERE e.uuid = r.uuid "
                             "SET e.turn_vectors = r.vectors"),
        # the entities first: Kuzu then follows their mentions instead of filtering all of them
        "episode_uuids_mentioning": (
            "MATCH (n:Entity) WHERE n.uuid IN $uuids MATCH (e:Episodic)-[:MENTIONS]->(n) "
            "RETURN n.uuid AS entity, e.uuid AS episode, e.valid_at AS valid_at"),
        "mention_counts": ("MATCH (e:Episodic)-[:MENTIONS]->(n:Entity) WHERE n.uuid IN $uuids "
                           "RETURN n.uuid AS uuid, count(e) AS n"),
        "mentions_of_episodes": ("MATCH (e:Episodic)-[:MENTIONS]->(n:Entity) WHERE e.uuid IN $uuids "
                                 "RETURN e.uuid AS episode, n.uuid AS entity"),
        "mentions_all": ("MATCH (e:Episodic)-[:MENTIONS]->(n:Entity) WHERE e.group_id = $gid "
                         "RETURN e.uuid AS episode, n.uuid AS entity"),
        "entities_all": ("MATCH (n:Entity) WHERE n.group_id = $gid RETURN n.uuid AS uuid, "
                         "n.name AS name, n.labels AS labels, n.summary AS summary, "
                         "n.created_at AS created_at, n.attributes AS attributes"),
        "entities_by_uuid": ("MATCH (n:Entity) WHERE n.uuid IN $uuids RETURN n.uuid AS uuid, "
                             "n.name AS name, n.labels AS labels, n.summary AS summary, "
                             "n.created_at AS created_at, n.attributes AS attributes"),
        "facts_all": f"MATCH {fact} WHERE r.group_id = $gid RETURN {_FACT_FIELDS}",
        "facts_by_uuid": f"MATCH {fact} WHERE r.uuid IN $uuids RETURN {_FACT_FIELDS}",
        # when each fact stopped being true: the fact alone, no join to its entities (a
        # search asks it of every turn it found; the join cost Kuzu ~2 ms, this ~0.4 ms)
        "fact_ends": (f"MATCH {_FACT_ALONE[p]} WHERE r.uuid IN $uuids "
                      "RETURN r.uuid AS uuid, r.invalid_at AS invalid_at"),
        "facts_touching": (f"MATCH {fact} WHERE s.uuid IN $uuids OR t.uuid IN $uuids "
                           f"RETURN {_FACT_FIELDS}"),
        "current_facts_from": (f"MATCH {fact} WHERE s.uuid = $source AND r.name = $relation "
                               f"AND r.expired_at IS NULL RETURN {_FACT_FIELDS}"),
        "current_facts_named": (f"MATCH {fact} WHERE s.uuid = $source AND r.name IN $relations "
                                f"AND r.expired_at IS NULL RETURN {_FACT_FIELDS}"),
        "ended_facts_from": (f"MATCH {fact} WHERE s.uuid IN $sources AND r.invalid_at IS NOT NULL "
                             f"RETURN {_FACT_FIELDS}"),
        # named too: a hub such as User has hundreds of ended facts (454 at 20,000 turns),
        # and Kuzu returned every one of them (10.5 ms; 4.4 ms with the names)
        "ended_facts_named": (f"MATCH {fact} WHERE s.uuid IN $sources AND r.name IN $names "
                              f"AND r.invalid_at IS NOT NULL RETURN {_FACT_FIELDS}"),
        "restore_fact": (f"MATCH {fact} WHERE r.uuid = $uuid "
                         "SET r.invalid_at = NULL, r.expired_at = NULL"),
        "set_summary": "MATCH (n:Entity) WHERE n.uuid = $uuid SET n.summary = $summary",
        # one query per batch, not per row: each Kuzu query costs a few ms of fixed overhead
        "set_summaries": ("UNWIND $rows AS r MATCH (n:Entity) WHERE n.uuid = r.uuid "
                          "SET n.summary = r.summary"),
        # CREATE, not graphiti's MERGE: the turn's row is new (a turn stored again is removed
        # first), so MERGE only searched the entity's mentions (a hub such as User has
        # thousands): ~1 ms of a turn's 12-16 ms. One uuid for all, as graphiti's mentions
        # are written (kuzu_statements.MENTION_UUID: why)
        "save_mentions": ("MATCH (e:Episodic {uuid: $source}) UNWIND $rows AS r "
                          f"MATCH (n:Entity {{uuid: r.target}}) CREATE (e)-[m:MENTIONS {{uuid: '{MENTION_UUID}', "
                          "group_id: r.group_id, created_at: r.created_at}]->(n)"),
        "set_fact_episodes": (f"MATCH {fact} WHERE r.uuid = $uuid SET r.episodes = $episodes"),
        "expire_fact": (f"MATCH {fact} WHERE r.uuid = $uuid "
                        "SET r.invalid_at = $invalid_at, r.expired_at = $expired_at"),
        "set_episode_meta": ("MATCH (e:Episodic) WHERE e.uuid = $uuid SET e.name = $name, "
                             "e.entity_edges = $entity_edges, e.source_description = $description"),
        # graphiti's own save of a turn on Neo4j (`SET n = {...}`) drops every property it does
        # not name: the turn's vectors are set again with its metadata there
        "set_episode_meta_and_vectors": ("MATCH (e:Episodic) WHERE e.uuid = $uuid SET e.name = $name, "
                                         "e.entity_edges = $entity_edges, "
                                         "e.source_description = $description, "
                                         "e.turn_vectors = $turn_vectors"),
        "count_episodes": "MATCH (e:Episodic) WHERE e.group_id = $gid RETURN count(e) AS n",
        "count_entities": "MATCH (n:Entity) WHERE n.group_id = $gid RETURN count(n) AS n",
        "count_facts": f"MATCH {fact} WHERE r.group_id = $gid RETURN count(r) AS n",
        "count_current_facts": (f"MATCH {fact} WHERE r.group_id = $gid AND r.expired_at IS NULL "
                                "RETURN count(r) AS n"),
        "pending_episodes": (f"MATCH (e:Episodic) WHERE e.group_id = $gid AND "
                             f"e.name STARTS WITH $prefix RETURN {_EPISODE_FIELDS}"),
    }
    if p == K:
        # Kuzu's schema is fixed: ratings live in the JSON `attributes` column.
        queries["set_entity_rating"] = ("MATCH (n:Entity) WHERE n.uuid = $uuid "
                                        "SET n.attributes = $attributes")
        queries["set_fact_rating"] = f"MATCH {fact} WHERE r.uuid = $uuid SET r.attributes = $attributes"
        queries["set_entity_embedding"] = ("MATCH (n:Entity) WHERE n.uuid = $uuid "
                                           "SET n.name_embedding = $embedding")
        queries["set_fact_embedding"] = ("MATCH (r:RelatesToNode_) WHERE r.uuid = $uuid "
                                         "SET r.fact_embedding = $embedding")
    else:
        # Neo4j cannot store a map property: the rating is a property of its own.
        queries["set_entity_rating"] = "MATCH (n:Entity) WHERE n.uuid = $uuid SET n.mp_rating = $rating"
        queries["set_fact_rating"] = f"MATCH {fact} WHERE r.uuid = $uuid SET r.mp_rating = $rating"
        queries["set_entity_embedding"] = ("MATCH (n:Entity) WHERE n.uuid = $uuid "
                                           "CALL db.create.setNodeVectorProperty(n, 'name_embedding', $embedding)")
        queries["set_fact_embedding"] = ("MATCH ()-[r:RELATES_TO]->() WHERE r.uuid = $uuid "
                                         "CALL db.create.setRelationshipVectorProperty(r, 'fact_embedding', $embedding)")
    return queries
