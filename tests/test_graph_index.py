"""The fact and entity vectors in memory (engine/graph_index.py) on real Kuzu banks: the
search they answer is graphiti's scan, before and after every kind of write; idle banks
close and reopen with nothing lost."""
from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memoryplus.cli.bench import load_data
from memoryplus.engine import graph_index
from memoryplus.engine.search_ops import clean_query, search_config, search_filter
from memoryplus.engine.word_index import WordIndex
from memoryplus.wire.records import Turn

T0 = datetime(2025, 1, 1, 12, tzinfo=timezone.utc)
BANK = "default"


def turns(n: int, start: int = 0) -> list[Turn]:
    data, _ = load_data(start + n)
    return [Turn(id=t, user=u, assistant=a, time=T0 + timedelta(minutes=10 * i))
            for i, (t, u, a) in enumerate(data[start:start + n], start)]


QUERIES = ["Where does my sister live?", "What is my job?", "Who is my dentist?",
           "What did I say about the trip?", "Which languages do I speak?", "my boss",
           "What pet do I have?", "Where do I live now?"]


async def assert_same_as_scan(bank, flt=None):
    """Our candidates are graphiti's own scan, result for result (every field of a fact,
    its entities too), score for score (its searches by words are the word index's either
    way: test_the_word_index_scores_as_kuzus_full_text_index compares that with Kuzu's)."""
    cfg, flt = search_config(10), flt or search_filter(None)
    compared = 0
    for q in QUERIES:
        q = clean_query(q)
        theirs = await bank.graphiti.search_(q, config=cfg, group_ids=[bank.slug], search_filter=flt)
        ours = await graph_index.candidates(bank, q, cfg, flt)
        assert [e.model_dump() for e in ours.edges] == [e.model_dump() for e in theirs.edges], q
        assert [n.model_dump() for n in ours.nodes] == [n.model_dump() for n in theirs.nodes], q
        assert [e.uuid for e in ours.episodes] == [e.uuid for e in theirs.episodes], q
        assert ours.edge_reranker_scores == pytest.approx(theirs.edge_reranker_scores), q
        compared += len(theirs.edges) + len(theirs.nodes)
    assert compared > 20, "the queries must find something, or the comparison proves nothing"


async def assert_index_is_the_database(bank, kept_most: bool = True):
    """Every fact and entity vector of the bank is in the index, and nothing else; each
    fact's two entities, and each fact row kept, are the database's."""
    sets = await bank.graph_index.ready()
    for kind, query in graph_index._LOAD.items():
        rows, _, _ = await bank.driver.execute_query(query, gid=bank.slug)
        db = {r["uuid"]: r["v"] for r in rows if r["v"] is not None}
        vs = sets[kind]
        assert set(vs.rows) == set(db), kind
        for u, v in db.items():
            assert np.allclose(vs.vector(u), v, atol=1e-6), (kind, u)
    facts, _, _ = await bank.driver.execute_query(graph_index._UUIDS["facts"], gid=bank.slug)
    rows, _, _ = await bank.driver.execute_query(graph_index._ROWS, gid=bank.slug)
    there, linked = {r["uuid"] for r in facts}, {r["uuid"]: r for r in rows}
    kept = {u: dict(zip(graph_index._RETURNED, r)) for u, r in bank.graph_index.rows.items()}
    assert set(kept) <= there & set(linked), "no row kept for a fact graphiti's MATCH no longer returns"
    assert [r for u, r in kept.items() if linked.get(u) != r] == [], "kept as graphiti's MATCH reads it"
    assert len(kept) > len(linked) / 2 or not kept_most, "most rows are kept, or this proves little"
    rows = bank.graph_index.rows
    assert not rows.whole or set(kept) == set(linked), "whole: every fact graphiti's MATCH returns is kept"
    ended: dict = {}
    for u, r in kept.items():
        if r["invalid_at"] is not None:
            ended.setdefault((r["source_node_uuid"], r["name"]), set()).add(u)
    assert rows.ended == ended, "the ended facts listed are the kept rows' ended facts"
    entities, _, _ = await bank.driver.execute_query(graph_index._NODE_ROWS, gid=bank.slug)
    db = {r["uuid"]: r for r in entities}
    kept = {u: graph_index._entity_record(r) for u, r in bank.graph_index.entity_rows.items()}
    assert [u for u, r in kept.items() if db.get(u) != r] == [], "entity rows kept as the database has them"
    for kind in ("facts", "entities"):
        assert postings(bank.graph_index.words[kind]) == postings(await fresh_words(bank, kind)), \
            f"the word index holds every one of the {kind}' words as a new one built from the database"


async def fresh_words(bank, kind: str) -> WordIndex:
    """A word index built from the bank's facts or entities now (its stems asked of Kuzu)."""
    index = bank.graph_index
    words = WordIndex(index.words["facts"].stopwords)
    for r in (await bank.driver.execute_query(graph_index._TEXTS[kind].format("")))[0]:
        words.put(r["uuid"], [r["name"], r["text"]])
    await index._stem(words)
    return words


def postings(words: WordIndex) -> dict[str, set]:
    """Per stem, the facts holding it and how often (what BM25 reads), and each fact's length."""
    out = {st: {(words.uuids[s], n) for s, n in zip(words.slots[t], words.tfs[t])}
           for st, t in words.term.items() if words.slots[t]}
    out[""] = {(u, words.lens[s]) for u, s in words.slot.items() if u in words}
    return out


async def test_the_index_returns_what_graphitis_scan_returns(engine):
    await engine.ingest(BANK, turns(120))
    bank = engine.banks[BANK]
    await assert_same_as_scan(bank)
    assert len(bank.graph_index.sets["facts"]) > 50 and len(bank.graph_index.sets["entities"]) > 20
    # the past too (no filter on expiry), and a point in time
    from graphiti_core.search.search_filters import SearchFilters
    await assert_same_as_scan(bank, SearchFilters())
    await assert_same_as_scan(bank, search_filter(T0 + timedelta(hours=5)))


async def test_the_index_stays_in_step_with_every_write(engine):
    await engine.ingest(BANK, turns(60))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")           # the index is built
    assert bank.graph_index.sets is not None
    # ingest, and a later turn that supersedes a fact
    await engine.ingest(BANK, turns(40, 60) + [
        Turn(id="move", user="I moved, I live in Lisbon now", assistant="Noted.", time=T0 + timedelta(days=30))])
    await assert_index_is_the_database(bank)
    await assert_same_as_scan(bank)
    # an explicit memory, a rating, forgetting a turn and memories by text
    await engine.remember(BANK, "My dentist is Dr. Okafor in Leeds")
    facts = [r for r in await engine.search(BANK, "my dentist") if r.kind == "fact"]
    await engine.rate(BANK, facts[0].id, 1)
    await engine.forget(BANK, last=True)
    await engine.forget(BANK, ids=["move"])
    await assert_index_is_the_database(bank)
    await assert_same_as_scan(bank)
    # re-embedding writes through our own query: a changed vector is the index's at once
    rows, _, _ = await bank.driver.execute_query(graph_index._LOAD["facts"], gid=bank.slug)
    u, v = rows[0]["uuid"], np.asarray(rows[0]["v"], np.float32)
    await engine.pool.query(bank, "set_fact_embedding", uuid=u, embedding=list(map(float, v[::-1])))
    assert np.allclose(bank.graph_index.sets["facts"].vector(u), v[::-1])
    await assert_index_is_the_database(bank)
    # pruning and expiry delete by their own queries
    await engine.prune(BANK, 6)
    await engine.expire(BANK, 1)      # stored just now: nothing is older than a day
    await assert_index_is_the_database(bank)
    await assert_same_as_scan(bank)
    # an entity deleted alone: its facts stay, linked to one entity (graphiti's join skips them)
    bank.graph_index.sets = None        # built again: every fact's row kept
    await bank.graph_index.ready()
    linked, _, _ = await bank.driver.execute_query(graph_index._ROWS, gid=bank.slug)
    sources = [r["source_node_uuid"] for r in linked]
    rare = min(sources, key=sources.count)
    await bank.driver.execute_query("MATCH (n:Entity {uuid: $uuid}) DETACH DELETE n", uuid=rare)
    await assert_index_is_the_database(bank)
    await assert_same_as_scan(bank)
    # a write of facts that names none of them
    await bank.driver.execute_query("MATCH (e:RelatesToNode_) WHERE e.group_id = $gid SET e.reference_time = $t",
                                    gid=bank.slug, t=T0)
    assert bank.graph_index.rows == {}, "which facts changed is not known: none is kept"
    await assert_same_as_scan(bank)
    await assert_index_is_the_database(bank, kept_most=False)     # those read again since
    # an export imported into a new bank: that bank's index holds all of it
    records = await engine.export(BANK)
    await engine.clear(BANK)
    assert BANK not in engine.banks
    await engine.import_("copy", [{**r} for r in records])
    await engine.search("copy", "Where do I live?")
    await assert_index_is_the_database(engine.banks["copy"])


async def test_a_rolled_back_write_is_not_kept(engine):
    await engine.ingest(BANK, turns(30))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    before = {k: set(v.rows) for k, v in bank.graph_index.sets.items()}
    with pytest.raises(RuntimeError, match="abandon"):
        async with engine.pool.all_or_nothing(bank):
            rows, _, _ = await bank.driver.execute_query(graph_index._LOAD["facts"], gid=bank.slug)
            await bank.driver.execute_query("MATCH (e:RelatesToNode_) WHERE e.uuid = $uuid "
                                            "SET e.fact_embedding = $fact_embedding",
                                            uuid=rows[0]["uuid"], fact_embedding=[0.5] * len(rows[0]["v"]))
            raise RuntimeError("abandon")
    await assert_index_is_the_database(bank)
    assert {k: set(v.rows) for k, v in bank.graph_index.sets.items()} == before


async def test_the_two_fact_searches_read_their_facts_in_one_query(engine):
    """graphiti's full-text and cosine searches of facts both end in a read of facts by uuid
    (Kuzu scans every fact for it): one search reads them once, with the same results as
    when each reads its own."""
    await engine.ingest(BANK, turns(120))
    bank = engine.banks[BANK]
    reads: list[dict] = []
    joined: list[dict] = []     # graphiti's join of each fact with its entities
    columns: list[dict] = []    # the facts' columns read, not kept
    queried: list[dict] = []    # Kuzu's filter of the facts
    bank.driver.observers.append(lambda query, params: (
        queried.append(params), "(m:Entity)" in str(query) and joined.append(params),
        "e.fact AS fact" in str(query) and columns.append(params))
        if "RelatesToNode_) WHERE e.uuid IN $uuids" in str(query) else None)
    index, read = bank.graph_index, bank.graph_index.fact_rows

    async def counted(where, uuids, **params):
        reads.append(uuids)
        return await read(where, uuids, **params)
    index.fact_rows = counted
    cfg, flt = search_config(10), search_filter(None)
    apart = together = 0
    for q in QUERIES + [q for q, _ in load_data(120)[1][:20]]:
        q = clean_query(q)
        reads.clear()       # graphiti's search_ on the index's driver, each search reading alone
        alone = await bank.graphiti.search_(q, config=cfg, group_ids=[bank.slug], search_filter=flt,
                                            driver=index.search_driver)
        apart += len(reads)
        reads.clear()
        res = await graph_index.candidates(bank, q, cfg, flt)
        assert len(reads) <= 1, q
        together += len(reads)
        assert [e.uuid for e in res.edges] == [e.uuid for e in alone.edges], q
        assert res.edge_reranker_scores == pytest.approx(alone.edge_reranker_scores), q
        assert [(e.source_node_uuid, e.target_node_uuid) for e in res.edges] == \
            [(e.source_node_uuid, e.target_node_uuid) for e in alone.edges], q
    assert apart > together, "some search must find facts both ways, or this proves nothing"
    assert joined == [], "the facts are read alone, their entities known"
    assert columns == [], "the facts' rows are kept: Kuzu only picks the uuids that pass"
    assert queried == [], "the kept rows are tested here: Kuzu does not scan the facts for them"


async def test_the_filter_tested_on_kept_rows_is_kuzus(engine):
    """graphiti's filters of facts tested on the kept rows pass exactly the facts Kuzu's
    WHERE passes: current facts, points in time, every comparison, several groups of them,
    dates with other offsets and none (Kuzu binds an aware date by its wall time)."""
    import random
    from graphiti_core.search.search_filters import ComparisonOperator as Op, DateFilter, SearchFilters
    await engine.ingest(BANK, turns(60) + [
        Turn(id="move", user="I moved, I live in Lisbon now", assistant="Noted.", time=T0 + timedelta(days=30))])
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    index = bank.graph_index
    uuids = list(index.rows)
    dates = sorted({d for r in index.rows.values() for d in (r[graph_index._RETURNED.index(k)] for k in graph_index._DATES)
                    if d is not None})
    assert len(uuids) > 30 and len(dates) > 20
    rnd, filters = random.Random(7), [SearchFilters(), search_filter(None), search_filter(None, datetime.now(timezone.utc))]
    for _ in range(60):
        t = rnd.choice(dates).replace(tzinfo=timezone.utc) + timedelta(seconds=rnd.choice([-1, 0, 1]))
        other = rnd.choice([t, t.replace(tzinfo=None), t.astimezone(timezone(timedelta(hours=-7)))])
        filters += [search_filter(t), search_filter(None, t), SearchFilters(**{rnd.choice(graph_index._DATES): [
            [DateFilter(date=None if op in (Op.is_null, Op.is_not_null) else other, comparison_operator=op)
             for op in rnd.sample(list(Op), rnd.randint(1, 2))] for _ in range(rnd.randint(1, 2))]})]
    passing = set()
    for flt in filters:
        where, params = graph_index._fact_filters(flt, ["another", bank.slug])
        assert where.test is not None, flt
        rows, _, _ = await bank.driver.execute_query(graph_index._ALONE + where + " RETURN e.uuid AS uuid",
                                                     uuids=uuids, **params)
        kuzu = {r["uuid"] for r in rows}
        assert {u for u in uuids if where.test(index.rows[u])} == kuzu, flt
        passing.add(len(kuzu))
    assert len(passing) > 20, "the filters must pass different facts, or this proves little"
    where, _ = graph_index._fact_filters(SearchFilters(edge_types=["LIVES_IN"]), [bank.slug])
    assert where.test is None, "a filter with more than dates is Kuzu's to evaluate"


async def test_entity_rows_are_kept_in_step_with_the_writes(engine):
    """The entities' rows kept for graphiti's entity search are the database's after each
    kind of write that changes an entity (graphiti's save, a summary, an expression, a
    deletion by uuid, a change picked by name); a search then returns the entities graphiti's scan returns, field for field,
    without Kuzu reading an entity it keeps."""
    await engine.ingest(BANK, turns(60))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    index = bank.graph_index
    entities, _, _ = await bank.driver.execute_query(graph_index._NODE_ROWS, gid=bank.slug)
    assert len(entities) > 20 and set(index.entity_rows) == {r["uuid"] for r in entities}
    read = []
    execute = bank.driver.execute_query

    async def counting(cypher, **params):
        if "MATCH (n:Entity) WHERE n.uuid IN $uuids" in str(cypher):
            read.append(params["uuids"])
        return await execute(cypher, **params)
    bank.driver.execute_query = counting
    try:
        await assert_same_as_scan(bank)
        assert read == [], "kept entities are not read from Kuzu"
        summary = graph_index._NODE_RETURNED.index("summary")
        found = next(iter(index.entity_rows))
        await engine.pool.query(bank, "set_summary", uuid=found, summary="A new summary")
        assert index.entity_rows[found][summary] == "A new summary", "a summary written: kept as written"
        await bank.driver.execute_query("MATCH (n:Entity) WHERE n.uuid = $uuid SET n.summary = n.summary + '!'",
                                        uuid=found)
        assert found not in index.entity_rows, "a value not known here: the row is read again"
        await assert_same_as_scan(bank)
        read.clear()
        query, params = graph_index._node_filters(search_filter(None), [bank.slug])
        rows = await index.node_rows(query, [found], **params)
        assert [r["summary"] for r in rows] == ["A new summary!"] and read == [[found]], "read from Kuzu"
        assert index.entity_rows[found][summary] == "A new summary!", "and kept again as read"
        await engine.ingest(BANK, turns(20, 60))          # graphiti's saves (MERGE … SET)
        await assert_index_is_the_database(bank)
        entities, _, _ = await bank.driver.execute_query(graph_index._NODE_ROWS, gid=bank.slug)
        assert set(index.entity_rows) == {r["uuid"] for r in entities}, \
            "the entities saved and summed up (UNWIND rows) are kept as written: none is read again"
        await assert_same_as_scan(bank)
        await bank.driver.execute_query("MATCH (n:Entity) WHERE n.name = $name SET n.summary = 'changed'",
                                        name=entities[0]["name"])
        assert index.entity_rows == {}, "an entity changed by its name: none is kept"
        await assert_same_as_scan(bank)
        await assert_index_is_the_database(bank, kept_most=False)
        gone = next(iter(index.entity_rows))
        await bank.driver.execute_query("MATCH (n:Entity) WHERE n.uuid IN $uuids DETACH DELETE n", uuids=[gone])
        assert gone not in index.entity_rows
        await assert_same_as_scan(bank)
    finally:
        bank.driver.execute_query = execute


async def test_fact_rows_are_kept_through_a_fact_told_again_and_its_end(engine):
    """A fact told again (its turns set), ended and its end taken back keeps its row as
    written, the database's after each write; chat turns that tell facts again and end
    them leave every fact kept before them kept: the search after them reads none of those
    from Kuzu (each read by uuid scans every fact)."""
    await engine.ingest(BANK, turns(60))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    index = bank.graph_index
    field = {k: i for i, k in enumerate(graph_index._RETURNED)}
    told = next(u for u, r in index.rows.items() if r[field["invalid_at"]] is None)
    episodes = [*index.rows[told][field["episodes"]], "a-later-turn"]
    await engine.pool.query(bank, "set_fact_episodes", uuid=told, episodes=episodes)
    assert index.rows[told][field["episodes"]] == episodes, "told again: kept as written"
    ended = datetime(2025, 3, 1, 9, tzinfo=timezone(timedelta(hours=2)))
    await engine.pool.query(bank, "expire_fact", uuid=told, invalid_at=ended, expired_at=ended)
    assert index.rows[told][field["invalid_at"]] == ended.replace(tzinfo=None), "as Kuzu returns it"
    await assert_index_is_the_database(bank)
    await engine.pool.query(bank, "restore_fact", uuid=told)
    assert told in index.rows and index.rows[told][field["invalid_at"]] is None
    await assert_index_is_the_database(bank)
    kept = set(index.rows)
    read, written = [], []
    execute = bank.driver.execute_query

    async def counting(cypher, **params):
        if "RelatesToNode_" in str(cypher) and "IN $uuids" in str(cypher):
            read.extend(params["uuids"])
        if params.get("uuid") in kept and "SET r." in str(cypher):
            written.append(params["uuid"])
        return await execute(cypher, **params)
    bank.driver.execute_query = counting
    try:        # the same things said again, on later days, and a move
        again = [t.model_copy(update={"id": f"again-{t.id}", "time": t.time + timedelta(days=20)})
                 for t in turns(30)]
        await engine.ingest(BANK, again + [
            Turn(id="move", user="I moved, I live in Lisbon now", assistant="Noted.", time=T0 + timedelta(days=30))])
        assert len(set(written)) > 5, "kept facts were told again, or ended"
        read.clear()
        for question in ("Where do I live?", "What do I like?", "Who is my dentist?"):
            await engine.search(BANK, question)
        assert kept & set(read) == set(), "no fact kept before the turns is read again"
        await assert_index_is_the_database(bank)
    finally:
        bank.driver.execute_query = execute


async def test_the_ended_facts_a_past_question_asks_for_are_kuzus(engine):
    """A question about the past asks for the ended facts of its current facts' entities
    and names: the kept rows answer it as Kuzu's query does, after turns that end facts,
    graphiti's saves of new facts (kept with their two entities), a fact ended and taken
    back by hand, and a turn forgotten; a write not followed leaves the question to Kuzu."""
    ask = "ended_facts_named"

    async def same_as_kuzu(bank):
        index = bank.graph_index
        facts, _, _ = await bank.driver.execute_query(graph_index._ROWS, gid=bank.slug)
        pairs = {(r["source_node_uuid"], r["name"]) for r in facts}
        sources = sorted({s for s, _ in pairs})
        asked = [([s], sorted({n for s2, n in pairs if s2 == s})) for s in sources] + [(sources, ["NOTHING"])]
        found = 0
        for srcs, names in asked:
            mine = await index.ended_named(srcs, names)
            assert mine is not None, "every row is kept: the index answers"
            kuzu = await engine.pool.query(bank, ask, sources=srcs, names=names)
            assert sorted((r["uuid"], r["source"], r["target"], r["name"], r["fact"], r["episodes"],
                           r["valid_at"], r["invalid_at"]) for r in mine) == \
                sorted((r["uuid"], r["source"], r["target"], r["name"], r["fact"], r["episodes"],
                        r["valid_at"], r["invalid_at"]) for r in kuzu), (srcs, names)
            found += len(mine)
        return found

    await engine.ingest(BANK, turns(60))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    index = bank.graph_index
    assert index.rows.whole
    facts = len(index.rows)
    await engine.ingest(BANK, turns(40, 60) + [
        Turn(id="move", user="I moved, I live in Lisbon now", assistant="Noted.", time=T0 + timedelta(days=30)),
        Turn(id="job", user="I quit my job at the bakery, I work at the library now", assistant="Noted.",
             time=T0 + timedelta(days=31))])
    assert len(index.rows) > facts and index.rows.whole, "new facts are kept with their entities"
    assert await same_as_kuzu(bank) >= 1, "a fact was ended"
    await assert_index_is_the_database(bank)
    told = next(u for u, r in index.rows.items() if r[graph_index._INVALID_AT] is None)
    ended = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)
    await engine.pool.query(bank, "expire_fact", uuid=told, invalid_at=ended, expired_at=ended)
    assert await same_as_kuzu(bank) >= 2
    await engine.pool.query(bank, "restore_fact", uuid=told)
    await engine.forget(BANK, ids=["move"])
    await same_as_kuzu(bank)
    await assert_index_is_the_database(bank, kept_most=False)
    await engine.pool.query(bank, "expire_fact", uuid=told, invalid_at=ended, expired_at=ended)
    await bank.driver.execute_query("MATCH (e:RelatesToNode_) WHERE e.uuid = $uuid SET e.fact = e.fact + '!'",
                                    uuid=told)
    assert not index.rows.whole, "an ended fact written by an expression: its row is read again"
    assert await index.ended_named([told], ["x"]) is None
    await assert_index_is_the_database(bank, kept_most=False)       # and it is not listed as ended


async def test_the_entity_filter_tested_on_kept_rows_is_kuzus(engine):
    """graphiti's entity filter (its labels, every one asked among the entity's) tested on
    the kept rows passes exactly the entities Kuzu's query passes."""
    from graphiti_core.search.search_filters import SearchFilters
    await engine.ingest(BANK, turns(60))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    index = bank.graph_index
    uuids = list(index.entity_rows)
    labels = sorted({x for r in index.entity_rows.values() for x in r[graph_index._NODE_LABELS]})
    assert len(labels) >= 3
    asked = [None, ["Entity"], labels, ["Nothing"], [labels[0], labels[0]]] + [[x] for x in labels] + \
        [[x, "Entity"] for x in labels]
    passing = set()
    for groups in (None, [bank.slug], ["another"]):
        for wanted in asked:
            query, params = graph_index._node_filters(SearchFilters(node_labels=wanted), groups)
            assert query.test is not None, wanted
            rows, _, _ = await bank.driver.execute_query(query, uuids=uuids, **params)
            kuzu = {r["uuid"] for r in rows}
            assert {u for u in uuids if query.test(index.entity_rows[u])} == kuzu, (wanted, groups)
            passing.add(len(kuzu))
    assert len(passing) > 3, "the filters must pass different entities, or this proves little"
    query, _ = graph_index._node_filters(SearchFilters(node_labels=[]), [bank.slug])
    assert query.test is None, "no labels asked: Kuzu's binder error, as in graphiti's own search"


async def test_the_word_index_scores_as_kuzus_full_text_index(engine):
    """On a bank below Kuzu's dense-scan size (1,000 rows reached), the word indexes find
    the facts and entities graphiti's Kuzu full-text search would find (its indexes made for
    the comparison: a bank keeps none), with the same scores, for questions and for every
    word they hold; after facts are rewritten and some deleted, too."""
    from memoryplus.engine.store import add_graphiti_fulltext_indexes
    await engine.ingest(BANK, turns(80))
    bank = engine.banks[BANK]
    await add_graphiti_fulltext_indexes(bank.driver, bank.dir)
    await engine.search(BANK, "Where do I live?")
    index = bank.graph_index
    kuzu_query = {kind: f"CALL QUERY_FTS_INDEX('{table}', '{name}', cast($query AS STRING), "
                        "TOP := $limit) RETURN node.uuid AS uuid, score"
                  for kind, table, name in [("facts", "RelatesToNode_", "edge_name_and_fact"),
                                            ("entities", "Entity", "node_name_and_summary")]}

    async def compare(kind, queries) -> int:
        found = 0
        for q in queries:
            kuzu, _, _ = await bank.driver.execute_query(kuzu_query[kind], query=q, limit=10)
            ours = await index._word_hits(kind, q, 10)
            assert sorted(r["score"] for r in ours) == pytest.approx(sorted(r["score"] for r in kuzu), rel=1e-9), q
            cut = min((r["score"] for r in kuzu), default=0)        # ties at the cut: either may be kept
            assert {r["uuid"] for r in ours if r["score"] > cut * (1 + 1e-9)} == \
                {r["uuid"] for r in kuzu if r["score"] > cut * (1 + 1e-9)}, q
            found += len(kuzu)
        return found
    questions = [clean_query(q) for q, _ in load_data(80)[1][:60]] + [clean_query(q) for q in QUERIES] + \
        ["", "the", "User's 2024"]
    for kind in ("facts", "entities"):
        rows = (await bank.driver.execute_query(graph_index._TEXTS[kind].format("")))[0]
        vocabulary = sorted({w for r in rows for w in f"{r['name']} {r['text'] or ''}".split()})
        assert await compare(kind, questions + vocabulary[::3]) > 400, kind
    facts = (await bank.driver.execute_query(graph_index._TEXTS["facts"].format("")))[0]
    for r in facts[:15]:            # graphiti's save rewrites a fact's texts (its name here)
        await bank.driver.execute_query("MATCH (e:RelatesToNode_ {uuid: $uuid}) SET e.name = $name, e.fact = $fact",
                                        uuid=r["uuid"], name="MOVED_TO", fact=r["text"] + " again")
    await engine.forget(BANK, ids=[t.id for t in turns(5)])
    await engine.search(BANK, "Where do I live?")
    assert await compare("facts", questions + ["moved again"]) > 300
    assert await compare("entities", questions) > 100
    await assert_index_is_the_database(bank, kept_most=False)


async def test_the_word_index_follows_every_write_of_fact_texts(engine):
    """A fact's texts written in a way the index cannot follow (an expression, several
    facts at once) make it read every fact's texts again; a rollback too."""
    await engine.ingest(BANK, turns(40))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    index = bank.graph_index
    await bank.driver.execute_query("MATCH (e:RelatesToNode_) WHERE e.uuid IN $uuids SET e.fact = e.fact + ' zebracorn'",
                                    uuids=list(index.words["facts"].slot)[:3])
    assert index.words["facts"] is None, "texts written by an expression: read again"
    await engine.search(BANK, "zebracorn")
    await assert_index_is_the_database(bank, kept_most=False)
    assert len(await index._word_hits("facts", "zebracorn", 10)) == 3, "the new word is found"
    before = postings(index.words["facts"])
    with pytest.raises(RuntimeError, match="abandon"):
        async with engine.pool.all_or_nothing(bank):
            u = next(iter(index.words["facts"].slot))
            await bank.driver.execute_query("MATCH (e:RelatesToNode_ {uuid: $uuid}) SET e.name = $name, e.fact = $fact",
                                            uuid=u, name="X", fact="rolled back")
            raise RuntimeError("abandon")
    await engine.search(BANK, "Where do I live?")
    assert postings(index.words["facts"]) == before
    await assert_index_is_the_database(bank, kept_most=False)


async def test_facts_deleted_through_a_turn_are_not_kept(engine):
    """A deletion that picks facts by something other than their uuid or an entity's (here
    a turn's uuid) drops every kept row: no search returns a deleted fact."""
    await engine.ingest(BANK, turns(60))
    bank = engine.banks[BANK]
    await engine.search(BANK, "Where do I live?")
    assert bank.graph_index.rows
    turn = (await bank.driver.execute_query("MATCH (e:RelatesToNode_) RETURN e.episodes[1] AS t LIMIT 1"))[0][0]["t"]
    await bank.driver.execute_query(
        "MATCH (t:Episodic {uuid: $uuid}) MATCH (e:RelatesToNode_) WHERE list_contains(e.episodes, t.uuid) "
        "DETACH DELETE e", uuid=turn)
    assert bank.graph_index.rows == {}
    await assert_index_is_the_database(bank, kept_most=False)
    await assert_same_as_scan(bank)


async def test_a_failed_fact_search_fails_the_search_at_once(engine):
    """When one of the two fact searches fails before it reads, the other must not wait for
    it: the search raises the error, graphiti's other searches end (none waits for ever),
    and a later search works."""
    await engine.ingest(BANK, turns(30))
    bank = engine.banks[BANK]
    await engine.search(BANK, "my sister")      # the word index is built; a new word needs Kuzu
    original = bank.driver.execute_query

    async def failing(cypher, /, **params):
        if "stem(w, 'english')" in cypher:
            raise RuntimeError("stemmer unavailable")
        return await original(cypher, **params)
    bank.driver.execute_query = failing
    cfg, flt = search_config(10), search_filter(None)
    before = asyncio.all_tasks()
    with pytest.raises(RuntimeError, match="stemmer unavailable"):
        await asyncio.wait_for(graph_index.candidates(bank, clean_query("Where do I live?"), cfg, flt), 30)
    siblings = asyncio.all_tasks() - before       # graphiti's gather does not cancel them
    if siblings:
        _, pending = await asyncio.wait(siblings, timeout=20)
        assert not pending, pending
    bank.driver.execute_query = original
    assert (await graph_index.candidates(bank, clean_query("Where do I live?"), cfg, flt)).edges


async def test_a_new_query_word_is_stemmed_once_for_facts_and_entities(engine):
    """The fact and entity searches share the stems Kuzu gave (a stem query costs 1–2 ms on
    a big bank): a search with words the bank has not seen asks Kuzu for them once, the next
    one not at all, and what it finds is still graphiti's own scan."""
    await engine.ingest(BANK, turns(30))
    bank = engine.banks[BANK]
    await engine.search(BANK, "my sister")      # both word indexes built
    original, stem_queries = bank.driver.execute_query, []

    async def counting(cypher, /, **params):
        if "stem(w, 'english')" in cypher:
            stem_queries.append(params["words"])
        return await original(cypher, **params)
    bank.driver.execute_query = counting
    try:
        cfg, flt = search_config(10), search_filter(None)
        query = clean_query("Which marathons did Ravi run with his whippet?")
        ours = await graph_index.candidates(bank, query, cfg, flt)
        assert len(stem_queries) == 1 and {"marathons", "whippet"} <= set(stem_queries[0])
        await graph_index.candidates(bank, query, cfg, flt)
        assert len(stem_queries) == 1
        theirs = await bank.graphiti.search_(query, config=cfg, group_ids=[bank.slug], search_filter=flt)
        assert ours.edges and [e.uuid for e in ours.edges] == [e.uuid for e in theirs.edges]
        assert [n.uuid for n in ours.nodes] == [n.uuid for n in theirs.nodes]
    finally:
        bank.driver.execute_query = original


async def test_a_cancelled_fact_search_leaves_the_other_its_rows():
    """A search cancelled while it waits for the other's read (the user's turn went on
    without memories) must not break the other one's answer."""
    reads = []

    async def read(query, uuids, **params):
        reads.append(uuids)
        return [{"uuid": u} for u in uuids]
    shared = graph_index.SharedFactRead(2, read)
    first = asyncio.create_task(shared.rows("Q", {}, ["a", "b"]))
    await asyncio.sleep(0)
    first.cancel()
    assert await shared.rows("Q", {}, ["b", "c"]) == [{"uuid": "b"}, {"uuid": "c"}]
    with pytest.raises(asyncio.CancelledError):
        await first
    assert reads == [["a", "b", "c"]]


@pytest.mark.option("bank_idle_close_s")
async def test_idle_banks_close_and_reopen_with_nothing_lost(make_engine):
    eng = make_engine(bank_idle_close_s=1)
    await eng.ingest(BANK, turns(40))
    before = [(r.id, r.text) for r in await eng.search(BANK, "Where does my sister live?")]
    stats = await eng.stats(BANK)
    assert before and not await eng.maintain()            # just used: it stays open
    await asyncio.sleep(1.2)
    assert await eng.maintain() and BANK not in eng.banks  # idle: closed, its lock released
    assert not (eng.dir.path(BANK) / "owner.json").exists()
    assert [(r.id, r.text) for r in await eng.search(BANK, "Where does my sister live?")] == before
    assert (await eng.stats(BANK)).episodes == stats.episodes
    await eng.ingest(BANK, turns(5, 40))                  # and it takes writes again
    assert (await eng.stats(BANK)).episodes == stats.episodes + 5



async def test_a_bank_reopened_after_an_idle_close_answers_without_embedding_its_turns_again(make_engine):
    """The first turn after a pause must not wait while every stored turn is embedded again
    (seconds on a big bank: past the injection's wait, so that turn would go without memories);
    a bank written while it was closed is read anew."""
    eng = make_engine(bank_idle_close_s=1)
    await eng.ingest(BANK, turns(40))
    before = [(r.id, r.text) for r in await eng.search(BANK, "Where does my sister live?")]
    index = eng.banks[BANK].turns
    await asyncio.sleep(1.2)
    assert await eng.maintain() and BANK not in eng.banks
    assert [(r.id, r.text) for r in await eng.search(BANK, "Where does my sister live?")] == before
    assert eng.banks[BANK].turns is index                  # the same index, not a rebuilt one
    await eng.ingest(BANK, turns(3, 40))                   # kept in step after the reopening
    assert len(eng.banks[BANK].turns) == len(index) == 43

    await asyncio.sleep(1.2)
    assert await eng.maintain()
    with open(eng.dir.path(BANK) / "graph.kuzu", "ab") as f:   # the file changed meanwhile
        f.write(b"")
    import os
    os.utime(eng.dir.path(BANK) / "graph.kuzu", ns=(1, 1))
    await eng.search(BANK, "Where does my sister live?")
    assert eng.banks[BANK].turns is not index and len(eng.banks[BANK].turns) == 43

async def test_banks_stay_open_when_idle_closing_is_off(make_engine):
    eng = make_engine(bank_idle_close_s=0)
    await eng.ingest(BANK, turns(5))
    await asyncio.sleep(0.1)
    assert not await eng.maintain() and BANK in eng.banks


def test_a_big_bank_gets_a_buffer_pool_in_proportion(tmp_path):
    from memoryplus.engine import store
    (tmp_path / "graph.kuzu").write_bytes(b"")
    assert store.pool_mb_for(tmp_path, 128) == 128          # a small bank: the setting
    with open(tmp_path / "graph.kuzu", "wb") as f:          # a 1 GB file (sparse)
        f.truncate(1024 * 1048576)
    assert store.pool_mb_for(tmp_path, 128) == 64 + 768
    assert store.pool_mb_for(tmp_path, 2048) == 2048         # a bigger setting wins

    class Opened:
        pool_mb = 128
    assert store.outgrown(Opened(), tmp_path, 128)           # reopened (when idle) with more
    Opened.pool_mb = 832
    assert not store.outgrown(Opened(), tmp_path, 128)
    Opened.pool_mb = 700           # grown, but by less than a quarter: not reopened for so little
    assert not store.outgrown(Opened(), tmp_path, 128)


async def test_a_bank_written_without_a_pause_is_reopened_with_a_bigger_pool(make_engine, monkeypatch):
    """Kuzu fixes a bank's buffer pool at open, and a checkpoint needs pool in proportion to
    the file. A bank that outgrows its pool while written to with no idle moment (an import)
    is reopened with a bigger one before its next part, and keeps every turn."""
    from memoryplus.engine import store
    eng = make_engine()
    await eng.ingest(BANK, turns(5))
    first = eng.banks[BANK]
    assert first.driver.pool_mb == 128
    monkeypatch.setattr(store, "POOL_MARGIN_MB", 300)     # as if its file had grown past it
    await eng.ingest(BANK, turns(10)[5:])
    second = eng.banks[BANK]
    assert second is not first and second.driver.pool_mb >= 300
    await eng.ingest(BANK, turns(12)[10:])
    assert eng.banks[BANK] is second, "not reopened again for a little more"
    assert len(await eng.browse(BANK, "episodes", limit=50)) == 12


def _lock_is_held(db_file) -> bool:
    """Whether another process fails to open the bank's database (Kuzu's file lock)."""
    import subprocess
    import sys
    probe = subprocess.run([sys.executable, "-c", f"import kuzu; kuzu.Database({str(db_file)!r})"],
                           capture_output=True, text=True, timeout=60)
    return probe.returncode != 0 and "lock" in probe.stderr.lower()


async def test_an_idle_bank_gives_back_its_pool_pages_and_keeps_its_indexes(make_engine, monkeypatch):
    """Kuzu keeps every page it read or wrote until its pool is full. When the worker is idle,
    a bank that wrote or read enough since is reopened in place: its database handle is new,
    its indexes are the same objects (nothing read again), it finds and stores as before,
    and it keeps its file lock. A bank in use, or with nothing new, is left alone."""
    from memoryplus.engine import store
    eng = make_engine()
    await eng.ingest(BANK, turns(8))
    before = [r.text for r in await eng.search(BANK, QUERIES[0])]
    bank = eng.banks[BANK]
    db, sets, turn_index = bank.driver.db, bank.graph_index.sets, bank.turns
    monkeypatch.setattr(store, "RELEASE_PAGES_MB", 1e-6)     # this bank's file is small
    bank.active = 1                                         # in use: left alone
    await eng.maintain()
    assert bank.driver.db is db
    bank.active = 0
    await eng.maintain()
    assert bank.driver.db is not db, "reopened in place"
    assert eng.banks[BANK] is bank and bank.graph_index.sets is sets and bank.turns is turn_index
    assert _lock_is_held(bank.dir / "graph.kuzu")
    texts = [r.text for r in await eng.search(BANK, QUERIES[0])]
    assert texts == before
    db = bank.driver.db
    await eng.maintain()
    assert bank.driver.db is db, "nothing written or read since: not reopened again"
    await eng.ingest(BANK, [Turn(id="late", user="My parrot is called Kiwi.", time=T0 + timedelta(days=9))])
    assert any("Kiwi" in r.text for r in await eng.search(BANK, "What is my parrot called?"))
    await eng.maintain()
    assert bank.driver.db is not db, "written since: reopened"
    assert len(await eng.browse(BANK, "episodes", limit=50)) == 9
    await eng.close()
    await eng.stats(BANK)                                   # opened, its indexes not built
    bank = eng.banks[BANK]
    db = bank.driver.db
    await eng.maintain()
    assert bank.driver.db is db
    await eng.search(BANK, QUERIES[1])                      # the index build reads the file
    await eng.maintain()
    assert bank.driver.db is not db, "read since: reopened"


async def test_a_bank_that_cannot_reopen_in_place_leaves_the_pool_and_opens_on_next_use(make_engine, monkeypatch):
    """If another process takes the file in the moment the bank is reopened in place, the
    idle round goes on (no error), the bank leaves the pool, and its next use opens it anew
    with everything stored."""
    from memoryplus.engine import store
    eng = make_engine()
    await eng.ingest(BANK, turns(5))
    await eng.search(BANK, QUERIES[0])
    bank = eng.banks[BANK]
    monkeypatch.setattr(store, "RELEASE_PAGES_MB", 1e-6)
    real = store.database

    def taken(path, pool_mb):
        raise RuntimeError("IO exception: Could not set lock on file")
    monkeypatch.setattr(store, "database", taken)
    assert await eng.maintain() is False
    assert BANK not in eng.banks and bank.driver.closed_by_us
    monkeypatch.setattr(store, "database", real)
    assert len(await eng.browse(BANK, "episodes", limit=50)) == 5
    assert eng.banks[BANK] is not bank


async def test_when_a_turns_facts_ended_comes_from_the_kept_rows(engine):
    """A turn whose facts were all replaced shows when they ended ("I live in Berlin" after
    "I live in Lisbon now"): taken from the kept fact rows, with no read of facts by uuid,
    as when read from the database."""
    from memoryplus.engine.queries import q
    await engine.ingest(BANK, [Turn(id="1", user="I live in Berlin.", time=T0),
                               Turn(id="2", user="I live in Lisbon now.", time=T0 + timedelta(days=30))])
    await engine.search(BANK, "Where do I live?")             # the index is built
    bank = engine.banks[BANK]
    ends_read = q("fact_ends", bank.provider)
    reads: list[dict] = []
    bank.driver.observers.append(lambda query, params: reads.append(params) if query == ends_read else None)

    async def berlin():
        return [(r.kind, r.invalid_at) for r in await engine.search(BANK, "Where do I live?", limit=5)
                if "Berlin" in r.text]
    kept = await berlin()
    assert ("episode", T0 + timedelta(days=30)) in kept and reads == []
    bank.graph_index.rows.clear()                   # as if none were kept
    assert await berlin() == kept and reads, "read from the database: the same"


def test_the_scan_bounded_by_the_first_dimensions_finds_what_the_full_scan_finds():
    """A scan reads each row's first dimensions and skips the rows whose cosine cannot pass
    the floor: it returns what scoring every row in full returns, rows that match only past
    those dimensions included; a floor most rows pass is scored in full the same way."""
    rng = np.random.default_rng(3)
    dim = 256
    query = rng.normal(size=dim).astype(np.float32)
    vs = graph_index.VectorSet(dim)
    rows = {f"r{i}": rng.normal(size=dim) for i in range(2000)}
    for i in range(6):      # close to the query everywhere
        rows[f"near{i}"] = query + 0.3 * rng.normal(size=dim)
    for i in range(6):      # close to it only past the first dimensions
        tail_only = rng.normal(size=dim)
        tail_only[graph_index.HEAD_DIMS:] = 3 * query[graph_index.HEAD_DIMS:]
        rows[f"tail{i}"] = tail_only
    for u, v in rows.items():
        vs.put(u, v)
    for u in ("r5", "near0", "tail0"):
        vs.drop(u)

    def every_row(floor):
        live = {u: v for u, v in rows.items() if u in vs.rows}
        cos = {u: float(np.dot(v, query) / np.linalg.norm(v) / np.linalg.norm(query)) for u, v in live.items()}
        return sorted((u for u, c in cos.items() if c > floor), key=lambda u: (-cos[u], vs.rows[u]))

    want = every_row(0.6)
    assert {u[:4] for u in want} == {"near", "tail"} and "tail0" not in want
    assert list(vs.ranked(query, 0.6)) == want
    assert list(vs.ranked(query, 0.0)) == every_row(0.0)     # half the rows: read in full


def test_a_ranking_read_in_chunks_is_the_whole_stable_order():
    """The cosine order is sorted only as far as a search reads it; read in the growing
    chunks a search reads (or at any point), it is the full stable sort: best first, ties in
    row order, nothing at or below the floor, and a row reused meanwhile changes nothing."""
    rng = np.random.default_rng(7)
    vs = graph_index.VectorSet(8)
    for i in range(3000):        # few distinct vectors: many equal scores, ties at every cut
        vs.put(f"u{i}", rng.integers(-2, 3, 8).astype(np.float32) + 0.5)
    for i in range(0, 3000, 7):
        vs.drop(f"u{i}")
    query = rng.normal(size=8)
    with np.errstate(divide="ignore", invalid="ignore"):        # dropped rows: norm 0
        mat = np.array([vs.vector(u) if u else np.zeros(8, np.float32) for u in vs.uuids])
        scores = (mat @ query.astype(np.float32)) / (vs.norms[:len(vs.uuids)] * np.linalg.norm(query))
    whole = [vs.uuids[i] for i in np.argsort(-scores, kind="stable") if vs.norms[i] and scores[i] > 0.1]
    assert 1000 < len(whole) < 2500
    ranked = vs.ranked(query, 0.1)
    gone = whole[len(whole) // 2]
    vs.drop(gone), vs.put("late", np.ones(8))            # written while a search reads down it
    assert len(ranked) == len(whole)
    start, size, read = 0, 20, []
    while start < len(ranked):
        read += ranked[start:start + size]
        start, size = start + size, size * 2
    assert read == whole
    assert gone in read and gone not in vs.ranked(query, 0.1)[:]      # the write is the next search's
    assert ranked[5] == whole[5] and ranked[-1] == whole[-1] and ranked[3:0] == []


def test_the_stop_words_kept_are_kuzus():
    """The word index leaves out the words Kuzu's full-text index leaves out: the list kept
    in engine/stopwords.py is the table Kuzu makes with an index (a database in memory here)."""
    import kuzu

    from memoryplus.engine.stopwords import KUZU_STOPWORDS, STOPWORDS_TABLE
    db = kuzu.Database(":memory:", buffer_pool_size=16 * 1024 * 1024)
    conn = kuzu.Connection(db)
    try:
        conn.execute("CREATE NODE TABLE Doc(id INT64 PRIMARY KEY, text STRING)")
        conn.execute("CALL CREATE_FTS_INDEX('Doc', 'doc_text', ['text'], stopWords := 'default')")
        conn.execute("CALL enable_internal_catalog=true")
        kuzus = {r[0] for r in conn.execute(f"MATCH (s:{STOPWORDS_TABLE}) RETURN s.sw").get_all()}
    finally:
        conn.close()
        db.close()
    assert len(kuzus) > 500 and KUZU_STOPWORDS == kuzus
