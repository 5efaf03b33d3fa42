"""The end of a `memoryplus chaos` run: the faults stopped, the failed turns retried, every
bank exported, and the run's own record of every turn checked against the exports (lost,
duplicated, half written, unsearchable, unforgotten, leaked to another bank, drops and skips
each checked against its cause), then orphan processes and secrets in every text shown.

`ChaosCheck` is a mixin of `cli.chaos.Chaos`.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from memoryplus.cli.chaos_faults import TurnRec

# Drop reasons the queue gives per overflow policy (plugin/queue.py); anything else is unexplained.
POLICY_DROP = {"drop_new": "queue full ({size})", "drop_oldest": "dropped as the oldest: queue full ({size})",
               "block": "queue full ({size}); waited"}
QUEUE_STOPPED = "the queue is stopped"


class ChaosCheck:
    def _finish(self, exceptions: list[str]) -> dict:
        """Faults off, retry the failed once, flush, export and account for every turn."""
        from memoryplus.wire.banks import episode_uuid, slug
        from memoryplus.engine.episodes import COMPLETE, EpisodeMeta
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

    def _outcome(self, rec: TurnRec, complete: int, pending: bool) -> str:
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

    def _searchable(self, rec: TurnRec, exceptions: list[str]) -> bool:
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
