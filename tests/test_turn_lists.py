"""A big bank's search over candidates (engine/turn_lists.py, TurnIndex._search_candidates):
the exact ranking's terms and spreads for the turns it reads, the turns that matter among
them, and lists and spreads kept in step with every write."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memoryplus.cli.bench import load_data
from memoryplus.engine import extract as local_extract
from memoryplus.engine import turn_index, turn_lists
from memoryplus.engine.embedders import _shared_local
from memoryplus.engine.turn_index import TurnIndex, reply_vectors

T0 = datetime(2023, 5, 1, tzinfo=timezone.utc)
MORE = ("work", "job")      # words of a query's families (the `related` of a search)


@pytest.fixture(scope="module")
def embedder():
    return _shared_local()


def body(user: str, assistant: str) -> str:
    return f"User: {user}\nAssistant: {assistant}"


def add_turns(index: TurnIndex, embedder, turns, first: int = 0) -> None:
    users = embedder.embed_array([u for _, u, _ in turns])
    for i, ((tid, u, a), v) in enumerate(zip(turns, users), first):
        index.add(tid, body(u, a), T0 + timedelta(minutes=10 * i), v, reply_vectors(embedder, body(u, a)))


def bench_index(embedder, size: int):
    """The turn index of the bench's first `size` turns (turns ten minutes apart), its
    questions and the turns that follow."""
    turns, questions = load_data(size + 100)
    index = TurnIndex(dim=embedder.embed_array(["x"]).shape[1])
    add_turns(index, embedder, turns[:size])
    return index, questions, turns[size:]


def searches(index, embedder, questions, monkeypatch, *, candidates: bool, replies: bool = True):
    """Each question's results, by candidates or by every turn, as a bank's search asks."""
    monkeypatch.setattr(turn_index, "SCALE_FROM", 0 if candidates else 10 ** 9)
    vectors = embedder.embed_array(questions)
    return [index.search(q, v, 10, related=MORE if i % 3 == 0 else (),
                         to_assistant=local_extract.asks_about_assistant(q),
                         reply_vector=v if replies else None,
                         several=local_extract.asks_for_several(q))
            for i, (q, v) in enumerate(zip(questions, vectors))]


def same_ranking(got, want) -> None:
    """The same scores rank by rank, each turn's own; turns of one score (the same words and
    meaning) may come in another order, and one of them may be cut at the tenth."""
    for g, w in zip(got, want):
        assert [s for _, s in g] == pytest.approx([s for _, s in w], abs=1e-4)
        mine, theirs = dict(g), dict(w)
        assert [mine[u] for u in theirs if u in mine] == pytest.approx(
            [theirs[u] for u in theirs if u in mine], abs=1e-4)
        cut = w[-1][1] if w else 0
        assert {u for u, s in g if s > cut + 1e-4} == {u for u, s in w if s > cut + 1e-4}


def test_reading_every_list_the_candidates_rank_as_every_turn_does(embedder, monkeypatch):
    """With every list and every keyword hit read, and every turn in the reply's sample, a
    search over candidates is the exact ranking, turn for turn, score for score: its terms
    and its spreads (the cosine's from the kept sums) are the ranking's own. After turns are
    forgotten, and after turns are stored, it still is: the sums follow each write."""
    index, questions, later = bench_index(embedder, 600)
    asked = [q for q, _ in questions[:40]] + ["What did you recommend for my trip?",
                                              "How many times did I go hiking in total?"]
    monkeypatch.setattr(turn_lists, "PROBES", 10 ** 6)
    monkeypatch.setattr(turn_index, "KEYWORD_CANDIDATES", 10 ** 6)
    monkeypatch.setattr(turn_lists, "SPREAD_SAMPLE", 10 ** 6)
    exact = searches(index, embedder, asked, monkeypatch, candidates=False)
    assert sum(len(r) for r in exact) > 300, "the questions find turns"
    same_ranking(searches(index, embedder, asked, monkeypatch, candidates=True), exact)

    # forget the turns found first for a third of the questions, and 60 others
    gone = list({r[0][0] for r in exact[::3] if r} | {t[0] for t in load_data(600)[0][100:160]})
    index.remove(gone)
    exact = searches(index, embedder, asked, monkeypatch, candidates=False)
    assert not {u for r in exact for u, _ in r} & set(gone)
    same_ranking(searches(index, embedder, asked, monkeypatch, candidates=True), exact)

    # the reply's sample is drawn when the lists are made: turns stored after are not in it
    add_turns(index, embedder, later, 600)
    exact = searches(index, embedder, asked, monkeypatch, candidates=False, replies=False)
    assert {u for r in exact for u, _ in r} & {t[0] for t in later}, "stored turns are found"
    same_ranking(searches(index, embedder, asked, monkeypatch, candidates=True, replies=False), exact)


def test_a_big_banks_search_keeps_the_best_turns_of_reading_every_turn(embedder, monkeypatch):
    """At the lists' own reach (PROBES of ~220 lists, the 200 best keyword hits, a sample of
    1,024 replies), the best ten of 3,000 turns are nearly those of the exact ranking, and
    the turn that answers a question is found as often."""
    index, questions, _ = bench_index(embedder, 3000)
    asked = questions[:200]
    exact = searches(index, embedder, [q for q, _ in asked], monkeypatch, candidates=False)
    found = searches(index, embedder, [q for q, _ in asked], monkeypatch, candidates=True)
    shared = [len({u for u, _ in f} & {u for u, _ in e}) / max(1, len(e)) for f, e in zip(found, exact)]
    assert np.mean(shared) >= 0.95, np.mean(shared)

    def answered(results):
        return sum(a in {u for u, _ in r} for (_, a), r in zip(asked, results))
    assert answered(found) >= answered(exact) - 2, (answered(found), answered(exact))


def test_a_turn_stored_after_the_lists_is_found_by_meaning_and_a_forgotten_one_never(embedder, monkeypatch):
    """The lists are made at a bank's first search at scale; a turn stored after joins the
    list nearest its meaning, so a query that shares no word with it finds it by meaning
    alone; once forgotten it is never found; and when the bank has doubled the lists are
    made again, with the same results for what they held."""
    monkeypatch.setattr(turn_index, "SCALE_FROM", 0)
    index, _, later = bench_index(embedder, 400)
    index.search("anything", embedder.embed_array(["anything"])[0], 10)     # the lists are made
    made = index._lists
    add_turns(index, embedder, later[:10], 400)
    probe = embedder.embed_array([later[3][1]])[0]          # the meaning of a new turn's message
    assert index.search("zzz", probe, 3)[0][0] == later[3][0]
    index.remove([later[3][0]])
    assert later[3][0] not in {u for u, _ in index.search("zzz", probe, 10)}
    assert index._lists is made, "the lists were kept in step, not made again"
    more, _ = load_data(1300)
    add_turns(index, embedder, more[500:1300], 500)
    hits = index.search("zzz", embedder.embed_array([more[900][1]])[0], 3)
    assert index._lists is not made and hits[0][0] == more[900][0]


def test_a_search_whose_candidates_were_all_forgotten_finds_nothing(embedder, monkeypatch):
    """The nearest list held only forgotten turns, and no turn has a word of the query: no
    result, and no error."""
    monkeypatch.setattr(turn_index, "SCALE_FROM", 0)
    monkeypatch.setattr(turn_lists, "PROBES", 1)
    index = TurnIndex(dim=4)
    for i, v in enumerate([(1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0)]):
        index.add(f"u{i}", body(f"note {i}", "ok"), T0 + timedelta(days=i), np.array(v, np.float32))
    assert index.search("zzz", np.array([1, 0, 0, 0], np.float32), 3)[0][0] == "u0"
    index.remove(["u0"])
    assert index.search("zzz", np.array([1, 0, 0, 0], np.float32), 3) == []
