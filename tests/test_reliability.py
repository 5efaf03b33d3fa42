"""Reliability of the worker and the queue with real parts: real worker processes, real Kuzu on
disk, the scripted LLM on the loopback address, the real plugin in the PyGPT host.

- A provider's malformed answer is a retryable provider error, not the caller's bad request.
- Store write faults (the worker's I/O fault hook) are retried and store each turn once.
- The crash-loop circuit breaker: turns are spooled while it is open, stored once after
  Restart worker.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import types

import pytest

from memoryplus.config.schema import Settings
from memoryplus.testing import wait_for
from memoryplus.testing.scripted_llm import ScriptedLLMServer
from memoryplus.wire import protocol as P
from memoryplus.client.worker_client import WorkerClient

BANK = "reliable"
KEY = "sk-test-RELIABLEkey0123456789abcdef"


@pytest.fixture
def llm():
    with ScriptedLLMServer() as server:
        yield server


@pytest.fixture
def clients():
    made: list[WorkerClient] = []

    def make(*args, **kwargs) -> WorkerClient:
        kwargs.setdefault("backoff_s", 0.05)
        c = WorkerClient(*args, **kwargs)
        made.append(c)
        return c
    yield make
    pids: set[int] = set()
    for c in made:
        pids |= c._s.own_pids
        c.close(timeout=10)
    for pid in pids:
        wait_for(lambda: not P.pid_alive(pid), 10, what=f"worker {pid} to exit")


def episode_ids(client: WorkerClient, bank: str = BANK) -> list[str]:
    return sorted(json.loads(r["name"])["id"] for r in client.call("export", {"bank": bank}, timeout=120)
                  if r["type"] == "episode")


# ── a provider's malformed answer ─────────────────────────────────────────────────────────
def test_a_malformed_llm_answer_stores_the_turn_locally_not_a_failure_or_a_bad_request(tmp_path, clients, llm):
    """The model's garbage is not retried turn after turn (it would only repeat): the turn is
    stored by local extraction and marked (tests/test_defaults.py has the call bound)."""
    s = Settings(extraction_engine="llm", llm_provider="openai", override_base_url=llm.base_url,
                 override_api_key=KEY, graphiti_model="scripted-llm", embedding_provider="local")
    c = clients(s, tmp_path / "data", mode="persistent").start()
    turn = {"id": "g1", "user": "I adopted a cat called Miso.", "assistant": "Lovely."}
    llm.inject("garbage", count=50, structured_only=True)

    # what the plugin's queue sink gets: a stored turn (nothing to retry), said once
    from memoryplus.plugin.plugin import Plugin
    from memoryplus.wire.records import Turn
    plugin = Plugin.__new__(Plugin)
    from memoryplus.service import RemoteMemoryService
    plugin.client, plugin.cache, plugin.sanitizer, plugin.queue = c, None, None, None
    plugin.service = RemoteMemoryService(c)
    plugin.settings = s
    plugin._llm_calls, plugin._streak, plugin._bank_embedders, plugin._said = [], {}, {}, set()
    plugin._lock, said = threading.Lock(), []
    plugin.notify = types.SimpleNamespace(emit=said.append)
    report = plugin._ingest_batch(BANK, [Turn(**turn)])
    assert report.stored == ["g1"] and "not valid JSON" in report.fallbacks["g1"], report
    assert len(said) == 1 and "stored by local extraction" in said[0] and KEY not in said[0]

    # the same turn again is a no-op: stored once
    llm.clear_faults()
    again = c.call("ingest", {"bank": BANK, "turns": [turn]}, timeout=120)
    assert again["unchanged"] == ["g1"]
    assert episode_ids(c) == ["g1"]

    # the caller's own bad parameters (sent raw, past the client's own check) are a bad request
    from memoryplus.wire import transport
    info = P.live_worker(tmp_path / "data")
    with transport.connect(info.family, info.socket, info.token) as conn:
        conn.send_bytes(P.encode(P.Request(id="raw1", op="ingest", params={"bank": BANK, "turns": [{"id": ""}]})))
        answer = P.decode(conn.recv_bytes())
    assert not answer.ok and answer.error.type == "BadRequest"
    assert "bad parameters for ingest" in answer.error.message


# ── turns the memory mode skips on purpose ────────────────────────────────────────────────


@pytest.mark.option("memory_mode")
def test_turns_the_memory_gate_skips_are_counted_and_shown_apart_from_stored_ones(host):
    from memoryplus.testing.pygpt_host import chat_turn
    window, plugin = host(memory_mode="MemoryGate")
    chat_turn(window, "hi thanks", "You're welcome!", ctx_id=1)
    chat_turn(window, "My dentist is Dr Okafor in Leipzig.", "Noted.", ctx_id=2)
    chat_turn(window, "ok cool", "Great.", ctx_id=3)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    counts = plugin.queue.counts()
    assert counts["done"] == 1 and counts["skipped"] == 2 and counts["failed"] == 0, counts
    assert "2 skipped by memory mode" in plugin.status_text()
    assert plugin.client.call("stats", {"bank": "default"}, timeout=60)["episodes"] == 1


# ── store write faults (the worker's I/O fault hook) ──────────────────────────────────────
def test_turns_written_during_a_store_write_fault_are_retried_and_stored_once(host, monkeypatch):
    from memoryplus.testing.pygpt_host import chat_turn
    from memoryplus.wire.banks import BankDirectory
    from memoryplus.engine.store import TEST_STORE_FAULT_FILE
    monkeypatch.setenv(P.TEST_HOOKS_ENV, "1")          # the hook is inert without it
    window, plugin = host(retry_attempts=8, retry_backoff_ms=100, batch_size=1, batch_delay_ms=0)
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted.", ctx_id=1)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    storage = BankDirectory(plugin.banks_dir(), "kuzu").path("default").parent
    fault, hits = storage / TEST_STORE_FAULT_FILE, storage / (TEST_STORE_FAULT_FILE + ".hits")

    fault.write_text(str(time.time() + 1.5))           # every write fails with EIO for 1.5 s
    for i, city in enumerate(["Lyon", "Turku", "Cadiz"], start=2):
        chat_turn(window, f"My colleague Person{i} moved to {city}.", "Noted.", ctx_id=i)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    counts = plugin.queue.counts()
    assert hits.exists() and hits.read_text().count("\n") >= 1, "the fault really hit the store"
    assert counts["failed"] == 0 and counts["done"] == 4, counts

    episodes = [r for r in plugin.client.call("export", {"bank": "default"}, timeout=60)
                if r["type"] == "episode"]
    ids = sorted(json.loads(e["name"])["id"] for e in episodes)
    assert ids == sorted(f"pygpt:1:{i}" for i in range(1, 5)), "every turn once, none twice"
    assert all(json.loads(e["name"])["state"] == "complete" for e in episodes)
    for city in ("Lyon", "Turku", "Cadiz"):
        results = plugin.client.call("search", {"bank": "default", "query": city}, timeout=60)
        assert any(city in r["text"] for r in results), city


def test_the_store_fault_file_is_inert_without_test_hooks(host, monkeypatch):
    from memoryplus.testing.pygpt_host import chat_turn
    from memoryplus.wire.banks import BankDirectory
    from memoryplus.engine.store import TEST_STORE_FAULT_FILE
    monkeypatch.delenv(P.TEST_HOOKS_ENV, raising=False)
    window, plugin = host()
    storage = BankDirectory(plugin.banks_dir(), "kuzu").path("default").parent
    storage.mkdir(parents=True, exist_ok=True)
    (storage / TEST_STORE_FAULT_FILE).write_text(str(time.time() + 3600))
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted.", ctx_id=1)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    assert plugin.queue.counts()["done"] == 1 and plugin.queue.counts()["failed"] == 0
    assert not (storage / (TEST_STORE_FAULT_FILE + ".hits")).exists()


# ── the crash-loop circuit breaker ────────────────────────────────────────────────────────
def test_after_the_crash_loop_breaker_opens_turns_are_spooled_and_stored_once_after_restart(host):
    from memoryplus.testing.pygpt_host import chat_turn
    window, plugin = host(retry_attempts=2, retry_backoff_ms=100, batch_delay_ms=0)
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted.", ctx_id=1)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()

    def ready_pid(old=None):
        st = plugin.client.status()
        return st["pid"] if st.get("state") == "ready" and st.get("pid") not in (None, old) else None

    pid = wait_for(ready_pid, 60, what="the worker")
    for death in range(3):                      # three deaths within the breaker's window
        os.kill(pid, signal.SIGKILL)
        if death < 2:
            pid = wait_for(lambda: ready_pid(pid), 60, what=f"worker restart {death + 1}")
    wait_for(lambda: plugin.client.status().get("state") == "broken", 30, what="the breaker to open")
    assert "Restart worker" in plugin.status_text()

    # turns keep being handed over and spooled while no worker runs
    for i, city in enumerate(["Lyon", "Turku", "Cadiz", "Tartu"], start=2):
        chat_turn(window, f"My colleague Person{i} moved to {city}.", "Noted.", ctx_id=i)
    spool = plugin.user_dir() / "spool"
    wait_for(lambda: all(f"pygpt:1:{i}" in "".join(p.read_text() for p in spool.glob("ingest-*.jsonl"))
                         for i in range(2, 6)), 10, what="the turns to be spooled")
    wait_for(lambda: plugin.queue.counts()["failed"] == 4, 60, what="the turns to fail (no worker)")
    time.sleep(1.0)
    assert plugin.client.status()["state"] == "broken", "the breaker stays open by itself"

    # the user's Restart worker: a new worker, and every kept turn stored once
    plugin.restart_worker().result(timeout=120)
    wait_for(lambda: plugin.queue.counts()["failed"] == 0, 30, what="the failed turns to be requeued")
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    counts = plugin.queue.counts()
    assert counts["failed"] == 0 and counts["done"] == 5, counts
    episodes = [r for r in plugin.client.call("export", {"bank": "default"}, timeout=60) if r["type"] == "episode"]
    assert sorted(json.loads(e["name"])["id"] for e in episodes) == [f"pygpt:1:{i}" for i in range(1, 6)]
    assert plugin.client.status()["state"] == "ready"
