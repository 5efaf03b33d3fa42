"""A long turn recalled by the sentences that answer the question (engine/excerpts.py): it
fits the memory block, which skipped it whole, and it costs the prompt a few hundred tokens
instead of the whole turn."""
from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from memoryplus.engine.excerpts import EXCERPT_TOKENS, GAP, excerpt, excerpts, prompt_tokens
from memoryplus.engine.embedders import LocalEmbedder
from memoryplus.plugin.memory_block import build_block
from memoryplus.wire.records import Turn

T0 = datetime(2023, 5, 1, 9, tzinfo=timezone.utc)
BANK = "reading.chat"
TOPICS = ["the garden", "the weekend trip", "the new laptop", "the tax forms", "the bike repair",
          "the kitchen paint", "the school run", "the phone plan", "the guitar lessons", "the move"]
ANSWER = "The book I would suggest first is The Left Hand of Darkness by Ursula K. Le Guin."


def long_reply() -> str:
    """A long assistant reply, the answer in its middle, as in real chats (LongMemEval)."""
    filler = [f"About {t}, it helps to write down a plan and to set a date for step {i}."
              for i, t in enumerate(TOPICS * 6)]
    return " ".join(filler[:30] + [ANSWER] + filler[30:])


def long_turn(i: int = 1) -> Turn:
    return Turn(id=str(i), user="I need a lot of advice today, and also something to read on the train.",
                assistant=long_reply(), time=T0)


def test_a_short_turn_is_shown_whole():
    body = "User: I moved to Lisbon.\nAssistant: Lisbon is lovely in spring."
    assert excerpt(body, "where do I live", LocalEmbedder()) == body


def test_a_long_turn_keeps_the_answer_in_order_and_says_what_it_left_out():
    body = long_turn().body()
    assert prompt_tokens(body) > 4 * EXCERPT_TOKENS
    shown = excerpt(body, "Which book did you suggest I read?", LocalEmbedder())
    assert ANSWER in shown
    assert prompt_tokens(shown) <= EXCERPT_TOKENS + 10        # its labels and gap marks
    assert shown.startswith("User: I need a lot of advice") and "\nAssistant: " in shown
    assert GAP in shown
    # the sentences shown are the turn's own, in the turn's order
    reply = shown.split("\nAssistant: ", 1)[1]
    sentences = [s.strip() for s in reply.replace(GAP, "").split(". ") if s.strip()]
    positions = [body.index(s) for s in sentences]
    assert len(sentences) > 3 and positions == sorted(positions)


def test_the_reply_vectors_the_index_holds_pick_the_same_sentences():
    """A search reuses the turn index's vectors of the reply's sentences instead of
    embedding them again: the excerpt is the same."""
    from memoryplus.engine.turn_index import compact, reply_vectors
    embedder, body = LocalEmbedder(), long_turn().body()
    question = "Which book did you suggest I read?"
    held = [compact(reply_vectors(embedder, body))]
    assert excerpts([body], question, embedder, held) == excerpts([body], question, embedder)
    # vectors of another turn (a different number of sentences) are not used
    assert excerpts([body], question, embedder, [held[0][:3]]) == excerpts([body], question, embedder)


def test_one_sentence_longer_than_the_budget_is_cut_with_a_gap_mark():
    body = "User: " + " ".join(f"word{i}" for i in range(1000))
    shown = excerpt(body, "word5", LocalEmbedder(), budget=50)
    assert shown.startswith("User: word0 word1") and shown.endswith(GAP)
    assert prompt_tokens(shown) <= 50 + 3           # "User", ":" and the gap mark


async def test_a_long_turn_reaches_the_memory_block(engine):
    """Whole, the long turn (~1,500 tokens) was over the block's budget and skipped: the
    prompt got the short unrelated turns and not the answer."""
    await engine.ingest(BANK, [long_turn(1),
                               Turn(id="2", user="I fixed the bike chain myself.", assistant="Nice work.", time=T0),
                               Turn(id="3", user="My sister reads a lot of crime novels.", assistant="Fun.", time=T0)])
    results = await engine.search(BANK, "Which book did you suggest I read?", limit=5)
    turn = next(r for r in results if r.kind == "episode" and r.sources == ["1"])
    assert ANSWER in turn.text and prompt_tokens(turn.text) <= EXCERPT_TOKENS + 10
    block = build_block(results, limit=5, max_tokens=1200)
    assert "Le Guin" in block


async def test_forgetting_matches_the_whole_turn(engine):
    """/forget_that with words from a part of the turn no excerpt shows still finds it."""
    await engine.ingest(BANK, [long_turn(1)])
    matches = await engine.strong_matches(BANK, "the school run step 56")
    assert [m.sources for m in matches if m.kind == "episode"] == [["1"]]
    assert matches[0].text == long_turn(1).body()


def test_query_words_count_for_the_sentence_they_are_in():
    """The keyword share of each sentence (one scan over all of them) is what a scan of that
    sentence alone finds: words at a sentence's ends, plurals, a line break inside a
    sentence, a letter whose lower case is longer (İ), a word split across two sentences."""
    from memoryplus.engine.excerpts import _keyword_share, _query_words
    words = _query_words("Which bikes did my sister repair?")
    sentences = ["Bike", "İstanbul has a bike lane and my sister's bike.",
                 "Repairs\nof the bike took a day", "sis", "ter came by", "Nothing here.",
                 "the BIKES were repaired by my SISTER"]
    pattern, spelled, n = words
    alone = [len({spelled[m] for m in pattern.findall(s.lower())}) / n for s in sentences]
    got = _keyword_share(sentences, words)
    assert got.tolist() == np.array(alone, np.float32).tolist()
    assert got[0] > 0 and got[2] > 0 and got[3] == got[4] == got[5] == 0 and got[1] == got[6] > got[0]
