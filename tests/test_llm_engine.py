"""The LLM extraction engine through the real openai client, against the scripted LLM served
on the loopback address: graphiti's real add_episode, our modes, cost counting, faults."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import kuzu
import pytest
from graphiti_core.llm_client.errors import RateLimitError

from memoryplus.engine.embedders import REQUEST_TEXTS
from memoryplus.engine.kuzu_statements import MENTION_UUID
from memoryplus.testing.scripted_llm import ScriptedLLMServer
from memoryplus.wire.records import Credentials, Turn

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def llm():
    with ScriptedLLMServer() as server:
        yield server


def llm_settings(server, **values):
    return dict(extraction_engine="llm", llm_provider="openai", override_base_url=server.base_url,
                override_api_key="sk-test-aaaaaaaaaaaaaaaaaaaaaaaa", graphiti_model="scripted-llm",
                embedding_provider="local", **values)


@pytest.mark.option("extraction_engine")
@pytest.mark.option("llm_provider")
@pytest.mark.option("override_base_url")
@pytest.mark.option("override_api_key")
@pytest.mark.option("graphiti_model")
async def test_llm_engine_stores_supersedes_and_counts_cost(make_engine, llm):
    eng = make_engine(**llm_settings(llm))
    assert eng.extraction == "llm"
    rep = await eng.ingest("p", [Turn(id="1", user="I live in Berlin.", assistant="Nice.", time=T0)])
    assert rep.stored == ["1"] and rep.llm_calls == sum(n for k, n in llm.calls.items() if k != "embeddings") >= 1
    await eng.ingest("p", [Turn(id="2", user="I moved. I live in Paris now.", time=T0 + timedelta(days=30))])
    facts = [r for r in await eng.search("p", "where do I live") if r.kind == "fact"]
    assert any("Paris" in r.text for r in facts) and not any("Berlin" in r.text for r in facts)
    past = [r for r in await eng.search("p", "where do I live", as_of=T0 + timedelta(days=1)) if r.kind == "fact"]
    assert any("Berlin" in r.text for r in past)
    stats = await eng.stats("p")
    assert stats.llm_calls == sum(llm.calls[k] for k in llm.calls if k not in ("embeddings",))
    assert stats.llm_input_tokens > 0 and stats.llm_calls_today == stats.llm_calls
    assert all(path.endswith("/responses") for path, body in llm.requests if body and "input" in body)
    assert all(b.get("model") == "scripted-llm" for p, b in llm.requests if b and "input" in b)
    # graphiti's own saves of the turns' mentions, written with the one blank uuid
    # (kuzu_statements.MENTION_UUID), link each turn to what it names
    bank = await eng.pool.existing("p")
    rows, _, _ = await bank.driver.execute_query(
        "MATCH (:Episodic)-[m:MENTIONS]->(n:Entity) RETURN n.name AS name, m.uuid AS uuid")
    assert {r["uuid"] for r in rows} == {MENTION_UUID}
    assert {"Berlin", "Paris"} <= {r["name"] for r in rows}, rows


@pytest.mark.option("memory_mode")
@pytest.mark.option("custom_analysis_prompt")
async def test_each_mode_changes_what_graphiti_extracts(make_engine, llm, tmp_path):
    turn = Turn(id="1", user="Dr Okafor reviewed the Apollo project; the deadline is Friday and "
                            "I prefer green tea.", time=T0)
    seen, labels = {}, {}
    for mode in ("Identity", "Productivity", "Research", "CustomPrompt"):
        eng = make_engine(tmp_path / mode, memory_mode=mode,
                          custom_analysis_prompt="Only extract beverages and doctors.", **llm_settings(llm))
        before = len(llm.requests)
        await eng.ingest("bank", [turn])
        prompts = json.dumps([b for _, b in llm.requests[before:] if b and "input" in b])
        seen[mode] = prompts
        labels[mode] = {lab for e in await eng.browse("bank", "entities") for lab in e["labels"]} - {"Entity"}
        await eng.close()
    def typed(name):      # an entity type the prompt offers (graphiti's own text names others)
        return f"'entity_type_name': '{name}'"
    assert typed("Preference") in seen["Identity"] and typed("Preference") not in seen["Productivity"]
    assert typed("Project") in seen["Productivity"] and typed("Deadline") in seen["Productivity"]
    assert "Only extract beverages and doctors." in seen["CustomPrompt"]
    assert labels["Identity"] != labels["Productivity"], labels
    assert all(labels.values()), "typed entities reach the graph"


@pytest.mark.option("llm_provider")
async def test_ollama_style_endpoint_with_think_blocks(make_engine, llm):
    eng = make_engine(extraction_engine="llm", llm_provider="ollama", override_base_url=llm.base_url,
                      graphiti_model="qwen3:8b", embedding_provider="local")
    llm.inject("think", count=50)
    rep = await eng.ingest("p", [Turn(id="1", user="I work at Siemens in Munich.", time=T0)])
    assert rep.stored == ["1"]
    assert any("chat/completions" in path for path, _ in llm.requests)
    # Ollama's OpenAI-compatible endpoint takes any key; the client sends "ollama" (an
    # openai_compatible server would get PyGPT's OpenAI key, or "none")
    from memoryplus.testing.scripted_llm import mask_secret
    assert llm.keys_sent_to("/chat/completions") == {mask_secret("ollama")}
    assert "Siemens" in "\n".join(r.text for r in await eng.search("p", "Siemens"))


async def test_auto_uses_llm_only_with_credentials(make_engine, llm):
    assert make_engine(extraction_engine="auto").extraction == "local"
    with_key = make_engine(extraction_engine="auto", embedding_provider="local",
                           credentials=Credentials(openai_api_key="sk-x" * 8))
    assert with_key.extraction == "llm"


async def test_a_failed_llm_call_leaves_nothing_half_stored(make_engine, llm):
    eng = make_engine(**llm_settings(llm))
    await eng.ingest("p", [Turn(id="1", user="I live in Berlin.", time=T0)])
    llm.inject("429", count=100, retry_after=0)
    with pytest.raises(RateLimitError):     # graphiti's, after the client's own retries
        await eng.ingest("p", [Turn(id="2", user="I work at Siemens in Munich.", time=T0)])
    llm.clear_faults()
    rep = await eng.ingest("p", [Turn(id="2", user="I work at Siemens in Munich.", time=T0)])
    assert rep.stored == ["2"]
    stats = await eng.stats("p")
    assert stats.episodes == 2
    assert all(e["complete"] for e in await eng.browse("p", "episodes"))


async def test_an_llm_turn_interrupted_after_graphitis_writes_is_redone_on_reopen(make_engine, llm):
    """graphiti writes a turn over several LLM calls, outside a transaction (searches would
    wait on the network): a crash before the turn is marked complete leaves it pending, and
    the bank's next open removes what it wrote and stores it again, once."""
    from memoryplus.engine.ingest_ops import IngestOps
    eng = make_engine(**llm_settings(llm))
    await eng.ingest("p", [Turn(id="1", user="I live in Berlin.", assistant="Nice.", time=T0)])
    original = IngestOps._extract_llm

    async def crash_midway(self, bank, episode):
        await original(self, bank, episode)          # graphiti's writes done ...
        raise KeyboardInterrupt                       # ... but never marked complete

    IngestOps._extract_llm = crash_midway
    try:
        with pytest.raises(KeyboardInterrupt):
            await eng.ingest("p", [Turn(id="2", user="I work at Siemens.", time=T0 + timedelta(days=1))])
    finally:
        IngestOps._extract_llm = original
    assert any(not e["complete"] for e in await eng.browse("p", "episodes")), "left pending"
    await eng.close()                                     # a restart ...
    assert (await eng.stats("p")).episodes == 2           # ... reopens and redoes it
    assert all(e["complete"] for e in await eng.browse("p", "episodes"))
    siemens = [r for r in await eng.search("p", "Siemens") if r.kind == "fact"]
    assert len(siemens) == 1, "redone once, not twice"


@pytest.mark.option("embedding_base_url")
@pytest.mark.option("embedding_api_key")
@pytest.mark.option("embedding_model")
@pytest.mark.option("extraction_engine")
async def test_remote_embeddings_use_their_own_endpoint(make_engine, llm):
    eng = make_engine(extraction_engine="local", embedding_provider="openai", embedding_base_url=llm.base_url,
                      embedding_api_key="sk-embed-bbbbbbbbbbbbbbbbbbbb", embedding_model="text-embedding-3-large",
                      override_base_url="http://127.0.0.1:9/never-used")
    await eng.ingest("p", [Turn(id="1", user="I live in Berlin.", time=T0)])
    assert llm.calls["embeddings"] >= 1
    assert {b["model"] for p, b in llm.requests if p.endswith("/embeddings")} == {"text-embedding-3-large"}
    stats = await eng.stats("p")
    # The bank records the size the server really returned (the scripted one gives 384).
    assert stats.embedder == "openai:text-embedding-3-large:384" and stats.embedding_dim == 384
    assert stats.llm_calls == 0, "local extraction, though an LLM endpoint is configured"


async def test_a_reopened_bank_embeds_none_of_its_turns_again(make_engine, llm, tmp_path):
    """Opening a bank (every start of PyGPT) rebuilds its turn index from the turns' vectors
    kept on their rows: an API embedder is asked for the query only, not for every turn. A
    bank from before they were kept (its rows cleared here) is embedded once, in requests
    under the provider's cap on texts (OpenAI's is 2,048), and keeps them from then on."""
    llm.max_embedding_inputs = REQUEST_TEXTS
    settings = dict(extraction_engine="local", embedding_provider="openai", embedding_base_url=llm.base_url,
                    embedding_api_key="sk-embed-bbbbbbbbbbbbbbbbbbbb")
    turns = [Turn(id=str(i), user=f"My colleague number {i} is called Person{i}.", time=T0 + timedelta(hours=i))
             for i in range(REQUEST_TEXTS + 8)]
    turns.append(Turn(id="last", user="My sister Ingrid keeps bees in Uppsala.", time=T0 + timedelta(days=3)))
    first = make_engine(tmp_path / "d", **settings)
    assert len((await first.ingest("p", turns)).stored) == len(turns)
    await first.close()

    async def reopened_search() -> list[int]:
        before = len(llm.texts_embedded)
        eng = make_engine(tmp_path / "d", **settings)
        found = await eng.search("p", "who keeps bees?")
        await eng.close()
        assert any("Ingrid" in r.text for r in found[:3])
        return llm.texts_embedded[before:]

    assert sum(await reopened_search()) <= 2        # the query, for the turns and for graphiti
    db = kuzu.Database(str(next((tmp_path / "d").rglob("graph.kuzu"))))
    kuzu.Connection(db).execute("MATCH (e:Episodic) SET e.turn_vectors = NULL")
    db.close()
    rebuilt = await reopened_search()
    assert max(rebuilt) <= REQUEST_TEXTS and sum(rebuilt) > len(turns)
    assert sum(await reopened_search()) <= 2


async def test_turns_the_model_could_not_extract_keep_their_vectors_too(make_engine, llm, tmp_path):
    """A turn whose LLM answer was unusable is stored by local extraction; reopened, its bank
    still asks the embedder for the query alone (that re-saved row had none until 2026-12-05)."""
    settings = {**llm_settings(llm), "embedding_provider": "openai", "embedding_base_url": llm.base_url,
                "embedding_api_key": "sk-embed-bbbbbbbbbbbbbbbbbbbb"}
    llm.inject("garbage", count=1000, structured_only=True)
    first = make_engine(tmp_path / "d", **settings)
    turns = [Turn(id="1", user="My sister Ingrid keeps bees in Uppsala.", assistant="Lovely.", time=T0),
             Turn(id="2", user="My dentist is Dr Okafor.", assistant="Noted.", time=T0 + timedelta(hours=1)),
             Turn(id="3", user="I play the cello on Sundays.", assistant="Nice.", time=T0 + timedelta(hours=2))]
    rep = await first.ingest("p", turns)
    assert rep.stored == ["1", "2", "3"] and set(rep.fallbacks) == {"1", "2", "3"}, rep
    await first.close()
    llm.clear_faults()
    before = len(llm.texts_embedded)
    eng = make_engine(tmp_path / "d", **settings)
    found = await eng.search("p", "who keeps bees?")
    await eng.close()
    assert any("Ingrid" in r.text for r in found[:3])
    assert sum(llm.texts_embedded[before:]) <= 2        # the query, for the turns and for graphiti


@pytest.mark.option("embedding_provider")
async def test_the_embedding_provider_chosen_wins_over_a_configured_key(make_engine, llm, tmp_path):
    key = dict(embedding_base_url=llm.base_url, embedding_api_key="sk-embed-bbbbbbbbbbbbbbbbbbbb")
    local = make_engine(tmp_path / "local", embedding_provider="local", **key)
    await local.ingest("p", [Turn(id="1", user="I live in Berlin.", time=T0)])
    assert not (await local.stats("p")).embedder.startswith("openai:") and llm.calls["embeddings"] == 0
    remote = make_engine(tmp_path / "remote", embedding_provider="openai", **key)
    await remote.ingest("p", [Turn(id="1", user="I live in Berlin.", time=T0)])
    assert (await remote.stats("p")).embedder.startswith("openai:") and llm.calls["embeddings"] >= 1


@pytest.mark.option("override_api_key")
@pytest.mark.option("embedding_api_key")
async def test_each_key_is_sent_to_its_own_endpoint(make_engine, llm):
    """Override API Key goes to the Graphiti model's endpoint, Embedding API Key to the
    embeddings', PyGPT's own key to neither: the scripted server records (masked) the key of
    every request. A real provider's check of a key cannot run here; this is as close as it gets."""
    from memoryplus.testing.scripted_llm import mask_secret
    override, embed, pygpt = ("sk-override-1111111111111111", "sk-embed-2222222222222222",
                              "sk-pygpt-3333333333333333")
    eng = make_engine(credentials=Credentials(openai_api_key=pygpt, model_provider="openai"),
                      **{**llm_settings(llm), "override_api_key": override, "embedding_provider": "openai",
                         "embedding_base_url": llm.base_url, "embedding_api_key": embed})
    rep = await eng.ingest("p", [Turn(id="1", user="I live in Berlin.", assistant="Nice.", time=T0)])
    assert rep.stored == ["1"]
    assert llm.keys_sent_to("/responses") == {mask_secret(override)}
    assert llm.keys_sent_to("/embeddings") == {mask_secret(embed)}
    assert mask_secret(pygpt) not in {k for _, k in llm.api_keys}


async def test_memory_gate_skips_small_talk_and_counts_it(make_engine, llm):
    eng = make_engine(**llm_settings(llm, memory_mode="MemoryGate"))
    rep = await eng.ingest("p", [Turn(id="1", user="hi", assistant="Hello! How can I help?", time=T0),
                                 Turn(id="2", user="My dentist is Dr Okafor and I live in Berlin.", time=T0)])
    assert "1" in rep.skipped and "memory gate" in rep.skipped["1"]
    assert rep.stored == ["2"]
    assert (await eng.stats("p")).skipped_by_gate == 1


async def test_the_llm_memory_gate_keeps_or_skips_each_turn_by_what_it_says(make_engine, llm):
    """Turns the gate's rules cannot decide go to the Insight Model, which answers by their
    content: the statement is stored, the general question skipped, each for its reason."""
    eng = make_engine(**llm_settings(llm, memory_mode="MemoryGate"))
    rep = await eng.ingest("p", [
        Turn(id="keep", user="Note: the Falcon kickoff moved to Thursday.", assistant="Noted.", time=T0),
        Turn(id="skip", user="Quick question: how long should an egg boil?", assistant="About nine minutes.",
             time=T0)])
    assert llm.calls["MemoryGateDecision"] == 2, "both turns were left to the LLM"
    assert rep.stored == ["keep"], rep
    assert rep.skipped["skip"].startswith("memory gate: ") and len(rep.skipped["skip"]) > len("memory gate: ")
    assert (await eng.stats("p")).skipped_by_gate == 1
    assert llm.unanswered == {}


@pytest.mark.option("insight_model")
@pytest.mark.option("insight_temperature")
@pytest.mark.option("graphiti_temperature")
@pytest.mark.option("max_context_tokens")
async def test_models_temperatures_and_token_caps_reach_the_provider(make_engine, llm):
    eng = make_engine(**llm_settings(llm, memory_mode="MemoryGate", insight_model="insight-m",
                                     insight_temperature=0.7, graphiti_temperature=0.2,
                                     max_context_tokens=16000))
    await eng.ingest("p", [Turn(id="1", user="hmm, maybe later then", time=T0),
                           Turn(id="2", user="My dentist is Dr Okafor.", time=T0)])
    bodies = [b for _, b in llm.requests if b and "input" in b]
    gate = [b for b in bodies if "MemoryGateDecision" in json.dumps(b)]
    graph = [b for b in bodies if "MemoryGateDecision" not in json.dumps(b)]
    assert gate and all(b["model"] == "insight-m" and b["temperature"] == 0.7 for b in gate)
    assert graph and all(b["model"] == "scripted-llm" and b["temperature"] == 0.2 for b in graph)
    assert all(b["max_output_tokens"] <= 4000 for b in bodies), "answers capped at a quarter of the context"
    assert any(b["max_output_tokens"] == 4000 for b in graph)


async def test_a_fact_without_any_time_in_it_is_dated_without_an_llm_call(make_engine, llm):
    """graphiti asks the LLM to date every new fact; a turn with no time expression is dated
    by rule (valid from the turn), which is the answer graphiti's own prompt asks for."""
    eng = make_engine(**llm_settings(llm))
    await eng.ingest("p", [Turn(id="1", user="My sister Anna works at Siemens.", assistant="Nice.", time=T0)])
    assert llm.calls["EdgeTimestamps"] + llm.calls["BatchEdgeTimestamps"] == 0
    assert llm.calls["CombinedExtraction"] == 1
    facts = [r for r in await eng.search("p", "Where does Anna work?") if r.kind == "fact"]
    assert any("Siemens" in r.text and r.valid_at == T0 and r.invalid_at is None for r in facts), facts
    await eng.ingest("p", [Turn(id="2", user="My brother Tom has lived in Oslo since 2019.",
                                time=T0 + timedelta(days=1))])
    assert llm.calls["BatchEdgeTimestamps"] >= 1, "a time expression still goes to the LLM"


async def test_a_second_niece_replaces_nobody_a_second_dentist_does(make_engine, llm):
    """Supersession as a model judges it: a person has several nieces but one dentist."""
    eng = make_engine(**llm_settings(llm))
    said = ["My niece Ravi lives in Osaka.", "My dentist is Ingrid.",
            "My niece Aisha works at Copperleaf Games.", "My dentist is Tomasz."]
    for n, text in enumerate(said):
        await eng.ingest("p", [Turn(id=str(n), user=text, time=T0 + timedelta(days=n))])
    current = [f["text"] for f in await eng.browse("p", "facts") if f["current"]]
    assert any("Ravi" in f for f in current) and any("Aisha" in f for f in current), current
    assert any("Tomasz" in f for f in current) and not any("Ingrid" in f for f in current), current


def _previous_messages(body: dict) -> list[dict]:
    """The PREVIOUS MESSAGES of a request graphiti built (its prompts embed them as JSON)."""
    for message in body["input"]:
        content = message.get("content")
        for text in [content] if isinstance(content, str) else [c.get("text", "") for c in content]:
            if "<PREVIOUS MESSAGES>" in text:
                return json.loads(text.split("<PREVIOUS MESSAGES>")[1].split("</PREVIOUS MESSAGES>")[0])
    raise AssertionError(f"no PREVIOUS MESSAGES in {body}")


async def test_the_model_reads_the_earlier_turns_in_the_order_they_were_said(make_engine, llm):
    """The extraction prompt shows the turns before this one so that the model can tell what
    "it" or "that" refers to. A turn stored late (a retry after a 429, an import of an older
    chat) must still come in its place: the model reads them as the conversation ran."""
    eng = make_engine(**llm_settings(llm))
    said = {"a": "I adopted a dog called Rex.", "b": "He is a beagle.",
            "c": "He hates the vet, Dr Okafor.", "d": "She says he is healthy though."}
    hours = {"a": 1, "b": 2, "c": 3, "d": 4}
    for key in ("a", "c", "b"):                  # b is stored after c, as a retried turn would be
        await eng.ingest("p", [Turn(id=key, user=said[key], time=T0 + timedelta(hours=hours[key]))])
    await eng.ingest("p", [Turn(id="d", user=said["d"], time=T0 + timedelta(hours=4))])
    last = [b for _, b in llm.requests if b and "input" in b and "CombinedExtraction" in json.dumps(b)][-1]
    assert said["d"] in json.dumps(last["input"])
    shown = _previous_messages(last)
    assert [m["content"].split("\n")[0] for m in shown] == [f"User: {said[k]}" for k in ("a", "b", "c")], shown
    assert [m["timestamp"] for m in shown] == sorted(m["timestamp"] for m in shown)
