"""`memoryplus demo`: a scripted conversation showing the memory engine at work, offline.

It runs on the embedded default (Kuzu, local extraction, the local embedder: no API key, no
server) in a fresh directory, and every step checks itself against the real bank (searches and
an export read back), not against what it printed. Exit status 0 only if every check held.
"""
from __future__ import annotations

import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from memoryplus.config.schema import Settings
from memoryplus.worker.engine import MemoryEngine
from memoryplus.worker.records import Turn

PERSONAL, WORK = "Personal assistant", "current.chat: work"
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)


class Out:
    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.color = stream.isatty()
        self.failures: list[str] = []
        self.checks = 0

    def _c(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.color else text

    def head(self, text: str) -> None:
        print("\n" + self._c("1;36", f"== {text}"), file=self.stream)

    def line(self, text: str) -> None:
        print("   " + text, file=self.stream)

    def check(self, ok: bool, what: str) -> bool:
        self.checks += 1
        mark = self._c("32", "PASS") if ok else self._c("31", "FAIL")
        print(f"   [{mark}] {what}", file=self.stream)
        if not ok:
            self.failures.append(what)
        return ok


def _texts(results) -> str:
    return "\n".join(r.text for r in results)


async def run_demo(args=None, *, out: Out | None = None, directory: Path | None = None,
                   engine_factory=None) -> int:
    out = out or Out()
    tmp = None
    if directory is None:
        tmp = tempfile.TemporaryDirectory(prefix="memoryplus-demo-")
        directory = Path(tmp.name)
    settings = Settings(extraction_engine="local", embedding_provider="local")
    engine = (engine_factory or MemoryEngine)(settings, directory, app="memoryplus demo")
    try:
        await _script(engine, out)
    finally:
        await engine.close()
        if tmp is not None:
            tmp.cleanup()
    out.head("Result")
    if out.failures:
        out.line(f"{len(out.failures)} of {out.checks} checks FAILED: " + "; ".join(out.failures))
        return 1
    out.line(f"all {out.checks} checks passed")
    return 0


async def _say(engine, out: Out, bank: str, ident: str, user: str, assistant: str, when: datetime):
    out.line(f"{when.date()}  user: {user}")
    out.line(f"{'':>12}  assistant: {assistant}")
    rep = await engine.ingest(bank, [Turn(id=ident, user=user, assistant=assistant, time=when)])
    return rep


async def _recall(engine, out: Out, bank: str, query: str, **kw):
    results = await engine.search(bank, query, 5, **kw)
    out.line(f"recall for {query!r}:")
    for r in results[:5]:
        state = "current" if r.invalid_at is None else f"superseded {r.invalid_at.date()}"
        tags = " ".join(f"[{t}]" for t in r.tags)
        out.line(f"   - ({r.kind}, {state}) {r.text.replace(chr(10), ' / ')[:100]} {tags}")
    return results


async def _script(engine: MemoryEngine, out: Out) -> None:
    out.head(f"Session 1 — preset {PERSONAL!r}")
    await _say(engine, out, PERSONAL, "s1-1", "Hi! My name is Ada and I live in Berlin.",
               "Nice to meet you, Ada. Berlin is a lovely city.", T0)
    await _say(engine, out, PERSONAL, "s1-2", "My dentist is Dr Okafor, the appointment is on Friday.",
               "Noted: Dr Okafor on Friday.", T0 + timedelta(minutes=5))
    await _say(engine, out, PERSONAL, "s1-3", "I love hiking in the Alps, it makes me so happy!",
               "Hiking in the Alps sounds wonderful.", T0 + timedelta(minutes=9))
    stats = await engine.stats(PERSONAL)
    out.line(f"stored: {stats.episodes} turns, {stats.entities} entities, {stats.facts} facts")
    out.check(stats.episodes == 3 and stats.facts >= 2, "three turns stored with their facts")

    out.head("Session 2 — a week later: what is remembered, and what changed")
    res = await _recall(engine, out, PERSONAL, "Where do I live?")
    out.check("Berlin" in _texts(res), "recalls that Ada lives in Berlin")
    when = T0 + timedelta(days=7)
    await _say(engine, out, PERSONAL, "s2-1", "Big news: I moved, I live in Lisbon now.",
               "Congratulations on the move to Lisbon!", when)
    res = await _recall(engine, out, PERSONAL, "Where do I live?")
    facts = [r for r in res if r.kind == "fact"]
    out.check(any("Lisbon" in r.text and r.invalid_at is None for r in facts),
              "the new fact (Lisbon) is current")
    out.check(not any("Berlin" in r.text for r in facts), "the old fact (Berlin) is no longer current")
    past = await _recall(engine, out, PERSONAL, "Where do I live?", as_of=T0 + timedelta(days=1))
    out.check(any("Berlin" in r.text for r in past if r.kind == "fact"),
              "time travel: as of day 1 the user lived in Berlin")

    out.head("/remember_this — an explicit memory")
    await engine.remember(PERSONAL, "My passport expires in March 2027.")
    out.line("remembered: My passport expires in March 2027.")
    res = await _recall(engine, out, PERSONAL, "When does my passport expire?")
    out.check("passport" in _texts(res).lower(), "the explicit memory is recalled")

    out.head("/forget_that — forgetting the dentist")
    matches = (await engine.forget(PERSONAL, text="dentist Dr Okafor", confirm=False)).matches
    out.line(f"{len(matches)} strong matches shown for confirmation")
    rep = await engine.forget(PERSONAL, text="dentist Dr Okafor", confirm=True)
    out.line(f"forgot {len(rep.forgotten)} memories and {rep.episodes_removed} turn(s)")
    res = await _recall(engine, out, PERSONAL, "dentist Okafor")
    out.check("okafor" not in _texts(res).lower(), "search no longer finds Dr Okafor")
    exported = str(await engine.export(PERSONAL)).lower()
    out.check("okafor" not in exported, "the export holds no trace of Dr Okafor")

    out.head(f"Another preset — {WORK!r} — has its own memory")
    await _say(engine, out, WORK, "w-1", "I work at Acme on the Apollo project, due on Friday.",
               "Got it: the Apollo project at Acme.", when)
    res = await _recall(engine, out, WORK, "Apollo project")
    out.check("Apollo" in _texts(res), "the work preset recalls the Apollo project")
    res_w = await engine.search(WORK, "Lisbon Berlin passport hiking", 10)
    res_p = await engine.search(PERSONAL, "Apollo Acme project", 10)
    leaks = [src for r in res_w for src in r.sources if not src.startswith("w-")]
    leaks += [src for r in res_p for src in r.sources if src.startswith("w-")]
    out.check(not leaks, "neither preset sees the other's memories")
