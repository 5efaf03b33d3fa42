"""Retrieval checks with known answers: keep fusion changes honest, and keep the benchmark's
recall data set (testing/make_recall_data.py) what it claims to be.

Recall@k counts a question as answered when its source turn is the first source of one of
the top k results; the baseline is BM25 over the same raw turns (what plain keyword search
would give)."""
from __future__ import annotations

import json
import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from memoryplus.cli.bench import DATA_FILE
from memoryplus.cli.bench_recall import bm25_ranking   # the same baseline the benchmark uses
from memoryplus.testing import make_recall_data
from memoryplus.wire.records import Turn

DATA = json.loads((Path(__file__).parent / "data" / "retrieval_small.json").read_text())
K = 5


async def _recall(engine, turns, questions, k: int) -> tuple[int, int]:
    """(ours, BM25) answered out of len(questions), turns ten minutes apart in order."""
    t0 = datetime(2025, 1, 1, tzinfo=timezone.utc)
    await engine.ingest("eval", [Turn(id=i, user=u, assistant=a, time=t0 + timedelta(minutes=10 * n))
                                 for n, (i, u, a) in enumerate(turns)])
    docs = {i: f"{u} {a}" for i, u, a in turns}   # the README baseline's text (cli/bench_recall.py)
    ours = base = 0
    for question, answer in questions:
        results = await engine.search("eval", question, k)
        firsts = [r.sources[0] for r in results if r.sources][:k]
        ours += answer in firsts
        base += answer in bm25_ranking(question, docs)[:k]
    return ours, base


async def test_recall_at_k_beats_plain_keyword_search(engine):
    ours, base = await _recall(engine, DATA["turns"], DATA["questions"], K)
    n = len(DATA["questions"])
    print(f"recall@{K}: ours {ours / n:.3f}, BM25 baseline {base / n:.3f} over {n} questions")
    assert ours >= base, f"fusion lost to plain keywords: {ours}/{n} vs {base}/{n}"
    assert ours / n >= 0.8


async def test_recall_at_10_on_the_benchmark_set_beats_plain_keyword_search(engine):
    """The benchmark's data (all 500 turns) and every third question: all categories,
    including those where keywords win (earlier values, whose facts the engine has retired)."""
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    picked = list(range(0, len(data["questions"]), 3))
    questions = [data["questions"][i] for i in picked]
    ours, base = await _recall(engine, data["turns"], questions, 10)
    n = len(questions)
    print(f"recall@10 on {n} of the benchmark's questions: ours {ours / n:.3f}, BM25 {base / n:.3f}")
    assert ours > base, f"lost to plain keywords: {ours}/{n} vs {base}/{n}"
    assert ours / n >= 0.8


# ── the generated data set ──────────────────────────────────────────────────────────────
def _has(text: str, word: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


def test_generator_is_deterministic_and_the_file_is_its_output():
    data = make_recall_data.build()
    assert data == make_recall_data.build()
    assert json.loads(make_recall_data.OUT.read_text(encoding="utf-8")) == data
    assert make_recall_data.build(seed=8) != data


def test_every_question_has_exactly_one_answer_turn_as_designed():
    data = make_recall_data.build()
    turns, questions, meta = data["turns"], data["questions"], data["meta"]
    ids = [t[0] for t in turns]
    assert len(set(ids)) == len(ids)
    at = {tid: n for n, tid in enumerate(ids)}
    text = {t[0]: t[1] for t in turns}
    assert len(questions) == len(meta) >= 400
    counts = Counter(m[0] for m in meta)
    assert set(counts) == set(make_recall_data.CATEGORIES), counts
    assert len(turns) <= 500                        # `bench --quick` keeps all of it
    referenced = {a for _, a in questions}
    assert len(set(ids) - referenced) >= 50        # small talk etc. for the benchmark's padding

    for (question, answer), (category, name, kind, value, earlier) in zip(questions, meta):
        assert answer in at, question
        # the one turn that says this value of this person
        stating = [tid for tid in ids if _has(text[tid], name) and _has(text[tid], value)]
        assert stating == [answer], (question, stating)
        if category in ("update", "relation_linked", "relation_hop") and earlier:
            before = [tid for tid in ids if _has(text[tid], name) and _has(text[tid], earlier)]
            assert len(before) == 1 and at[before[0]] < at[answer], question   # the later statement
            assert [q for q, a in questions if a == before[0]], "an earlier value is never padding"
        if category.startswith("relation"):
            role = re.search(r"\bmy (\w+)", question).group(1)
            intro = [tid for tid in ids if re.match(rf"My {role} is (\w+)\.$", text[tid])]
            assert [text[tid] for tid in intro] == [f"My {role} is {name}."], question
            assert all(_has(text[tid], name) for tid in ids if _has(text[tid], f"My {role}"))
            assert _has(text[answer], f"My {role}") == (category == "relation_linked"), question
            assert not _has(question, name)
        else:
            assert _has(question, name)
        if category == "distractor":    # someone else's same kind of fact, with the name in it
            assert any(_has(text[tid], f"{name}'s") and tid != answer
                       for tid in ids), question


def test_padding_beyond_the_data_set_is_new_people_in_the_same_mix():
    """`bench` grows the bank past 500 turns with generate_turns: deterministic, the data set
    first (unchanged), then new people only (no word of a data-set name, so every question keeps
    its one answer turn), with facts, updates, mentions, distractors and small talk at the data
    set's rates."""
    import time
    from memoryplus.cli.bench import load_data

    t = time.perf_counter()
    turns = make_recall_data.generate_turns(5000)
    assert time.perf_counter() - t < 2
    assert turns == make_recall_data.generate_turns(5000)
    assert make_recall_data.generate_turns(5000, seed=8)[500:] != turns[500:]
    data = json.loads(make_recall_data.OUT.read_text(encoding="utf-8"))
    assert turns[:500] == data["turns"]
    assert [t[0] for t in turns[500:502]] == ["x00501", "x00502"] and turns[-1][0] == "x05000"
    assert len({t[0] for t in turns}) == 5000

    # no data-set person (or any word of the data set) in a padded name, no data-set name in a padded turn
    words = {w for t in data["turns"] for w in re.findall(r"[A-Za-z]+", t[1] + " " + t[2])}
    words |= {w for q, _ in data["questions"] for w in re.findall(r"[A-Za-z]+", q)}
    assert not (set(make_recall_data.PAD_FIRST) | set(make_recall_data.PAD_LAST)) & (words | set(make_recall_data.NAMES))
    dataset_people = {m[1] for m in data["meta"]}
    for _, user, assistant in turns[500:]:
        assert not any(_has(user + " " + assistant, n) for n in dataset_people), user
        assert not re.search(r"\bmy (" + "|".join(make_recall_data.CORE_ROLES) + r")\b", user, re.I), user

    # the same mix, 10x the people
    objs = make_recall_data._generate(5000)
    first, pad = make_recall_data.stats(objs[:500]), make_recall_data.stats(objs[500:])
    assert first["people"] == 76 and pad["people"] >= 650 and make_recall_data.stats(objs)["people"] >= 700
    for key in ("facts_per_100", "updates_per_100", "mentions_per_100", "distractors_per_100",
                "intros_per_100"):
        assert abs(pad[key] - first[key]) <= 0.15 * first[key] + 0.5, (key, first, pad)
    assert abs(pad["small_talk_share"] - first["small_talk_share"]) < 0.02

    # the benchmark's loader: the data set, then this padding; the questions unchanged
    bench_turns, questions = load_data(2000)
    assert [list(t) for t in bench_turns] == turns[:2000]
    assert questions == [tuple(q) for q in data["questions"]]
