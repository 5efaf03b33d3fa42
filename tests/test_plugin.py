"""The PyGPT plugin against real pygpt-net parts: its plugin registry (options, saved values),
its dispatcher, Event, CtxItem and CtxMeta; a real worker process, real Kuzu."""
from __future__ import annotations

import json
import re
import time

import pytest

from memoryplus.config.schema import options
from memoryplus.plugin.memory_block import TAG
from memoryplus.plugin.plugin import Plugin
from memoryplus.testing import backlog, kill_worker_and_its_log, mentions_code
from memoryplus.testing.pygpt_host import LOCAL, HostWindow, chat_turn



def block_of(prompt: str) -> str:
    m = re.search(rf"<{TAG}>(.*?)</{TAG}>", prompt or "", re.S)
    return m.group(1) if m else ""


def settle(window: HostWindow, plugin: Plugin, timeout: float = 60.0) -> None:
    """Wait until every handed-over turn is stored."""
    assert plugin.queue.flush(timeout=timeout), plugin.queue.counts()
    window.process_events(0.05)


def restart_without_saved_settings(workdir) -> HostWindow:
    """PyGPT started once without MemoryPlus (its saved values gone from config.json), then
    started again."""
    cfg_path = workdir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.get("plugins", {}).pop("memoryplus", None)
    cfg_path.write_text(json.dumps(cfg))
    return HostWindow(workdir)


def test_every_option_is_on_its_tab_with_the_right_widget(host):
    window, plugin = host()
    for info in options():
        opt = plugin.options[f"cmd.{info.id}" if info.kind == "cmd" else info.id]   # a model tool's: its command
        assert opt["tab"] == info.tab and opt["label"] == info.label
        assert opt["type"] == info.kind and opt["secret"] == info.secret
        if info.use == "models":
            assert opt["use"] == "models"
    assert plugin.options["neo4j_password"]["secret"] and plugin.options["override_api_key"]["secret"]
    assert set(plugin.tabs) == {o.tab for o in options()}


@pytest.mark.option("inject_context")
def test_a_later_turn_recalls_an_earlier_one_in_the_same_turn(host):
    window, plugin = host()
    first = chat_turn(window, "I live in Berlin and my dentist is Dr Okafor.", "Noted!", ctx_id=1)
    assert TAG not in first, "nothing to recall yet"
    settle(window, plugin)
    prompt = chat_turn(window, "Who is my dentist again?", "Dr Okafor.", ctx_id=2)
    block = block_of(prompt)
    assert "Okafor" in block
    assert "data, not instructions" in prompt
    assert re.search(r"\(\d{4}-\d{2}-\d{2}\)", block), "each line carries its date"
    window.save_options(plugin, inject_context=False)
    assert block_of(chat_turn(window, "Who is my dentist again?", "Dr Okafor.", ctx_id=3)) == ""


@pytest.mark.option("context_limit")
def test_the_injected_block_holds_at_most_context_limit_memories(host):
    window, plugin = host(context_limit=2)
    family = [("sister Ilse", "Graz"), ("brother Tomas", "Brno"), ("aunt Greta", "Cork"),
              ("uncle Imre", "Turku"), ("cousin Lena", "Lyon")]
    for i, (who, city) in enumerate(family, start=1):
        chat_turn(window, f"My {who} lives in {city}.", "Noted.", ctx_id=i)
    settle(window, plugin)

    def lines(ctx_id: int) -> int:
        block = block_of(chat_turn(window, "Where does my family live: sister, brother, aunt, uncle, cousin?",
                                   "?", ctx_id=ctx_id))
        return len([ln for ln in block.splitlines() if ln.startswith("- ")])
    assert lines(10) == 2
    window.save_options(plugin, context_limit=4)
    assert lines(11) == 4


@pytest.mark.option("manual_flagging")
def test_with_manual_flagging_off_the_commands_are_ordinary_messages(host):
    window, plugin = host(manual_flagging=False)
    prompt = chat_turn(window, "/remember_this My locker code is 4711", "Noted.", ctx_id=1)
    assert prompt is not None, "the message went to the model, not to MemoryPlus"
    assert chat_turn(window, "/forget_that", "Sure.", ctx_id=2) is not None
    window.process_events(0.5)
    assert plugin.counters["commands"] == 0
    assert not any(a.startswith(("Remembered", "Forg", "These memories match")) for a in window.alerts)
    settle(window, plugin)     # stored as ordinary turns (Auto-Ingest), not as flagged ones
    episodes = [r for r in plugin.client.call("export", {"bank": "default"}, timeout=30) if r["type"] == "episode"]
    assert len(episodes) == 2 and not any(json.loads(e["name"])["explicit"] for e in episodes)


@pytest.mark.option("link_db_to_preset")
@pytest.mark.option("fallback_bank")
def test_presets_have_their_own_banks_and_unsaved_presets_share_one(host):
    window, plugin = host(fallback_bank="household")
    chat_turn(window, "The launch code for project Falcon is 7731.", "Noted.", preset="work", ctx_id=1)
    chat_turn(window, "My cat is called Miso.", "Cute!", preset="current.chat", ctx_id=2)
    settle(window, plugin)
    assert not mentions_code(chat_turn(window, "What is the launch code for Falcon?", "?", preset="home", ctx_id=3), "7731")
    assert "7731" in block_of(chat_turn(window, "What is the launch code for Falcon?", "?", preset="work", ctx_id=4))
    assert "Miso" in block_of(chat_turn(window, "What is my cat called?", "?", preset="current.agent", ctx_id=5))
    settle(window, plugin)     # the questions are turns too: "home"'s is stored in its own bank
    banks = {b["name"] for b in plugin.client.call("banks", {}, timeout=30)}
    assert banks == {"work", "home", "household"}


@pytest.mark.option("link_db_to_preset")
def test_with_link_db_to_preset_off_every_chat_uses_the_fallback_bank(host):
    window, plugin = host(link_db_to_preset=False)
    chat_turn(window, "The launch code for project Falcon is 7731.", "Noted.", preset="work", ctx_id=1)
    settle(window, plugin)
    assert "7731" in block_of(chat_turn(window, "What is the launch code for Falcon?", "?", preset="home",
                                        ctx_id=2)), "one bank for every preset"
    settle(window, plugin)
    assert {b["name"] for b in plugin.client.call("banks", {}, timeout=30)} == {"default"}


@pytest.mark.option("search_cache_ttl")
@pytest.mark.option("search_cache_similarity")
def test_the_cache_ttl_and_similarity_set_are_the_ones_the_chat_uses(host):
    """Questions with no answer store nothing, so nothing invalidates the cache between them."""
    window, plugin = host(search_cache_ttl=0)
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted.", ctx_id=1)
    settle(window, plugin)

    def hits_after(question: str, ctx_id: int) -> int:
        chat_turn(window, question, "", ctx_id=ctx_id)
        window.process_events(0.05)
        return plugin.cache.stats().get("hits", 0)
    hits_after("Where does my sister live?", 2)
    assert hits_after("Where does my sister live?", 3) == 0, "a TTL of 0 keeps nothing"
    window.save_options(plugin, search_cache_ttl=45, search_cache_similarity=1.0)
    before = hits_after("Where does my sister live?", 4)
    assert hits_after("Where does my sister live?", 5) == before + 1, "the same question again"
    assert hits_after("where does my sister live, please", 6) == before + 1, "similarity 1: exact only"
    window.save_options(plugin, search_cache_similarity=0.85)
    before = hits_after("Where does my sister live?", 7)
    assert hits_after("where does my sister live, please", 8) == before + 1, "a near-duplicate shares it"


MATCHES = re.compile(r"^(\d+) (memory matches|memories match) ")
FORGOT = re.compile(r"^Forgot (\d+) (memory|memories):")


def plural_right(n: str, words: str) -> bool:
    return (int(n) == 1) == (words in ("memory matches", "memory"))


@pytest.mark.option("manual_flagging")
def test_remember_this_and_forget_that_with_confirmation(host):
    """The replies are chat messages under the command (no dialog), in order, with the right
    plurals; the commands themselves never reach the model."""
    window, plugin = host()
    assert chat_turn(window, "/remember_this My locker code is 4711", "unused") is None
    assert window.wait_chat(1) == [("/remember_this My locker code is 4711",
                                    "Remembered: My locker code is 4711", "MemoryPlus")]
    assert "4711" in block_of(chat_turn(window, "What is my locker code?", "4711", ctx_id=2))

    assert chat_turn(window, "/forget_that locker code", "unused") is None
    command, offer, _ = window.wait_chat(2)[1]
    assert command == "/forget_that locker code"
    m = MATCHES.match(offer)
    assert m and plural_right(m.group(1), m.group(2)), offer
    assert "\n1. " in offer and "4711" in offer and "/forget_that yes" in offer
    assert "4711" in block_of(chat_turn(window, "What is my locker code?", "?", ctx_id=3)), \
        "nothing is forgotten before the user confirms"
    assert chat_turn(window, "/forget_that yes", "unused") is None
    done = window.wait_chat(3)[2][1]
    m = FORGOT.match(done)
    assert m and plural_right(m.group(1), m.group(2)), done
    settle(window, plugin)
    assert not mentions_code(chat_turn(window, "What is my locker code?", "?", ctx_id=4), "4711")
    export = plugin.client.call("export", {"bank": "default"}, timeout=30)
    assert not mentions_code(json.dumps(export), "4711")
    assert window.alerts == [], "no dialog pops up"
    assert all(cmd.startswith("/") for cmd, _, _ in window.chat)


LONG_TURN = ("Last summer my sister Isabella finally moved from Rotterdam to a small village near "
             "Porto, where she restores old wooden fishing boats for a living. She says the "
             "neighbours bring her grilled sardines every Friday and that she has never been "
             "happier, although the winters there are surprisingly damp and grey.")
WORDS = set(re.findall(r"[\w']+", LONG_TURN + " The house has a blue door and a fig tree, Isabella"))


def whole_words(line: str) -> bool:
    """Every word of a quoted memory is a whole word of what was said."""
    return set(re.findall(r"[\w']+", line)) <= WORDS | {"You", "said", "The", "assistant"}


def test_forget_that_quotes_memories_in_whole_words_and_plain_labels(host):
    window, plugin = host()
    chat_turn(window, LONG_TURN, "The house has a blue door and a fig tree, Isabella says.", ctx_id=1)
    settle(window, plugin)
    assert chat_turn(window, "/forget_that Isabella restores wooden fishing boats near Porto",
                     "unused") is None
    offer = window.wait_chat(1)[0][1]
    assert MATCHES.match(offer), offer
    items = [line for line in offer.splitlines() if re.match(r"\d+\. ", line)]
    turn = next(line for line in items if "Rotterdam" in line)
    assert "You said: Last summer my sister Isabella" in turn, turn
    assert "User:" not in offer and "Assistant:" not in offer
    for line in items:
        body = line.split(". ", 1)[1]
        assert len(body) <= 260 and whole_words(body), line
        if body.endswith("…"):
            cut = body[:-1].rstrip()
            assert (LONG_TURN + " ").find(cut.split("You said: ")[-1] + " ") >= 0 or cut.endswith("."), line
    assert chat_turn(window, "/forget_that yes", "unused") is None
    done = window.wait_chat(2)[1][1]
    m = FORGOT.match(done)
    assert m and plural_right(m.group(1), m.group(2)), done
    for line in done.splitlines()[1:]:
        if line.startswith("- "):
            assert whole_words(line[2:]) and len(line) <= 170, line
    assert "Isabella" not in json.dumps(plugin.client.call("export", {"bank": "default"}, timeout=30))
    assert window.alerts == []


def test_forget_that_alone_forgets_the_last_turn(host):
    window, plugin = host()
    chat_turn(window, "My favourite colour is teal.", "Nice.", ctx_id=1)
    settle(window, plugin)
    chat_turn(window, "I secretly collect stamps from Peru.", "Fun!", ctx_id=2)
    assert chat_turn(window, "/forget_that", "unused") is None
    reply = window.wait_chat(1)[0][1]
    assert reply.startswith(("Forgot the last turn: I secretly collect stamps from Peru.",
                             "Forgotten before it was stored: I secretly collect stamps from Peru.")), reply
    settle(window, plugin)
    dump = json.dumps(plugin.client.call("export", {"bank": "default"}, timeout=30))
    assert "Peru" not in dump and "teal" in dump


def test_command_errors_are_answered_in_the_chat(host):
    window, plugin = host()
    assert chat_turn(window, "/remember_thsi oops", "unused") is None
    assert chat_turn(window, "/forget_that yes", "unused") is None
    replies = [reply for _, reply, _ in window.wait_chat(2)]
    assert replies[0].startswith("Unknown command /remember_thsi: use /remember_this"), replies
    assert replies[1] == "Nothing to confirm: use /forget_that TEXT first."
    assert any("Unknown command" in s for s in window.statuses), "the status bar says it too"
    assert window.alerts == [] and plugin.queue.counts()["pending"] == 0
    from memoryplus.wire.banks import MAX_NAME_CHARS
    window.core.config.set("preset", "p" * (MAX_NAME_CHARS + 1))   # a preset no bank can be named after
    assert chat_turn(window, "/remember_this my bike is green", "unused") is None
    failed = window.wait_chat(3)[2]
    assert failed[0] == "/remember_this my bike is green"
    assert failed[1].startswith("MemoryPlus could not do that: ") and "bank name" in failed[1], failed
    assert len(failed[1].splitlines()) == 1 and window.alerts == []


@pytest.mark.option("auto_ingest")
def test_auto_ingest_off_stores_only_flagged_turns(host):
    window, plugin = host(auto_ingest=False)
    chat_turn(window, "I live in Oslo.", "Nice.", ctx_id=1)
    settle(window, plugin)
    assert "Oslo" not in chat_turn(window, "Where do I live?", "?", ctx_id=2)
    assert chat_turn(window, "/remember_this", "unused") is None   # the previous turn, explicitly
    settle(window, plugin)
    assert "Where do I live" in block_of(chat_turn(window, "Where do I live?", "?", ctx_id=3))


@pytest.mark.option("disable_default_vector_store")
@pytest.mark.option("max_injected_tokens")
def test_block_size_and_vector_store_instruction(host):
    window, plugin = host(disable_default_vector_store=True, max_injected_tokens=80, context_limit=2)
    for i in range(6):
        chat_turn(window, f"Fact number {i}: the zebra named Zed{i} likes apples.", "ok", ctx_id=i + 1)
    settle(window, plugin)
    prompt = chat_turn(window, "What does the zebra like?", "?", ctx_id=50)
    block = block_of(prompt)
    assert "Prefer these memories" in block
    lines = [ln for ln in block.splitlines() if ln.startswith("- ")]
    assert 1 <= len(lines) <= 2
    assert len(re.findall(r"\w+|[^\w\s]", block)) <= 80 + 10


@pytest.mark.option("sanitize_code_blocks")
@pytest.mark.option("sanitize_tool_calls")
@pytest.mark.option("custom_sanitization_rules")
def test_turns_are_sanitized_before_they_are_stored(host):
    window, plugin = host(custom_sanitization_rules=r"ACCT-\d+")
    chat_turn(window, "Here is my script:\n```python\nprint('SECRET_CODE_LINE')\n```\nMy account is ACCT-991.",
              "<tool>{\"cmd\": \"run\"}</tool> Done, the code works.", ctx_id=1)
    settle(window, plugin)
    dump = json.dumps(plugin.client.call("export", {"bank": "default"}, timeout=30))
    assert "SECRET_CODE_LINE" not in dump and "ACCT-991" not in dump and '"cmd"' not in dump
    assert "script" in dump


def test_a_failing_handler_degrades_instead_of_hanging_pygpt(host, monkeypatch):
    window, plugin = host()

    def boom(ctx):
        raise ValueError("simulated failure")
    monkeypatch.setattr(plugin, "_start_search", boom)
    prompt = chat_turn(window, "Where do I live?", "?", ctx_id=1)   # must not raise
    assert prompt == "You are a helpful assistant."
    assert plugin.counters["errors"] >= 1 and "simulated failure" in plugin.last_error


def test_a_late_search_lets_the_turn_go_ahead(host, monkeypatch):
    import concurrent.futures
    import threading
    import memoryplus.plugin.turns as mod
    window, plugin = host()
    chat_turn(window, "I live in Berlin.", "ok", ctx_id=1)
    settle(window, plugin)
    monkeypatch.setattr(mod, "INJECT_WAIT_S", 0.0)
    monkeypatch.setattr(plugin.cache, "get", lambda bank, q: None)
    search = plugin.service.search

    def slow_search(params, timeout):
        # the worker's answer comes after the turn's budget (a search of a small bank can
        # come within it, and the test then saw no late search)
        late = concurrent.futures.Future()
        real = search(params, timeout=timeout)
        threading.Timer(1.0, lambda: late.set_result(real.result())).start()
        return late
    monkeypatch.setattr(plugin.service, "search", slow_search)
    start = time.monotonic()
    prompt = chat_turn(window, "Where do I live, really?", "?", ctx_id=2)
    assert time.monotonic() - start < 2.0
    assert plugin.counters["late"] >= 1 and TAG not in prompt


def test_settings_survive_pygpt_dropping_them(host, tmp_path):
    window, plugin = host()
    window.save_options(plugin, context_limit=3, memory_mode="Research")
    mirror = json.loads((tmp_path / "pygpt" / "memoryplus" / "settings.json").read_text())
    assert mirror["context_limit"] == 3 and mirror["memory_mode"] == "Research"
    plugin.destroy()
    again = restart_without_saved_settings(tmp_path / "pygpt")
    plugin2 = again.register(Plugin())
    plugin2._ensure_started()
    try:
        assert plugin2.get_option_value("context_limit") == 3
        assert plugin2.settings.memory_mode == "Research"
        assert again.core.config.get("plugins")["memoryplus"]["context_limit"] == 3
    finally:
        plugin2.destroy()


def test_invalid_saved_values_keep_defaults_and_are_reported(host):
    window, plugin = host(context_limit=999, overflow_policy="explode")
    assert plugin.settings.context_limit == 10 and plugin.settings.overflow_policy == "drop_new"
    window.process_events(0.1)
    assert any("context_limit" in s for s in window.statuses)


@pytest.mark.option("retry_attempts")
@pytest.mark.option("retry_backoff_ms")
@pytest.mark.option("batch_size")
@pytest.mark.option("batch_delay_ms")
def test_a_flaky_provider_is_retried_until_the_turn_is_stored(host):
    from memoryplus.testing.scripted_llm import ScriptedLLMServer
    with ScriptedLLMServer() as llm:
        window, plugin = host(extraction_engine="llm", llm_provider="openai_compatible",
                              override_base_url=llm.base_url, override_api_key="sk-flaky-cccccccccccccccccccc",
                              graphiti_model="scripted-llm", retry_attempts=5, retry_backoff_ms=100,
                              batch_size=2, batch_delay_ms=0)
        llm.inject("500", count=3)
        llm.inject("429", count=3, retry_after=0)
        chat_turn(window, "My dentist is Dr Okafor in Leipzig.", "Noted.", ctx_id=1)
        settle(window, plugin, timeout=120)
        counts = plugin.queue.counts()
        assert counts["failed"] == 0 and counts["done"] >= 1
        assert llm.faults_applied, "the faults really happened"
        assert "Okafor" in block_of(chat_turn(window, "Who is my dentist?", "?", ctx_id=2))
        settle(window, plugin, timeout=120)
        stats = plugin.client.call("stats", {"bank": "default"}, timeout=30)
        assert stats["episodes"] == 2 and stats["llm_calls"] > 0, "each turn stored once"


@pytest.mark.option("max_llm_calls_per_hour")
def test_the_hourly_llm_budget_pauses_ingestion_without_losing_turns(host):
    from memoryplus.testing.scripted_llm import ScriptedLLMServer
    with ScriptedLLMServer() as llm:
        window, plugin = host(extraction_engine="llm", llm_provider="openai_compatible",
                              override_base_url=llm.base_url, override_api_key="sk-budget-dddddddddddddddddd",
                              graphiti_model="scripted-llm", max_llm_calls_per_hour=1, batch_delay_ms=0)
        chat_turn(window, "I live in Berlin.", "Nice.", ctx_id=1)
        settle(window, plugin, timeout=60)          # the first turn spends the budget
        chat_turn(window, "I work at Siemens.", "Cool.", ctx_id=2)
        deadline = time.monotonic() + 20
        while not plugin.queue.counts().get("paused_reason") and time.monotonic() < deadline:
            window.process_events(0.05)
        counts = plugin.queue.counts()
        assert "LLM call limit" in str(counts["paused_reason"])
        assert counts["pending"] + counts.get("retrying", 0) + counts["in_flight"] >= 1 and counts["failed"] == 0
        window.process_events(1.2)
        assert any("LLM call limit" in s for s in window.statuses), "the user is told why"
        window.save_options(plugin, max_llm_calls_per_hour=0)   # lifting the limit resumes
        settle(window, plugin, timeout=60)
        assert plugin.client.call("stats", {"bank": "default"}, timeout=30)["episodes"] == 2


def test_pygpt_start_is_not_held_up_and_early_turns_are_kept(tmp_path, monkeypatch):
    """PyGPT's start-up timer starts MemoryPlus on a thread; a turn that ends (or a command
    typed) before the machinery exists is neither lost nor run against nothing."""
    import threading
    from memoryplus.plugin.queue import IngestQueue
    gate = threading.Event()
    real_start = IngestQueue.start

    def slow_start(self):       # hold our own start-up (not PyGPT's API) at the queue's start
        gate.wait(30)
        return real_start(self)
    monkeypatch.setattr(IngestQueue, "start", slow_start)
    window = HostWindow(tmp_path / "pygpt")
    window.core.config.data.setdefault("plugins", {})["memoryplus"] = dict(LOCAL)
    plugin = window.register(Plugin())
    try:
        window.process_events(0.1)            # PyGPT's event loop runs the start-up timer
        assert plugin.queue is None and not plugin.wait_started(0), "the start ran on the GUI thread"
        chat_turn(window, "My locksmith is called Ottilie Brandt.", "Noted!", ctx_id=1)
        chat_turn(window, "/remember_this my bike is green", "", ctx_id=2)
        window.process_events(0.1)
        assert any("still starting" in s for s in window.statuses), window.statuses
        assert window.chat and "still starting" in window.chat[-1][1], "the reply is in the chat too"
        gate.set()
        assert plugin.wait_started(60)
        settle(window, plugin)
        found = plugin.client.call("search", {"bank": "default", "query": "Who is my locksmith?"}, timeout=60)
        assert any("Ottilie" in r["text"] for r in found), found
    finally:
        gate.set()
        plugin.destroy()


def test_saved_bank_settings_apply_to_a_turn_that_ended_before_the_start(tmp_path, monkeypatch):
    """Until the start-up thread has validated the saved settings, `settings` holds the
    defaults; a turn ending meanwhile is kept as it was and given its bank by the saved ones."""
    import threading
    from memoryplus.plugin import host as plugin_host
    gate = threading.Event()
    real_read = plugin_host.read_settings

    def slow_read(plugin):      # hold our own start-up (not PyGPT's API) before the settings are read
        gate.wait(30)
        return real_read(plugin)
    monkeypatch.setattr(plugin_host, "read_settings", slow_read)
    window = HostWindow(tmp_path / "pygpt")
    window.core.config.data.setdefault("plugins", {})["memoryplus"] = {
        **LOCAL, "link_db_to_preset": False, "fallback_bank": "household"}
    plugin = window.register(Plugin())
    try:
        window.process_events(0.1)            # PyGPT's event loop runs the start-up timer
        assert plugin._started and not plugin.wait_started(0)
        assert plugin.settings.fallback_bank == "default", "still the defaults"
        prompt = chat_turn(window, "My plumber is called Jasper Okonkwo.", "Noted!", preset="renovation", ctx_id=1)
        assert TAG not in prompt, "no search before the start"
        window.save_options(plugin, context_limit=4)   # saved while starting: applied once started
        gate.set()
        assert plugin.wait_started(60)
        assert plugin.settings.fallback_bank == "household" and not plugin.settings.link_db_to_preset
        settle(window, plugin)
        assert plugin.settings.context_limit == 4
        banks = {b["name"] for b in plugin.client.call("banks", {}, timeout=30)}
        assert banks == {"household"}, banks
        found = plugin.client.call("search", {"bank": "household", "query": "Who is my plumber?"}, timeout=60)
        assert any("Jasper" in r["text"] for r in found), found
    finally:
        gate.set()
        plugin.destroy()


def test_settings_are_restored_on_the_gui_thread_when_started_by_pygpt(host, tmp_path):
    """As test_settings_survive_pygpt_dropping_them, but started as PyGPT starts us (a thread):
    the settings come from the mirror at once; PyGPT's options and config are restored by the
    GUI thread's event loop, never from the start-up thread."""
    window, plugin = host()
    window.save_options(plugin, context_limit=3, memory_mode="Research")
    plugin.destroy()
    again = restart_without_saved_settings(tmp_path / "pygpt")
    plugin2 = again.register(Plugin())
    plugin2._start_in_background()
    try:
        assert plugin2.wait_started(60)
        assert plugin2.settings.context_limit == 3 and plugin2.settings.memory_mode == "Research"
        assert plugin2.get_option_value("context_limit") == 10, "not from the start-up thread"
        deadline = time.monotonic() + 10
        while plugin2.get_option_value("context_limit") != 3 and time.monotonic() < deadline:
            again.process_events(0.05)
        assert plugin2.get_option_value("memory_mode") == "Research"
        assert again.core.config.get("plugins")["memoryplus"]["context_limit"] == 3
        saved = json.loads((tmp_path / "pygpt" / "config.json").read_text())
        assert saved["plugins"]["memoryplus"]["context_limit"] == 3
    finally:
        plugin2.destroy()


_NO_PYDANTIC_AT_START = r'''
import json, sys, threading
from pathlib import Path

imported = {}

class Spy:   # records which thread first imports pydantic
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name == "pydantic" and name not in imported:
            imported[name] = threading.current_thread() is threading.main_thread()
        return None

from memoryplus.testing.pygpt_host import HostWindow
window = HostWindow(Path(sys.argv[1]))
window.core.config.data.setdefault("plugins", {})["memoryplus"] = json.loads(sys.argv[2])
assert "pydantic" not in sys.modules, "PyGPT's parts imported pydantic"
sys.meta_path.insert(0, Spy)
from memoryplus.plugin.plugin import Plugin
plugin = window.register(Plugin())
plugin._start_in_background()
out = {"registered": len(plugin.options)}
assert plugin.wait_started(60)
window.process_events(0.1)
out.update(imported_on_main=imported.get("pydantic"), client=plugin.client is not None,
           settings=type(plugin.settings).__name__, error=plugin.last_error)
plugin.destroy()
print(json.dumps(out), flush=True)
'''


def test_pygpt_start_does_not_import_pydantic_on_the_gui_thread(tmp_path):
    """Importing the plugin, its construction and registration, setup_ui and the start-up
    timer's work leave pydantic (about 70 ms with our model) to the start-up thread."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false", "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-c", _NO_PYDANTIC_AT_START, str(tmp_path / "pygpt"),
                           json.dumps(LOCAL)], capture_output=True, text=True, env=env, timeout=180)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    out = json.loads(lines[-1])
    assert out["imported_on_main"] is False, "pydantic was imported on the GUI thread"
    assert out["registered"] >= len(options())
    assert out["client"] and out["settings"] == "Settings" and not out["error"], out


def _each_stored_once(plugin, texts: list[str]) -> None:
    episodes = [r for r in plugin.client.call("export", {"bank": "default"}, timeout=60) if r["type"] == "episode"]
    for text in texts:
        assert sum(text in r["content"] for r in episodes) == 1, text


def test_turns_answered_before_the_log_was_flushed_are_stored_again_if_the_worker_dies(host):
    """A persistent worker answers batches before flushing Kuzu's log (one flush for many
    batches, or when idle). If it dies before that flush and its log cannot be replayed, the
    queue stores those turns again: nothing answered is lost. The turns held leave the spool
    once the worker's next answer says it flushed them."""
    window, plugin = host(batch_size=2, batch_delay_ms=0)
    queue = plugin.queue
    sink, answers = queue._sink, []

    def worker_dies_after_an_unflushed_answer(bank, turns):
        report = sink(bank, turns)
        answers.append(report)
        if len(answers) == 1:
            kill_worker_and_its_log(plugin)
        return report
    queue._sink = worker_dies_after_an_unflushed_answer
    texts = backlog(queue, 5)
    queue.resume()
    settle(window, plugin)
    assert answers[0].flushed is False and answers[0].stored == ["b0", "b1"], "answered before the flush"
    assert answers[-1].instance != answers[0].instance, "a new worker answered"
    assert queue.counts()["failed"] == 0
    _each_stored_once(plugin, texts)
    # The new worker answered the last batch unflushed too (no more turns followed): it
    # flushes when idle (2 s), and its next answer lets the turns held until then go.
    assert queue.counts()["unflushed"] > 0
    time.sleep(3.0)
    from memoryplus.wire.records import Turn
    queue.put("default", Turn(id="after", user="My colleague Ines plays the oboe.", assistant="Noted."))
    settle(window, plugin)
    assert queue.counts()["unflushed"] == 1, "only the turn after the idle flush is held"


_PYGPT_DIES_WITH_ITS_WORKER = r'''
import json, os, sys, time
from pathlib import Path
from memoryplus.plugin.plugin import Plugin
from memoryplus.testing import backlog, kill_worker_and_its_log
from memoryplus.testing.pygpt_host import HostWindow
window = HostWindow(Path(sys.argv[1]))
window.core.config.data.setdefault("plugins", {})["memoryplus"] = json.loads(sys.argv[2])
plugin = window.register(Plugin())
plugin._ensure_started()
queue, sink, answers = plugin.queue, plugin.queue._sink, []

def crash(bank, turns):
    if answers:        # the first answer is in, and the queue has written what it does with it
        kill_worker_and_its_log(plugin)
        deadline = time.monotonic() + 10
        while (queue._journal or queue._writer_busy) and time.monotonic() < deadline:
            time.sleep(0.01)
        print(json.dumps({"unflushed": answers[0].stored if not answers[0].flushed else []}), flush=True)
        os._exit(9)    # PyGPT dies too: no stop, no flush, no clean-up
    answers.append(sink(bank, turns))
    return answers[-1]
queue._sink = crash
backlog(queue, 5)
queue.resume()
time.sleep(120)
'''


def test_turns_answered_unflushed_survive_pygpt_dying_with_its_worker(host, tmp_path):
    """The same, when PyGPT itself dies (and its worker with it): the turns answered unflushed
    are still in the spool, and the next start stores them."""
    import os
    import subprocess
    import sys
    workdir = tmp_path / "pygpt"
    settings = {**LOCAL, "batch_size": 2, "batch_delay_ms": 0}
    env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false", "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, "-c", _PYGPT_DIES_WITH_ITS_WORKER, str(workdir), json.dumps(settings)],
                           capture_output=True, text=True, env=env, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 9 and lines, proc.stderr[-2000:]
    assert json.loads(lines[-1])["unflushed"] == ["b0", "b1"], "the first batch was answered unflushed"
    window, plugin = host(workdir, **settings)
    settle(window, plugin)
    _each_stored_once(plugin, [f"Worker{i} plays the tuba" for i in range(5)])
