"""Defaults that work, and nothing failing silently: an LLM that answers garbage still lets a
turn be stored (by local extraction, marked, within a call bound); a worker that cannot start
is said once, in PyGPT, with the fix; the embedder in use and why is on the settings page.
The set-ups of a PyGPT user (its own endpoint, Ollama) run in the real app: test_defaults_e2e.py."""
from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from memoryplus.config.install import LOCAL_EMBEDDER_PINS
from memoryplus.testing.pygpt_host import chat_turn
from memoryplus.testing.scripted_llm import ScriptedLLMServer
from memoryplus.engine.providers import INVALID_ANSWER_RETRIES, MAX_LLM_CALLS_PER_TURN, resolve_embedder
from memoryplus.wire.records import Credentials, Turn

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def llm():
    with ScriptedLLMServer() as server:
        yield server


def model_calls(server: ScriptedLLMServer) -> int:
    return sum(1 for path, body in server.requests
               if body and path.rstrip("/").endswith(("/responses", "/chat/completions")))


@pytest.mark.option("extraction_engine")
@pytest.mark.parametrize("provider", ["openai", "openai_compatible"])
async def test_garbage_answers_store_the_turn_locally_marked_within_the_call_bound(make_engine, llm, provider):
    eng = make_engine(extraction_engine="llm", llm_provider=provider, override_base_url=llm.base_url,
                      override_api_key="sk-test-aaaaaaaaaaaaaaaaaaaaaaaa", graphiti_model="scripted-llm",
                      embedding_provider="local")
    llm.inject("garbage", count=1000, structured_only=True)
    rep = await eng.ingest("p", [Turn(id="t1", user="My dentist is Dr Okafor and I live in Lisbon.",
                                      assistant="Noted.")])
    calls = model_calls(llm)
    assert rep.stored == ["t1"], rep
    assert "not valid JSON" in rep.fallbacks["t1"], rep.fallbacks
    # one prompt, asked again once, then the turn gives up on the LLM (today: 9 calls, then failed)
    assert calls <= INVALID_ANSWER_RETRIES + 1 <= MAX_LLM_CALLS_PER_TURN, calls
    # remembered: found by search, marked in the browser, the export and the stats
    assert any("Okafor" in r.text for r in await eng.search("p", "Who is my dentist?"))
    [episode] = await eng.browse("p", "episodes")
    assert episode["fallback"] and episode["complete"], episode
    exported = [r for r in await eng.export("p") if r["type"] == "episode"]
    assert json.loads(exported[0]["name"])["fallback"] == episode["fallback"]
    stats = await eng.stats("p")
    assert stats.llm_fallbacks == 1 and stats.episodes == 1 and stats.facts >= 1, stats
    # a good answer again: the next turn is the LLM's, not marked
    llm.clear_faults()
    rep = await eng.ingest("p", [Turn(id="t2", user="I work at Siemens in Munich.", assistant="Nice.")])
    assert rep.stored == ["t2"] and not rep.fallbacks
    assert (await eng.stats("p")).llm_fallbacks == 1


async def test_an_outage_is_not_papered_over_by_local_extraction(make_engine, llm):
    """Only the model's own bad answers fall back; an unreachable server fails the turn (kept,
    retried, and said to the user), so that it is stored by the LLM once it answers."""
    eng = make_engine(extraction_engine="llm", llm_provider="openai_compatible",
                      override_base_url="http://127.0.0.1:9/v1", graphiti_model="scripted-llm",
                      embedding_provider="local")
    with pytest.raises(Exception) as err:
        await eng.ingest("p", [Turn(id="t1", user="I live in Lisbon.")])
    assert "connection" in str(err.value).lower(), err.value


def test_auto_embeddings_for_each_set_up():
    from memoryplus.config.schema import Settings
    s = Settings()
    none = resolve_embedder(s, Credentials())
    assert none.provider in ("local", "hash") and "no API key" in none.why or "not installed" in none.why
    openai = resolve_embedder(s, Credentials(openai_api_key="sk-x", openai_base_url="https://api.openai.com/v1",
                                             model_provider="openai"))
    assert (openai.provider, openai.base_url) == ("openai", "")      # OpenAI's own endpoint
    own = resolve_embedder(s, Credentials(openai_api_key="sk-x", openai_base_url="http://10.0.0.5:8000/v1",
                                          model_provider="openai_compatible"))
    assert own.provider == "openai_compatible" and own.base_url == "http://10.0.0.5:8000/v1"
    assert own.local_if_unserved and "10.0.0.5:8000" in own.why
    ollama = resolve_embedder(s, Credentials(ollama_base_url="http://127.0.0.1:11434/v1", model_provider="ollama"))
    assert (ollama.provider, ollama.base_url) == ("ollama", "http://127.0.0.1:11434/v1")
    # the LLM override URL is never borrowed for embeddings
    override = resolve_embedder(Settings(override_base_url="http://10.0.0.9/v1"), Credentials(openai_api_key="sk-x"))
    assert override.provider == "openai" and override.base_url == ""
    # a bank keeps the embedder it was built with
    kept = resolve_embedder(s, Credentials(openai_api_key="sk-x", openai_base_url="http://10.0.0.5:8000/v1"),
                            "local:wordllama-l2-256:256")
    assert kept.provider == "local" and "keeps" in kept.why


async def test_a_pygpt_endpoint_without_embeddings_builds_the_bank_with_local_ones(make_engine, llm):
    llm.serve_embeddings = False
    creds = Credentials(openai_api_key="sk-test-aaaaaaaaaaaaaaaaaaaaaaaa", openai_base_url=llm.base_url,
                        model_provider="openai")
    eng = make_engine(credentials=creds, extraction_engine="local", embedding_provider="auto")
    await eng.ingest("p", [Turn(id="1", user="I live in Lisbon.")])
    assert any(p.endswith("/embeddings") for p, _ in llm.requests), "PyGPT's endpoint was not asked"
    stats = await eng.stats("p")
    assert stats.embedder.split(":")[0] in ("local", "hash"), stats
    assert "does not serve embeddings" in stats.embedder_note and "404" in stats.embedder_note
    # decided once: the endpoint serving embeddings later does not switch the bank
    llm.serve_embeddings = True
    await eng.close()
    await eng.ingest("p", [Turn(id="2", user="I work in Porto.")])
    llm.reset()
    assert (await eng.stats("p")).embedder == stats.embedder
    seen = len(llm.requests)
    await eng.ingest("p", [Turn(id="3", user="I like tea.")])
    assert not any(p.endswith("/embeddings") for p, _ in llm.requests[seen:])


def test_the_install_hint_matches_the_pinned_requirements():
    pins = [line.strip() for line in (REPO / "requirements-nodeps.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert sorted(LOCAL_EMBEDDER_PINS.split()) == sorted(pins)


def _python_without(tmp_path: Path, module: str) -> str:
    """A real interpreter on which `module` is not installed, as on a PyGPT whose add-on
    installer did not bring it: a wrapper whose sitecustomize hides the module from imports."""
    shadow = tmp_path / f"without-{module}"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r} or name.startswith({module + '.'!r}):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Hide())\n")
    wrapper = tmp_path / f"python-without-{module}"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH=\"{shadow}:$PYTHONPATH\" exec \"{sys.executable}\" \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


@pytest.mark.option("worker_python")
def test_a_worker_that_cannot_start_is_said_once_with_the_fix(host, tmp_path):
    window, plugin = host(worker_python=_python_without(tmp_path, "graphiti_core"), engine_mode="auto")
    deadline = time.monotonic() + 60
    while not window.alerts and time.monotonic() < deadline:
        window.process_events(0.1)
    assert window.alerts, f"no alert; status bar said {window.statuses[-3:]}"
    text = window.alerts[0]
    assert "graphiti_core" in text and "graphiti-core[kuzu,google-genai]==0.31.2" in text, text
    assert "pip install" in text
    # turns go on failing for the same cause: still one message, not one per turn
    for i in range(3):
        chat_turn(window, f"My locker number is {100 + i}.", "Noted.", ctx_id=10 + i)
    window.process_events(8)
    assert len([a for a in window.alerts if "graphiti_core" in a]) == 1, window.alerts
    assert not any("sk-" in a for a in window.alerts)


def test_no_key_means_local_everything_and_the_settings_page_says_so(host):
    """Set-up (a): PyGPT with no API key and MemoryPlus's default settings."""
    window, plugin = host(embedding_provider="auto", extraction_engine="auto")
    chat_turn(window, "My dentist is Dr Okafor.", "Noted.", ctx_id=1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "Embeddings in use" not in plugin.options["embedding_provider"]["description"]:
        window.process_events(0.2)
    desc = plugin.options["embedding_provider"]["description"]
    assert "Embeddings in use: local:wordllama-l2-256:256" in desc, desc
    assert plugin.client.status()["extraction"] == "local"
    assert plugin.queue.flush(timeout=30)
    assert "Okafor" in chat_turn(window, "Who is my dentist?", "Dr Okafor.", ctx_id=2)
    assert not window.alerts, window.alerts


@pytest.mark.option("embedding_provider")
def test_hashed_features_are_explained_with_a_command_that_keeps_pygpts_numpy(host, tmp_path):
    python = _python_without(tmp_path, "wordllama")
    window, plugin = host(worker_python=python, embedding_provider="auto", extraction_engine="local")
    chat_turn(window, "My dentist is Dr Okafor.", "Noted.", ctx_id=1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and "Embeddings in use" not in plugin.options["embedding_provider"]["description"]:
        window.process_events(0.2)
    desc = plugin.options["embedding_provider"]["description"]
    assert "Embeddings in use: hash:hash:384" in desc and "not installed" in desc, desc
    assert f"-m pip install --no-deps {LOCAL_EMBEDDER_PINS}" in desc, desc
    assert "hashed embeddings" in plugin.status_text()
    # a bank built before the reason was recorded still says how to get the real embedder
    # (what this session's own ingest reported of the bank is not asked here)
    plugin._bank_embedders.clear()
    text = plugin.embedder_text({"embedder": {"banks": {plugin.current_bank(): {"id": "hash:hash:384", "why": ""}}},
                                 "python": "/opt/pygpt/bin/python"})
    assert f'"/opt/pygpt/bin/python" -m pip install --no-deps {LOCAL_EMBEDDER_PINS}' in text, text


def test_the_doctor_installs_the_offline_embedder_without_replacing_pygpts_numpy(monkeypatch):
    from importlib import metadata
    from types import SimpleNamespace
    from memoryplus.cli.doctor import Doctor
    real = metadata.version

    def version(dist):        # this environment has WordLlama; the user's does not
        if dist == "wordllama":
            raise metadata.PackageNotFoundError(dist)
        return real(dist)
    monkeypatch.setattr(metadata, "version", version)
    doctor = Doctor(SimpleNamespace())
    doctor.python_and_packages()
    [check] = [c for c in doctor.checks if c.name == "package wordllama"]
    assert check.status == "WARN" and "hashed" in check.message
    assert f"-m pip install --no-deps {LOCAL_EMBEDDER_PINS}" in check.fix, check.fix


SECRET = "sk-defaults-secret-0123456789abcdef"


def _wait_alert(window, needle: str, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while not any(needle in a for a in window.alerts) and time.monotonic() < deadline:
        window.process_events(0.1)
    return [a for a in window.alerts if needle in a]


@pytest.mark.option("override_api_key")
def test_a_refused_key_is_said_once_without_the_key(host, llm):
    llm.inject("401", count=10000, embeddings=True)
    window, plugin = host(extraction_engine="llm", llm_provider="openai_compatible",
                          override_base_url=llm.base_url, override_api_key=SECRET,
                          graphiti_model="scripted-llm", embedding_provider="local",
                          retry_backoff_ms=100)
    for i in range(3):
        chat_turn(window, f"My locker number is {100 + i}.", "Noted.", ctx_id=i + 1)
    said = _wait_alert(window, "refused the API key")
    assert len(said) == 1, window.alerts
    assert f"127.0.0.1:{llm.port}" in said[0] and "Override API Key" in said[0], said[0]
    window.process_events(3)
    assert len(_wait_alert(window, "refused the API key", 0)) == 1, window.alerts
    everything = "\n".join(window.alerts + window.statuses + [plugin.last_error])
    assert SECRET not in everything and SECRET[:12] not in everything
    # kept, not lost: the key is fixed, the server accepts it, the turns are stored
    llm.clear_faults()
    plugin.queue.retry_failed()
    assert plugin.queue.flush(timeout=60)
    assert plugin.queue.counts()["failed"] == 0, plugin.queue.counts()


@pytest.mark.option("retry_attempts")
def test_an_unreachable_server_is_said_once_after_the_retries_not_per_turn(host):
    window, plugin = host(extraction_engine="llm", llm_provider="openai_compatible",
                          override_base_url="http://127.0.0.1:9/v1", override_api_key=SECRET,
                          graphiti_model="scripted-llm", embedding_provider="local",
                          retry_attempts=2, retry_backoff_ms=100)
    chat_turn(window, "My locker number is 100.", "Noted.", ctx_id=1)
    said = _wait_alert(window, "cannot reach its model server")
    assert len(said) == 1 and "127.0.0.1:9" in said[0], window.alerts
    deadline = time.monotonic() + 5      # the alert came as the turn was kept as failed
    while plugin.queue.counts()["failed"] < 1 and time.monotonic() < deadline:
        window.process_events(0.05)
    assert plugin.queue.counts()["failed"] == 1, plugin.queue.counts()
    for i in range(2):
        chat_turn(window, f"My locker number is {101 + i}.", "Noted.", ctx_id=2 + i)
    deadline = time.monotonic() + 20
    while plugin.queue.counts()["failed"] < 3 and time.monotonic() < deadline:
        window.process_events(0.1)
    assert len([a for a in window.alerts if "cannot reach" in a]) == 1, window.alerts
    assert SECRET not in "\n".join(window.alerts)


def test_pygpts_custom_endpoint_is_spoken_to_with_chat_completions():
    from memoryplus.config.schema import Settings
    from memoryplus.engine.providers import resolve_llm
    own = resolve_llm(Settings(), Credentials(openai_api_key="sk-x", openai_base_url="http://10.0.0.5:8000/v1",
                                              model_provider="openai"))
    assert (own.provider, own.base_url, own.configured) == ("openai_compatible", "http://10.0.0.5:8000/v1", True)
    openai = resolve_llm(Settings(), Credentials(openai_api_key="sk-x", openai_base_url="https://api.openai.com/v1",
                                                 model_provider="openai"))
    assert openai.provider == "openai"
    chosen = resolve_llm(Settings(llm_provider="openai"), Credentials(openai_api_key="sk-x",
                                                                       openai_base_url="http://10.0.0.5:8000/v1"))
    assert chosen.provider == "openai"      # an explicit choice stands


@pytest.mark.parametrize("error, cause", [
    ("ModuleNotFoundError: No module named 'graphiti_core.nodes'", "missing:graphiti_core"),
    ("Connection error.", "unreachable"),
    (f"Error code: 401 - {{'error': {{'message': 'Incorrect API key provided: {SECRET}'}}}}", "auth"),
    ("bank 'work' is in use by PyGPT, pid 4242; close it or use that process", "bank_in_use"),
    ("Error code: 404 - {'error': {'message': 'The model `gpt-4o` does not exist'}}", "not_found"),
    ("RequestTimeout: search was not answered within 15.0 s", None),
])
def test_each_fixable_cause_is_recognised_and_its_text_has_no_secret(error, cause):
    from memoryplus.plugin.problems import diagnose
    from memoryplus.common import redact
    redact.register(SECRET)
    problem = diagnose(error, python="/opt/pygpt/bin/python", endpoints="LLM at 10.0.0.5:8000")
    assert (problem.cause if problem else None) == cause
    if problem is not None:
        assert "Fix" in problem.text and SECRET not in problem.text


def test_a_failed_operation_is_known_by_its_error_class_not_its_words():
    """A bank in use reaches the plugin as the service's BankInUse, whatever its message says;
    a classified error whose message merely mentions a lock is not taken for one."""
    from memoryplus.plugin.problems import diagnose
    from memoryplus.wire import errors
    assert diagnose(errors.BankInUse("bank 'work' is locked by pid 4242")).cause == "bank_in_use"
    assert diagnose(errors.EmbeddingMismatch("bank 'work' needs another embedder")).cause == "embedder_mismatch"
    assert diagnose(errors.BadParams("the text 'is in use by' is not a bank")) is None


@pytest.mark.option("manual_flagging")
def test_remember_this_that_cannot_be_stored_answers_in_the_chat_with_the_fix(host):
    window, plugin = host(extraction_engine="llm", llm_provider="openai_compatible",
                          override_base_url="http://127.0.0.1:9/v1", graphiti_model="scripted-llm",
                          embedding_provider="local")
    assert chat_turn(window, "/remember_this My locker code is 4711", "unused") is None
    chat = window.wait_chat(1)
    said = [reply for _, reply, _ in chat if "could not do that" in reply]
    assert said and "cannot reach its model server" in said[0] and "Fix:" in said[0], chat
    assert not window.alerts, "a command's reply is in the chat, not a dialog"


@pytest.mark.option("extraction_engine")
def test_a_turn_the_llm_could_not_extract_is_stored_and_marked_in_the_browser(host, llm, qtbot):
    llm.inject("garbage", count=1000, structured_only=True)
    window, plugin = host(extraction_engine="llm", llm_provider="openai_compatible",
                          override_base_url=llm.base_url, override_api_key=SECRET,
                          graphiti_model="scripted-llm", embedding_provider="local")
    chat_turn(window, "My dentist is Dr Okafor and I live in Lisbon.", "Noted.", ctx_id=1)
    assert plugin.queue.flush(timeout=60)
    counts = plugin.queue.counts()
    assert counts["done"] == 1 and counts["failed"] == 0, counts
    said = _wait_alert(window, "stored by local extraction", 10)
    assert len(said) == 1 and "scripted-llm" in said[0], window.alerts
    # the memory is recalled in the next turn
    assert "Okafor" in chat_turn(window, "Who is my dentist?", "Dr Okafor.", ctx_id=2)
    b = plugin.memory_ui.open_browser(bank="default")
    b.tabs.setCurrentWidget(b.timeline)
    qtbot.waitUntil(lambda: b.timeline.tree.topLevelItemCount() >= 1, timeout=30_000)
    item = b.timeline.tree.topLevelItem(b.timeline.tree.topLevelItemCount() - 1)
    assert item.text(3).endswith("(local)") and "not valid JSON" in item.toolTip(3), item.text(3)
    item.setSelected(True)
    qtbot.waitUntil(lambda: "stored by local extraction" in b.timeline.detail.toPlainText(), timeout=30_000)
    b.close()


def test_the_doctor_follows_the_auto_choice_for_a_chat_only_endpoint(llm, tmp_path):
    from types import SimpleNamespace
    from memoryplus.cli.doctor import Doctor
    from memoryplus.config.schema import Settings
    llm.serve_embeddings = False
    doctor = Doctor(SimpleNamespace())
    doctor.embeddings(Settings(), Credentials(openai_api_key="sk-x", openai_base_url=llm.base_url), [])
    checks = [(c.status, c.message) for c in doctor.checks if c.name == "embeddings"]
    assert all(status == "OK" for status, _ in checks), checks
    assert "serves no embeddings" in checks[0][1] and "local" in checks[-1][1], checks
