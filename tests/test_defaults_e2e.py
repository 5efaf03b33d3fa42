"""The common PyGPT set-ups with MemoryPlus's default settings (extraction and embeddings
`auto`), in the real desktop app (testing/app_driver.py; see test_app_e2e.py for the harness).

(c) PyGPT's OpenAI provider pointed at an OpenAI-compatible endpoint: LLM extraction there and
embeddings there too, or local embeddings when that endpoint serves none; (d) PyGPT's Ollama
chosen for the Graphiti model. Each run must store the first turn and recall it in the second,
with no error, no alert, and the embedder recorded for the bank with its reason.
(a) no key is in test_defaults.py (the real PyGPT host); (b) OpenAI's own endpoint cannot be
reached from here (its choice is checked in test_defaults.py::test_auto_embeddings_for_each_set_up).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from memoryplus.testing.scripted_llm import ScriptedLLMServer

# The app harness of test_app_e2e.py (pytest's importlib mode does not import test modules
# by name): loaded as a module of its own, its tests are not collected twice.
_spec = importlib.util.spec_from_file_location("memoryplus_tests_app_e2e",
                                               Path(__file__).with_name("test_app_e2e.py"))
_e2e = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_e2e)
FIRST, SECOND, _reply, assert_recall, run_app = _e2e.FIRST, _e2e.SECOND, _e2e._reply, _e2e.assert_recall, _e2e.run_app
_runtime_missing = _e2e._runtime_missing

pytestmark = pytest.mark.skipif(_runtime_missing() is not None, reason=_runtime_missing() or "")
DEFAULTS = ("--option", 'extraction_engine="auto"', "--option", 'embedding_provider="auto"')
GRAPHITI_PATHS = ("/responses", "/chat/completions")


@pytest.fixture
def llm():
    server = ScriptedLLMServer(chat_reply=_reply).start()
    yield server
    server.stop()


def manifests(run) -> list[dict]:
    data = Path(run.report["worker_status"]["data_dir"])
    return [json.loads(p.read_text()) for p in data.glob("kuzu/*/bank.json")]


def graphiti_requests(server: ScriptedLLMServer) -> list[dict]:
    """Extraction calls: structured, not streamed (PyGPT's own chat turns are streamed)."""
    return [b for p, b in server.requests if isinstance(b, dict) and not b.get("stream")
            and p.rstrip("/").endswith(GRAPHITI_PATHS)]


def embedding_requests(server: ScriptedLLMServer) -> list[dict]:
    return [b for p, b in server.requests if p and p.rstrip("/").endswith("/embeddings")]


def assert_quiet(run) -> None:
    rep = run.report
    assert not rep.get("alerts"), rep.get("alerts")
    assert rep["queue_counts"].get("failed", 0) == 0, rep["queue_counts"]


@pytest.mark.option("embedding_provider")
@pytest.mark.option("extraction_engine")
def test_pygpt_endpoint_serves_extraction_and_embeddings(tmp_path, llm):
    run = run_app(tmp_path, "endpoint", tmp_path / "pygpt", "--route", "launcher", "--base-url", llm.base_url,
                  *DEFAULTS, "--message", FIRST, "--message", SECOND)
    assert_recall(run, llm)
    assert_quiet(run)
    assert run.report["worker_status"]["extraction"] == "llm"
    assert graphiti_requests(llm), "no extraction call reached PyGPT's endpoint"
    assert embedding_requests(llm), "no embedding call reached PyGPT's endpoint"
    [bank] = manifests(run)
    assert bank["embedder"].startswith("openai_compatible:"), bank
    assert f"127.0.0.1:{llm.port}" in bank["embedder_note"], bank
    assert "Embeddings in use: openai_compatible" in run.report["embedding_provider_description"]


def test_pygpt_endpoint_without_embeddings_gets_local_ones(tmp_path, llm):
    llm.serve_embeddings = False         # a chat-only OpenAI-compatible server
    run = run_app(tmp_path, "chat-only", tmp_path / "pygpt", "--route", "launcher", "--base-url", llm.base_url,
                  *DEFAULTS, "--message", FIRST, "--message", SECOND)
    assert_recall(run, llm)
    assert_quiet(run)
    assert graphiti_requests(llm), "extraction should still be the LLM's"
    [bank] = manifests(run)
    assert bank["embedder"].split(":")[0] in ("local", "hash"), bank
    assert "does not serve embeddings" in bank["embedder_note"], bank
    assert "does not serve embeddings" in run.report["embedding_provider_description"]


@pytest.mark.option("embedding_provider")
def test_pygpt_ollama_for_the_graphiti_model(tmp_path, llm):
    # PyGPT's Ollama address is its OLLAMA_API_BASE (Settings → General → Environment: the
    # `app.env` config key); the scripted server speaks Ollama's OpenAI-compatible /v1 API,
    # which is what MemoryPlus's Ollama clients use
    ollama = json.dumps([{"name": "OLLAMA_API_BASE", "value": llm.base_url[:-len("/v1")]}])
    run = run_app(tmp_path, "ollama", tmp_path / "pygpt", "--route", "launcher", "--base-url", llm.base_url,
                  *DEFAULTS, "--option", 'graphiti_model="llama3.1"', "--config", f"app.env={ollama}",
                  "--message", FIRST, "--message", SECOND)
    assert_recall(run, llm)
    assert_quiet(run)
    extraction = graphiti_requests(llm)
    assert extraction and all(b.get("model") == "llama3.1" for b in extraction), \
        {b.get("model") for b in extraction}
    assert {b.get("model") for b in embedding_requests(llm)} == {"nomic-embed-text"}
    [bank] = manifests(run)
    assert bank["embedder"].startswith("ollama:nomic-embed-text:"), bank
    assert "Ollama" in bank["embedder_note"], bank
