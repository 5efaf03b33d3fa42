"""What a turn costs with LLM extraction, counted at the scripted LLM server (every request the
real openai client sends), and that the cheaper route stores what stock graphiti stores."""
from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from graphiti_core.llm_client.errors import RateLimitError

from memoryplus.testing.scripted_llm import ScriptedLLMServer
from memoryplus.wire.records import Turn

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
TWO_CALL_ROUTE = ("ExtractedEntities", "ExtractedEdges", "EdgeTimestamps")


@pytest.fixture
def llm():
    with ScriptedLLMServer() as server:
        yield server


def llm_settings(server, **values):
    return dict(extraction_engine="llm", llm_provider="openai", override_base_url=server.base_url,
                override_api_key="sk-test-aaaaaaaaaaaaaaaaaaaaaaaa", graphiti_model="scripted-llm",
                embedding_provider="local", **values)


def llm_calls(server) -> Counter:
    return Counter({k: v for k, v in server.calls.items() if k != "embeddings"})


async def test_a_turn_costs_one_extraction_call(make_engine, llm):
    """Entities and facts come from one call (graphiti's combined prompt); what else a turn
    may cost is graphiti's resolution of each new fact against the bank, and a summary."""
    eng = make_engine(**llm_settings(llm))
    before = llm_calls(llm)
    rep = await eng.ingest("p", [Turn(id="1", user="My sister Anna works at Siemens.", time=T0)])
    first = llm_calls(llm) - before
    assert rep.stored == ["1"]
    # an empty bank: nothing to resolve against, no time to date, every entity has a fact
    assert first == Counter({"CombinedExtraction": 1}), first
    facts = [r for r in await eng.search("p", "Where does Anna work?") if r.kind == "fact"]
    assert any("Siemens" in r.text for r in facts), facts

    turns = ["My brother Tom lives in Oslo.", "My dentist is Dr Okafor.", "Tom moved to Bergen last year."]
    for n, text in enumerate(turns, 2):
        before, facts_before = llm_calls(llm), (await eng.stats("p")).facts
        await eng.ingest("p", [Turn(id=str(n), user=text, time=T0 + timedelta(days=n))])
        spent = llm_calls(llm) - before
        new_facts = (await eng.stats("p")).facts - facts_before
        assert spent["CombinedExtraction"] == 1 and not any(spent[k] for k in TWO_CALL_ROUTE), spent
        assert spent["EdgeDuplicate"] <= new_facts, (spent, new_facts)   # one per new fact at most
        assert set(spent) <= {"CombinedExtraction", "EdgeDuplicate", "BatchEdgeTimestamps",
                              "SummarizedEntities"}, spent
    assert llm_calls(llm)["BatchEdgeTimestamps"] == 1, "only the turn with a time in it is dated by the LLM"
    stats = await eng.stats("p")
    assert stats.llm_calls == sum(llm_calls(llm).values())     # the bank's bill is the server's count


async def _stock_graphiti(server, db, turns) -> tuple[int, int]:
    """Stock graphiti's add_episode per turn (as the bench's baseline runs it): (entities, facts)."""
    from graphiti_core import Graphiti
    from graphiti_core.driver.kuzu_driver import KuzuDriver
    from graphiti_core.nodes import EpisodeType

    from memoryplus.config.schema import Settings
    from memoryplus.engine.embedders import LocalEmbedder
    from memoryplus.engine.providers import OverlapReranker, build_llm
    from memoryplus.engine.store import add_graphiti_fulltext_indexes
    from memoryplus.wire.records import Credentials
    driver = KuzuDriver(db=str(db))
    driver._database = ""                    # graphiti 0.31.2 bug: add_episode(group_id=...) reads it
    await add_graphiti_fulltext_indexes(driver, db.parent)
    g = Graphiti(graph_driver=driver, llm_client=build_llm(Settings(**llm_settings(server)), Credentials()),
                 embedder=LocalEmbedder(), cross_encoder=OverlapReranker())
    for turn in turns:
        await g.add_episode(name=turn.id, episode_body=turn.body(), source_description="chat turn",
                            reference_time=turn.time, source=EpisodeType.message, group_id="bench")
    count = {}
    for key, q in (("entities", "MATCH (n:Entity) RETURN count(n) AS n"),
                   ("facts", "MATCH (r:RelatesToNode_) RETURN count(r) AS n")):
        count[key] = (await driver.execute_query(q))[0][0]["n"]
    await driver.close()
    return count["entities"], count["facts"]


async def test_the_bench_turns_store_what_stock_graphiti_stores(make_engine, tmp_path):
    """The bench's first turns, default settings (Chatbot mode, tags on) against graphiti's own
    add_episode with no types: the same entities and facts, in fewer calls. Each side has its
    own scripted LLM (its fact memory is per server)."""
    from memoryplus.cli.bench import load_data, make_turn
    turns = [make_turn(t, u, a, n) for n, (t, u, a) in enumerate(load_data(12)[0])]
    with ScriptedLLMServer() as ours_llm:
        eng = make_engine(**llm_settings(ours_llm))
        for turn in turns:
            await eng.ingest("bench", [turn])
        stats = await eng.stats("bench")
        ours_calls = sum(llm_calls(ours_llm).values())
    with ScriptedLLMServer() as stock_llm:
        entities, facts = await _stock_graphiti(stock_llm, tmp_path / "stock.kuzu", turns)
        stock_calls = sum(llm_calls(stock_llm).values())
    assert facts > 0 and entities > 0
    assert (stats.entities, stats.facts) == (entities, facts)
    assert ours_calls < 0.6 * stock_calls, (ours_calls, stock_calls)


async def test_a_failing_provider_on_the_combined_call_loses_nothing(make_engine, llm):
    """The one extraction call of a turn meets 500, 429 and garbage: a 500 is retried by the
    client; a rate limit that lasts is said (the turn is not half stored and goes in later);
    a garbage answer is asked again, and one that stays garbage leaves the turn stored by
    local extraction, said in the report."""
    eng = make_engine(**llm_settings(llm))
    llm.inject("500", count=1)
    rep = await eng.ingest("p", [Turn(id="1", user="I live in Berlin.", time=T0)])
    assert rep.stored == ["1"] and not rep.fallbacks and llm.faults_applied["500"] == 1
    assert llm.calls["CombinedExtraction"] == 2        # the failed request, then its retry

    llm.inject("429", count=100, retry_after=0)
    with pytest.raises(RateLimitError):
        await eng.ingest("p", [Turn(id="2", user="I work at Siemens in Munich.", time=T0 + timedelta(days=1))])
    llm.clear_faults()
    assert not [e for e in await eng.browse("p", "facts") if "Siemens" in e["text"]], "nothing half stored"
    rep = await eng.ingest("p", [Turn(id="2", user="I work at Siemens in Munich.", time=T0 + timedelta(days=1))])
    assert rep.stored == ["2"] and not rep.fallbacks

    llm.inject("garbage", count=1, structured_only=True)
    rep = await eng.ingest("p", [Turn(id="3", user="My sister Anna lives in Rome.", time=T0 + timedelta(days=2))])
    assert rep.stored == ["3"] and not rep.fallbacks, rep      # asked again, answered

    llm.inject("garbage", count=1000, structured_only=True)
    rep = await eng.ingest("p", [Turn(id="4", user="My brother Tom lives in Oslo.", time=T0 + timedelta(days=3))])
    llm.clear_faults()
    assert rep.stored == ["4"] and "4" in rep.fallbacks, rep
    stats = await eng.stats("p")
    assert stats.episodes == 4 and stats.llm_fallbacks == 1
    assert all(e["complete"] for e in await eng.browse("p", "episodes"))
    found = [r.text for r in await eng.search("p", "Where does Tom live?")]
    assert any("Oslo" in f for f in found), found


async def test_one_statement_given_as_several_facts_is_resolved_once(make_engine, llm):
    """The model may give one statement as several facts with the same text (one per pair of
    entities it links): graphiti's resolution prompt for them is then the same, word for word,
    and is asked once; each fact is still stored and still supersedes what it contradicts."""
    eng = make_engine(**llm_settings(llm))
    for n, text in enumerate(["My vet is Oskar.", "I live in Berlin.", "My barber is Mei."]):
        await eng.ingest("p", [Turn(id=str(n), user=text, time=T0 + timedelta(days=n))])
    before, facts_before = llm_calls(llm), await eng.browse("p", "facts")
    await eng.ingest("p", [Turn(id="9", user="I work at Siemens and live in Krakow now.",
                                time=T0 + timedelta(days=9))])
    spent = llm_calls(llm) - before
    old = {f["text"] for f in facts_before}
    new = [f for f in await eng.browse("p", "facts") if f["text"] not in old]
    assert len(new) >= 2 and len({f["text"] for f in new}) == 1, new    # one text, several facts
    assert spent["EdgeDuplicate"] == 1, spent
    found = [r.text for r in await eng.search("p", "Where do I live?") if r.kind == "fact"]
    assert any("Krakow" in t for t in found) and not any("Berlin" in t for t in found), found


def resolution_prompts(server) -> list[str]:
    """The text of each fact-resolution (EdgeDuplicate) request the server received."""
    out = []
    for _, body in server.requests:
        text = json.dumps(body)
        if "FACT INVALIDATION CANDIDATES" in text:
            out.append(text)
    return out


async def test_a_fact_text_is_shown_once_when_a_new_fact_is_resolved(make_engine, llm):
    """Several facts with one text (one statement, one fact per pair of entities) are shown
    once in graphiti's resolution prompt, not once each: the model cannot tell them apart,
    and what it answers for the text holds for every one of them (the move replaces them)."""
    eng = make_engine(**llm_settings(llm))
    await eng.ingest("p", [Turn(id="1", user="I work at Siemens and live in Krakow now.", time=T0)])
    same = await eng.browse("p", "facts")
    assert len(same) >= 2 and len({f["text"] for f in same}) == 1, same
    text = same[0]["text"]
    seen = len(resolution_prompts(llm))
    await eng.ingest("p", [Turn(id="2", user="I live in Lisbon now.", time=T0 + timedelta(days=3))])
    asked = resolution_prompts(llm)[seen:]
    quoted = json.dumps(text)[1:-1]        # as the prompt's JSON body carries it
    shown = [p for p in asked if quoted in p]
    assert shown, "the new fact must be checked against the same-text facts, or this proves nothing"
    assert all(p.count(quoted) == 1 for p in shown), [p.count(quoted) for p in shown]
    found = [r.text for r in await eng.search("p", "Where do I live?") if r.kind == "fact"]
    assert any("Lisbon" in t for t in found) and not any("Krakow" in t for t in found), found


async def test_facts_of_one_statement_are_resolved_together_when_their_searches_differ(make_engine, llm):
    """One statement given as facts between different pairs of entities: graphiti's search
    finds other facts for each pair, so its prompts differ. They are still asked once, with
    what was found for any of them, each text once, and each fact gets its part of the answer:
    the old home is replaced, the visits stay."""
    eng = make_engine(**llm_settings(llm))
    for n, text in enumerate(["I visited Krakow in May.", "I visited Siemens in June.", "I live in Berlin."]):
        await eng.ingest("p", [Turn(id=str(n), user=text, time=T0 + timedelta(days=n))])
    before, seen = llm_calls(llm), len(resolution_prompts(llm))
    await eng.ingest("p", [Turn(id="99", user="I work at Siemens and live in Krakow now.",
                                time=T0 + timedelta(days=99))])
    spent, asked = llm_calls(llm) - before, resolution_prompts(llm)[seen:]
    new = [f for f in await eng.browse("p", "facts") if f["text"].startswith("User works")]
    assert len(new) >= 2 and len({f["text"] for f in new}) == 1, new    # one text, several facts
    assert spent["EdgeDuplicate"] == 1, spent
    assert [[p.count(t) for t in ("in May", "in June", "Berlin")] for p in asked] == [[1, 1, 1]], asked
    current = {f["text"] for f in await eng.browse("p", "facts", limit=100) if f["current"]}
    assert not any("Berlin" in t for t in current), current
    assert {"User visited Krakow in May.", "User visited Siemens in June."} <= current, current


async def test_facts_that_share_only_the_speakers_name_are_not_asked_about(make_engine, llm):
    """graphiti asks the model which facts a new one contradicts among those its search finds,
    and a full-text hit on the speaker's name alone is any fact of the bank: such facts are
    not asked about. A fact that shares another word still is, and is replaced."""
    eng = make_engine(**llm_settings(llm))
    await eng.ingest("p", [Turn(id="1", user="My vet is Oskar.", time=T0)])
    before = llm_calls(llm)
    await eng.ingest("p", [Turn(id="2", user="My barber is Mei.", time=T0 + timedelta(days=1))])
    assert not (llm_calls(llm) - before)["EdgeDuplicate"], llm_calls(llm) - before
    before, seen = llm_calls(llm), len(resolution_prompts(llm))
    await eng.ingest("p", [Turn(id="3", user="My barber is Tom now.", time=T0 + timedelta(days=2))])
    assert (llm_calls(llm) - before)["EdgeDuplicate"] == 1, llm_calls(llm) - before
    asked = resolution_prompts(llm)[seen:]
    assert "barber is Mei" in asked[0] and "Oskar" not in asked[0], asked
    current = {f["text"] for f in await eng.browse("p", "facts") if f["current"]}
    assert any("Tom" in t for t in current) and not any("Mei" in t for t in current), current
    assert any("Oskar" in t for t in current), current


async def test_an_entity_named_without_a_fact_is_summarized_from_the_turn(make_engine, llm):
    """An entity the model names but links to no fact gets, as its summary, what the turn says
    about it (graphiti would ask the LLM for it); the turn costs its one extraction call."""
    eng = make_engine(**llm_settings(llm))
    await eng.ingest("p", [Turn(id="1", user="My tutor is Henrik.", time=T0)])
    before = llm_calls(llm)
    await eng.ingest("p", [Turn(id="2", user="Rafael's partner has a birthday on 8 June.",
                                assistant="Noted!", time=T0 + timedelta(days=1))])
    spent = llm_calls(llm) - before
    entities = {e["name"]: e for e in await eng.browse("p", "entities")}
    assert "Rafael" in entities, sorted(entities)
    assert entities["Rafael"]["summary"] == "User: Rafael's partner has a birthday on 8 June.", entities["Rafael"]
    assert not spent["SummarizedEntities"], spent


def test_one_question_for_a_text_shows_what_each_of_its_facts_was_checked_against():
    """The facts found for each fact of one text (graphiti's context per fact) are all in the
    one question, each text once, and the answer comes back in each fact's own idx values:
    a duplicate only among its own EXISTING FACTS, a contradiction wherever it was listed."""
    from memoryplus.engine.llm_savings import answered_for, shown_once

    def context(existing, candidates):
        return {"new_edge": "N", "existing_edges": [{"idx": i, "fact": f} for i, f in enumerate(existing)],
                "edge_invalidation_candidates": [{"idx": len(existing) + i, "fact": f}
                                                 for i, f in enumerate(candidates)]}
    first = context(["A", "A"], ["C", "D"])
    second = context(["B"], ["A", "C", "E"])
    shown, texts = shown_once([first, second])
    assert [i["fact"] for i in shown["existing_edges"]] == ["A", "B"]
    assert [i["fact"] for i in shown["edge_invalidation_candidates"]] == ["C", "D", "E"]
    assert [i["idx"] for i in shown["existing_edges"] + shown["edge_invalidation_candidates"]] == [0, 1, 2, 3, 4]
    answer = {"duplicate_facts": [0, 1], "contradicted_facts": [2, 4, 9]}    # A, B; C, E; out of range
    assert answered_for(answer, texts, first) == {"duplicate_facts": [0, 1], "contradicted_facts": [2, 8]}
    assert answered_for(answer, texts, second) == {"duplicate_facts": [0], "contradicted_facts": [2, 3, 8]}
