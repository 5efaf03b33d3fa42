"""`memoryplus import-pygpt` against a real PyGPT database written by pygpt-net's own code
(its Database with every migration, its db_sqlite ctx provider, CtxMeta and CtxItem)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from datetime import datetime
from pathlib import Path

import pytest

EXE = shutil.which("memoryplus", path=str(Path(sys.executable).parent)) or "memoryplus"


def ts(day: str) -> int:
    return int(datetime.fromisoformat(day + "T10:00:00+00:00").timestamp())


# (preset, [(user, assistant, day, flags)])
CONVERSATIONS = [
    ("coder", [("I write my services in Rust.", "Rust is a fine choice.", "2024-03-01", {}),
               ("My editor is Helix.", "Helix is modal.", "2024-03-02", {}),
               ("internal summary call", "summary", "2024-03-02", {"internal": True}),
               ("Stopped half way", "", "2024-03-03", {})]),
    ("coder", [("I deploy on Hetzner servers.", "Noted.", "2024-06-10", {})]),
    ("travel", [("I am flying to Lisbon in May.", "Enjoy Lisbon!", "2024-04-01", {}),
                ("My passport expires in 2027.", "Good to know.", "2024-07-15", {})]),
    ("current.chat", [("My cat is called Miso.", "Cute name.", "2024-05-05", {})]),
]


def make_pygpt_db(workdir: Path) -> dict:
    """db.sqlite created and filled as PyGPT does it; returns {preset: [(meta_id, item_id)]}."""
    from pygpt_net.core.command import Command
    from pygpt_net.core.db import Database
    from pygpt_net.item.ctx import CtxItem, CtxMeta
    from pygpt_net.provider.core.ctx.db_sqlite import DbSqliteProvider

    workdir.mkdir(parents=True, exist_ok=True)
    window = types.SimpleNamespace()
    window.core = types.SimpleNamespace(config=types.SimpleNamespace(path=str(workdir), get=lambda k, d=None: d))
    window.core.db = Database(window)
    window.core.db.echo = False
    window.core.command = Command(window)
    window.core.db.init()
    window.core.db.migrate()
    provider = DbSqliteProvider(window)
    provider.attach(window)
    ids: dict = {}
    for preset, turns in CONVERSATIONS:
        meta = CtxMeta()
        meta.preset, meta.name, meta.mode, meta.model = preset, f"{preset} chat", "chat", "gpt-4o"
        meta.created = meta.updated = ts(turns[0][2])
        provider.create(meta)
        for user, assistant, day, flags in turns:
            item = CtxItem()
            item.input, item.output = user, assistant
            item.input_timestamp, item.output_timestamp = ts(day), ts(day) + 5
            item.mode, item.model = "chat", "gpt-4o"
            item.internal = bool(flags.get("internal"))
            provider.append_item(meta, item)
            ids.setdefault(preset, []).append((meta.id, item.id))
    window.core.db.close()
    return ids


@pytest.fixture(scope="module")
def pygpt(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pygpt")
    ids = make_pygpt_db(workdir)
    return workdir, ids


def run(data, *args, check=True, env_extra=None, stdin=None):
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    env.pop("OPENAI_API_KEY", None)
    env.update(env_extra or {})
    proc = subprocess.run([EXE, "--data-dir", str(data), *args], capture_output=True, text=True,
                          env=env, timeout=240, stdin=stdin if stdin is not None else subprocess.DEVNULL)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def banks(data) -> dict:
    return {b["name"]: b["episodes"] for b in json.loads(run(data, "banks", "--json").stdout)}


def test_import_banks_dates_idempotence(pygpt, tmp_path):
    workdir, ids = pygpt
    data = tmp_path / "data"
    dry = run(data, "--extraction", "local", "import-pygpt", "--workdir", str(workdir), "--dry-run")
    assert "coder\t3 turns" in dry.stdout and "travel\t2 turns" in dry.stdout
    assert "default\t1 turn would" in dry.stdout and "6 turns in 3 banks" in dry.stdout
    assert not (data / "kuzu").exists() or banks(data) == {}          # a dry run stores nothing

    out = run(data, "--extraction", "local", "import-pygpt", "--workdir", str(workdir), "--batch", "2")
    assert "6 stored, 0 already there" in out.stdout
    # current.* presets go to the fallback bank; internal and unanswered turns are left out
    assert banks(data) == {"coder": 3, "travel": 2, "default": 1}

    # the plugin's own turn ids and the original dates
    eps = run(data, "export", "--bank", "coder").stdout.splitlines()
    episodes = [json.loads(x) for x in eps if json.loads(x).get("type") == "episode"]
    expected = {f"pygpt:{m}:{i}" for m, i in ids["coder"]}
    blob = json.dumps(episodes)
    assert len(episodes) == 3 and sum(e in blob for e in expected) == 3
    assert "2024-03-01" in blob and "2024-06-10" in blob
    past = json.loads(run(data, "search", "--bank", "coder", "--json", "--as-of",
                          "2024-03-05T00:00:00+00:00", "where do I deploy Hetzner Rust").stdout)
    assert past and not any("Hetzner" in r["text"] for r in past)      # not yet said in March
    now = json.loads(run(data, "search", "--bank", "coder", "--json", "Hetzner servers").stdout)
    assert any("Hetzner" in r["text"] for r in now)

    again = run(data, "--extraction", "local", "import-pygpt", "--workdir", str(workdir))
    assert "0 stored, 6 already there" in again.stdout
    assert banks(data) == {"coder": 3, "travel": 2, "default": 1}


def test_preset_and_since_filters(pygpt, tmp_path):
    workdir, _ = pygpt
    data = tmp_path / "data"
    out = run(data, "--extraction", "local", "import-pygpt", "--workdir", str(workdir), "--preset", "travel")
    assert "2 stored" in out.stdout and banks(data) == {"travel": 2}
    out = run(data, "--extraction", "local", "import-pygpt", "--workdir", str(workdir),
              "--since", "2024-05-01")
    # on or after May 1st: coder (June), travel (July, already there), default (May)
    assert "2 stored, 1 already there" in out.stdout
    assert banks(data) == {"travel": 2, "coder": 1, "default": 1}
    bad = run(data, "import-pygpt", "--workdir", str(workdir), "--since", "someday", check=False)
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr
    recent = run(data, "import-pygpt", "--workdir", str(workdir), "--since", "yesterday")
    assert "nothing to import" in recent.stdout, "a relative time is a time: nothing that recent"
    missing = run(data, "import-pygpt", "--workdir", str(tmp_path / "nowhere"), check=False)
    assert missing.returncode == 1 and "no PyGPT database" in missing.stderr


def test_llm_estimate_prompt_and_yes(pygpt, tmp_path):
    from memoryplus.cli.import_pygpt import LLM_CALLS_PER_TURN, LLM_INPUT_TOKENS_PER_CALL
    from memoryplus.config.paths import save_settings
    from memoryplus.config.schema import Settings
    from memoryplus.testing.scripted_llm import ScriptedLLMServer

    workdir, _ = pygpt
    data = tmp_path / "data"
    with ScriptedLLMServer() as server:
        save_settings(data, Settings(extraction_engine="llm", llm_provider="openai_compatible",
                                     override_base_url=server.base_url, graphiti_model="scripted-llm",
                                     embedding_provider="local"))
        env = {"OPENAI_API_KEY": "sk-test-import-aaaaaaaaaaaa"}
        refused = run(data, "import-pygpt", "--workdir", str(workdir), check=False, env_extra=env)
        assert refused.returncode == 1 and "--yes" in refused.stderr
        assert f"about {6 * LLM_CALLS_PER_TURN} LLM calls" in refused.stderr
        assert sum(server.calls.values()) == 0

        # on a terminal the question is asked; "n" stores nothing
        import pty
        master, slave = pty.openpty()
        os.write(master, b"n\n")
        no = run(data, "import-pygpt", "--workdir", str(workdir), check=False, env_extra=env, stdin=slave)
        os.close(slave)
        os.close(master)
        assert no.returncode == 1 and "Go on?" in no.stderr and "nothing imported" in no.stderr
        assert not sum(v for k, v in server.calls.items() if k != "embeddings"), "no extraction call"

        out = run(data, "import-pygpt", "--workdir", str(workdir), "--preset", "travel", "--yes",
                  env_extra=env)
        assert "2 stored" in out.stdout and "(llm extraction)" in out.stdout
        llm_calls = sum(v for k, v in server.calls.items() if k != "embeddings")
        per_turn = llm_calls / 2
        per_call = server.input_tokens / max(llm_calls, 1)
        print(f"measured: {per_turn:.1f} LLM calls per turn, {per_call:.0f} input tokens per call")
        # the constants in cli/import_pygpt.py come from this measurement
        assert 0.5 * LLM_CALLS_PER_TURN <= per_turn <= 1.5 * LLM_CALLS_PER_TURN
        assert 0.3 * LLM_INPUT_TOKENS_PER_CALL <= per_call <= 2.0 * LLM_INPUT_TOKENS_PER_CALL


def test_import_through_running_worker(pygpt, tmp_path):
    """While PyGPT runs, its worker holds the banks: the import goes through that worker."""
    import time

    from memoryplus.config.schema import Settings
    from memoryplus.client.worker_client import WorkerClient

    workdir, _ = pygpt
    data = tmp_path / "data"
    settings = Settings(extraction_engine="local", embedding_provider="local")
    client = WorkerClient(settings, data, mode="persistent", app="PyGPT (test)").start()
    try:
        deadline = time.monotonic() + 60
        while client.status()["state"] != "ready" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.status()["state"] == "ready"
        client.call("ingest", {"bank": "travel", "turns": [{"id": "x", "user": "Warm-up turn here.",
                                                             "assistant": "ok"}]})
        out = run(data, "--extraction", "local", "import-pygpt", "--workdir", str(workdir),
                  "--preset", "travel")
        assert "importing through it" in out.stderr and "2 stored" in out.stdout
        info = {b["name"]: b["episodes"] for b in client.call("banks")}
        assert info == {"travel": 3}
    finally:
        client.close(timeout=15)
