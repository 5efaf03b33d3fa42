"""The memoryplus command, run as a user runs it: a real process, real Kuzu, no network."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memoryplus.testing import mentions_code

EXE = shutil.which("memoryplus", path=str(Path(sys.executable).parent)) or "memoryplus"


def run(data, *args, input=None, check=True):
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run([EXE, "--data-dir", str(data), *args], capture_output=True, text=True,
                          input=input, env=env, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    """A bank of a few hundred turns ingested through the CLI, shared by the tests below."""
    data = tmp_path_factory.mktemp("cli")
    lines = []
    cities = ["Berlin", "Paris", "Lisbon", "Oslo"]
    for i in range(300):
        lines.append({"user": f"Note {i}: I talked with Person{i % 17} about the topic number {i}.",
                      "assistant": "Noted.", "time": f"2025-01-{1 + i % 28:02d}T10:00:00"})
    for i, city in enumerate(cities):
        lines.append({"id": f"city-{i}", "user": f"I live in {city} now.", "assistant": "Nice.",
                      "time": f"2025-0{i + 2}-01T10:00:00+00:00"})
    f = data / "turns.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in lines))
    out = run(data, "ingest", "--bank", "current.chat", str(f))
    assert "304 stored" in out.stdout
    return data, f


def test_ingest_twice_adds_nothing(bank):
    data, f = bank
    out = run(data, "ingest", "--bank", "current.chat", str(f))
    assert "0 stored, 304 already there" in out.stdout


def test_search_json_shape_and_time_travel(bank):
    data, _ = bank
    results = json.loads(run(data, "search", "--bank", "current.chat", "--json", "where do I live").stdout)
    assert results and set(results[0]) == {"id", "kind", "text", "valid_at", "invalid_at", "tags",
                                           "sources", "score"}
    facts = [r for r in results if r["kind"] == "fact"]
    assert any("Oslo" in r["text"] for r in facts) and not any("Berlin" in r["text"] for r in facts)
    past = json.loads(run(data, "search", "--bank", "current.chat", "--json", "--as-of",
                          "2025-02-15T00:00:00+00:00", "where do I live").stdout)
    assert any("Berlin" in r["text"] and r["sources"] == ["city-0"] for r in past if r["kind"] == "fact")


def test_search_many_queries_one_process(bank):
    data, _ = bank
    q = data / "queries.txt"
    q.write_text("where do I live\nPerson3\nsomething unknown entirely zzz\n")
    lines = run(data, "search", "--bank", "current.chat", "--queries", str(q)).stdout.splitlines()
    assert len(lines) == 3 and all(isinstance(json.loads(x), list) for x in lines)
    assert json.loads(lines[2]) == []


def test_banks_stats_export(bank, tmp_path):
    data, _ = bank
    banks = json.loads(run(data, "banks", "--json").stdout)
    assert banks[0]["name"] == "current.chat" and banks[0]["episodes"] == 304
    stats = json.loads(run(data, "stats", "--bank", "current.chat", "--json").stdout)
    assert {"episodes", "entities", "facts", "llm_calls", "llm_input_tokens"} <= set(stats)
    assert stats["llm_calls"] == 0
    out = tmp_path / "export.jsonl"
    run(data, "export", "--bank", "current.chat", "--out", str(out))
    kinds = {json.loads(line)["type"] for line in out.read_text().splitlines()}
    assert kinds == {"bank", "episode", "entity", "fact", "mention"}


def test_forget_text_asks_first_then_forgets(tmp_path):
    run(tmp_path, "remember", "--bank", "p", "My locker code is 4711 at the gym")
    preview = run(tmp_path, "forget", "--bank", "p", "locker code gym")
    assert "run again with --yes" in preview.stdout
    assert "4711" in run(tmp_path, "search", "--bank", "p", "locker code").stdout
    done = json.loads(run(tmp_path, "forget", "--bank", "p", "locker code gym", "--yes", "--json").stdout)
    assert done["episodes_removed"] == 1 and done["forgotten"]
    assert not mentions_code(run(tmp_path, "export", "--bank", "p").stdout, "4711")


def test_errors_are_one_line_with_the_right_status(tmp_path):
    for args in (["search", "--bank", "missing", "x"], ["stats", "--bank", "missing"],
                 ["forget", "--bank", "missing", "--last"], ["export", "--bank", "missing"]):
        proc = run(tmp_path, *args, check=False)
        assert proc.returncode == 1 and "unknown bank 'missing'" in proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run(tmp_path, "search", check=False)
    assert proc.returncode == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"user": "ok"}\nnot json\n')
    proc = run(tmp_path, "ingest", "--bank", "b", str(bad), check=False)
    assert proc.returncode == 1 and "line 2" in proc.stderr and "Traceback" not in proc.stderr


def test_demo_passes_every_check():
    proc = subprocess.run([EXE, "demo"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checks passed" in proc.stdout and "FAIL" not in proc.stdout
    assert "\033[" not in proc.stdout, "plain output when piped"
    assert "qt.svg" not in proc.stderr and "Cannot open file" not in proc.stderr, proc.stderr[:300]
    assert "FORCE using workdir" not in proc.stdout
    assert "MemoryPlus: Remembered: My passport expires in March 2027." in proc.stdout, \
        "the command's reply, from the chat"


@pytest.mark.option("kuzu_storage_path")
def test_the_command_follows_the_mirrored_settings(tmp_path, monkeypatch):
    """Without --data-dir, the command reads the settings the plugin mirrors in PyGPT's user
    directory, and stores banks under Kuzu Storage Path when it is set."""
    from memoryplus.config.paths import save_settings
    from memoryplus.config.schema import Settings
    workdir, storage = tmp_path / "pygpt", tmp_path / "elsewhere"
    save_settings(workdir / "memoryplus", Settings(kuzu_storage_path=str(storage)))
    env = {**os.environ, "PYGPT_WORKDIR": str(workdir), "GRAPHITI_TELEMETRY_ENABLED": "false"}
    proc = subprocess.run([EXE, "remember", "--bank", "b", "I keep the spare key under the blue pot"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(storage.glob("kuzu/*/graph.kuzu")), "the bank lives under Kuzu Storage Path"
    assert not list((workdir / "memoryplus").glob("kuzu"))
