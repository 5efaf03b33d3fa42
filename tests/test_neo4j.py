"""The Neo4j backend, against a real server. Neo4j cannot run on the CI machine, so this runs
only when NEO4J_URI is set (with NEO4J_USER, NEO4J_PASSWORD, and optionally NEO4J_DATABASE)."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from memoryplus.config.schema import Settings
from memoryplus.engine.memory_engine import MemoryEngine
from memoryplus.testing.scripted_llm import ScriptedLLMServer
from memoryplus.wire.records import Turn

URI = os.environ.get("NEO4J_URI")
pytestmark = pytest.mark.skipif(not URI, reason="NEO4J_URI is not set: no Neo4j server to test against")
T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def neo4j_settings(**values) -> Settings:
    return Settings(backend="neo4j", neo4j_uri=URI, neo4j_user=os.environ.get("NEO4J_USER", "neo4j"),
                    neo4j_password=os.environ.get("NEO4J_PASSWORD", "password"),
                    neo4j_database=os.environ.get("NEO4J_DATABASE", "neo4j"), **values)


@pytest.mark.option("backend", needs="NEO4J_URI")
@pytest.mark.option("neo4j_uri", needs="NEO4J_URI")
@pytest.mark.option("neo4j_user", needs="NEO4J_URI")
@pytest.mark.option("neo4j_password", needs="NEO4J_URI")
@pytest.mark.option("neo4j_database", needs="NEO4J_URI")
async def test_neo4j_bank_roundtrip_isolation_and_forget(tmp_path):
    settings = neo4j_settings(extraction_engine="local", embedding_provider="local")
    engine = MemoryEngine(settings, tmp_path)
    a, b = f"neo4j-test-a-{os.getpid()}", f"neo4j-test-b-{os.getpid()}"
    try:
        await engine.ingest(a, [Turn(id="1", user="I live in Berlin", time=T0),
                                Turn(id="2", user="I live in Paris now", time=T0 + timedelta(days=9))])
        await engine.ingest(b, [Turn(id="1", user="My dentist is Dr Okafor", time=T0)])
        facts = [r for r in await engine.search(a, "where do I live") if r.kind == "fact"]
        assert any("Paris" in r.text for r in facts) and not any("Berlin" in r.text for r in facts)
        assert not any("Okafor" in r.text for r in await engine.search(a, "dentist Okafor"))
        await engine.forget(b, text="dentist Dr Okafor")
        assert "okafor" not in json.dumps(await engine.export(b)).lower()
    finally:
        for bank in (a, b):
            if engine.known(bank):
                await engine.clear(bank)
        await engine.close()


async def test_neo4j_turns_stored_by_the_llm_keep_their_vectors(tmp_path):
    """graphiti saves a turn again inside `add_episode`, and on Neo4j that save replaces the
    whole row: the vectors kept on it must be set again, or every reopen of the bank sends
    all its turns to the (paid) embedder."""
    bank = f"neo4j-test-llm-{os.getpid()}"
    with ScriptedLLMServer() as llm:
        settings = neo4j_settings(extraction_engine="llm", llm_provider="openai", override_base_url=llm.base_url,
                                  override_api_key="sk-test-aaaaaaaaaaaaaaaaaaaaaaaa", graphiti_model="scripted-llm",
                                  embedding_provider="openai", embedding_base_url=llm.base_url,
                                  embedding_api_key="sk-embed-bbbbbbbbbbbbbbbbbbbb")
        first = MemoryEngine(settings, tmp_path)
        try:
            rep = await first.ingest(bank, [
                Turn(id="1", user="My sister Ingrid keeps bees in Uppsala.", time=T0),
                Turn(id="2", user="My dentist is Dr Okafor.", time=T0 + timedelta(hours=1))])
            assert rep.stored == ["1", "2"] and not rep.fallbacks, rep
        finally:
            await first.close()
        before = sum(llm.texts_embedded)
        eng = MemoryEngine(settings, tmp_path)
        try:
            found = await eng.search(bank, "who keeps bees?")
            assert any("Ingrid" in r.text for r in found[:3])
            assert sum(llm.texts_embedded) - before <= 2        # the query, for the turns and for graphiti
        finally:
            await eng.clear(bank)
            await eng.close()
