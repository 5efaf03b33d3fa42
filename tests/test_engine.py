"""The memory engine on real Kuzu with local extraction: every operation a user relies on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone

import pytest

from memoryplus.wire.banks import episode_uuid, slug
from memoryplus.engine.errors import EmbeddingMismatchError, EngineError, UnknownBankError
from memoryplus.engine.kuzu_statements import MENTION_UUID
from memoryplus.wire.records import Turn
from memoryplus.engine.store import BankLockedError, StoreError

T0 = datetime(2025, 1, 1, 12, tzinfo=timezone.utc)
BANK = "current.chat"


def turn(i, user, assistant="Noted.", days=0, **kw):
    return Turn(id=str(i), user=user, assistant=assistant, time=T0 + timedelta(days=days), **kw)


def texts(results):
    return "\n".join(r.text for r in results)


async def test_ingest_then_search_returns_sources_tags_and_validity(engine):
    await engine.ingest(BANK, [turn("a", "I live in Berlin and I use Linux every day"),
                               turn("b", "My sister Maria works at Siemens", days=1)])
    results = await engine.search(BANK, "Where do I live?")
    assert results, "a stored fact must be found"
    top_fact = next(r for r in results if r.kind == "fact" and "Berlin" in r.text)
    assert top_fact.sources == ["a"]
    assert top_fact.invalid_at is None and top_fact.valid_at == T0
    assert any(t.startswith("topic:") for t in top_fact.tags)
    # best first among results from different turns; a second result from a turn already
    # shown (its fact after the turn itself) comes after them
    seen, distinct = set(), []
    for r in results:
        if r.sources[0] not in seen:
            distinct.append(r)
        seen.add(r.sources[0])
    assert [r.score for r in distinct] == sorted((r.score for r in distinct), reverse=True)
    assert results[:len(distinct)] == distinct


async def test_same_id_twice_stores_one_episode_and_new_content_replaces(engine):
    first = await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    again = await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    assert first.stored == ["1"] and again.unchanged == ["1"] and not again.stored
    assert (await engine.stats(BANK)).episodes == 1
    regenerated = await engine.ingest(BANK, [turn(1, "I live in Berlin", "A different answer about Berlin")])
    assert regenerated.replaced == ["1"]
    exported = await engine.export(BANK)
    episodes = [r for r in exported if r["type"] == "episode"]
    assert len(episodes) == 1 and "A different answer" in episodes[0]["content"]
    # the turn stored again mentions each of its entities once (its mentions are created, not merged)
    bank = await engine.pool.existing(BANK)
    rows, _, _ = await bank.driver.execute_query(
        "MATCH (e:Episodic)-[m:MENTIONS]->(n:Entity) RETURN n.name AS name, count(m) AS n")
    assert "Berlin" in {r["name"] for r in rows} and all(r["n"] == 1 for r in rows), rows


async def test_forgetting_a_turn_takes_its_mentions_and_leaves_the_other_turns_mentions(engine):
    """Mentions share one blank uuid (kuzu_statements.MENTION_UUID): each is known by its
    episode and entity, so removing one turn's must leave every other turn's."""
    await engine.ingest(BANK, [turn(1, "I live in Berlin with my sister Maria"),
                               turn(2, "Berlin is lovely in May, Maria says", days=1),
                               turn(3, "I work at Siemens", days=2)])
    bank = await engine.pool.existing(BANK)

    async def mentions():
        rows, _, _ = await bank.driver.execute_query(
            "MATCH (e:Episodic)-[m:MENTIONS]->(n:Entity) RETURN e.uuid AS ep, n.name AS name, m.uuid AS uuid")
        return rows
    before = await mentions()
    assert {r["uuid"] for r in before} == {MENTION_UUID}
    first = episode_uuid(slug(BANK), "1")
    assert {"Berlin", "Maria"} <= {r["name"] for r in before if r["ep"] == first}
    await engine.forget(BANK, ids=["1"])
    after = await mentions()
    assert sorted((r["ep"], r["name"]) for r in after) == sorted(
        (r["ep"], r["name"]) for r in before if r["ep"] != first)
    assert "Berlin" in texts(await engine.search(BANK, "Berlin in May"))


async def test_later_contradicting_fact_supersedes_and_as_of_finds_the_old(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    await engine.ingest(BANK, [turn(2, "I moved, I live in Paris now", days=30)])
    now = [r for r in await engine.search(BANK, "where do I live") if r.kind == "fact"]
    assert any("Paris" in r.text for r in now)
    assert not any("Berlin" in r.text for r in now), "a superseded fact is not current"
    past = [r for r in await engine.search(BANK, "where do I live", as_of=T0 + timedelta(days=2))
            if r.kind == "fact"]
    assert any("Berlin" in r.text for r in past) and not any("Paris" in r.text for r in past)
    berlin = next(r for r in past if "Berlin" in r.text)
    assert berlin.invalid_at == T0 + timedelta(days=30)


async def test_an_old_turn_arriving_late_does_not_supersede_the_newer_fact(engine):
    await engine.ingest(BANK, [turn(2, "I live in Paris", days=30)])
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])      # imported history, older
    now = [r for r in await engine.search(BANK, "where do I live") if r.kind == "fact"]
    assert any("Paris" in r.text for r in now) and not any("Berlin" in r.text for r in now)


async def test_forget_text_lists_first_then_removes_everywhere(engine):
    await engine.ingest(BANK, [turn(1, "My dentist is Dr Okafor in Leipzig"),
                               turn(2, "I enjoy cooking Italian food", days=1)])
    preview = await engine.forget(BANK, text="dentist Dr Okafor", confirm=False)
    assert preview.dry_run and preview.matches and not preview.forgotten
    assert "Okafor" in texts(await engine.search(BANK, "Okafor")), "a dry run removes nothing"
    report = await engine.forget(BANK, text="dentist Dr Okafor")
    assert report.episodes_removed == 1 and report.sources == ["1"]
    assert "okafor" not in texts(await engine.search(BANK, "dentist Okafor Leipzig")).lower()
    dump = json.dumps(await engine.export(BANK)).lower()
    assert "okafor" not in dump and "leipzig" not in dump
    for page in ("entities", "facts", "episodes"):
        assert "okafor" not in json.dumps(await engine.browse(BANK, page)).lower()
    assert "cooking" in texts(await engine.search(BANK, "cooking")).lower(), "other memories stay"


async def test_forget_weak_match_forgets_nothing(engine):
    await engine.ingest(BANK, [turn(1, "My dentist is Dr Okafor")])
    report = await engine.forget(BANK, text="the weather in Tokyo tomorrow")
    assert report.forgotten == [] and report.episodes_removed == 0
    assert (await engine.stats(BANK)).episodes == 1


async def test_forget_shared_entity_keeps_its_summary_free_of_forgotten_text(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin"), turn(2, "I work at Siemens", days=1)])
    fact = next(r for r in await engine.search(BANK, "Siemens") if r.kind == "fact")
    await engine.forget(BANK, ids=[fact.id])
    entities = await engine.browse(BANK, "entities")
    user = next(e for e in entities if e["name"] == "User")
    assert "Siemens" not in user["summary"] and "Berlin" in user["summary"]


async def test_a_forget_that_fails_part_way_changes_nothing_and_a_retry_completes_it(engine, monkeypatch):
    """A write error at the forget's last step (the surviving entities' summaries, after the
    facts, entities and episode are deleted) leaves the bank as it was: one transaction."""
    from memoryplus.engine.store import StoreError, WriteStoreError
    await engine.ingest(BANK, [turn(1, "I live in Berlin"), turn(2, "I work at Siemens", days=1)])
    before = sorted(json.dumps(r, sort_keys=True, default=str) for r in await engine.export(BANK))
    fact = next(r for r in await engine.search(BANK, "Siemens") if r.kind == "fact")
    query = engine.pool.query

    async def disk_fails_at_the_summaries(bank, name, /, **params):
        if name == "set_summary":
            raise WriteStoreError("writing to its database failed: [Errno 5] Input/output error (test)")
        return await query(bank, name, **params)
    monkeypatch.setattr(engine.pool, "query", disk_fails_at_the_summaries)
    with pytest.raises(StoreError):
        await engine.forget(BANK, ids=[fact.id])
    after = sorted(json.dumps(r, sort_keys=True, default=str) for r in await engine.export(BANK))
    assert after == before, "a failed forget changes nothing"
    assert "Siemens" in texts(await engine.search(BANK, "Siemens"))

    monkeypatch.setattr(engine.pool, "query", query)
    report = await engine.forget(BANK, ids=[fact.id])
    assert report.sources == ["2"] and report.episodes_removed == 1
    assert "siemens" not in json.dumps(await engine.export(BANK)).lower()
    assert "Berlin" in texts(await engine.search(BANK, "Where do I live?"))


async def test_forget_last_removes_the_newest_turn(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    await engine.ingest(BANK, [turn(2, "I adopted a cat named Whiskers", days=1)])
    report = await engine.forget(BANK, last=True)
    assert report.sources == ["2"]
    assert "whiskers" not in json.dumps(await engine.export(BANK)).lower()
    assert (await engine.stats(BANK)).episodes == 1


@pytest.mark.option("memory_feedback")
async def test_rating_moves_a_memory_within_bounds(engine):
    await engine.ingest(BANK, [turn(1, "I like jazz music"), turn(2, "I like rock music", days=1)])
    before = {r.id: r.score for r in await engine.search(BANK, "I like music") if r.kind == "fact"}
    assert len(before) == 2
    liked, disliked = sorted(before, key=before.get)          # lift the lower, sink the higher
    for _ in range(5):
        up = await engine.rate(BANK, liked, +1)
        down = await engine.rate(BANK, disliked, -1)
    assert (up, down) == (2, -2), "ratings are bounded"
    after = {r.id: r.score for r in await engine.search(BANK, "I like music") if r.kind == "fact"}
    assert after[liked] == pytest.approx(before[liked] * 1.3, rel=1e-3)
    assert after[disliked] == pytest.approx(before[disliked] * 0.7, rel=1e-3)
    with pytest.raises(EngineError):
        await engine.rate(BANK, liked, 5)


async def test_banks_are_isolated_even_with_hostile_names(engine):
    names = ["../../etc", "Work", "work", "wörk", "a b 'c' `d`", "current.chat", "x" * 300, "日本語"]
    for i, name in enumerate(names):
        await engine.ingest(name, [turn(f"{i}", f"My secret code word is Zebra{i}")])
    for i, name in enumerate(names):
        found = texts(await engine.search(name, "secret code word"))
        assert f"Zebra{i}" in found
        assert not any(f"Zebra{j}" in found for j in range(len(names)) if j != i)
    data = engine.data_dir.resolve()
    for path in data.rglob("*"):
        assert data in path.resolve().parents
    listed = {b.name for b in await engine.banks_info()}
    assert listed == set(names)


async def test_twenty_banks_stay_open_together_in_one_worker(engine):
    # one bank per preset: Kuzu's default address-space reservation let only 15 open at once
    for i in range(20):
        await engine.ingest(f"preset {i}", [turn(f"{i}", f"My locker number is {1000 + i}")])
    assert len(engine.banks) == 20
    for i in range(20):
        assert f"{1000 + i}" in texts(await engine.search(f"preset {i}", "locker number"))


async def test_export_import_roundtrip_merges_by_id(make_engine, tmp_path):
    src = make_engine(tmp_path / "a")
    await src.ingest(BANK, [turn(1, "I live in Berlin"), turn(2, "I love hiking", days=1)])
    records = await src.export(BANK)
    dst = make_engine(tmp_path / "b")
    first = await dst.import_("copy", records)
    second = await dst.import_("copy", records)
    assert first["problems"] == [] and second["problems"] == []
    assert (await dst.stats("copy")).episodes == 2, "importing twice merges by id"
    assert "Berlin" in texts(await dst.search("copy", "where do I live"))


async def test_import_reports_bad_lines_and_keeps_good_ones(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    records = await engine.export(BANK)
    bad = records + [{"type": "fact", "uuid": "x"}, {"type": "entity", "uuid": "y", "name": "Q",
                                                     "name_embedding": [0.1, 0.2]}, {"type": "nope"}]
    out = await engine.import_("other", bad)
    assert len(out["problems"]) == 3 and all("line" in p for p in out["problems"])
    assert (await engine.stats("other")).episodes == 1


async def engine_with_another_embedder(make_engine, where):
    """An engine whose embedder is not the one the bank at `where` was built with."""
    from memoryplus.engine.providers import EmbedderChoice
    first = make_engine(where)
    await first.ingest(BANK, [turn(1, "I live in Berlin")])
    await first.close()
    other = make_engine(where)
    other.embedder_override = EmbedderChoice("hash", "hash", 384)
    return other


async def test_embedding_dimension_mismatch_is_refused_until_reembed(make_engine, tmp_path):
    other = await engine_with_another_embedder(make_engine, tmp_path / "d")
    with pytest.raises(EmbeddingMismatchError, match="re-embed"):
        await other.search(BANK, "Berlin")
    assert await other.reembed(BANK) > 0
    assert "Berlin" in texts(await other.search(BANK, "where do I live"))


async def test_a_bank_built_with_another_embedder_can_be_cleared(make_engine, tmp_path):
    other = await engine_with_another_embedder(make_engine, tmp_path / "d")
    await other.clear(BANK)
    assert not other.known(BANK) and BANK not in [b.name for b in await other.banks_info()]
    await other.ingest(BANK, [turn(2, "I live in Porto")])     # starts again, with this embedder
    assert "Porto" in texts(await other.search(BANK, "where do I live"))


async def test_a_bank_held_by_another_process_gives_a_clear_error(engine, tmp_path):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    script = textwrap.dedent(f"""
        import asyncio, sys, time
        from memoryplus.config.schema import Settings
        from memoryplus.engine.memory_engine import MemoryEngine
        async def main():
            e = MemoryEngine(Settings(extraction_engine='local', embedding_provider='local'),
                             {str(tmp_path / 'data')!r}, app='PyGPT')
            await e.stats({BANK!r})
            print('ready', flush=True)
            sys.stdin.readline()
            await e.close()
        asyncio.run(main())
    """)
    await engine.close()
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"})
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(BankLockedError) as err:
            await engine.search(BANK, "Berlin")
        assert f"pid {holder.pid}" in str(err.value) and "PyGPT" in str(err.value)
    finally:
        holder.communicate("\n", timeout=30)
    assert "Berlin" in texts(await engine.search(BANK, "where do I live")), "the lock is released"


async def test_an_interrupted_local_ingest_leaves_nothing_and_its_retry_stores_it_once(engine):
    """A turn is written in one transaction: a crash after all of its rows, before it is
    complete, leaves no trace of it (no episode, no entity), and the retry that the queue
    makes stores it whole, its entity too (the in-memory entity index forgot the rolled-back
    one)."""
    from memoryplus.engine.local_writer import LocalGraphWriter
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    before = sorted(json.dumps(r, sort_keys=True, default=str) for r in await engine.export(BANK))
    original = LocalGraphWriter.write

    async def crash_midway(self, bank, episode, meta):
        await original(self, bank, episode, meta)   # all graph writes done ...
        raise KeyboardInterrupt                       # ... but never marked complete

    LocalGraphWriter.write = crash_midway
    try:
        with pytest.raises(KeyboardInterrupt):
            await engine.ingest(BANK, [turn(2, "I work at Siemens", days=1)])
    finally:
        LocalGraphWriter.write = original
    after = sorted(json.dumps(r, sort_keys=True, default=str) for r in await engine.export(BANK))
    assert after == before, "nothing of the interrupted turn is left"
    assert (await engine.ingest(BANK, [turn(2, "I work at Siemens", days=1)])).stored == ["2"]
    siemens = [r for r in await engine.search(BANK, "Siemens") if r.kind == "fact"]
    assert len(siemens) == 1 and siemens[0].sources == ["2"]
    entities = [r for r in await engine.export(BANK) if r["type"] == "entity" and r["name"] == "Siemens"]
    assert len(entities) == 1
    await engine.close()                                  # a restart finds it whole
    assert (await engine.stats(BANK)).episodes == 2
    assert all(e["complete"] for e in await engine.browse(BANK, "episodes"))


async def test_unknown_bank_is_an_error_for_reads(engine):
    with pytest.raises(UnknownBankError, match="unknown bank"):
        await engine.search("nope", "anything")
    with pytest.raises(UnknownBankError):
        await engine.stats("nope")


async def test_remember_stores_even_when_pruning_would_skip(make_engine):
    eng = make_engine(auto_prune=True, low_value_threshold=10)
    rep = await eng.ingest(BANK, [turn(1, "ok thanks")])
    assert "1" in rep.skipped and "pruned" in rep.skipped["1"]
    rep = await eng.remember(BANK, "Parking spot 42")
    assert rep.stored
    assert "42" in texts(await eng.search(BANK, "parking spot"))


@pytest.mark.option("auto_prune")
@pytest.mark.option("low_value_threshold")
async def test_prune_counts_words_without_role_labels(make_engine):
    eng = make_engine(auto_prune=True, low_value_threshold=3)
    rep = await eng.ingest(BANK, [Turn(id="1", user="hi", assistant="hello"),
                                  Turn(id="2", user="I live in Berlin", assistant="")])
    assert list(rep.skipped) == ["1"] and rep.stored == ["2"]
    plain = make_engine(directory=eng.data_dir.parent / "plain")
    await plain.ingest(BANK, [Turn(id="1", user="hi", assistant="hello"), Turn(id="2", user="I live in Berlin")])
    assert await plain.prune(BANK, 3) == 1
    assert (await plain.stats(BANK)).episodes == 1


@pytest.mark.option("low_value_threshold")
async def test_the_threshold_sets_how_many_words_a_turn_needs(make_engine, tmp_path):
    turns = [Turn(id="1", user="I live in Berlin"), Turn(id="2", user="My sister Ilse lives in Graz")]
    strict = make_engine(tmp_path / "strict", auto_prune=True, low_value_threshold=6)
    rep = await strict.ingest(BANK, turns)
    assert list(rep.skipped) == ["1"] and rep.stored == ["2"]
    lenient = make_engine(tmp_path / "lenient", auto_prune=True, low_value_threshold=2)
    assert (await lenient.ingest(BANK, turns)).stored == ["1", "2"]


@pytest.mark.option("memory_expiry_days")
async def test_expiry_counts_from_when_stored_not_the_conversation_date(make_engine):
    eng = make_engine(memory_expiry_days=30)
    old_conversation = Turn(id="1", user="I live in Berlin", time=T0 - timedelta(days=3000))
    await eng.ingest(BANK, [old_conversation])
    assert await eng.expire(BANK) == 0, "imported old chats do not vanish at the next check"
    assert await eng.expire(BANK, days=0) == 0, "0 disables expiry"


@pytest.mark.option("memory_expiry_days")
async def test_a_memory_stored_longer_ago_than_the_expiry_is_deleted(make_engine):
    """A bank restored from a backup made 40 days ago: with a 30-day expiry, the turn stored
    then goes (its facts with it), the one stored today stays; 0 keeps both."""
    eng = make_engine(memory_expiry_days=30)
    await eng.ingest("today", [Turn(id="old", user="My locker code is amber falcon."),
                               Turn(id="new", user="I live in Berlin.")])
    backup = await eng.export("today")
    stored_then = (datetime.now(timezone.utc) - timedelta(days=40)).isoformat()
    for record in backup:
        if record["type"] == "episode" and json.loads(record["name"])["id"] == "old":
            record["created_at"] = stored_then
    await eng.import_("restored", backup)
    assert await eng.expire("restored", days=0) == 0, "0 keeps memories forever"
    assert await eng.expire("restored") == 1
    left = [e["source"] for e in await eng.browse("restored", "episodes")]
    assert left == ["new"], left
    found = await eng.search("restored", "locker code amber falcon")
    assert not any("old" in r.sources for r in found), texts(found)
    assert "Berlin" in texts(await eng.search("restored", "where do I live"))


@pytest.mark.option("kuzu_buffer_pool_mb")
async def test_a_bank_opens_with_the_configured_buffer_pool_and_reopens_on_a_change(make_engine):
    eng = make_engine(kuzu_buffer_pool_mb=96)
    await eng.ingest(BANK, [turn(1, "I live in Berlin")])
    assert eng.banks[BANK].driver.db.buffer_pool_size == 96 * 1024 * 1024
    await eng.update_settings(eng.settings.model_copy(update={"kuzu_buffer_pool_mb": 128}))
    assert "Berlin" in texts(await eng.search(BANK, "Berlin"))
    assert eng.banks[BANK].driver.db.buffer_pool_size == 128 * 1024 * 1024


@pytest.mark.option("max_memory_length")
async def test_max_memory_length_truncates_stored_turns(make_engine):
    eng = make_engine(max_memory_length=100)
    await eng.ingest(BANK, [Turn(id="1", user="word " * 1000)])
    episode = (await eng.browse(BANK, "episodes"))[0]
    assert len(episode["text"].split()) <= 110


@pytest.mark.option("custom_memory_tags")
@pytest.mark.option("topic_tagging")
@pytest.mark.option("emotion_tagging")
async def test_tags_follow_the_settings(make_engine, tmp_path):
    on = make_engine(tmp_path / "on", custom_memory_tags="work, q3 ")
    await on.ingest(BANK, [turn(1, "I am so happy, my Linux server finally boots!")])
    tags = (await on.browse(BANK, "episodes"))[0]["tags"]
    assert "tag:work" in tags and "tag:q3" in tags
    assert any(t.startswith("emotion:") for t in tags) and "topic:linux" in tags
    off = make_engine(tmp_path / "off", emotion_tagging=False, topic_tagging=False)
    await off.ingest(BANK, [turn(1, "I am so happy, my Linux server finally boots!")])
    tags = (await off.browse(BANK, "episodes"))[0]["tags"]
    assert not any(t.startswith(("emotion:", "topic:")) for t in tags)


async def test_bank_closes_releasing_its_lock_and_reopens(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    bank_dir = engine.banks[BANK].dir
    assert (bank_dir / "owner.json").exists()
    await engine.close()
    assert not (bank_dir / "owner.json").exists()
    assert "Berlin" in texts(await engine.search(BANK, "Berlin"))


async def test_reopening_a_bank_logs_no_error(engine, caplog):
    """A user reading the worker's log sees no ERROR for a bank that opens as it should (the
    full-text indexes it already has were built again, and graphiti logged each refusal)."""
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    await engine.close()
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert "Berlin" in texts(await engine.search(BANK, "Berlin"))
    assert not [r for r in caplog.records if r.levelno >= 40], caplog.text


@pytest.mark.option("backend")
@pytest.mark.option("neo4j_uri")
async def test_the_neo4j_backend_goes_to_the_configured_server_and_not_to_kuzu(make_engine, tmp_path):
    """No Neo4j here (tests/test_neo4j.py runs against one when NEO4J_URI is set): a listener
    on the loopback address stands in for the server. Backend neo4j connects to the URI set,
    says so clearly when the server does not answer Bolt, never echoes the password, and
    writes no Kuzu bank."""
    import socket
    import threading
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(20)
    handshakes: list[bytes] = []

    def serve():
        try:
            while True:
                conn, _ = listener.accept()
                with conn:
                    handshakes.append(conn.recv(4))
                    conn.sendall(bytes(4))          # "no Bolt version in common": not a server of ours
        except OSError:
            pass
    threading.Thread(target=serve, daemon=True).start()
    uri = f"bolt://127.0.0.1:{listener.getsockname()[1]}"
    password = "neo4jPw-never-echoed-7c1f"
    eng = make_engine(tmp_path / "data", backend="neo4j", neo4j_uri=uri, neo4j_password=password)
    try:
        with pytest.raises(StoreError) as info:
            await eng.ingest(BANK, [turn(1, "I live in Berlin")])
    finally:
        listener.close()
    assert handshakes and handshakes[0] == bytes.fromhex("6060b017"), "Bolt's magic reached the URI set"
    assert str(info.value).startswith(f"cannot connect to Neo4j at {uri}") and password not in str(info.value)
    assert not (tmp_path / "data" / "kuzu").exists() or not any((tmp_path / "data" / "kuzu").iterdir())


@pytest.mark.option("backend")
async def test_clear_deletes_the_bank(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    await engine.clear(BANK)
    assert await engine.banks_info() == []
    with pytest.raises(UnknownBankError):
        await engine.search(BANK, "Berlin")


async def test_forget_needs_exactly_one_target(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    with pytest.raises(EngineError):
        await engine.forget(BANK)


@pytest.mark.option("vibe_scoring")
@pytest.mark.option("emotion_sensitivity")
async def test_vibe_and_emotion_sensitivity(make_engine, tmp_path):
    text = "Ugh, the build failed again lol, but I'm thrilled about the new job!"
    results = {}
    for level in ("Low", "High"):
        eng = make_engine(tmp_path / level, emotion_sensitivity=level, vibe_scoring=True)
        await eng.ingest(BANK, [turn(1, text)])
        results[level] = (await eng.browse(BANK, "episodes"))[0]
    low = {t for t in results["Low"]["tags"] if t.startswith("emotion:")}
    high = {t for t in results["High"]["tags"] if t.startswith("emotion:")}
    assert low < high, (low, high)
    assert 0.0 <= results["High"]["vibe"] <= 1.0
    off = make_engine(tmp_path / "off")
    await off.ingest(BANK, [turn(1, text)])
    assert (await off.browse(BANK, "episodes"))[0]["vibe"] is None


async def test_local_extraction_types_entities_by_mode(make_engine, tmp_path):
    labels = {}
    for mode in ("Identity", "Productivity"):
        eng = make_engine(tmp_path / mode, memory_mode=mode)
        await eng.ingest(BANK, [turn(1, "I live in Berlin and I'm working on the Apollo project, due on Friday. "
                                        "I prefer green tea.")])
        labels[mode] = {lab for e in await eng.browse(BANK, "entities") for lab in e["labels"]} - {"Entity"}
    assert labels["Identity"] != labels["Productivity"], labels


async def test_banks_are_recycled_when_idle_and_keep_their_memories(engine, monkeypatch):
    from memoryplus.engine import bank_pool
    monkeypatch.setattr(bank_pool, "RECYCLE_AFTER_QUERIES", 10)
    await engine.ingest(BANK, [turn(i, f"I visited Museum{i} in Vienna") for i in range(5)])
    first = engine.banks[BANK]
    assert await engine.maintain() is True
    assert BANK not in engine.banks and not (first.dir / "owner.json").exists()
    assert "Museum3" in texts(await engine.search(BANK, "Museum3 Vienna"))
    assert engine.banks[BANK] is not first


def _fulltext_indexes(bank_dir) -> set[str]:
    """The bank's full-text indexes, and Kuzu's stop-word table of them if it is there."""
    import kuzu

    from memoryplus.engine.stopwords import STOPWORDS_TABLE
    db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=64 * 1024 * 1024)
    conn = kuzu.Connection(db)
    try:
        conn.execute("CALL enable_internal_catalog=true")
        tables = {r[0] for r in conn.execute("CALL SHOW_TABLES() RETURN name").get_all()}
        return ({r[0] for r in conn.execute("CALL SHOW_INDEXES() RETURN index_name").get_all()}
                | ({STOPWORDS_TABLE} & tables))
    finally:
        conn.close()
        db.close()


async def test_a_bank_keeps_no_full_text_index(make_engine, tmp_path):
    """graphiti's searches by words are answered by the word index, so Kuzu's full-text
    indexes (and their stop-word table) are only a cost: 33 MB of an open bank's memory and
    work at every write. A new bank has none; a bank an older version made with all four of
    graphiti's loses them when it opens, and still finds its turns, facts and entities by
    their words and stores new ones."""
    import kuzu
    from graphiti_core.driver.kuzu_driver import SCHEMA_QUERIES

    from memoryplus.engine.kuzu_repair import graphiti_fulltext_indexes
    from memoryplus.engine.search_ops import search_filter
    data = tmp_path / "data"
    eng = make_engine(data)
    await eng.ingest(BANK, [turn(i, f"I visited Museum{i} in Vienna") for i in range(3)])
    bank_dir = eng.banks[BANK].dir
    await eng.close()
    assert _fulltext_indexes(bank_dir) == set()
    db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=64 * 1024 * 1024)
    conn = kuzu.Connection(db)      # what an older version left
    conn.execute(SCHEMA_QUERIES)
    for _table, _index, create in graphiti_fulltext_indexes():
        conn.execute(create)
    conn.close()
    db.close()
    (bank_dir / "no-fulltext-indexes").unlink(missing_ok=True)   # as an older version left it
    (bank_dir / "indexes-checked").write_text("")
    assert len(_fulltext_indexes(bank_dir)) == 5
    again = make_engine(data)
    await again.ingest(BANK, [turn(3, "I visited Museum3 in Graz")])
    assert "Museum1" in texts(await again.search(BANK, "Museum1 Vienna"))
    assert "Museum3" in texts(await again.search(BANK, "Museum3 Graz"))
    names = {e["name"] for e in await again.browse(BANK, "entities")}
    assert "Museum3" in names
    bank = again.banks[BANK]
    found = await bank.graph_index.nodes_by_words("Museum3", search_filter(None), [bank.slug], 10)
    assert "Museum3" in {n.name for n in found}, "an entity found by its words"
    await again.close()
    assert _fulltext_indexes(bank_dir) == set()


def _tables(bank_dir) -> set[str]:
    import kuzu
    db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=64 * 1024 * 1024)
    conn = kuzu.Connection(db)
    try:
        return {r[0] for r in conn.execute("CALL SHOW_TABLES() RETURN name").get_all()}
    finally:
        conn.close()
        db.close()


async def test_a_bank_keeps_no_community_or_saga_table(make_engine, tmp_path):
    """graphiti's Community and Saga tables (with HAS_MEMBER, HAS_EPISODE) hold what
    MemoryPlus never makes, yet cost every open bank ~11 MB. A bank stores, finds and forgets
    without ever making them; one an older version made with graphiti's whole schema loses
    them (empty) when it opens, and keeps its memories."""
    from graphiti_core.driver.kuzu_driver import SCHEMA_QUERIES

    from memoryplus.engine.kuzu_schema import UNUSED_TABLES
    data = tmp_path / "data"
    eng = make_engine(data)
    await eng.ingest(BANK, [turn(1, "My dentist is Dr Okafor in Leipzig"),
                            turn(2, "I enjoy cooking Italian food", days=1)])
    assert "Okafor" in texts(await eng.search(BANK, "dentist Okafor"))
    report = await eng.forget(BANK, text="dentist Dr Okafor")
    assert report.episodes_removed == 1
    assert "okafor" not in texts(await eng.search(BANK, "dentist Okafor Leipzig")).lower()
    bank_dir = eng.banks[BANK].dir
    await eng.close()
    tables = _tables(bank_dir)
    assert {"Episodic", "Entity", "RelatesToNode_", "MENTIONS"} <= tables
    assert not tables & set(UNUSED_TABLES)

    import kuzu
    db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=64 * 1024 * 1024)
    conn = kuzu.Connection(db)      # what an older version left: graphiti's whole schema
    conn.execute(SCHEMA_QUERIES)
    conn.close()
    db.close()
    assert set(UNUSED_TABLES) <= _tables(bank_dir)
    again = make_engine(data)
    await again.ingest(BANK, [turn(3, "I visited Museum3 in Graz", days=2)])
    assert "cooking" in texts(await again.search(BANK, "cooking")).lower()
    assert "Museum3" in texts(await again.search(BANK, "Museum3 Graz"))
    await again.close()
    assert not _tables(bank_dir) & set(UNUSED_TABLES)


async def test_a_bank_whose_community_table_cannot_be_dropped_keeps_all_of_them(make_engine, tmp_path):
    """Kuzu refuses to drop a table an index refers to (after dropping the tables before it):
    the bank then keeps every community and saga table, and stores, finds and forgets."""
    import kuzu
    from graphiti_core.driver.kuzu_driver import SCHEMA_QUERIES

    from memoryplus.engine.kuzu_repair import INDEXES_CHECKED
    from memoryplus.engine.kuzu_schema import UNUSED_TABLES
    data = tmp_path / "data"
    eng = make_engine(data)
    await eng.ingest(BANK, [turn(1, "My dentist is Dr Okafor in Leipzig")])
    bank_dir = eng.banks[BANK].dir
    await eng.close()
    db = kuzu.Database(str(bank_dir / "graph.kuzu"), buffer_pool_size=64 * 1024 * 1024)
    conn = kuzu.Connection(db)
    conn.execute(SCHEMA_QUERIES)
    conn.execute("CALL CREATE_FTS_INDEX('Community', 'community_name', ['name'])")
    conn.close()
    db.close()
    (bank_dir / INDEXES_CHECKED).write_text("")     # not the repair's to drop: checked already
    again = make_engine(data)
    await again.ingest(BANK, [turn(2, "I enjoy cooking Italian food", days=1)])
    assert "cooking" in texts(await again.search(BANK, "cooking")).lower()
    assert (await again.forget(BANK, text="dentist Dr Okafor")).episodes_removed == 1
    assert "okafor" not in texts(await again.search(BANK, "dentist Okafor Leipzig")).lower()
    await again.close()
    assert set(UNUSED_TABLES) <= _tables(bank_dir)


async def test_graphiti_communities_still_work_on_a_bank_without_their_table(make_engine, tmp_path):
    """A graphiti call that needs the community tables makes them, and what it stores there
    stays (a bank drops only empty ones)."""
    from graphiti_core.nodes import CommunityNode
    data = tmp_path / "data"
    eng = make_engine(data)
    await eng.ingest(BANK, [turn(1, "I enjoy cooking Italian food")])
    bank = eng.banks[BANK]
    assert await CommunityNode.get_by_group_ids(bank.driver, [bank.slug]) == []
    node = CommunityNode(name="Cooking", group_id=bank.slug, labels=["Community"],
                         summary="food", name_embedding=[0.1] * 8)
    await node.save(bank.driver)
    await bank.driver.execute_query("MATCH (n:Community {uuid: $uuid}) SET n.summary = $s",
                                    uuid=node.uuid, s="Italian food")
    bank_dir = bank.dir
    await eng.close()
    again = make_engine(data)
    await again.ingest(BANK, [turn(2, "I visited Graz", days=1)])
    bank = again.banks[BANK]
    found = await CommunityNode.get_by_group_ids(bank.driver, [bank.slug])
    assert [(c.name, c.summary) for c in found] == [("Cooking", "Italian food")]
    await found[0].delete(bank.driver)
    assert await CommunityNode.get_by_group_ids(bank.driver, [bank.slug]) == []
    assert "cooking" in texts(await again.search(BANK, "cooking")).lower()
    await again.close()
    third = make_engine(data)
    assert "cooking" in texts(await third.search(BANK, "cooking")).lower()
    await third.close()
    assert "Community" not in _tables(bank_dir), "dropped once empty again"


@pytest.mark.option("search_depth")
async def test_search_depth_is_the_candidate_pool(make_engine, tmp_path):
    turns = [turn(i, f"The zebra number {i} lives in Zoo{i}") for i in range(15)]
    shallow = make_engine(tmp_path / "s", search_depth=2)
    deep = make_engine(tmp_path / "d", search_depth=20)
    for eng in (shallow, deep):
        await eng.ingest(BANK, turns)
    few = await shallow.search(BANK, "zebra lives in zoo", limit=50)
    many = await deep.search(BANK, "zebra lives in zoo", limit=50)
    assert len(few) <= 2 * 3, "at most search_depth candidates of each kind"
    assert len(many) > len(few)
    assert len(await deep.search(BANK, "zebra lives in zoo", limit=4)) == 4, "the limit cuts the fused list"


async def test_fewer_results_are_the_head_of_more_and_unfinished_turns_never_show(engine):
    """Sources are looked up only for the candidates that can make the list: asking for 3
    must give exactly the first 3 of the longer list, also when the best-scoring candidates
    come from a turn whose storing was interrupted (pending: never shown)."""
    from memoryplus.engine.local_writer import LocalGraphWriter
    await engine.ingest(BANK, [turn(i, f"The zebra number {i} lives in Zoo{i} near the river", days=i)
                               for i in range(12)])
    original = LocalGraphWriter.write

    async def crash_midway(self, bank, episode, meta):
        await original(self, bank, episode, meta)
        raise KeyboardInterrupt

    LocalGraphWriter.write = crash_midway
    try:
        with pytest.raises(KeyboardInterrupt):
            await engine.ingest(BANK, [turn("okapi", "The okapi Kibo lives in Zoo7 near the river", days=20)])
    finally:
        LocalGraphWriter.write = original
    query = "okapi Kibo lives in Zoo7 near the river"
    everything = await engine.search(BANK, query, limit=100)
    assert everything and all("okapi" not in r.sources for r in everything)
    for k in (1, 2, 3, 5, 8):
        head = await engine.search(BANK, query, limit=k)
        assert [(r.id, r.score, r.sources) for r in head] == \
               [(r.id, r.score, r.sources) for r in everything[:k]]


async def test_a_turn_is_answered_as_stored_only_once_it_is_flushed_from_the_log(engine):
    """Kuzu 0.11.3 can crash replaying a killed worker's log; an answered turn must not
    depend on a replay: the batch's writes are checkpointed before the answer."""
    report = await engine.ingest("flushed", [turn(1, "My godmother Signe lives in Bergen.")])
    assert report.stored == ["1"]
    wal = engine.banks["flushed"].dir / "graph.kuzu.wal"
    assert not wal.exists() or wal.stat().st_size == 0
    assert "Bergen" in texts(await engine.search("flushed", "Where does Signe live?"))


async def test_a_question_about_the_past_finds_the_fact_that_was_replaced(engine):
    # many turns name the new company, so plain keyword search would bury the old job
    await engine.ingest(BANK, [turn(1, "My cousin Anton works at Redwood Clinic.")])
    await engine.ingest(BANK, [turn(10 + i, f"{n} works at Lumen Energy.", days=1)
                               for i, n in enumerate(["Mira", "Nadia", "Bettina", "Kofi", "Rosa",
                                                      "Hugo", "Selin", "Omar", "Petra", "Luca"])])
    await engine.ingest(BANK, [turn(2, "Anton switched employers and now works at Lumen Energy.", days=30)])
    asked, query = [], engine.pool.query

    async def counting(bank, name, /, **params):
        asked.append(name)
        return await query(bank, name, **params)
    engine.pool.query = counting
    try:
        past = await engine.search(BANK, "Where did Anton work before joining Lumen Energy?", limit=5)
    finally:
        engine.pool.query = query
    old = next((r for r in past if r.kind == "fact" and "Redwood" in r.text), None)
    assert old is not None, texts(past)
    assert "ended_facts_named" not in asked, "Kuzu: the kept fact rows answer which facts ended"
    assert old.sources == ["1"] and old.invalid_at == T0 + timedelta(days=30), "shown as no longer true"
    now = await engine.search(BANK, "Where does Anton work?")
    assert not any(r.kind == "fact" and "Redwood" in r.text for r in now), "not current: not offered"


async def test_my_boss_is_resolved_to_the_person_the_user_named(engine):
    await engine.ingest(BANK, [turn(1, "My boss is Tomasz."),
                               turn(2, "Tomasz works as an architect.", days=1),
                               turn(3, "My neighbour Priya works as a pharmacist.", days=2)])
    results = await engine.search(BANK, "What does my boss do for a living?", limit=5)
    # the boss's job, from the turn that said it (as a fact, the turn, or Tomasz's summary:
    # one result per turn, so whichever ranks first stands for that turn)
    assert any("architect" in r.text and "2" in r.sources for r in results), texts(results)
    assert not any("pharmacist" in r.text for r in results[:1]), "the neighbour is not the boss"


async def test_forgetting_the_newer_fact_makes_the_older_one_current_again(engine):
    await engine.ingest(BANK, [turn(1, "I live in Berlin")])
    await engine.ingest(BANK, [turn(2, "I moved, I live in Paris now", days=30)])
    report = await engine.forget(BANK, ids=[episode_uuid(slug(BANK), "2")])
    assert report.episodes_removed == 1
    now = [r for r in await engine.search(BANK, "where do I live") if r.kind == "fact"]
    berlin = next((r for r in now if "Berlin" in r.text), None)
    assert berlin is not None and berlin.invalid_at is None, texts(now)
    assert not any("Paris" in r.text for r in now)
    assert (await engine.stats(BANK)).current_facts >= 1


async def test_a_long_backfill_fits_the_smallest_buffer_pool(make_engine):
    """Kuzu keeps unflushed pages in its buffer pool: a backfill that never pauses must flush
    as it goes, or it fails with 'buffer pool is full' (at ~4 turns per MB)."""
    from memoryplus.cli.bench import load_data, make_turn
    eng = make_engine(extraction_engine="local", embedding_provider="local", kuzu_buffer_pool_mb=64)
    turns, _ = load_data(400)
    stored = 0
    for i in range(0, len(turns), 25):
        batch = [make_turn(t, u, a, i + k) for k, (t, u, a) in enumerate(turns[i:i + 25])]
        report = await eng.ingest("backfill", batch)
        assert len(report.stored) + len(report.skipped) == len(batch), report
        stored += len(report.stored)
    assert stored > 350 and (await eng.stats("backfill")).episodes == stored


async def test_a_deferred_flush_is_said_and_done_with_a_later_batch_or_when_idle(engine):
    first = await engine.ingest("defer", [turn(1, "My aunt Greta lives in Graz.")], defer_flush=True)
    assert first.stored == ["1"] and first.flushed is False and first.instance == engine.instance
    wal = engine.banks["defer"].dir / "graph.kuzu.wal"
    assert wal.exists() and wal.stat().st_size > 0
    second = await engine.ingest("defer", [turn(2, "My uncle Imre lives in Brno.", days=1)])
    assert second.flushed is True and (not wal.exists() or wal.stat().st_size == 0)
    await engine.ingest("defer", [turn(3, "My niece Talia lives in Cork.", days=2)], defer_flush=True)
    await engine.maintain()          # the worker, idle
    assert not wal.exists() or wal.stat().st_size == 0


async def test_an_answer_says_whether_the_turns_answered_unflushed_before_it_are_flushed(engine):
    """A chat turn's flush waits for the worker's idle time; the next answer tells the queue
    whether the earlier turns are flushed (it keeps them spooled until then)."""
    first = await engine.ingest("held", [turn(1, "My aunt Greta lives in Graz.")], defer_flush=True)
    assert first.flushed is False and first.flushed_before is True     # nothing was held
    second = await engine.ingest("held", [turn(2, "My uncle Imre lives in Brno.", days=1)], defer_flush=True)
    assert second.flushed is False and second.flushed_before is False, "the first is not flushed yet"
    await engine.maintain()          # the worker, idle: flushes both
    wal = engine.banks["held"].dir / "graph.kuzu.wal"
    assert not wal.exists() or wal.stat().st_size == 0
    third = await engine.ingest("held", [turn(3, "My niece Talia lives in Cork.", days=2)], defer_flush=True)
    assert third.flushed is False and third.flushed_before is True
    assert "Brno" in texts(await engine.search("held", "Where does Imre live?"))


async def test_the_rewritten_fact_similarity_query_returns_what_graphitis_returns(engine):
    """kuzu_statements rewrites graphiti's fact similarity search (join after scoring, not
    before): same rows, same order, on a real bank, for graphiti's own query text."""
    import graphiti_core.driver.kuzu_driver as kd
    from graphiti_core.search.search_filters import SearchFilters
    from graphiti_core.search.search_utils import edge_similarity_search
    from memoryplus.engine.kuzu_statements import faster_query
    from memoryplus.engine.search_ops import search_filter
    people = ["Greta", "Imre", "Talia", "Bruno", "Freya", "Ravi", "Joao", "Maren"]
    await engine.ingest("sim", [turn(i, f"My friend {n} lives in {c} and works as a {j}.", days=i)
                                for i, (n, c, j) in enumerate(zip(people, ["Graz", "Brno", "Cork", "Lyon", "Ghent",
                                                                           "Osaka", "Porto", "Bergen"],
                                                                  ["baker", "nurse", "pilot", "chef", "judge",
                                                                   "welder", "tailor", "vet"]))])
    bank = engine.banks["sim"]
    seen: list[str] = []
    real = bank.driver.execute_query

    async def spy(cypher, **kw):
        seen.append(cypher)
        return await real(cypher, **kw)
    bank.driver.execute_query = spy
    try:
        for query in ("Who bakes bread?", "Where does Ravi live?", "a pilot in Cork"):
            vec = await bank.embedder.create(query)
            for flt in (SearchFilters(), search_filter(None)):
                seen.clear()
                mine = await edge_similarity_search(bank.driver, vec, None, None, flt, [bank.slug], 5, 0.0)
                original = seen[-1]
                assert faster_query(original) != original, "the shape graphiti builds is the one rewritten"
                rows, _, _ = await kd.KuzuDriver.execute_query(bank.driver, original, search_vector=vec, limit=5,
                                                               min_score=0.0, group_ids=[bank.slug])
                assert [e.uuid for e in mine] == [r["uuid"] for r in rows] and mine, query
    finally:
        bank.driver.execute_query = real
    bound = "MATCH (n:Entity)-[:RELATES_TO]->(e:RelatesToNode_)-[:RELATES_TO]->(m:Entity) WHERE n.uuid = $source_uuid " \
            "WITH DISTINCT e, n, m, array_cosine_similarity(e.fact_embedding, CAST($search_vector AS FLOAT[256])) AS score " \
            "WHERE score > $min_score RETURN e.uuid AS uuid ORDER BY score DESC LIMIT $limit"
    assert faster_query(bound) == bound, "a search bound to an entity is left as it is"


async def test_turns_read_by_key_are_the_turns_read_by_a_scan(engine, monkeypatch):
    """A search's turns are read by primary key when that is cheaper than Kuzu's scan: the
    same rows either way, none for a turn the bank does not have; and a search gives the
    same results by either way."""
    from memoryplus.engine import bank_pool
    await engine.ingest("keys", [turn(i, f"My friend number {i} lives in town {i}.", days=i) for i in range(12)])
    await engine.search("keys", "Where does my friend live?")      # the turn index is built
    bank = engine.banks["keys"]
    ids = [r["uuid"] for r in await engine.pool.query(bank, "episodes_all", gid=bank.slug)][:7] + ["no-such-turn"]
    ways: dict[bool, dict] = {}
    found: dict[bool, list] = {}
    for by_key in (True, False):
        monkeypatch.setattr(bank_pool, "lookups_cheaper", lambda keys, rows, by_key=by_key: by_key)
        read = []
        real = bank.driver.execute_each
        monkeypatch.setattr(bank.driver, "execute_each", lambda *a: read.append(a) or real(*a))
        ways[by_key] = await engine.pool.episodes(bank, ids)
        assert bool(read) == by_key
        found[by_key] = [(r.id, r.text) for r in await engine.search("keys", "Where does friend number 3 live?")]
    assert ways[True] == ways[False] and len(ways[True]) == 7 and "no-such-turn" not in ways[True]
    assert found[True] == found[False] and found[True]


async def test_a_search_shows_its_turns_texts_from_the_index_copy_and_a_forgotten_turn_leaves_none_there(engine, monkeypatch):
    """The turns a search shows carry their texts, read from the turn index's copy (not from
    the bank, ~0.22 ms a turn at 20,000 turns); a turn stored again shows its new text; a
    forgotten turn's text is gone from the copy's file, not only from its offsets."""
    await engine.ingest("copy", [turn(i, f"My cousin number {i} collects stamps from Peru and Chile {i}.",
                                      f"Stamps number {i} noted.", days=i) for i in range(8)])
    await engine.search("copy", "Who collects stamps?")              # the turn index is built
    await engine.ingest("copy", [turn(3, "My cousin number 3 collects old maps of Lisbon.", days=3),
                                 turn(9, "My neighbour Ingrid collects stamps from Norway.", days=9)])
    bank = engine.banks["copy"]
    real, read = engine.pool.episodes, []
    monkeypatch.setattr(engine.pool, "episodes", lambda b, uuids: read.append(list(uuids)) or real(b, uuids))
    shown = [r for r in await engine.search("copy", "Who collects stamps from Norway or maps of Lisbon?")
             if r.kind == "episode"]
    stored = {r["uuid"]: r["content"] for r in await engine.pool.query(bank, "episodes_all", gid=bank.slug)}
    assert len(shown) >= 3 and not read, read
    assert all(r.text == stored[r.id] for r in shown), [(r.text, stored.get(r.id)) for r in shown]
    assert any("Ingrid" in r.text for r in shown) and any("Lisbon" in r.text for r in shown)
    copy = bank.turns.texts._file                 # what anyone reading the file would see

    def raw() -> bytes:
        copy.flush()
        copy.seek(0)
        return copy.read()
    assert b"Peru and Chile 3." not in raw(), "the text a turn stored again replaced"
    assert b"Ingrid" in raw()
    monkeypatch.setattr(engine.pool, "episodes", real)
    report = await engine.forget("copy", text="neighbour Ingrid Norway stamps")
    assert report.sources == ["9"]
    assert b"Ingrid" not in raw() and b"Norway" not in raw()
    assert "Ingrid" not in texts(await engine.search("copy", "Who collects stamps from Norway?"))


async def test_a_search_half_that_fails_stops_the_other():
    """A search reads the graph and the turn index at once; when one fails, the other is
    cancelled, not left running against a bank that may be closing."""
    import asyncio
    from memoryplus.engine.search_ops import _both
    stopped = asyncio.Event()

    async def slow():
        try:
            await asyncio.sleep(30)
        finally:
            stopped.set()

    async def failing():
        await asyncio.sleep(0.01)
        raise StoreError("the graph query failed")
    with pytest.raises(StoreError):
        await _both(slow(), failing())
    assert stopped.is_set()
    assert await _both(asyncio.sleep(0, "graph"), asyncio.sleep(0, "turns")) == ["graph", "turns"]


async def test_reading_a_banks_facts_again_and_again_keeps_no_memory_behind(engine):
    """Kuzu 0.11.3's binding kept every timestamp it returned (kuzu_statements.py): a stored
    turn reads its entities' facts, and the worker grew with each. Read 300 times, a hub's
    facts (four timestamps each) leave nothing of Kuzu's results allocated."""
    import gc
    import tracemalloc
    from memoryplus.engine.queries import q
    await engine.ingest("reads", [turn(i, f"My friend {n} lives in {c}.", days=i) for i, (n, c) in
                                  enumerate(zip(["Greta", "Imre", "Talia", "Bruno", "Freya", "Ravi"],
                                                ["Graz", "Brno", "Cork", "Lyon", "Ghent", "Osaka"]))])
    bank = engine.banks["reads"]
    hubs = [r["uuid"] for r in await engine.pool.query(bank, "entities_all", gid=bank.slug)]
    cypher = q("facts_touching", bank.provider)
    rows, _, _ = await bank.driver.execute_query(cypher, uuids=hubs)
    assert len(rows) >= 6 and all(isinstance(r["created_at"], datetime) for r in rows)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(300):
            await bank.driver.execute_query(cypher, uuids=hubs)
            await bank.driver.execute_each(cypher, [{"uuids": hubs}])
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    kept = sum(s.size_diff for s in after.compare_to(before, "filename")
               if "/kuzu/" in s.traceback[0].filename)
    assert kept < 20_000, f"{kept} bytes of {600 * len(rows)} rows' results kept"


async def test_timestamps_read_as_text_are_the_datetimes_kuzu_returns(engine):
    """The rows graphiti's and our queries read through the driver carry the same datetimes
    (to the microsecond, naive, None where unset) as Kuzu's own binding returns for the
    unrewritten query."""
    import graphiti_core.driver.kuzu_driver as kd
    from graphiti_core.edges import EntityEdge
    from graphiti_core.nodes import EntityNode, EpisodicNode
    from memoryplus.engine.kuzu_statements import timestamps_as_text
    from memoryplus.engine.queries import q
    await engine.ingest("stamps", [turn(1, "My sister Vera lives in Graz.", days=1),
                                   turn(2, "My sister Vera moved to Porto.", days=40),
                                   turn(3, "My dentist is Dr. Okafor.", days=41)])
    bank = engine.banks["stamps"]
    seen: list[str] = []
    real = bank.driver.execute_query

    async def spy(cypher, **kw):
        seen.append((cypher, kw))
        return await real(cypher, **kw)
    bank.driver.execute_query = spy
    try:
        for kind in (EntityEdge, EntityNode, EpisodicNode):
            assert await kind.get_by_group_ids(bank.driver, [bank.slug])
        await engine.pool.query(bank, "facts_touching",
                                uuids=[r["uuid"] for r in await engine.pool.query(bank, "entities_all", gid=bank.slug)])
        await engine.pool.query(bank, "episodes_all", gid=bank.slug)
    finally:
        bank.driver.execute_query = real
    read = 0
    for cypher, kw in seen:
        if not timestamps_as_text(cypher)[1]:
            continue
        mine, _, _ = await bank.driver.execute_query(cypher, **kw)
        theirs, _, _ = await kd.KuzuDriver.execute_query(bank.driver, cypher, **kw)
        assert mine == theirs and mine, cypher
        read += sum(isinstance(v, datetime) for r in mine for v in r.values())
    assert read >= 20, "the queries read timestamps"
    ended = [e for e in await EntityEdge.get_by_group_ids(bank.driver, [bank.slug]) if e.invalid_at]
    assert ended and ended[0].invalid_at == T0.replace(tzinfo=None) + timedelta(days=40), "Graz, until the move"
