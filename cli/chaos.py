"""`memoryplus chaos`: the real plugin, real worker and real Kuzu under injected faults.

Drives N chat turns across several presets through the real PyGPT registry and dispatcher
(testing/pygpt_host.py) with LLM extraction against the scripted LLM server, injecting at
random (seeded) every kind of fault at least once:

- the LLM answering 429 (Retry-After), 500, timeouts, garbage JSON and <think> noise;
- the worker SIGKILLed mid-ingest and mid-search (the pid from client.status());
- PyGPT "quitting" with a full queue and restarting on the same workdir (spool replay);
- a bank locked by another process for a while (a read-only Kuzu open in a child process);
- writes failing for a while, in both layers: spool writes through an I/O fault hook patched
  into *this process only* (``memoryplus.plugin.queue._write_all`` raises EIO), and Kuzu
  writes in the worker through the store's test fault hook (``engine/store.py``,
  ``store_write_fault``: a fault file in the bank storage directory, honoured only with
  MEMORYPLUS_TEST_HOOKS=1, which this run sets for its workers);
- settings changed mid-run; turns forgotten with /forget_that and with forget-by-id.

At the end it stops the faults, retries the failed turns, flushes, exports every bank and
checks its own record of every turn against the exports. Nothing is mocked in the path
from the dispatcher to Kuzu.
"""
from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PRESETS = ["alpha", "beta", "gamma-Ω"]
FAULT_KEYS = ["llm_429", "llm_500", "llm_timeout", "llm_garbage", "worker_kill", "app_restart",
              "bank_locked", "write_error", "settings_change", "forget", "memory_gate"]
SUBJECTS = ["Berlin", "Lisbon", "Acme", "Apollo", "Okafor", "Siemens", "Munich", "Falcon", "Miso"]
# Turns of two kinds, both beyond the gate's rules (local_extract.gate_decision answers None),
# so under MemoryGate the Insight Model (the scripted LLM) decides each by what it says:
# a statement about the user is kept, a general question or a thanks is skipped.
STATEMENT = "Note {marker}: I met {subject} about topic {marker} today."
SMALL_TALK = ["Quick question {marker}: how long should an egg boil?", "Thanks {marker}, that helps!"]
QUESTION_SHARE = 0.2
# Drop reasons the queue gives per overflow policy (plugin/queue.py); anything else is unexplained.
POLICY_DROP = {"drop_new": "queue full ({size})", "drop_oldest": "dropped as the oldest: queue full ({size})",
               "block": "queue full ({size}); waited"}
QUEUE_STOPPED = "the queue is stopped"
_DIGITS_AS_LETTERS = str.maketrans("0123456789", "abcdefghij")


class _TurnRec:
    __slots__ = ("i", "bank", "turn_id", "marker", "forgotten", "kind", "modes")

    def __init__(self, i: int, bank: str, turn_id: str, marker: str, kind: str = "statement", mode: str = ""):
        self.i, self.bank, self.turn_id, self.marker = i, bank, turn_id, marker
        self.forgotten = False
        self.kind = kind            # "statement" (a gate keeps it) or "small_talk" (a gate skips it)
        self.modes = {mode}         # the memory modes configured from its sending to the end


class _WriteFault:
    """The I/O fault hook: while on, every spool write of this process fails with EIO."""

    def __init__(self):
        from memoryplus.plugin import queue as qmod
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


class _StoreFault:
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


class Chaos:
    def __init__(self, turns: int, seed: int, workdir: Path, log=print):
        self.n = turns
        self.seed = seed
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.log = log
        self.records: list[_TurnRec] = []
        self.by_id: dict[tuple[str, str], _TurnRec] = {}
        self.faults = {k: 0 for k in FAULT_KEYS}
        self.faults["llm_think"] = 0
        self.kill_where = {"ingest": 0, "search": 0}
        self.dropped: dict[tuple[str, str], str] = {}   # dropped by the queue -> its reason
        self.skipped: dict[tuple[str, str], str] = {}   # skipped by the memory mode (gate, prune)
        self.texts: list[str] = []          # statuses, alerts, errors, exception texts seen
        self.cmdlines: list[str] = []
        self.cross_bank_leaks = 0
        self.ctx_id = 0
        self.restarts = 0
        token = "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(32))
        self.api_key = f"sk-chaosfake-{token}"
        self.neo4j_password = f"neo4jPw-{token[::-1]}"
        self.settings: dict[str, Any] = {}
        self.window = None
        self.plugin = None
        self.server = None
        self.write_fault = _WriteFault()
        self.store_fault = _StoreFault()
        self.worker_pids: set[int] = set()
        self.kill_times: list[float] = []
        self.forget_failed: list[_TurnRec] = []   # forgets that answered an error: retried at the end
        self.events: list[tuple[int, str]] = []

    # ── plumbing ──────────────────────────────────────────────────────────────────────
    def _start_app(self) -> None:
        from memoryplus.plugin.plugin import Plugin
        from memoryplus.testing.pygpt_host import HostWindow
        self.window = HostWindow(self.workdir / "pygpt")
        stored = self.window.core.config.data.setdefault("plugins", {}).setdefault("memoryplus", {})
        stored.update(self.settings)
        plugin = Plugin()
        sink = plugin._ingest_batch

        def recording_sink(bank, turns):   # notes the turns the memory mode's gate skips
            report = sink(bank, turns)
            for tid, why in report.skipped.items():
                self.skipped[(bank, tid)] = why
            for tid in [*report.stored, *report.replaced]:   # a later attempt stored it after all
                self.skipped.pop((bank, tid), None)
            return report
        plugin._ingest_batch = recording_sink      # the queue calls this instance attribute
        self.plugin = self.window.register(plugin)
        self.plugin._ensure_started()
        self._wait_worker()

    def _wait_worker(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.plugin.service.status() if self.plugin.service is not None else {}
            if st.get("pid"):
                self.worker_pids.add(st["pid"])
                self._note_cmdline(st["pid"])
                return
            self.window.process_events(0.05)

    def _note_cmdline(self, pid: int) -> None:
        try:
            self.cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                                 .decode("utf-8", "replace"))
        except OSError:
            pass
        try:
            import psutil
            for child in psutil.Process().children(recursive=True):
                try:
                    self.cmdlines.append(" ".join(child.cmdline()))
                except psutil.Error:
                    pass
        except Exception:
            pass

    def _collect_texts(self) -> None:
        if self.window is not None:
            self.texts.extend(self.window.statuses)
            self.texts.extend(self.window.alerts)
            self.texts.extend(reply for _, reply, _ in self.window.chat)   # command replies
            self.window.statuses.clear()
            self.window.alerts.clear()
            self.window.chat.clear()
        if self.plugin is not None:
            self.texts.append(self.plugin.last_error or "")
            if self.plugin.service is not None:
                self.texts.append(json.dumps(self.plugin.service.status(), default=str))
            if self.plugin.queue is not None:
                self.texts.extend(self.plugin.queue.problems)
                self.texts.extend(f.error for f in self.plugin.queue.failed())
                self.texts.extend(d.reason for d in self.plugin.queue.dropped())

    def _note_drops(self) -> None:
        if self.plugin is not None and self.plugin.queue is not None:
            for d in self.plugin.queue.dropped():
                self.dropped[(d.bank, d.turn_id)] = d.reason

    def _stop_app(self) -> None:
        self._note_drops()
        self._collect_texts()
        self.plugin.destroy()
        self.window.process_events(0.05)
        self.plugin = None
        self.window = None

    def _bank(self, preset: str) -> str:
        from memoryplus.plugin import host

        class _M:
            pass
        ctx, meta = _M(), _M()
        meta.preset = preset
        ctx.meta = meta
        return host.bank_for(ctx, self.plugin.settings)

    def _search(self, bank: str, query: str, limit: int = 10, timeout: float = 60.0):
        from memoryplus.wire.protocol import SearchParams
        return self.plugin.service.search(SearchParams(bank=bank, query=query, limit=limit), timeout=timeout)

    def _forget_turn(self, bank: str, turn_id: str):
        """Forget one stored turn by its id, as the browser does (waits for the answer)."""
        from memoryplus.wire.banks import episode_uuid, slug
        from memoryplus.wire.protocol import ForgetParams
        return self.plugin.service.forget(ForgetParams(bank=bank, ids=[episode_uuid(slug(bank), turn_id)]),
                                          timeout=60).result()

    def _pid(self) -> int | None:
        st = self.plugin.service.status()
        pid = st.get("pid")
        if pid:
            self.worker_pids.add(pid)
        return pid

    # ── one turn ──────────────────────────────────────────────────────────────────────
    def _turn(self, preset: str | None = None, kind: str | None = None) -> _TurnRec:
        from memoryplus.plugin.memory_block import TAG
        from memoryplus.testing.pygpt_host import chat_turn
        preset = preset or self.rng.choice(PRESETS)
        i = len(self.records)
        self.ctx_id += 1
        # letters only: Kuzu's full-text index splits words at digits ("mk7x3q" is "mk x q")
        marker = "mk" + f"{self.seed}x{i:05d}".translate(_DIGITS_AS_LETTERS) + "q"
        subject = self.rng.choice(SUBJECTS)
        kind = kind or ("small_talk" if self.rng.random() < QUESTION_SHARE else "statement")
        template = STATEMENT if kind == "statement" else self.rng.choice(SMALL_TALK)
        text = template.format(marker=marker, subject=subject)
        self.window.core.config.set("preset", preset)
        bank = self._bank(preset)
        rec = _TurnRec(i, bank, f"pygpt:1:{self.ctx_id}", marker, kind, self._mode())
        self.records.append(rec)
        self.by_id[(bank, rec.turn_id)] = rec
        prompt = chat_turn(self.window, text, f"Noted {subject}.", preset=preset, meta_id=1,
                           ctx_id=self.ctx_id, previews=1)
        if prompt and TAG in prompt:   # the injected block must hold this bank's turns only
            for other in self.records:
                if other.bank != bank and other.marker in prompt:
                    self.cross_bank_leaks += 1
        return rec

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
            _kill_pid(pid)
            try:
                fut.result(timeout=60)
            except Exception as exc:
                self.texts.append(f"{type(exc).__name__}: {exc}")
        else:
            _kill_pid(pid)
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

    # ── the run ───────────────────────────────────────────────────────────────────────
    def _schedule(self) -> dict[int, list[str]]:
        kinds = ["429", "500", "timeout", "garbage", "think", "kill_ingest", "kill_search", "restart",
                 "restart_locked", "write_error", "settings", "forget_cmd", "forget_id", "memory_gate"]
        span = max(1, int(self.n * 0.5))
        plan: dict[int, list[str]] = {}
        for k in kinds:          # every kind once, in the first half of the run
            plan.setdefault(self.rng.randrange(span), []).append(k)
        span = max(1, int(self.n * 0.8))
        # further faults at random, about one turn in eight
        extra = ["429", "500", "timeout", "garbage", "think", "kill_ingest", "kill_search", "write_error",
                 "settings", "forget_cmd", "forget_id", "restart", "memory_gate"]
        for t in range(span):
            if self.rng.random() < 0.125:
                plan.setdefault(t, []).append(self.rng.choice(extra))
        return plan

    def run(self) -> dict:
        from memoryplus.testing.scripted_llm import ScriptedLLMServer
        from memoryplus.common import redact
        t0 = time.monotonic()
        self.server = ScriptedLLMServer(latency_s=0.005, timeout_hold_s=1.0).start()
        self.settings = {
            "extraction_engine": "llm", "llm_provider": "openai", "override_base_url": self.server.base_url,
            "override_api_key": self.api_key, "neo4j_password": self.neo4j_password,
            "graphiti_model": "scripted-llm", "embedding_provider": "local", "engine_mode": "persistent",
            "batch_delay_ms": 0, "retry_attempts": 3, "retry_backoff_ms": 100, "queue_size": 200,
        }
        redact.register(self.api_key, self.neo4j_password)
        from memoryplus.wire import protocol as P
        hooks_before = os.environ.get(P.TEST_HOOKS_ENV)
        os.environ[P.TEST_HOOKS_ENV] = "1"     # the workers honour the store fault hook
        self.write_fault.install()
        exceptions: list[str] = []
        try:
            self._start_app()
            plan = self._schedule()
            while len(self.records) < self.n:
                step = len(self.records)
                due = [k for t in sorted(plan) if t <= step for k in plan.pop(t)]
                for kind in due:    # faults that send turns themselves may jump a few steps
                    self.events.append((len(self.records), kind))
                    try:
                        self._fault(kind)
                    except Exception as exc:
                        exceptions.append(f"fault {kind}: {type(exc).__name__}: {exc}")
                if len(self.records) >= self.n:
                    break
                self._turn()
                if self.rng.random() < 0.1:
                    self._search_check()
                if step % 20 == 19:
                    self.log(f"chaos: {len(self.records)}/{self.n} turns, {self.plugin.queue.counts()}")
                    self._collect_texts()
            result = self._finish(exceptions)
        finally:
            self.write_fault.uninstall()
            if hooks_before is None:
                os.environ.pop(P.TEST_HOOKS_ENV, None)
            else:
                os.environ[P.TEST_HOOKS_ENV] = hooks_before
            if self.plugin is not None:
                try:
                    self._stop_app()
                except Exception as exc:
                    exceptions.append(f"stop: {type(exc).__name__}: {exc}")
            self.server.stop()
        result["orphan_processes"] = self._orphans()
        result["secret_leaks"] = self._secret_leaks(exceptions)
        result["exceptions"] = exceptions
        result["seconds"] = round(time.monotonic() - t0, 1)
        return result

    def _fault(self, kind: str) -> None:
        if kind in ("429", "500", "timeout", "garbage", "think"):
            self._llm_fault(kind)
        elif kind == "kill_ingest":
            self._kill("ingest")
        elif kind == "kill_search":
            self._kill("search")
        elif kind == "restart":
            self._restart(lock_bank=False)
        elif kind == "restart_locked":
            self._restart(lock_bank=True)
        elif kind == "write_error":
            self._write_error()
        elif kind == "settings":
            self._settings_change()
        elif kind == "forget_cmd" or kind == "forget_id":
            self._forget()
        elif kind == "memory_gate":
            self._memory_gate()

    def _finish(self, exceptions: list[str]) -> dict:
        """Faults off, retry the failed once, flush, export and account for every turn."""
        from memoryplus.wire.banks import episode_uuid, slug
        from memoryplus.engine.memory_engine import COMPLETE, EpisodeMeta
        self.server.clear_faults()
        self.write_fault.until = 0.0
        self.store_fault.off()
        q = self.plugin.queue
        q.resume()
        if self.plugin.service.status().get("state") == "broken":   # the user's "Restart worker"
            self.events.append((len(self.records), "worker restarted by hand (breaker open)"))
            self.plugin.service.restart().result(timeout=120)
        end = time.monotonic() + 600
        while time.monotonic() < end:        # let the running retries finish first
            if q.flush(timeout=5):
                c = q.counts()
                if not c.get("in_flight"):
                    break
            self.window.process_events(0.05)
        q.retry_failed()
        if not q.flush(timeout=300):
            exceptions.append(f"final flush timed out: {q.counts()}")
        self.window.process_events(0.1)
        # A forget answered with an error (a write fault, a killed worker) may have been partly
        # applied, as a user would see from the error: they forget it again, now it works.
        forget_retried = 0
        for rec in self.forget_failed:
            if rec.forgotten:
                continue
            try:
                self.plugin.queue.remove(rec.bank, rec.turn_id)
                self._forget_turn(rec.bank, rec.turn_id)
                rec.forgotten = True
                forget_retried += 1
            except Exception as exc:
                exceptions.append(f"forget retry: {type(exc).__name__}: {exc}")
        self._note_drops()
        failed = {(f.bank, f.turn_id) for f in q.failed()}
        from memoryplus.wire.protocol import BankParams
        exports: dict[str, list] = {}
        for bank in sorted({r.bank for r in self.records}):
            try:
                exports[bank] = self.plugin.service.export(BankParams(bank=bank), timeout=120).result()
            except Exception as exc:
                exceptions.append(f"export {bank}: {type(exc).__name__}: {exc}")
                exports[bank] = []
        counts = dict.fromkeys(("stored", "lost", "duplicated", "unforgotten", "dropped", "dropped_stopped",
                                "unexplained_drops", "failed_final", "skipped", "unexplained_skips",
                                "gate_missed", "half_written", "unsearchable", "missing", "marker_in_other_bank"), 0)
        texts: dict[str, str] = {}
        problems: list[str] = []
        for bank, records in exports.items():
            texts[bank] = json.dumps([r.model_dump(mode="json") for r in records if r.type != "bank"],
                                     ensure_ascii=False)
        for bank, records in exports.items():
            complete: dict[str, int] = {}
            pending: dict[str, int] = {}
            for r in records:
                if r.type == "episode":
                    done = EpisodeMeta.parse(r.name, r.uuid).state == COMPLETE
                    (complete if done else pending)[r.uuid] = (complete if done else pending).get(r.uuid, 0) + 1
            fact_eps = {e for r in records if r.type == "fact" for e in r.episodes}
            for rec in (r for r in self.records if r.bank == bank):
                uid = episode_uuid(slug(bank), rec.turn_id)
                n = complete.get(uid, 0)
                # a turn's marker belongs in its own bank's export, never in another's
                if any(rec.marker in texts[b] for b in exports if b != bank):
                    counts["marker_in_other_bank"] += 1
                if rec.forgotten:
                    if n or uid in pending or uid in fact_eps or rec.marker in texts[bank]:
                        counts["unforgotten"] += 1
                    continue
                if n > 1:
                    counts["duplicated"] += n - 1
                # the same text under another id counts as a duplicate too
                counts["duplicated"] += sum(1 for r in records if r.type == "episode"
                                            and rec.marker in r.content and r.uuid != uid)
                outcome = self._outcome(rec, n, uid in pending)
                if outcome == "stored" and not self._searchable(rec, exceptions):
                    outcome = "unsearchable"
                counts[outcome] += 1
                if outcome not in ("stored", "dropped", "skipped"):
                    problems.append(f"{outcome}: turn {rec.i} ({rec.kind}, {rec.turn_id}) in {bank!r}, "
                                    f"modes {sorted(rec.modes)}, skip {self.skipped.get((bank, rec.turn_id))!r}")
                if outcome not in ("stored", "dropped", "skipped", "gate_missed"):
                    counts["lost"] += 1          # every other outcome is a turn the user lost
                    if (bank, rec.turn_id) in failed:
                        counts["failed_final"] += 1
        # forgotten turns are not found by search either
        for rec in [r for r in self.records if r.forgotten]:
            try:
                results = self._search(rec.bank, rec.marker).result()
                if any(rec.turn_id in x.sources for x in results):
                    counts["unforgotten"] += 1
            except Exception as exc:
                exceptions.append(f"search: {type(exc).__name__}: {exc}")
        for bank in exports:
            probe = self.rng.sample(self.records, min(10, len(self.records)))
            for rec in probe:
                try:
                    self._count_leaks(bank, self._search(bank, rec.marker).result())
                except Exception as exc:
                    exceptions.append(f"search: {type(exc).__name__}: {exc}")
        st = self.plugin.service.status()
        return {
            "seed": self.seed, "turns": len(self.records), "stored": counts["stored"],
            "dropped_by_policy": counts["dropped"], "dropped_queue_stopped": counts["dropped_stopped"],
            "unexplained_drops": counts["unexplained_drops"], "failed_final": counts["failed_final"],
            "skipped_by_mode": counts["skipped"], "unexplained_skips": counts["unexplained_skips"],
            "gate_missed": counts["gate_missed"], "half_written": counts["half_written"],
            "unsearchable": counts["unsearchable"], "lost": counts["lost"], "duplicated": counts["duplicated"],
            "cross_bank_leaks": self.cross_bank_leaks + counts["marker_in_other_bank"],
            "unforgotten": counts["unforgotten"],
            "forgotten": sum(1 for r in self.records if r.forgotten),
            "turns_by_kind": {k: sum(1 for r in self.records if r.kind == k) for k in ("statement", "small_talk")},
            "gate_llm_calls": int(self.server.calls.get("MemoryGateDecision", 0)),
            "gate_decisions": {"keep": int(self.server.brain.gate_decisions[True]),
                               "skip": int(self.server.brain.gate_decisions[False])},
            "unanswered_schemas": dict(self.server.unanswered),
            "problems": problems,
            "faults": dict(self.faults), "worker_kills": dict(self.kill_where),
            "llm_faults_applied": {k: int(v) for k, v in self.server.faults_applied.items()},
            "spool_write_errors_injected": self.write_fault.hits,
            "store_write_errors_injected": self.store_fault.hits,
            "forgets_failed_and_retried": forget_retried,
            "worker_restarts": st.get("restarts"), "worker_rss_mb": st.get("rss_mb"),
            "events": [f"turn {t}: {e}" for t, e in self.events],
        }

    def _outcome(self, rec: _TurnRec, complete: int, pending: bool) -> str:
        """What became of a turn not forgotten, each drop and skip checked against its cause."""
        key = (rec.bank, rec.turn_id)
        if complete:
            if rec.kind == "small_talk" and rec.modes == {"MemoryGate"}:
                return "gate_missed"       # the gate was on all along and should have skipped it
            return "stored"
        if pending:
            return "half_written"          # written, never completed: not a memory
        if key in self.dropped:
            reason = self.dropped[key]
            if reason == QUEUE_STOPPED:    # a turn sent while the app was up must not meet a stopped queue
                return "dropped_stopped"
            policy = self.settings.get("overflow_policy", "drop_new")
            size = self.settings.get("queue_size")
            return "dropped" if reason.startswith(POLICY_DROP[policy].format(size=size)) else "unexplained_drops"
        if key in self.skipped:
            why = self.skipped[key]
            # only MemoryGate skips here (chaos never turns auto_prune on, never sends an empty
            # turn), and only small talk, and only if the gate was on at some point after it was sent
            if why.startswith("memory gate:") and rec.kind == "small_talk" and "MemoryGate" in rec.modes:
                return "skipped"
            return "unexplained_skips"
        return "missing"

    def _searchable(self, rec: _TurnRec, exceptions: list[str]) -> bool:
        """A stored turn is found by a search for its marker (a pending one would not be)."""
        try:
            results = self._search(rec.bank, rec.marker).result()
        except Exception as exc:
            exceptions.append(f"search: {type(exc).__name__}: {exc}")
            return False
        return any(rec.turn_id in x.sources for x in results)

    def _orphans(self) -> int:
        time.sleep(0.5)
        n = 0
        try:
            import psutil
            for child in psutil.Process().children(recursive=True):
                if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                    n += 1
        except Exception:
            pass
        for pid in self.worker_pids:
            try:
                os.kill(pid, 0)
                if Path(f"/proc/{pid}/status").read_text().find("zombie") < 0:
                    n += 1
            except OSError:
                pass
        # a lock left behind: the worker lock of the data dir must be free
        try:
            import fcntl

            from memoryplus.wire import protocol as P
            lock = self.workdir / "pygpt" / "memoryplus" / P.WORKER_LOCK
            if lock.exists():
                fd = os.open(lock, os.O_RDWR)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    n += 1
                finally:
                    os.close(fd)
        except Exception:
            pass
        return n

    def _secret_leaks(self, exceptions: list[str]) -> int:
        secrets = [self.api_key, self.neo4j_password]
        self._collect_texts()
        haystacks = list(self.texts) + list(exceptions) + list(self.cmdlines)
        for logdir in self.workdir.rglob("logs"):
            if logdir.is_dir():
                for f in logdir.rglob("*"):
                    if f.is_file():
                        haystacks.append(f.read_text("utf-8", "replace"))
        for spool in self.workdir.rglob("spool"):
            if spool.is_dir():
                for f in spool.rglob("*"):
                    if f.is_file():
                        haystacks.append(f.read_text("utf-8", "replace"))
        return sum(h.count(s) for h in haystacks for s in secrets)


def _kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def run_chaos(turns: int = 200, seed: int = 1, json_path: str | os.PathLike | None = None,
              workdir: str | os.PathLike | None = None, log=None) -> dict:
    """Run the chaos test; return (and optionally write as JSON) its figures."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="memoryplus-chaos-")
        workdir = tmp.name
    try:
        result = Chaos(turns, seed, Path(workdir), log=log).run()
    finally:
        if tmp is not None:
            tmp.cleanup()
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return result


def print_result(result: dict, out=sys.stdout) -> None:
    keys = ["turns", "stored", "dropped_by_policy", "skipped_by_mode", "forgotten", *MUST_BE_ZERO, "failed_final"]
    for k in keys:
        print(f"{k:>18}: {result.get(k)}", file=out)
    print(f"{'faults':>18}: " + ", ".join(f"{k}={v}" for k, v in result["faults"].items()), file=out)
    print(f"{'write errors':>18}: spool {result.get('spool_write_errors_injected')}, "
          f"store {result.get('store_write_errors_injected')}", file=out)
    print(f"{'memory gate':>18}: {result.get('gate_llm_calls')} LLM calls, {result.get('gate_decisions')}", file=out)
    print(f"{'seed':>18}: {result.get('seed')}   ({result.get('seconds')} s)", file=out)
    if result.get("exceptions"):
        print(f"{'exceptions':>18}: " + "; ".join(result["exceptions"][:5]), file=out)


# Each a failure: `lost` counts every turn neither stored (complete and searchable) nor dropped
# or skipped for a cause the configured policy and mode explain; the others say why.
MUST_BE_ZERO = ("lost", "half_written", "unsearchable", "unexplained_drops", "dropped_queue_stopped",
                "unexplained_skips", "gate_missed", "duplicated", "cross_bank_leaks", "unforgotten",
                "secret_leaks", "orphan_processes")


def ok(result: dict) -> bool:
    return (all(result[k] == 0 for k in MUST_BE_ZERO) and not result["exceptions"]
            and not result["unanswered_schemas"]
            and all(result["faults"][k] >= 1 for k in FAULT_KEYS))
