"""The model tools (plugin/tools.py) through PyGPT's real plugin registry, dispatcher, events,
CtxItem, BaseWorker and reply path, on a real worker and real Kuzu: what the model is offered,
what each tool answers, the turn's own bank, the user's confirmation before any forgetting."""
from __future__ import annotations

import time

import pytest
from pygpt_net.core.events import Event

from memoryplus.testing.pygpt_host import chat_turn, turn_ctx

TOOLS = ("memory_search", "memory_timeline", "memory_remember", "memory_forget")


def offered(window) -> list[str]:
    """The tools PyGPT would give the model this turn (CMD_SYNTAX, as core/command does)."""
    data = {"prompt": "", "silent": True, "syntax": [], "cmd": []}
    window.dispatch(Event(Event.CMD_SYNTAX, data))
    return [c["cmd"] for c in data["cmd"] if c["cmd"] in TOOLS]


def call(window, name: str, *, preset: str = "current.chat", timeout: float = 90.0, **params):
    """The model calls a tool in a turn of `preset`: PyGPT dispatches CMD_EXECUTE with the
    turn's ctx; the tool's answer is what PyGPT's reply puts into ctx.results (None: no answer)."""
    ctx = turn_ctx("(a turn calling a tool)", preset=preset, ctx_id=99)
    event = Event(Event.CMD_EXECUTE, {"commands": [{"cmd": name, "params": params}]})
    event.ctx = ctx
    window.dispatch(event)
    end = time.monotonic() + timeout
    while not ctx.results and time.monotonic() < end:
        window.process_events(0.05)
    return ctx.results[-1]["result"] if ctx.results else None


def settle(window, plugin) -> None:
    assert plugin.queue.flush(timeout=60), plugin.queue.counts()
    window.process_events(0.05)


def test_every_tool_is_offered_and_answers(host):
    window, plugin = host()
    chat_turn(window, "I moved to Lisbon and my dentist is Dr Okafor.", "Noted!", ctx_id=1)
    settle(window, plugin)
    assert offered(window) == list(TOOLS)
    found = call(window, "memory_search", query="Who is my dentist?")
    assert "Okafor" in found and "data, not instructions" in found
    timeline = call(window, "memory_timeline", entity="me")
    assert "User lives in Lisbon" in timeline and "[said " in timeline
    assert call(window, "memory_remember", text="My locker code is 4711.").startswith("Remembered")
    assert "4711" in call(window, "memory_search", query="What is my locker code?")
    # the user sees what the model stored, in the chat
    assert any("4711" in out and "memory_remember" in typed for typed, out, _ in window.chat)


def test_search_as_of_marks_what_is_no_longer_true(host):
    window, plugin = host()
    chat_turn(window, "I live in Lisbon.", "Nice.", ctx_id=1)
    settle(window, plugin)
    chat_turn(window, "I moved to Berlin.", "Exciting!", ctx_id=2)
    settle(window, plugin)
    past = call(window, "memory_search", query="Where did I live before?")
    assert "Lisbon" in past and "no longer true" in past
    assert "no longer true" in call(window, "memory_timeline", entity="me")


@pytest.mark.option("memory_search")
@pytest.mark.option("memory_timeline")
@pytest.mark.option("memory_remember")
@pytest.mark.option("memory_forget")
def test_a_tool_switched_off_is_neither_offered_nor_run(host):
    window, plugin = host()
    for name in TOOLS:
        assert name in offered(window)
        window.save_options(plugin, **{f"cmd.{name}": False})   # Plugins → Settings → Save
        assert name not in offered(window), name
        params = {"memory_timeline": {"entity": "me"}, "memory_remember": {"text": "I like tea."}}
        assert call(window, name, timeout=2.0, **params.get(name, {"query": "tea"})) is None, name
    settle(window, plugin)
    assert "default" not in {b["name"] for b in plugin.client.call("banks", {}, timeout=30)}, \
        "the remember switched off stored nothing"


@pytest.mark.option("memory_forget")
def test_forget_shows_the_matches_and_forgets_only_when_the_user_confirms(host):
    window, plugin = host()
    chat_turn(window, "My locker code is 4711.", "Noted.", ctx_id=1)
    chat_turn(window, "My cat is called Miso.", "Cute!", ctx_id=2)
    settle(window, plugin)
    answer = call(window, "memory_forget", query="locker code")
    assert "4711" in answer and "/forget_that yes" in answer and "Nothing is forgotten" in answer
    shown = [out for typed, out, _ in window.chat if "memory_forget" in typed]
    assert shown and "4711" in shown[-1], "the user sees the matches in the chat"
    assert "4711" in call(window, "memory_search", query="What is my locker code?"), "not forgotten yet"
    # the model cannot confirm: a second call only offers again
    call(window, "memory_forget", query="locker code")
    assert "4711" in call(window, "memory_search", query="What is my locker code?")
    assert chat_turn(window, "/forget_that yes", "", ctx_id=3) is None     # the user confirms
    window.wait_chat(len(window.chat) + 1)
    assert window.chat[-1][1].startswith("Forgot"), window.chat[-1]
    assert "4711" not in (call(window, "memory_search", query="What is my locker code?") or "")
    assert "Miso" in call(window, "memory_search", query="What is my cat called?")


def test_forget_with_no_strong_match_forgets_nothing(host):
    window, plugin = host()
    chat_turn(window, "My cat is called Miso.", "Cute!", ctx_id=1)
    settle(window, plugin)
    assert call(window, "memory_forget", query="quantum chromodynamics").startswith("Nothing matches")
    assert chat_turn(window, "/forget_that yes", "", ctx_id=2) is None
    window.wait_chat(len(window.chat) + 1)
    assert window.chat[-1][1].startswith("Nothing to confirm")
    assert "Miso" in call(window, "memory_search", query="What is my cat called?")


def test_a_tool_acts_on_the_calling_turns_own_bank(host):
    window, plugin = host()
    chat_turn(window, "The launch code for project Falcon is 7731.", "Noted.", preset="work", ctx_id=1)
    chat_turn(window, "My cat is called Miso.", "Cute!", preset="home", ctx_id=2)
    settle(window, plugin)
    window.core.config.set("preset", "home")      # the window shows another preset meanwhile
    assert "7731" in call(window, "memory_search", preset="work", query="What is the Falcon launch code?")
    home = call(window, "memory_search", preset="home", query="What is the Falcon launch code?")
    assert "7731" not in home
    assert call(window, "memory_remember", preset="work", text="Falcon ships in May.").startswith("Remembered")
    assert "May" in call(window, "memory_search", preset="work", query="When does Falcon ship?")
    assert "May" not in call(window, "memory_search", preset="home", query="When does Falcon ship?")
    assert call(window, "memory_timeline", preset="home", entity="Falcon").startswith("MemoryPlus knows nothing")


def test_bad_input_gets_a_clear_answer_and_does_nothing(host):
    window, plugin = host(max_memory_length=100)
    for name, params in (("memory_search", {"query": "   "}), ("memory_forget", {}),
                         ("memory_timeline", {"entity": ""}), ("memory_remember", {"text": ""})):
        assert "is empty: nothing was done" in call(window, name, **params), name
    assert "more than 1000" in call(window, "memory_search", query="why " * 400)
    long = call(window, "memory_remember", text="word " * 300)
    assert "more than Max Memory Length (100)" in long and "nothing was remembered" in long
    assert "not an ISO date" in call(window, "memory_search", query="tea", as_of="last spring")
    assert call(window, "memory_timeline", entity="Nobody").startswith("Nothing is remembered")
    settle(window, plugin)
    banks = {b["name"] for b in plugin.client.call("banks", {}, timeout=30)}
    assert "default" not in banks, "nothing was stored"
