"""The turn index (engine/turn_index.py): keywords and the user message's meaning, a relevance
floor, the conversation's time, and nothing left of a removed turn."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

from memoryplus.engine import extract as local_extract
from memoryplus.engine.turn_index import TurnIndex, compact, split_body

T0 = datetime(2023, 5, 1, tzinfo=timezone.utc)


def vec(*xs):
    v = np.array(xs + (0.0,) * (4 - len(xs)), dtype=np.float32)
    return v / np.linalg.norm(v)


def index_of(*turns):
    idx = TurnIndex(dim=4)
    for i, (body, v) in enumerate(turns):
        idx.add(f"u{i}", body, T0 + timedelta(days=i), v)
    return idx


def test_split_body_reads_multi_line_messages():
    assert split_body("User: first\nsecond\nAssistant: reply\nmore") == ("first\nsecond", "reply\nmore")
    assert split_body("Assistant: only") == ("", "only")


def test_keywords_and_meaning_both_rank():
    idx = index_of(("User: I adopted a cat named Pistachio\nAssistant: Lovely", vec(1, 0)),
                   ("User: The weather is nice\nAssistant: Enjoy", vec(0, 1)),
                   ("User: My kitten loves salmon\nAssistant: Cute", vec(0.9, 0.1)),
                   ("User: Book a dentist visit\nAssistant: Done", vec(0, 0, 1)))
    # a word of the query: that turn first
    assert idx.search("Pistachio", vec(0, 0, 0, 1), 5)[0][0] == "u0"
    # no shared word, close in meaning (the embedder's side): found above the floor
    hits = [u for u, _ in idx.search("feline pet", vec(1, 0.05), 5)]
    assert hits[:2] in (["u0", "u2"], ["u2", "u0"]) and "u3" not in hits


def test_relevance_floor_returns_nothing_when_nothing_matches():
    idx = index_of(("User: I like jazz\nAssistant: Nice", vec(1, 0)),
                   ("User: I run on Sundays\nAssistant: Good", vec(0, 1)))
    assert idx.search("capital of Peru", vec(0, 0, 0, 1), 5) == []


def test_until_and_remove():
    idx = index_of(("User: I live in Berlin\nAssistant: ok", vec(1, 0)),
                   ("User: I live in Lisbon now\nAssistant: ok", vec(1, 0.1)))
    assert {u for u, _ in idx.search("live", vec(1, 0), 5)} == {"u0", "u1"}
    assert [u for u, _ in idx.search("live", vec(1, 0), 5, until=T0 + timedelta(hours=1))] == ["u0"]
    idx.remove(["u1"])
    assert [u for u, _ in idx.search("Lisbon live", vec(1, 0), 5)] == ["u0"]
    assert "lisbon" not in idx.turn and "lisbon" not in idx.user, "nothing of it is kept"
    idx.add("u1", "User: I live in Porto\nAssistant: ok", T0, vec(1, 0))     # replaced: once
    assert len(idx) == 2 and [u for u, _ in idx.search("Porto", vec(0, 1), 5)][0] == "u1"


def test_after_forgetting_turns_the_others_score_as_if_those_had_never_been_stored():
    """BM25's counts (how many turns are live, how many have each word, their lengths)
    lose every word of a removed turn: the turns that remain score exactly as in an index
    that only ever held them, by keywords alone and in the whole search."""
    bodies = ["User: My sister Anna lives in Porto\nAssistant: Porto is lovely in spring.",
              "User: Anna and I hiked in the Alps, Anna carried the tent\nAssistant: Sounds tiring.",
              "User: I bought a new tent for hiking\nAssistant: Good for the Alps.",
              "User: My sister moved from Porto to Lisbon\nAssistant: A big move for Anna."]
    vecs = [vec(1, 0), vec(0.5, 0.5), vec(0, 1), vec(0.9, 0.2)]
    forgot = TurnIndex(dim=4)
    for i in range(4):
        forgot.add(f"u{i}", bodies[i], T0 + timedelta(days=i), vecs[i])
    forgot.remove(["u1", "u2"])
    never = TurnIndex(dim=4)
    for i in (0, 3):
        never.add(f"u{i}", bodies[i], T0 + timedelta(days=i), vecs[i])
    for terms in (["anna"], ["sister", "porto"], ["lisbon", "anna", "move"]):
        for field in ("turn", "user"):
            got = getattr(forgot, field).scores(terms, 4)[[0, 3]]
            want = getattr(never, field).scores(terms, 2)
            assert got.tolist() == want.tolist(), (field, terms)
    assert forgot.search("Anna sister Porto", vec(1, 0.1), 5) == never.search("Anna sister Porto", vec(1, 0.1), 5)
    assert "tent" not in forgot.turn and "hiked" not in forgot.user, "no word of theirs is kept"


async def test_turns_stored_while_the_index_is_built_are_in_it(engine, monkeypatch):
    """The index is built on a bank's first search from one read of the bank; a turn stored
    after that read and before the index is in place must not be missing from it."""
    import asyncio
    from memoryplus.wire.records import Turn
    await engine.ingest("b", [Turn(id="1", user="I play the cello", time=T0)])
    bank = await engine.pool.bank("b", create=False)
    bank.turns = None
    read, go_on = asyncio.Event(), asyncio.Event()
    query = engine.pool.query

    async def slow_read(bank_, name, /, **params):
        rows = await query(bank_, name, **params)
        if name == "turns_for_index":      # the read is done: hold the build here
            read.set()
            await go_on.wait()
        return rows
    monkeypatch.setattr(engine.pool, "query", slow_read)
    build = asyncio.ensure_future(engine.search_ops.turn_index(bank))
    await read.wait()
    await engine.ingest("b", [Turn(id="2", user="I also play the oboe", time=T0 + timedelta(days=1))])
    go_on.set()
    index = await build
    assert len(index) == 2
    assert [r.sources[0] for r in await engine.search("b", "oboe", limit=3)][0] == "2"


def test_a_turn_of_a_strong_turns_conversation_ranks_above_a_stray_match():
    """The turn after a strong match, in the same sitting, often holds the detail asked for:
    it gains a share of its conversation's best score and passes a turn of another day that
    matches as weakly as it does."""
    idx = TurnIndex(dim=4)
    idx.add("strong", "User: which cafes are near the old market?\nAssistant: a few", T0, vec(1, 0))
    idx.add("detail", "User: great, I'll go there\nAssistant: enjoy", T0 + timedelta(minutes=2), vec(0.5, 0.5))
    idx.add("stray", "User: great weather\nAssistant: yes", T0 + timedelta(days=5), vec(0.52, 0.5))
    for i in range(6):
        idx.add(f"other{i}", f"User: unrelated {i}\nAssistant: ok", T0 + timedelta(days=10 + i), vec(0, 0, 1))
    ranked = [u for u, _ in idx.search("cafes market great", vec(1, 0), 5)]
    assert ranked[0] == "strong" and ranked.index("detail") < ranked.index("stray"), ranked


def test_a_time_pointed_to_lifts_the_turns_of_that_time():
    idx = index_of(*[(f"User: I went hiking, trip {i}\nAssistant: nice", vec(1, 0)) for i in range(30)])
    assert idx.search("hiking", vec(1, 0), 1, pointed=(T0 + timedelta(days=21), 7.0))[0][0] == "u21"


def test_a_plural_in_the_query_finds_the_singular_in_a_turn():
    """"How many doctors" is about the turn that says "my doctor": words match by their
    singular. That turn shares no word as written and is far in meaning, so before it was
    under the relevance floor and never returned."""
    idx = index_of(("User: my doctor said the mole is benign\nAssistant: good news", vec(0, 1)),
                   ("User: I repainted the kitchen\nAssistant: nice", vec(0, 0, 1)),
                   ("User: we watched a film\nAssistant: fun", vec(0, 0, 0, 1)))
    assert [u for u, _ in idx.search("How many doctors?", vec(1, 0), 5)] == ["u0"]


def test_a_turn_near_the_best_turns_in_meaning_is_found_though_the_query_is_not():
    """Pseudo-relevance feedback: the query's vector moves towards its best turns, so a turn
    about the same thing in other words ("the Bowie record" after "my rare coin collection")
    passes the floor and is returned, while turns near neither stay out."""
    idx = index_of(("User: my rare coin collection grew\nAssistant: nice", vec(0.6, 0.8)),
                   ("User: I found a 1972 Bowie pressing\nAssistant: a gem", vec(0, 1)),
                   *[(f"User: chores {i}\nAssistant: ok", vec(0, 0, 1)) for i in range(5)])
    hits = [u for u, _ in idx.search("how many rare items do I own", vec(1, 0), 5)]
    assert hits == ["u0", "u1"], hits
    # a question about what the assistant said has no feedback: its user turns are questions
    assert [u for u, _ in idx.search("rare", vec(1, 0), 5, to_assistant=True)] == ["u0"]


def test_a_turn_is_found_by_one_sentence_of_its_reply():
    """"The book you told me about": the answer is one sentence of a long reply. Every user
    message and keyword is alike here; only turn 7's reply holds a sentence like the query."""
    idx = TurnIndex(dim=4)
    for i in range(12):
        reply = [vec(0, 1, 0), vec(0, 1, 0.2), vec(0, 1, -0.2)]
        if i == 7:
            reply[1] = vec(0, 0, 1)
        idx.add(f"u{i}", f"User: note {i}\nAssistant: a long reply", T0 + timedelta(days=i), vec(1, 0), reply)
    found = idx.search("which one was it", vec(1, 0), 3, reply_vector=vec(0, 0, 1))
    assert found[0][0] == "u7"
    idx.remove(["u7"])
    assert "u7" not in [u for u, _ in idx.search("which one was it", vec(1, 0), 12, reply_vector=vec(0, 0, 1))]


def test_the_reply_sentences_are_kept_small():
    """64 bytes a sentence, whatever the embedder's size: a long reply costs kilobytes."""
    from memoryplus.engine.turn_index import REPLY_DIM, compact, reply_sentences
    sentences = reply_sentences("User: hi\nAssistant: One. Two! Three?\nFour")
    assert sentences == ["One.", "Two!", "Three?", "Four"]
    kept = compact(np.random.default_rng(0).normal(size=(len(sentences), 256)))
    assert kept.dtype == np.int8 and kept.shape == (4, REPLY_DIM)


def test_a_turns_kept_vectors_rebuild_the_same_index():
    """The vectors kept on a turn's row (pack_vectors) give back the index built from the
    embedders, to the last bit; vectors of other embedders, or damaged, are not used."""
    from memoryplus.engine.embedders import HashEmbedder
    from memoryplus.engine.turn_index import pack_vectors, reply_vectors, unpack_vectors, vectors_tag
    emb = HashEmbedder(32)
    tag = vectors_tag("hash:hash:32", emb)
    bodies = [f"User: note {i} about {w}\nAssistant: The {w} is fine. Ask me again. Bye."
              for i, w in enumerate(["cello", "oboe", "garden", "taxes", "cello lessons"])]
    fresh, restored = TurnIndex(dim=32), TurnIndex(dim=32)
    for i, body in enumerate(bodies):
        user, replies = emb.embed_one(split_body(body)[0]), reply_vectors(emb, body)
        fresh.add(f"u{i}", body, T0 + timedelta(days=i), user, replies)
        kept = unpack_vectors(pack_vectors(tag, user, compact(replies)), tag)
        assert kept is not None and kept[1].dtype == np.int8
        restored.add(f"u{i}", body, T0 + timedelta(days=i), *kept)
    for q in ("cello", "what did you say about the garden", "taxes"):
        args = (q, emb.embed_one(q), 5)
        assert fresh.search(*args, reply_vector=emb.embed_one(q)) == \
            restored.search(*args, reply_vector=emb.embed_one(q))
    packed = pack_vectors(tag, emb.embed_one("x"), None)
    assert unpack_vectors(packed, tag)[1].shape == (0, compact(None).shape[1])
    assert unpack_vectors(packed, vectors_tag("openai:text-embedding-3-small:1536", emb)) is None
    assert unpack_vectors(packed[:-8], tag) is None and unpack_vectors("not base64!", tag) is None
    assert unpack_vectors(None, tag) is None


def test_a_question_that_adds_up_occasions_gets_turns_of_each_conversation():
    """"How many doctors did I visit?" adds up visits told on different days. One long
    sitting about one visit matches best, and its turns lift each other (the conversation's
    share): they filled the results, and the other visits were left out. For such a question
    each turn gives way for every better turn of its own conversation."""
    idx = TurnIndex(dim=4)
    for i in range(6):      # one sitting, one visit: every turn says "doctor"
        idx.add(f"sitting{i}", f"User: the doctor said part {i} of my results\nAssistant: the doctor is right",
                T0 + timedelta(minutes=i), vec(1, 0.1 * i))
    idx.add("dentist", "User: I saw a doctor about my tooth\nAssistant: ok", T0 + timedelta(days=5), vec(0.7, 0.7))
    idx.add("ent", "User: the ENT doctor checked my ears\nAssistant: ok", T0 + timedelta(days=9), vec(0.7, 0, 0.7))
    for i in range(6):
        idx.add(f"other{i}", f"User: unrelated {i}\nAssistant: ok", T0 + timedelta(days=20 + i), vec(0, 0, 0, 1))
    query = "How many different doctors did I visit?"
    assert local_extract.asks_for_several(query)
    spread = [u for u, _ in idx.search(query, vec(1, 0), 5, several=True)]
    assert {"dentist", "ent"} <= set(spread) and spread[0] == "sitting0", spread
    # scored as any other question, the sitting's turns fill the results
    plain = [u for u, _ in idx.search(query, vec(1, 0), 5)]
    assert all(u.startswith("sitting") for u in plain), plain
    assert not local_extract.asks_for_several("What did the doctor say about my results?")


def test_searches_between_writes_change_no_later_result():
    """What a search keeps for the next (the turns' lengths for BM25, which turns are stored,
    their times, their conversations, where each reply's sentences are) follows every add and
    remove: after each write, an index searched after every write ranks and scores exactly as
    one built anew from the same writes, and holds the same reply sentences for each turn. Turns
    come as in a chat (two sittings of two turns, then a third day) and one comes late."""
    bodies = ["User: I adopted a cat named Pistachio\nAssistant: Lovely name for a cat.",
              "User: The weather is nice in Lisbon today, my cat sleeps in the sun\nAssistant: Enjoy the sun.",
              "User: My kitten loves salmon and tuna\nAssistant: Cats often do.",
              "User: Book a dentist visit for Friday\nAssistant: Done, Friday at nine.",
              "User: My cat Pistachio hid under the sofa all day\nAssistant: Cats like hiding."]
    vecs = [vec(1, 0), vec(0, 1), vec(0.9, 0.1), vec(0, 0, 1), vec(0.8, 0.2)]
    replies = [[vec(0, 1, i), vec(i, 0, 1)][:1 + i % 2] if i != 3 else None for i in range(5)]
    when = [T0, T0 + timedelta(minutes=10), T0 + timedelta(days=1), T0 + timedelta(days=1, minutes=30),
            T0 + timedelta(days=2)]
    query = ("cat Pistachio", vec(1, 0.1))
    writes = [("add", i) for i in range(4)] + [("remove", 0), ("add", 4), ("add", 0), ("remove", 2)]

    def write(idx, op, i):
        if op == "add":
            idx.add(f"u{i}", bodies[i], when[i], vecs[i], replies[i])
        else:
            idx.remove([f"u{i}"])

    searched = TurnIndex(dim=4)
    for done, (op, i) in enumerate(writes, 1):
        write(searched, op, i)
        fresh = TurnIndex(dim=4)
        for w in writes[:done]:
            write(fresh, *w)
        for until in (None, T0 + timedelta(days=1)):
            assert searched.search(*query, 5, until=until, reply_vector=vec(0, 1, 1)) == \
                fresh.search(*query, 5, until=until, reply_vector=vec(0, 1, 1)), writes[:done]
    assert [u for u, _ in fresh.search(*query, 5)] == ["u0", "u4", "u1"]   # the re-added turn is back
    # slots: u0, u1, u2, u3 (the two sittings), u4, u0 again (late); u0 and u2 were removed
    assert searched.conversations().tolist() == fresh.conversations().tolist() == [0, 0, 1, 1, 2, 0]
    for i in range(5):
        held = searched.reply_rows(f"u{i}")
        assert (held is None) == (i == 2), "a removed turn's sentences are gone"
        if held is not None:
            assert held.tolist() == fresh.reply_rows(f"u{i}").tolist() == \
                compact(replies[i]).tolist()


async def bank_indexed_then_written(engine):
    """Bank "b" with 80 bench turns: 50 in it when its turn index is built, 30 stored after
    (they reach the index from the writes); returns the bank and the bench's questions."""
    from memoryplus.cli.bench import load_data
    from memoryplus.wire.records import Turn
    data, questions = load_data(80)
    stored = [Turn(id=t, user=u, assistant=a, time=T0 + timedelta(hours=i)) for i, (t, u, a) in enumerate(data)]
    await engine.ingest("b", stored[:50])
    await engine.search("b", "anything")                # the index is built from the bank here
    await engine.ingest("b", stored[50:])
    return await engine.pool.bank("b", create=False), questions


async def test_a_search_names_its_turns_from_the_index_as_the_bank_would(engine):
    """The index holds each turn's row name (its id, tags and state), from its building and
    from each turn stored after: a search's results name the turns behind their facts from
    it, with no read of names by uuid (Kuzu scans every turn for one), and the results are
    those of names read from the bank."""
    from memoryplus.engine.queries import q
    bank, questions = await bank_indexed_then_written(engine)
    rows = await engine.pool.query(bank, "turns_for_index", gid=bank.slug)
    assert len(rows) == 80 and all(bank.turns.name(r["uuid"]) == r["name"] for r in rows)
    names_read = q("episode_names", bank.provider)
    reads: list[dict] = []
    bank.driver.observers.append(lambda query, params: reads.append(params) if query == names_read else None)
    asked = [q for q, _ in questions[:30]] + ["Where did I live before?", "What did I use to do for work?"]

    async def results():
        return [[(r.id, r.kind, r.sources, r.tags, r.score) for r in await engine.search("b", q, limit=10)]
                for q in asked]
    named = await results()
    assert reads == [], "the names come from the index"
    bank.turns.names = [None] * len(bank.turns.names)    # as if the index did not know them
    assert await results() == named
    assert reads, "the searches must name turns behind facts, or this proves nothing"
    assert any(tags for found in named for (_, _, _, tags, _) in found), "some results carry tags"


async def test_a_search_reads_the_text_of_only_the_turns_it_may_show(engine):
    """The index holds each turn's time and facts (entity_edges) with its name, from its
    building and from each turn stored after: a search ranks its turn hits and tells which
    have ended from it, and reads from the bank the text of only the turns it may show (a
    read by key costs Kuzu ~0.3 ms), not of every hit; the results are those of rows read
    from the bank."""
    from memoryplus.engine.extract import asks_about_past
    from memoryplus.engine.queries import q
    bank, questions = await bank_indexed_then_written(engine)
    by_uuid = {q("episodes_by_uuid", bank.provider), q("episode_by_uuid", bank.provider)}
    reads: list[list[str]] = []
    bank.driver.observers.append(
        lambda query, params: reads[-1].extend(params.get("uuids") or [params.get("uuid")])
        if query in by_uuid and reads else None)
    asked = [q for q, _ in questions[:30]] + ["Where did I live before?", "What did I use to do for work?"]
    limit = 3

    async def results():
        out = []
        for text in asked:
            reads.append([])
            out.append([(r.id, r.kind, r.text, r.valid_at, r.invalid_at, r.sources, r.score)
                        for r in await engine.search("b", text, limit=limit)])
        return out
    found = await results()
    assert any(r[1] == "episode" for f in found for r in f), "some results are turns"
    now = [len(set(r)) for a, r in zip(asked, reads) if not asks_about_past(a)]  # the past: all found
    assert max(now) <= limit + 2, now       # the spares fusion reads
    bank.turns.rows = [None] * len(bank.turns.rows)      # as if the index did not know them
    reads.clear()
    assert await results() == found
    assert max(len(set(r)) for a, r in zip(asked, reads) if not asks_about_past(a)) > limit + 2, \
        "with rows read, every hit is read: this proves nothing"
