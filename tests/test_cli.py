"""The memoryplus command, run as a user runs it: a real process, real Kuzu, no network."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memoryplus.testing import mentions_code, wait_until

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


def test_timeline_shows_each_fact_with_when_it_held(bank):
    """The user's homes, oldest first: each replaced one with the day it ended, the last current."""
    data, _ = bank
    tl = json.loads(run(data, "timeline", "--bank", "current.chat", "--json", "Lisbon").stdout)
    assert tl["matched"] == ["Lisbon"]
    (lisbon,) = [f for f in tl["facts"] if "Lisbon" in f["fact"]]
    assert lisbon["valid_at"].startswith("2025-04-01") and lisbon["invalid_at"].startswith("2025-05-01")
    text = run(data, "timeline", "--bank", "current.chat", "Oslo").stdout
    assert "2025-05-01 current" in text and "Oslo" in text, text
    past = json.loads(run(data, "timeline", "--bank", "current.chat", "--json", "--as-of",
                          "2025-03-15T00:00:00+00:00", "Oslo").stdout)
    assert past["facts"] == [], "nothing about Oslo had begun by then"
    none = run(data, "timeline", "--bank", "current.chat", "Zanzibar")
    assert "nothing known about 'Zanzibar'" in none.stdout
    bad = run(data, "timeline", "--bank", "no/such bank", "Oslo", check=False)
    assert bad.returncode != 0 and "bank" in bad.stderr.lower() and "Traceback" not in bad.stderr


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


def test_forget_takes_turn_ids_and_asks_first_in_every_form(tmp_path):
    turns = tmp_path / "turns.jsonl"
    turns.write_text("\n".join(json.dumps(t) for t in (
        {"id": "t1", "user": "My sister Ana lives in Porto.", "assistant": "Lovely."},
        {"id": "t2", "user": "My locker code at the gym is 4711.", "assistant": "Noted."})))
    run(tmp_path, "ingest", "--bank", "p", str(turns))

    def stored() -> str:
        return run(tmp_path, "export", "--bank", "p").stdout

    for args in (["--id", "t2"], ["--last"]):
        preview = run(tmp_path, "forget", "--bank", "p", *args)
        assert "1 stored turn would be forgotten; run again with --yes" in preview.stdout, preview.stdout
        assert "4711" in preview.stdout and "You said: My locker code" in preview.stdout
        assert mentions_code(stored(), "4711"), f"forget {args} without --yes removes nothing"
    would = json.loads(run(tmp_path, "forget", "--bank", "p", "--id", "t2", "--json").stdout)
    assert would["episodes_removed"] == 0 and [m["sources"] for m in would["would_forget"]] == [["t2"]]

    for ids in (["t9"], ["t2", "t9"]):
        proc = run(tmp_path, "forget", "--bank", "p", "--id", *ids, "--yes", check=False)
        assert proc.returncode == 1 and "1 id not in bank 'p': t9; nothing was forgotten" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "memory's `id`" in proc.stderr
        assert mentions_code(stored(), "4711"), "an unknown id loses nothing, not even the known ones"

    done = run(tmp_path, "forget", "--bank", "p", "--id", "t2", "--yes")
    assert done.stdout.strip() == "forgot 1 memory and 1 stored turn"
    assert run(tmp_path, "banks").stdout.split("\t")[:2] == ["p", "1 turn"]
    assert not mentions_code(stored(), "4711") and "Porto" in stored()
    proc = run(tmp_path, "forget", "--bank", "p", "--id", "t2", "--yes", check=False)
    assert proc.returncode == 1 and "t2" in proc.stderr, "forgetting it twice finds nothing"
    run(tmp_path, "forget", "--bank", "p", "--last", "--yes")
    assert "Porto" not in stored()


def test_every_argument_of_every_command_is_documented():
    from memoryplus.cli.main import _parser
    undocumented = []

    def walk(parser, where):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{where} {name}")
            elif not isinstance(action, argparse._HelpAction) and not (action.help or "").strip():
                undocumented.append(f"{where}: {'/'.join(action.option_strings) or action.dest}")
    walk(_parser(), "memoryplus")
    assert not undocumented
    out = " ".join(subprocess.run([EXE, "forget", "--help"], capture_output=True, text=True,
                                  timeout=60).stdout.split())
    assert "turn ids" in out and "the turn stored last" in out and "only shows what would be" in out


def test_as_of_takes_relative_times_and_a_bad_one_is_a_usage_error(bank):
    data, _ = bank
    for when in ("last week", "3 days ago", "yesterday", "2025-02-15", "2025-02-15T00:00:00Z"):
        proc = run(data, "search", "--bank", "current.chat", "--json", "--as-of", when, "where do I live",
                   check=False)
        assert proc.returncode == 0, (when, proc.stderr)
        assert isinstance(json.loads(proc.stdout), list)
    for bad in ("lastweek", "15/02/2025", "soon"):
        proc = run(data, "search", "--bank", "current.chat", "--as-of", bad, "x", check=False)
        assert proc.returncode == 2, (bad, proc.returncode, proc.stderr)
        assert f"not a date or time: '{bad}'" in proc.stderr and "ISO-8601" in proc.stderr
        assert "3 days ago" not in proc.stderr or "N days" in proc.stderr
        assert "Traceback" not in proc.stderr and "isoformat" not in proc.stderr
    proc = run(data, "import-pygpt", "--since", "whenever", "--dry-run", check=False)
    assert proc.returncode == 2 and "not a date or time" in proc.stderr
    for args in (["search", "--bank", "current.chat", "--limit", "0", "x"],
                 ["ingest", "--bank", "current.chat", "--batch", "-1", "turns.jsonl"],
                 ["search", "--bank", "current.chat", "--limit", "ten", "x"]):
        proc = run(data, *args, check=False)
        assert proc.returncode == 2 and ("must be at least 1" in proc.stderr
                                         or "not a whole number: 'ten'" in proc.stderr), proc.stderr


def test_a_reader_that_stops_early_gets_no_error(bank):
    data, _ = bank
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    for args in ("export --bank current.chat", "search --bank current.chat --limit 200 Person3",
                 "--help"):
        proc = subprocess.run(f"{shlex.quote(EXE)} --data-dir {shlex.quote(str(data))} {args} | head -c 20; "
                              "echo \" status=${PIPESTATUS[0]}\"",
                              shell=True, executable="/bin/bash", capture_output=True, text=True,
                              env=env, timeout=300)
        assert "Broken pipe" not in proc.stderr and "Errno" not in proc.stderr, (args, proc.stderr)
        assert proc.stderr == "", (args, proc.stderr)
        status = int(proc.stdout.rsplit("status=", 1)[1])
        assert status in (0, 141), (args, status)


def test_search_output_is_cut_at_word_boundaries(tmp_path):
    text = ("My grandmother Henrietta kept bees behind the old stone farmhouse near Aberystwyth "
            "and sold the honey every Saturday at the market in the square, next to the "
            "fishmonger who always sang sea shanties while wrapping mackerel in newspaper")
    run(tmp_path, "remember", "--bank", "g", text)
    out = run(tmp_path, "search", "--bank", "g", "Henrietta bees honey").stdout
    line = next(x for x in out.splitlines() if "Henrietta kept bees" in x)
    quoted = line.split(None, 2)[2].rsplit("  (", 1)[0]
    assert quoted.endswith("…") and len(quoted) <= 160 and "User:" not in quoted
    said = quoted[:-1].rstrip().removeprefix("You said: ")
    assert text.startswith(said) and text[len(said)] in " ,", quoted


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


def test_times_in_any_iso_form_are_read_alike_on_every_python(tmp_path, monkeypatch):
    """A trailing `Z`, basic forms and week dates (which 3.10's fromisoformat refuses; PyGPT's
    AppImage runs 3.10) are read as 3.11 reads them: `Z` is UTC whatever the local zone."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    f = tmp_path / "turns.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [
        {"id": "a", "user": "I live in Berlin now.", "assistant": "Nice.", "time": "2025-02-01T10:00:00Z"},
        {"id": "b", "user": "I live in Oslo now.", "assistant": "Nice.", "time": "20250401T1000Z"},
    ]))
    assert "2 stored" in run(tmp_path, "ingest", "--bank", "d", str(f)).stdout
    past = json.loads(run(tmp_path, "search", "--bank", "d", "--json", "--as-of", "2025-W09-1T00:00Z",
                          "where do I live").stdout)
    facts = [r for r in past if r["kind"] == "fact"]
    assert any("Berlin" in r["text"] and r["sources"] == ["a"] for r in facts), facts
    assert not any("Oslo" in r["text"] for r in facts), facts
    berlin = next(r for r in facts if "Berlin" in r["text"])
    assert berlin["valid_at"].startswith("2025-02-01T10:00:00"), berlin["valid_at"]
    proc = run(tmp_path, "search", "--bank", "d", "--as-of", "31/01/2025", "where", check=False)
    assert proc.returncode == 2 and "not a date or time: '31/01/2025'" in proc.stderr


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(),
                    reason="runs in the checkout's own .venv, made by scripts/install.sh (as in CI)")
def test_install_script_is_quiet_and_run_again_only_checks():
    """scripts/install.sh (CI runs it before the tests) hides setuptools' editable-install
    warning, and a run with nothing changed since installs nothing and prints one line."""
    def install():
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "install.sh")], capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "Editable installation" not in proc.stdout + proc.stderr
        return proc
    install()           # the first run here, if CI's ran an older script
    again = install()
    assert again.stderr == ""
    assert again.stdout.strip().splitlines() == [f"MemoryPlus is installed in {ROOT.resolve()}/.venv "
                                                 "(checked; nothing to do)"]


def test_the_command_goes_through_pygpts_running_worker(tmp_path):
    """While PyGPT runs, its plugin's worker holds the banks' Kuzu locks: search, remember and
    forget typed at the command line go through that worker (they used to fail with "in use"),
    and the plugin sees at once what they changed."""
    from memoryplus.plugin.plugin import Plugin
    from memoryplus.testing.pygpt_host import LOCAL, HostWindow, chat_turn

    window = HostWindow(tmp_path / "pygpt")
    # no search cache: what the plugin recalls is what its worker's bank holds now
    window.core.config.data.setdefault("plugins", {})["memoryplus"] = {**LOCAL, "search_cache": False}
    plugin = window.register(Plugin())
    plugin._ensure_started()
    try:
        window.core.config.set("preset", "current.chat")     # the preset chat_turn talks in
        chat_turn(window, "My dentist is Dr Okafor, his practice is in Hamburg.", "Noted.", ctx_id=1)
        assert plugin.queue.flush(timeout=120), plugin.queue.counts()
        data, bank = plugin.banks_dir(), plugin.current_bank()

        found = run(data, "search", "--bank", bank, "--json", "Who is my dentist?")
        assert "PyGPT's worker" in found.stderr and "going through it" in found.stderr, found.stderr
        assert any("Okafor" in r["text"] for r in json.loads(found.stdout)), found.stdout
        # a setting of the command's own that PyGPT's worker does not share is named, not lost silently
        told = run(data, "--extraction", "llm", "search", "--bank", bank, "--json", "Who is my dentist?")
        assert "--extraction ignored" in told.stderr and "extraction_engine" in told.stderr, told.stderr

        remembered = run(data, "remember", "--bank", bank, "My locker code at the gym is 4711.")
        assert remembered.stdout.strip() == "remembered", remembered.stdout
        prompt = chat_turn(window, "What is my locker code at the gym?", "Noted.", ctx_id=2)
        assert "4711" in prompt, "the plugin recalls what the command remembered"

        gone = run(data, "forget", "--bank", bank, "--yes", "locker code at the gym 4711")
        assert gone.stdout.startswith("forgot ") and not gone.stdout.startswith("forgot 0 "), gone.stdout
        prompt = chat_turn(window, "Tell me my gym locker code.", "Noted.", ctx_id=3)
        assert "4711" not in prompt, "the plugin no longer recalls what the command forgot"
        assert plugin.client.status()["restarts"] == 0, "the plugin's worker was not displaced"
    finally:
        plugin.destroy()


def test_pygpt_starting_during_a_long_command_joins_its_worker_and_takes_over(host, tmp_path):
    """A long command holds the data directory (an ingest of many turns): a PyGPT started
    meanwhile is not told "bank in use" but joins the command's worker and stores its turn at
    once; when the command ends PyGPT takes the data directory over, and the bank holds every
    turn of both."""
    import time

    from memoryplus.config.paths import save_settings
    from memoryplus.config.schema import Settings
    from memoryplus.testing.pygpt_host import LOCAL, chat_turn
    from memoryplus.wire import protocol as P

    data = tmp_path / "pygpt" / "memoryplus"       # the host fixture's PyGPT data directory
    save_settings(data, Settings(**LOCAL))
    n = 400
    f = tmp_path / "turns.jsonl"
    f.write_text("\n".join(json.dumps({"user": f"Log {i}: I sorted box number {i} in the attic.",
                                       "assistant": "Noted.", "time": "2025-03-01T10:00:00"})
                           for i in range(n)))
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    env.pop("OPENAI_API_KEY", None)
    cmd = subprocess.Popen([EXE, "--data-dir", str(data), "ingest", "--bank", "default", "--batch", "5", str(f)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        end = time.monotonic() + 120
        while not list(data.glob("kuzu/*/graph.kuzu")) and cmd.poll() is None and time.monotonic() < end:
            time.sleep(0.05)       # the command has opened the bank
        window, plugin = host()
        assert plugin.banks_dir() == data
        chat_turn(window, "My neighbour Rosalind keeps bees in her garden.", "Lovely.", ctx_id=1)
        assert plugin.queue.flush(timeout=120), plugin.queue.counts()
        counts = plugin.queue.counts()
        assert counts["done"] == 1 and counts["failed"] == 0, ("PyGPT's turn is stored, not 'bank in use'", counts)
        assert cmd.poll() is None, "stored while the command still runs (not after it let go)"
        assert plugin.client.status()["using"] == "socket", "PyGPT joined the command's worker"
        out, err = cmd.communicate(timeout=600)
        assert cmd.returncode == 0, err
        assert f"{n} stored" in out, out
        assert "going through it" not in err, "the command started the worker: no note"
    finally:
        if cmd.poll() is None:
            cmd.kill()
            cmd.wait()
    assert wait_until(lambda: (info := P.live_worker(data)) is not None and info.app == "PyGPT", 120), \
        "PyGPT took the data directory over"
    chat_turn(window, "My piano teacher Ignatius lives in Salzburg.", "Noted.", ctx_id=2)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    assert plugin.client.status()["using"] == "persistent"
    plugin.destroy()
    banks = {b["name"]: b for b in json.loads(run(data, "banks", "--json").stdout)}
    assert banks["default"]["episodes"] == n + 2, banks
    for query, name in (("Who keeps bees?", "Rosalind"), ("Where does my piano teacher live?", "Ignatius"),
                        ("What did I sort in box number 317?", "box number 317")):
        found = run(data, "search", "--bank", "default", "--json", query).stdout
        assert name in found, (query, found)
