"""`memoryplus chaos`: the real plugin, real worker and real Kuzu under injected faults.

Drives N chat turns across several presets through the real PyGPT registry and dispatcher
(testing/pygpt_host.py) with LLM extraction against the scripted LLM server, injecting at
random (seeded) every kind of fault at least once:

- the LLM answering 429 (Retry-After), 500, timeouts, garbage JSON and <think> noise;
- the worker SIGKILLed mid-ingest and mid-search (the pid from client.status());
- PyGPT "quitting" with a full queue and restarting on the same workdir (spool replay);
- a bank locked by another process for a while (a read-only Kuzu open in a child process);
- writes failing for a while, in both layers: spool writes through an I/O fault hook patched
  into *this process only* (``memoryplus.plugin.spool._write_all`` raises EIO), and Kuzu
  writes in the worker through the store's test fault hook (``engine/store.py``,
  ``store_write_fault``: a fault file in the bank storage directory, honoured only with
  MEMORYPLUS_TEST_HOOKS=1, which this run sets for its workers);
- settings changed mid-run; turns forgotten with /forget_that and with forget-by-id.

At the end it stops the faults, retries the failed turns, flushes, exports every bank and
checks its own record of every turn against the exports. Nothing is mocked in the path
from the dispatcher to Kuzu.
"""
from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memoryplus.cli.chaos_check import ChaosCheck
from memoryplus.cli.chaos_faults import PRESETS, FaultsMixin, StoreFault, TurnRec, WriteFault

FAULT_KEYS = ["llm_429", "llm_500", "llm_timeout", "llm_garbage", "worker_kill", "app_restart",
              "bank_locked", "write_error", "settings_change", "forget", "memory_gate"]
SUBJECTS = ["Berlin", "Lisbon", "Acme", "Apollo", "Okafor", "Siemens", "Munich", "Falcon", "Miso"]
# Turns of two kinds, both beyond the gate's rules (engine/extract's gate_decision answers None),
# so under MemoryGate the Insight Model (the scripted LLM) decides each by what it says:
# a statement about the user is kept, a general question or a thanks is skipped.
STATEMENT = "Note {marker}: I met {subject} about topic {marker} today."
SMALL_TALK = ["Quick question {marker}: how long should an egg boil?", "Thanks {marker}, that helps!"]
QUESTION_SHARE = 0.2
_DIGITS_AS_LETTERS = str.maketrans("0123456789", "abcdefghij")


class Chaos(FaultsMixin, ChaosCheck):
    """One run: the app's life cycle and the turns here, the faults in chaos_faults.py, the
    final accounting in chaos_check.py."""
    def __init__(self, turns: int, seed: int, workdir: Path, log=print):
        self.n = turns
        self.seed = seed
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.log = log
        self.records: list[TurnRec] = []
        self.by_id: dict[tuple[str, str], TurnRec] = {}
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
        self.write_fault = WriteFault()
        self.store_fault = StoreFault()
        self.worker_pids: set[int] = set()
        self.kill_times: list[float] = []
        self.forget_failed: list[TurnRec] = []   # forgets that answered an error: retried at the end
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
    def _turn(self, preset: str | None = None, kind: str | None = None) -> TurnRec:
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
        rec = TurnRec(i, bank, f"pygpt:1:{self.ctx_id}", marker, kind, self._mode())
        self.records.append(rec)
        self.by_id[(bank, rec.turn_id)] = rec
        prompt = chat_turn(self.window, text, f"Noted {subject}.", preset=preset, meta_id=1,
                           ctx_id=self.ctx_id, previews=1)
        if prompt and TAG in prompt:   # the injected block must hold this bank's turns only
            for other in self.records:
                if other.bank != bank and other.marker in prompt:
                    self.cross_bank_leaks += 1
        return rec

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
