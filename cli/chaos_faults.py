"""The faults `memoryplus chaos` injects (see cli/chaos.py for the list), and the checks it
runs between turns (forgetting, cross-bank searches).

`FaultsMixin` is a mixin of `cli.chaos.Chaos` (its plugin, window, server and records are the
run's); the hooks below are what a fault switches on.
"""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PRESETS = ["alpha", "beta", "gamma-Ω"]


class TurnRec:
    """The run's own record of one turn sent, checked against the exports at the end."""
    __slots__ = ("i", "bank", "turn_id", "marker", "forgotten", "kind", "modes")

    def __init__(self, i: int, bank: str, turn_id: str, marker: str, kind: str = "statement", mode: str = ""):
        self.i, self.bank, self.turn_id, self.marker = i, bank, turn_id, marker
        self.forgotten = False
        self.kind = kind            # "statement" (a gate keeps it) or "small_talk" (a gate skips it)
        self.modes = {mode}         # the memory modes configured from its sending to the end


class WriteFault:
    """The I/O fault hook: while on, every spool write of this process fails with EIO."""

    def __init__(self):
        from memoryplus.plugin import spool as qmod
        self.qmod = qmod
        self.original = qmod._write_all
        self.until = 0.0
        self.hits = 0

    def install(self) -> None:
        def faulty(fd: int, data: bytes) -> None:
            if time.monotonic() < self.until:
                self.hits += 1
                raise OSError(errno.EIO, "injected I/O error (chaos)")
            self.original(fd, data)
        self.qmod._write_all = faulty

    def uninstall(self) -> None:
        self.qmod._write_all = self.original


class StoreFault:
    """The worker's store fault hook: while the file holds a future time, every Kuzu write of
    the worker fails with EIO (StoreError, retried by the queue); the worker counts its hits."""

    def __init__(self):
        self.storage: Path | None = None

    def on(self, storage: Path, seconds: float) -> None:
        from memoryplus.engine.store import TEST_STORE_FAULT_FILE
        self.storage = storage
        storage.mkdir(parents=True, exist_ok=True)
        (storage / TEST_STORE_FAULT_FILE).write_text(str(time.time() + seconds))

    def off(self) -> None:
        from memoryplus.engine.store import TEST_STORE_FAULT_FILE
        if self.storage is not None:
            (self.storage / TEST_STORE_FAULT_FILE).write_text("0")

    @property
    def hits(self) -> int:
        from memoryplus.engine.store import TEST_STORE_FAULT_FILE
        if self.storage is None:
            return 0
        try:
            return (self.storage / (TEST_STORE_FAULT_FILE + ".hits")).read_text().count("\n")
        except OSError:
            return 0


def kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


class FaultsMixin:
    # ── faults ────────────────────────────────────────────────────────────────────────
    def _llm_fault(self, kind: str) -> None:
        key = {"429": "llm_429", "500": "llm_500", "timeout": "llm_timeout", "garbage": "llm_garbage",
               "think": "llm_think"}[kind]
        self.server.inject(kind, count=self.rng.randint(1, 3), retry_after=1)
        self.faults[key] += 1

    def _kill(self, where: str) -> None:
        # The client stops restarting a worker that died 3 times within 60 s (a crash loop,
        # by design); chaos kills are spaced so that they test recovery, not that breaker.
        now = time.monotonic()
        if len([t for t in self.kill_times if now - t < 62]) >= 2:
            self.events.append((len(self.records), f"kill_{where} skipped (breaker spacing)"))
            return
        self.kill_times.append(now)
        if where == "ingest":
            self._turn()
            end = time.monotonic() + 5
            while time.monotonic() < end and not self.plugin.queue.in_flight_ids():
                self.window.process_events(0.01)
        pid = self._pid()
        if not pid:
            return
        if where == "search":   # one kill (a second would count as another death of the worker)
            fut = self._search(self._bank(PRESETS[0]), "topic", limit=5, timeout=30)
            time.sleep(0.005)
            kill_pid(pid)
            try:
                fut.result(timeout=60)
            except Exception as exc:
                self.texts.append(f"{type(exc).__name__}: {exc}")
        else:
            kill_pid(pid)
        self.faults["worker_kill"] += 1
        self.kill_where[where] += 1
        self.window.process_events(0.2)

    def _restart(self, lock_bank: bool) -> None:
        """PyGPT quits with a full queue and starts again on the same workdir."""
        self.plugin.queue.pause("chaos: PyGPT about to quit")
        for _ in range(self.rng.randint(3, 6)):
            self._turn()
        lock_target = None
        banks_dir = self.plugin.banks_dir()
        if lock_bank:   # a bank already on disk (turns may still be queued), else nothing to lock
            from memoryplus.wire.banks import BankDirectory
            bd = BankDirectory(banks_dir, "kuzu")
            used = [b for b in sorted({r.bank for r in self.records}) if (bd.path(b) / "graph.kuzu").exists()]
            lock_target = self.rng.choice(used) if used else None
            if lock_target is None:
                self.events.append((len(self.records), "no bank on disk yet to lock"))
        self._stop_app()
        locker = None
        if lock_target is not None:
            locker = self._lock_bank(banks_dir, lock_target)
        self._start_app()
        self.restarts += 1
        self.faults["app_restart"] += 1
        if locker is not None:
            # a few more turns while the bank is held; they must fail retryably and be stored later
            for _ in range(2):
                self._turn()
            self.window.process_events(0.5)
            try:
                locker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                locker.kill()
                locker.wait()

    def _lock_bank(self, banks_dir: Path, bank: str) -> subprocess.Popen | None:
        from memoryplus.wire.banks import BankDirectory
        path = BankDirectory(banks_dir, "kuzu").path(bank) / "graph.kuzu"
        if not path.exists():
            return None
        code = ("import kuzu, sys, time\n"
                "db = kuzu.Database(sys.argv[1], read_only=True)\n"
                "conn = kuzu.Connection(db)\n"
                "print('locked', flush=True)\n"
                "time.sleep(float(sys.argv[2]))\n")
        proc = subprocess.Popen([sys.executable, "-c", code, str(path), "3"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        if "locked" in line:
            self.faults["bank_locked"] += 1
        else:
            proc.wait(timeout=30)
            self.events.append((len(self.records), f"bank lock failed: {proc.stderr.read()[-300:]}"))
        return proc

    def _write_error(self) -> None:
        from memoryplus.wire.banks import BankDirectory
        seconds = self.rng.uniform(0.5, 1.5)
        self.write_fault.until = time.monotonic() + seconds          # the spool (this process)
        self.store_fault.on(BankDirectory(self.plugin.banks_dir(), "kuzu").base, seconds)  # Kuzu (worker)
        self.faults["write_error"] += 1
        for _ in range(2):
            self._turn()

    def _mode(self) -> str:
        from memoryplus.config.schema import Settings
        return self.settings.get("memory_mode") or Settings().memory_mode

    def _set_mode(self, mode: str) -> None:
        """Every turn not yet stored may be ingested under the new mode too (it is queued)."""
        for rec in self.records:
            rec.modes.add(mode)

    def _memory_gate(self) -> None:
        """MemoryGate on, then a turn of each kind ingested under it: the scripted LLM keeps
        the statement and skips the small talk (the chaos checks both at the end)."""
        self.plugin.queue.flush(timeout=120)    # turns queued before ingest under the old mode
        change = {"memory_mode": "MemoryGate"}
        self.settings.update(change)
        self._set_mode("MemoryGate")
        self.events.append((len(self.records), f"settings {change}"))
        self.window.save_options(self.plugin, **change)
        self.window.process_events(0.1)
        self._turn(kind="statement")
        self._turn(kind="small_talk")
        self.faults["memory_gate"] += 1

    def _settings_change(self) -> None:
        from memoryplus.config.schema import MEMORY_MODES
        change = self.rng.choice([
            {"batch_size": self.rng.randint(1, 8)},
            {"batch_delay_ms": self.rng.choice([0, 50, 200])},
            {"search_cache": self.rng.choice([True, False])},
            {"context_limit": self.rng.randint(3, 12)},
            {"memory_mode": self.rng.choice([m for m in MEMORY_MODES if m != "CustomPrompt"])},
            {"retry_backoff_ms": self.rng.choice([100, 300])},
        ])
        self.settings.update(change)
        if "memory_mode" in change:
            self._set_mode(change["memory_mode"])
        self.events.append((len(self.records), f"settings {change}"))
        self.window.save_options(self.plugin, **change)
        self.faults["settings_change"] += 1

    def _forget(self) -> None:
        use_command = self.rng.random() < 0.5
        if use_command:
            rec = self._turn()
            seen = len(self.window.chat)
            from memoryplus.testing.pygpt_host import chat_turn
            self.window.core.config.set("preset", next(p for p in PRESETS if self._bank(p) == rec.bank))
            chat_turn(self.window, "/forget_that", "unused")
            end = time.monotonic() + 90
            answer = ""
            while time.monotonic() < end:
                texts = [reply for _, reply, _ in self.window.chat[seen:]]   # its reply in the chat
                answer = next((t for t in texts if t.startswith(("Forg", "That turn", "Could not",
                                                                 "Nothing to forget"))), "")
                if answer:
                    break
                self.window.process_events(0.05)
            if answer.startswith(("Forgot", "Forgotten")):
                rec.forgotten = True
            else:
                self.texts.append(f"forget_that answered: {answer!r}")
                if not answer.startswith(("That turn", "Nothing to forget")):
                    self.forget_failed.append(rec)     # an error: the user tries again
        else:
            candidates = [r for r in self.records if not r.forgotten]
            if not candidates:
                return
            rec = self.rng.choice(candidates)
            self.plugin.queue.flush(timeout=120)
            try:
                self._forget_turn(rec.bank, rec.turn_id)
                if self.plugin.cache is not None:
                    self.plugin.cache.invalidate(rec.bank)
                # forgotten in the bank; a failed copy of it must not come back either
                self.plugin.queue.remove(rec.bank, rec.turn_id)
                rec.forgotten = True
            except Exception as exc:
                self.texts.append(f"{type(exc).__name__}: {exc}")
                self.forget_failed.append(rec)         # may be partly done: the user tries again
        if rec.forgotten:
            self.faults["forget"] += 1

    def _search_check(self) -> None:
        """A search in one bank for another bank's marker must return nothing of theirs."""
        if len(self.records) < 2:
            return
        other = self.rng.choice(self.records)
        bank = self._bank(self.rng.choice(PRESETS))
        try:
            results = self._search(bank, other.marker).result()
        except Exception as exc:
            self.texts.append(f"{type(exc).__name__}: {exc}")
            return
        self._count_leaks(bank, results)

    def _count_leaks(self, bank: str, results: list) -> None:
        for r in results:
            for src in r.sources:
                owners = {b for (b, tid) in self.by_id if tid == src}
                if owners and bank not in owners:
                    self.cross_bank_leaks += 1
