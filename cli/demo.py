"""`memoryplus demo`: a scripted multi-session conversation through the real PyGPT plugin.

No API key, no server, no display: real PyGPT parts (registry, dispatcher, events, ctx items;
see testing/pygpt_host.py), the real MemoryPlus plugin, a real worker process, Kuzu on disk,
local extraction and the local embedder, in a fresh temporary directory. Each turn shows what
was stored and what was recalled into the next turns' system prompts, and every step checks
itself against the real bank (searches through the worker, an export read back), never
against text the demo printed. Exit status 0 only if every check held.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

PERSONAL, WORK = "personal-assistant", "work"
SETTINGS = {"extraction_engine": "local", "embedding_provider": "local", "engine_mode": "persistent",
            "batch_delay_ms": 0}


class Out:
    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.color = stream.isatty() and not os.environ.get("NO_COLOR")
        self.failures: list[str] = []
        self.checks = 0

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def head(self, text: str) -> None:
        print("\n" + self._c("1;36", f"== {text}"), file=self.stream, flush=True)

    def line(self, text: str, code: str = "") -> None:
        print("   " + (self._c(code, text) if code else text), file=self.stream, flush=True)

    def check(self, ok: bool, what: str) -> bool:
        self.checks += 1
        mark = self._c("32", "PASS") if ok else self._c("31", "FAIL")
        print(f"   [{mark}] {what}", file=self.stream, flush=True)
        if not ok:
            self.failures.append(what)
        return ok


class Demo:
    def __init__(self, workdir: Path, out: Out):
        from memoryplus.plugin.plugin import Plugin
        from memoryplus.testing.pygpt_host import HostWindow
        self.out = out
        # PyGPT's Config prints "FORCE using workdir: ..." each time it reads PYGPT_WORKDIR
        with contextlib.redirect_stdout(io.StringIO()):
            self.window = HostWindow(workdir)
            self.window.core.config.data.setdefault("plugins", {})["memoryplus"] = dict(SETTINGS)
            self.plugin = self.window.register(Plugin())
            self.plugin._ensure_started()
        self.ctx_id = 0

    # what the demo checks, read through the plugin's MemoryService
    def browse(self, bank: str, what: str):
        from memoryplus.wire.protocol import BrowseParams
        return self.plugin.service.browse(BrowseParams(bank=bank, what=what, limit=50), timeout=60).result()

    def search(self, bank: str, query: str, limit: int):
        from memoryplus.wire.protocol import SearchParams
        return self.plugin.service.search(SearchParams(bank=bank, query=query, limit=limit), timeout=60).result()

    def export(self, bank: str) -> str:
        from memoryplus.wire.protocol import BankParams
        records = self.plugin.service.export(BankParams(bank=bank), timeout=60).result()
        return json.dumps([r.model_dump(mode="json") for r in records])

    def say(self, preset: str, text: str, answer: str) -> str:
        """One chat turn; prints what the model was given, then waits until it is stored."""
        from memoryplus.plugin.memory_block import TAG
        from memoryplus.testing.pygpt_host import chat_turn
        self.ctx_id += 1
        self.window.core.config.set("preset", preset)   # the preset selected in PyGPT's UI
        self.out.line(f"you ({preset}): {text}", "1")
        seen = len(self.window.chat)
        prompt = chat_turn(self.window, text, answer, preset=preset, ctx_id=self.ctx_id)
        if prompt is None:     # a chat command: MemoryPlus answers instead of the model
            self._wait_for_reply(seen)
            return ""
        block = re.search(rf"<{TAG}>\n.*?\n(.*?)</{TAG}>", prompt, re.S)
        if block:
            self.out.line("recalled into this turn's system prompt:", "33")
            for line in block.group(1).strip().splitlines():
                self.out.line("  " + line, "33")
        self.out.line(f"assistant: {answer}")
        self.settle()
        return block.group(1) if block else ""

    def _wait_for_reply(self, seen: int, timeout: float = 60.0) -> None:
        """MemoryPlus answers a command in the chat: print its reply."""
        for _, reply, _ in self.window.wait_chat(seen + 1, timeout)[seen:]:
            for line in reply.splitlines():
                if line.strip():
                    self.out.line("MemoryPlus: " + line, "35")

    def settle(self) -> None:
        self.plugin.queue.flush(timeout=60)
        self.window.process_events(0.02)

    def stored(self, bank: str) -> None:
        facts = self.browse(bank, "facts")
        current = [f.text for f in facts if f.current]
        older = [f.text for f in facts if not f.current]
        self.out.line(f"bank {bank!r} now holds {len(facts)} facts:")
        for text in current:
            self.out.line(f"  current:    {text}", "32")
        for text in older:
            self.out.line(f"  superseded: {text}", "2")

    def close(self) -> None:
        self.plugin.destroy()


def run_demo(out: Out | None = None, workdir: Path | None = None) -> int:
    out = out or Out()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="memoryplus-demo-")
        workdir = Path(tmp.name)
    started = time.monotonic()
    demo = None
    try:
        demo = Demo(workdir, out)
        _script(demo, out)
    except Exception as exc:  # a crash is a failed demo, said plainly
        out.check(False, f"the demo ran to the end ({type(exc).__name__}: {exc})")
    finally:
        if demo is not None:
            demo.close()
        if tmp is not None:
            tmp.cleanup()
    out.head("Result")
    took = time.monotonic() - started
    if out.failures:
        out.line(f"{len(out.failures)} of {out.checks} checks FAILED in {took:.0f} s: "
                 + "; ".join(out.failures), "31")
        return 1
    out.line(f"all {out.checks} checks passed in {took:.0f} s", "32")
    return 0


def _script(d: Demo, out: Out) -> None:
    out.head(f"Session 1 — preset {PERSONAL!r}: getting to know each other")
    d.say(PERSONAL, "Hi! My name is Ada and I live in Berlin.", "Nice to meet you, Ada!")
    d.say(PERSONAL, "My dentist is Dr Okafor, the appointment is on Friday.", "Noted: Dr Okafor on Friday.")
    d.say(PERSONAL, "I love hiking in the Alps, it makes me so happy!", "The Alps are wonderful.")
    d.stored(PERSONAL)
    facts = d.browse(PERSONAL, "facts")
    out.check(any("Berlin" in f.text and f.current for f in facts), "the bank holds 'lives in Berlin'")
    episodes = d.browse(PERSONAL, "episodes")
    out.check(any(t.startswith("emotion:") for e in episodes for t in e.tags), "turns carry emotion tags")

    out.head("Session 2 — a week later: recalled in the same turn")
    block = d.say(PERSONAL, "Where do I live these days?", "You live in Berlin.")
    out.check("Berlin" in block, "the earlier turn came back in this turn's system prompt")
    d.say(PERSONAL, "Big news: I moved, I live in Lisbon now.", "Congratulations on Lisbon!")
    d.stored(PERSONAL)
    facts = d.browse(PERSONAL, "facts")
    out.check(any("Lisbon" in f.text and f.current for f in facts), "the new fact (Lisbon) is current")
    out.check(any("Berlin" in f.text and not f.current for f in facts),
              "the old fact (Berlin) is kept, superseded")
    current = [r for r in d.search(PERSONAL, "where do I live", 10) if r.kind == "fact"]
    out.check(not any("Berlin" in r.text for r in current), "search recalls only the current fact")

    out.head("/remember_this — an explicit memory")
    d.say(PERSONAL, "/remember_this My passport expires in March 2027.", "")
    results = d.search(PERSONAL, "passport expires", 5)
    out.check(any("passport" in r.text.lower() for r in results), "the bank returns the remembered text")

    out.head("/forget_that — forgetting the dentist, with confirmation")
    d.say(PERSONAL, "/forget_that dentist Dr Okafor", "")
    d.say(PERSONAL, "/forget_that yes", "")
    results = d.search(PERSONAL, "dentist Okafor", 10)
    out.check(not any("okafor" in r.text.lower() for r in results), "search no longer finds Dr Okafor")
    export = d.export(PERSONAL).lower()
    out.check("okafor" not in export, "an export of the bank holds no trace of Dr Okafor")

    out.head(f"Another preset — {WORK!r} — has its own memory")
    d.say(WORK, "I work at Acme on the Apollo project, due on Friday.", "Got it: Apollo at Acme.")
    block = d.say(WORK, "What about Lisbon and my passport?", "I don't know about that here.")
    out.check("Lisbon" not in block and "passport" not in block.lower(),
              "the work preset recalls nothing from the personal one")
    leaks = [r for r in d.search(PERSONAL, "Apollo project Acme", 10) if "apollo" in r.text.lower()]
    out.check(not leaks, "and the personal preset nothing from work")
