"""The recall bench's reader, baseline and scorer (cli/bench_recall.py) on a tiny LongMemEval-
format file made here (not the real data): what a number in docs/PERFORMANCE.md rests on."""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys

import pytest

from memoryplus.cli import bench_recall as br


def _question(qid, qtype, question, sessions, answer_sessions, date="2023/06/01 (Thu) 10:00"):
    return {"question_id": qid, "question_type": qtype, "question": question, "question_date": date,
            "answer": "x", "answer_session_ids": answer_sessions,
            "haystack_session_ids": [f"s{i}" if f"answer_{i}" not in answer_sessions else f"answer_{i}"
                                     for i in range(len(sessions))],
            "haystack_dates": [f"2023/05/{10 + i:02d} (Wed) 09:0{i}" for i in range(len(sessions))],
            "haystack_sessions": sessions}


def _file(tmp_path, gz=True):
    sessions = [
        [{"role": "user", "content": "I adopted a cat named Pistachio."},
         {"role": "assistant", "content": "Congratulations on the new cat!"},
         {"role": "user", "content": "The weather is nice.", "has_answer": False},
         {"role": "assistant", "content": "Enjoy the sun."}],
        [{"role": "user", "content": "My cat Pistachio likes salmon treats.", "has_answer": True},
         {"role": "assistant", "content": "Salmon treats are popular with cats."}],
        [{"role": "assistant", "content": "Hello again."},
         {"role": "user", "content": "What is the capital of France?"},
         {"role": "assistant", "content": "Paris.", "has_answer": True}],
    ]
    data = [_question("q1", "single-session-user", "What treats does my cat Pistachio like?", sessions,
                      ["answer_1", "answer_2"]),
            _question("q2_abs", "single-session-user", "What is my dog's name?", sessions, []),
            _question("q3", "multi-session", "Which capital did I ask about?", sessions, ["answer_2"])]
    path = tmp_path / ("tiny.json.gz" if gz else "tiny.json")
    raw = json.dumps(data).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path, data


def test_reader_builds_opaque_turns_at_session_dates_with_evidence(tmp_path):
    path, data = _file(tmp_path)
    raw = br.load(path)
    assert raw == data                                         # gzipped or plain, the same list
    assert br.load(_file(tmp_path, gz=False)[0]) == data
    q = br.to_question(raw[0])
    assert [t.id for t in q.turns] == ["s0t0", "s0t1", "s1t0", "s2t0", "s2t1"]
    # an assistant message with no user message before it is a turn of its own
    assert (q.turns[3].user, q.turns[3].assistant) == ("", "Hello again.")
    assert q.turns[4].user == "What is the capital of France?" and q.turns[4].assistant == "Paris."
    assert q.evidence == {"s1t0", "s2t1"}                      # user or assistant flagged
    assert q.answer_sessions == {1, 2}
    assert q.turns[2].time.isoformat().startswith("2023-05-11T09:01")
    assert q.date.isoformat() == "2023-06-01T10:00:00+00:00"
    # nothing from the data's ids reaches the engine: turn ids only carry positions
    assert all(re.fullmatch(r"s\d+t\d+", t.id) for t in q.turns)
    assert br.to_question(raw[1]).abstention and not q.abstention


def test_bm25_is_the_readmes_definition():
    assert br.bm25_tokens("Where is THE cat's 2nd toy? I don't know") == ["cat", "s", "2nd", "toy", "don", "t", "know"]
    docs = {"a": "cat cat dog", "b": "dog bird", "c": "fish"}
    ranked = br.bm25_ranking("the cat", docs)
    assert ranked[0] == "a" and set(ranked) == {"a", "b", "c"}
    # the score by hand: idf = ln(1 + (N - n + 0.5) / (n + 0.5)), k1 1.5, b 0.75
    import math
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    avg = (3 + 2 + 1) / 3
    expect = idf * 2 * 2.5 / (2 + 1.5 * (1 - 0.75 + 0.75 * 3 / avg))
    scores = br.bm25_scores("the cat", docs)
    assert scores["a"] == pytest.approx(expect) and scores["b"] == scores["c"] == 0
    # the same term frequency in a shorter doc scores higher
    assert br.bm25_ranking("dog", docs)[:2] == ["b", "a"]


def test_scores_count_one_source_per_result(tmp_path):
    path, _ = _file(tmp_path)
    q = br.to_question(br.load(path)[0])
    assert br.score(["s1t0", "s0t0"], q, 5) == {"any": 1.0, "all": 0.0, "session": 1.0}
    assert br.score(["s0t0", "s2t1", "s1t0"], q, 2) == {"any": 1.0, "all": 0.0, "session": 1.0}
    assert br.score(["s0t0", "s2t1", "s1t0"], q, 3)["all"] == 1.0
    assert br.score(["s0t0", None, "s0t1"], q, 10) == {"any": 0.0, "all": 0.0, "session": 0.0}
    # a session hit without the evidence turn: session recall only
    assert br.score(["s2t0"], q, 5) == {"any": 0.0, "all": 0.0, "session": 1.0}


def test_summary_skips_abstention_for_recall_and_counts_its_results():
    def rec(t, abst, any5, all10, n):
        r = {"type": t, "abstention": abst, "n_results": n, "turns": 10, "ingest_s": 1.0,
             "search_ms": 10.0, "graphiti_ms": 8.0, "search_ms_first": 12.0, "graphiti_ms_first": 8.0,
             "tokens_at5": 50, "tokens_at5_bm25": 100,
             "tokens_at10": 90, "tokens_at10_bm25": 200}
        if not abst:
            r["ours_at5"] = r["bm25_at5"] = {"any": any5, "all": 0.0, "session": 1.0}
            r["ours_at10"] = {"any": 1.0, "all": all10, "session": 1.0}
            r["bm25_at10"] = {"any": 0.0, "all": 0.0, "session": 0.0}
        return r
    out = br.summarize([rec("a", False, 1.0, 1.0, 10), rec("b", False, 0.0, 0.0, 10), rec("b", True, 0, 0, 3)])
    assert out["dev_questions"] == 3 and out["dev_questions_scored"] == 2
    assert out["dev_any_at5"] == 0.5 and out["dev_all_at10"] == 0.5 and out["dev_any_at10_bm25"] == 0.0
    assert out["dev_by_type"]["b"]["any_at5"] == 0.0 and out["dev_by_type"]["b"]["n"] == 1
    assert out["dev_abstention_results"] == 3
    assert out["dev_tokens_at5"] == 50 and out["dev_tokens_at5_bm25"] == 100
    assert out["long_turn_ingest_turns_per_s"] == 10.0
    # the ratio from the medians of the timed rounds, and the first round's beside it
    assert out["dev_search_ratio_p95"] == 1.25 and out["dev_search_ratio_p95_first_round"] == 1.5
    assert "long_vs_short_ingest_ratio" not in out      # no short turns were stored beside
    twin = rec("a", False, 1.0, 1.0, 10) | {"turns": 10, "ingest_s": 2.0, "short_turns": 10, "short_ingest_s": 0.5}
    out = br.summarize([twin, rec("b", False, 1.0, 1.0, 10)])
    # the ratio is of the questions that had a short twin, not of all of them
    assert out["short_turn_ingest_turns_per_s"] == 20.0 and out["long_vs_short_ingest_ratio"] == 0.25


def test_stratified_subset_keeps_every_type():
    raw = [{"question_id": f"{t}{i}", "question_type": t, "haystack_sessions": []}
           for t, n in (("big", 40), ("mid", 20), ("small", 3)) for i in range(n)]
    sub = br.stratified(raw, 6)
    types = [q["question_type"] for q in sub]
    assert len(sub) == 6 and set(types) == {"big", "mid", "small"}
    assert types.count("big") > types.count("mid") >= types.count("small") == 1
    assert br.stratified(raw, None) == raw and len(br.stratified(raw, 1000)) == len(raw)


def test_bad_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match="LongMemEval"):
        br.load(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="not LongMemEval JSON"):
        br.load(bad)


def test_recall_bench_end_to_end_on_the_tiny_file(tmp_path):
    path, _ = _file(tmp_path)
    out = tmp_path / "recall.json"
    proc = subprocess.run([sys.executable, "-m", "memoryplus.cli.main", "bench", "--recall", str(path),
                           "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    for key in ("dev_any_at5", "dev_any_at10", "dev_all_at10", "dev_session_at5"):
        assert 0 <= data[key] <= 1 and 0 <= data[key + "_bm25"] <= 1
    assert set(data["dev_by_type"]) == {"single-session-user", "multi-session"}
    assert data["dev_questions"] == 3 and data["dev_abstention_questions"] == 1
    for key in ("dev_tokens_at5", "dev_tokens_at5_bm25", "long_turn_ingest_turns_per_s", "dev_search_ms_p95",
                "short_turn_ingest_turns_per_s", "long_vs_short_ingest_ratio"):
        assert data[key] > 0
    assert data["dev_any_at10"] == 1.0        # five turns: every evidence turn is in the top 10
    assert "real conversations" in proc.stdout
