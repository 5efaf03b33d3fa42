"""`memoryplus doctor` on a healthy set-up and on broken ones, run as a user runs it."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

EXE = shutil.which("memoryplus", path=str(Path(sys.executable).parent)) or "memoryplus"
SECRET = "sk-doctor-secret-0123456789abcdef"


def doctor(data, tmp_path, *extra, env_extra=None):
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    env.pop("OPENAI_API_KEY", None)
    workdir = tmp_path / "pygpt"
    workdir.mkdir(exist_ok=True)
    (workdir / "config.json").write_text(json.dumps({"plugins_enabled": {"memoryplus": True}}))
    env["PYGPT_WORKDIR"] = str(workdir)
    env.update(env_extra or {})
    proc = subprocess.run([EXE, "--data-dir", str(data), "doctor", *extra], capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stderr + proc.stdout
    return proc


def checks(proc) -> dict:
    return {c["name"]: c for c in json.loads(proc.stdout)}


def remember(data, bank="notes"):
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    env.pop("OPENAI_API_KEY", None)
    subprocess.run([EXE, "--data-dir", str(data), "remember", "--bank", bank, "I like green tea."],
                   check=True, capture_output=True, env=env, timeout=120)


def write_settings(data, **values):
    from memoryplus.config.paths import save_settings
    from memoryplus.config.schema import Settings
    save_settings(data, Settings(**values))


def unused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_healthy(tmp_path):
    data = tmp_path / "data"
    write_settings(data, extraction_engine="local", embedding_provider="local")
    remember(data)
    proc = doctor(data, tmp_path)
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    for name in ("python", "package graphiti-core", "package kuzu", "settings", "pygpt",
                 "data directory", "worker", "bank notes", "embeddings", "embedding dims notes"):
        assert any(line.startswith("OK") and f" {name}:" in line for line in lines), (name, proc.stdout)
    assert proc.stdout.rstrip().endswith("everything looks fine")
    as_json = checks(doctor(data, tmp_path, "--json"))
    assert all(c["status"] == "OK" for c in as_json.values())
    assert as_json["embedding dims notes"]["message"].startswith("256 dimensions")


def test_unwritable_data_dir_and_garbage_settings(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = doctor(blocker / "data", tmp_path)
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if " data directory:" in x)
    assert line.startswith("FAIL") and "not writable" in line and "fix:" in proc.stdout

    data = tmp_path / "data"
    data.mkdir()
    (data / "settings.json").write_text("{ this is not json")
    proc = doctor(data, tmp_path, "--json")
    assert proc.returncode == 1
    c = checks(proc)["settings"]
    assert c["status"] == "FAIL" and "settings.json" in c["message"] and c["fix"]


def test_locked_bank_names_its_holder(tmp_path):
    data = tmp_path / "data"
    write_settings(data, extraction_engine="local", embedding_provider="local")
    remember(data)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import asyncio, sys
        from memoryplus.config.schema import Settings
        from memoryplus.engine.memory_engine import MemoryEngine
        async def main():
            eng = MemoryEngine(Settings(extraction_engine="local", embedding_provider="local"),
                               {str(data)!r}, app="a test holder")
            await eng.stats("notes")
            print("ready", flush=True)
            sys.stdin.readline()
            await eng.close()
        asyncio.run(main())
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        proc = doctor(data, tmp_path, "--json")
        assert proc.returncode == 1
        c = checks(proc)["bank notes"]
        assert c["status"] == "FAIL" and f"pid {holder.pid}" in c["message"] and "a test holder" in c["message"]
        assert str(holder.pid) in c["fix"]
    finally:
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    assert doctor(data, tmp_path).returncode == 0      # released: healthy again


def test_refused_provider_never_shows_the_key(tmp_path):
    data = tmp_path / "data"
    write_settings(data, extraction_engine="llm", llm_provider="openai_compatible",
                   override_base_url=f"http://127.0.0.1:{unused_port()}/v1", embedding_provider="local")
    proc = doctor(data, tmp_path, env_extra={"OPENAI_API_KEY": SECRET})
    assert proc.returncode == 1
    line = next(x for x in proc.stdout.splitlines() if " llm provider:" in x)
    assert line.startswith("FAIL") and "unreachable" in line and "sk-…" in line
    assert SECRET not in proc.stdout + proc.stderr and SECRET[3:12] not in proc.stdout + proc.stderr


def test_embedding_dimension_mismatch(tmp_path):
    import asyncio

    from memoryplus.config.schema import Settings
    from memoryplus.testing.scripted_llm import ScriptedLLMServer
    from memoryplus.engine.memory_engine import MemoryEngine
    from memoryplus.wire.records import Turn

    data = tmp_path / "data"
    emb = dict(extraction_engine="local", embedding_provider="openai", embedding_api_key=SECRET)
    with ScriptedLLMServer(embedding_dim=64) as server:
        async def build():
            eng = MemoryEngine(Settings(embedding_base_url=server.base_url, **emb), data)
            await eng.ingest("work", [Turn(id="1", user="I use Kuzu at work.", assistant="ok")])
            await eng.close()
        asyncio.run(build())
    manifest = json.loads(next((data / "kuzu").glob("*/bank.json")).read_text())
    assert manifest["embedding_dim"] == 64
    with ScriptedLLMServer(embedding_dim=32) as server:    # the server's model changed
        write_settings(data, embedding_base_url=server.base_url, **emb)
        proc = doctor(data, tmp_path, "--json")
    assert proc.returncode == 1
    c = checks(proc)["embedding dims work"]
    assert c["status"] == "FAIL" and "64" in c["message"] and "32" in c["message"]
    assert "reembed --bank work" in c["fix"]
    assert SECRET not in proc.stdout + proc.stderr
