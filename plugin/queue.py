"""The ingestion queue between PyGPT's GUI thread and the graph worker.

`put(bank, turn)` only appends to in-memory structures under a lock (microseconds: no disk
I/O, no waiting — except overflow policy `block`, which waits at most `GUI_BLOCK_BUDGET_S`
(20 ms) for room and then drops the new turn, counted as dropped and as a block timeout).

Two daemon threads do the rest:

* the **spool writer** (plugin/spool.py) appends every handed-over turn to a JSON-lines spool
  file and fsyncs it: a turn is durable within **`SPOOL_WINDOW_S` = 200 ms** of `put()`
  returning; on start, turns spooled but not completed (ours, or a crashed instance's) are
  replayed, so quitting PyGPT or a crash loses nothing spooled.

* the **ingest thread** (plugin/scheduler.py) takes batches of ONE bank (`batch_size`,
  `batch_delay_ms`), calls `sink(bank, turns)`, serves banks round-robin and retries a failed
  batch with backoff; a turn that keeps failing is kept as *failed*, never vanished.

Their bookkeeping, shared under one lock, is plugin/queue_state.py.

A put with the same (bank, turn.id) as a waiting turn replaces it in place (a regenerated
answer), and supersedes a failed one. `remove(bank, id)` takes a waiting or failed turn out
("removed"); for a turn in flight it returns "in_flight", lists it in `in_flight_ids()`, does not
retry it, and reports it in the `forget` list of the `on_done` callback so the caller can forget
it right after its ingestion.

`clock` (seconds, monotonic) times retries; `sleep(seconds)` waits for a retry (default: a wait
that new work or stop() interrupts); `rand()` gives the jitter. Tests inject a fake clock and a
sleep that advances it. Batch delays and the block budget are real time (Condition waits).
"""
from __future__ import annotations

import random as _random
import threading
import time
from pathlib import Path
from typing import Any, Callable

from memoryplus.plugin.queue_state import BatchDone, DroppedTurn, FailedTurn, IngestError, QueueState
from memoryplus.plugin.scheduler import Scheduler
from memoryplus.plugin.spool import SpoolWriter
from memoryplus.wire.records import IngestReport, Turn

# The queue's API: IngestQueue, what its sink may raise, and the records it hands out.
__all__ = ["IngestQueue", "IngestError", "BatchDone", "DroppedTurn", "FailedTurn",
           "GUI_BLOCK_BUDGET_S", "SPOOL_WINDOW_S"]

GUI_BLOCK_BUDGET_S = 0.020      # the longest put() waits under policy `block`
SPOOL_WINDOW_S = 0.200          # a handed-over turn is on disk (fsynced) within this time

QUEUED, DROPPED, REPLACED = "queued", "dropped", "replaced"
REMOVED, IN_FLIGHT, ABSENT = "removed", "in_flight", "absent"


class IngestQueue(QueueState):
    """See the module docstring."""

    def __init__(self, spool_dir: Path | str, settings: Any,
                 sink: Callable[[str, list[Turn]], IngestReport], *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] | None = None,
                 rand: Callable[[], float] = _random.random,
                 on_done: Callable[[BatchDone], Any] | None = None,
                 block_budget_s: float = GUI_BLOCK_BUDGET_S):
        self._dir = Path(spool_dir)
        self._sink = sink
        self._clock = clock
        self._sleep = sleep if sleep is not None else self._interruptible_sleep
        self._rand = rand
        self._on_done = on_done
        self._block_budget_s = block_budget_s

        super().__init__()
        self._ingest_thread: threading.Thread | None = None
        self._writer_thread: threading.Thread | None = None
        self._writer = SpoolWriter(self, self._dir)
        self._scheduler = Scheduler(self)

        self.configure(settings)

    # ── settings and life cycle ─────────────────────────────────────────────────────────
    def configure(self, settings: Any) -> None:
        """Apply queue_size, overflow_policy, batch_size, batch_delay_ms, retry_attempts and
        retry_backoff_ms live. A smaller queue never drops waiting turns (except drop_oldest on
        the next put)."""
        with self._lock:
            self.queue_size = max(0, int(settings.queue_size))
            self.overflow_policy = str(settings.overflow_policy)
            self.batch_size = max(1, int(settings.batch_size))
            self.batch_delay_s = max(0.0, int(settings.batch_delay_ms) / 1000.0)
            self.retry_attempts = max(1, int(settings.retry_attempts))
            self.retry_backoff_s = max(0.0, int(settings.retry_backoff_ms) / 1000.0)
            self._kick()

    def start(self) -> None:
        with self._lock:
            if self._stopping:
                raise RuntimeError("an IngestQueue cannot be restarted after stop(); make a new one")
            if self._started:
                return
            self._started = True
        self._writer_thread = threading.Thread(target=self._writer.run, name="memoryplus-spool",
                                               daemon=True)
        self._ingest_thread = threading.Thread(target=self._scheduler.run, name="memoryplus-ingest",
                                               daemon=True)
        self._writer_thread.start()
        self._ingest_thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop taking batches, let the batch in flight finish if it can within `timeout`, write
        everything to the spool and release it. Waiting turns stay spooled for the next start.
        True when both threads ended in time."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            self._stopping = True
            self._kick()
            self._room.notify_all()
        ok = True
        if self._ingest_thread is not None:
            self._ingest_thread.join(max(0.0, deadline - time.monotonic()))
            ok = not self._ingest_thread.is_alive()
        with self._lock:
            self._writer_exit = True
            self._writer_deadline = deadline
            self._writer._write_retry_at = 0.0  # a last write at once, whatever the pause
            self._wcv.notify_all()
        if self._writer_thread is not None:
            self._writer_thread.join(max(0.05, deadline - time.monotonic()))
            ok = ok and not self._writer_thread.is_alive()
        return ok

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until nothing waits or is in flight (batch delays are skipped meanwhile) and the
        spool reflects it. False on timeout (e.g. while paused, or a bank keeps failing)."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            self._flushing += 1
            self._kick()
            try:
                while not (self._replay_done and self._npending == 0 and not self._inflight
                           and not self._journal and not self._writer_busy and self._unspooled == 0):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._idle.wait(remaining)
                return True
            finally:
                self._flushing -= 1

    def wait_spooled(self, timeout: float = SPOOL_WINDOW_S) -> bool:
        """Wait until every handed-over turn is on disk."""
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            while self._unspooled > 0 or not self._replay_done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(remaining)
            return True

    def pause(self, reason: str = "paused") -> None:
        """Take no new batches (the batch in flight finishes); turns stay queued and spooled."""
        with self._lock:
            self._paused = reason or "paused"
            self._kick()

    def resume(self) -> None:
        with self._lock:
            self._paused = None
            self._kick()

    # ── the GUI side ────────────────────────────────────────────────────────────────────
    def put(self, bank: str, turn: Turn) -> str:
        """Hand a turn over: "queued", "replaced" (same bank and id as a waiting or failed turn)
        or "dropped" (queue full, see overflow_policy; listed in dropped())."""
        if not isinstance(turn, Turn):
            raise TypeError(f"put() takes a Turn, not {type(turn).__name__}")
        if not isinstance(bank, str) or not bank:
            raise ValueError("put() needs a bank name")
        with self._lock:
            deadline: float | None = None
            while True:
                if self._stopping:
                    self._record_drop(bank, turn.id, "the queue is stopped")
                    return DROPPED
                od = self._pending.get(bank)
                if od is not None and turn.id in od:
                    old = od[turn.id]
                    new = self._new_entry(bank, turn, seq=old.seq, t_enq=old.t_enq)
                    od[turn.id] = new                  # same position in the queue
                    old.state = "replaced"
                    self._journal.append(("del", old, False))
                    self._journal_add(new)
                    self._kick()
                    return REPLACED
                if not self._full():
                    break
                if self.overflow_policy == "drop_oldest":
                    while self._full() and self._npending:
                        self._drop_oldest()
                    break
                if self.overflow_policy == "block":
                    now = time.monotonic()
                    if deadline is None:
                        deadline = now + self._block_budget_s
                    if now < deadline:
                        self._room.wait(deadline - now)
                        continue
                    self._block_timeouts += 1
                    self._record_drop(bank, turn.id,
                                      f"queue full ({self.queue_size}); waited {self._block_budget_s * 1000:.0f} ms")
                    return DROPPED
                self._record_drop(bank, turn.id, f"queue full ({self.queue_size})")
                return DROPPED
            superseded = self._take_failed(bank, turn.id)
            entry = self._new_entry(bank, turn)
            self._enqueue(entry)
            self._journal_add(entry)
            self._kick()
            return REPLACED if superseded else QUEUED

    def remove(self, bank: str, turn_id: str) -> str:
        """Take a turn out before it is ingested: "removed" (it was waiting or failed; gone from
        the spool too), "in_flight" (being ingested now: forget it after, see on_done and
        in_flight_ids()) or "absent" (stored, or never here; a held copy leaves the spool)."""
        with self._lock:
            self._drop_held(bank, {turn_id})
            found = False
            od = self._pending.get(bank)
            if od is not None and turn_id in od:
                entry = od.pop(turn_id)
                self._npending -= 1
                self._tidy_bank(bank)
                entry.state = "removed"
                self._journal.append(("del", entry, True))
                found = True
            if self._take_failed(bank, turn_id, urgent=True):
                found = True
            in_flight = False
            for entry in self._inflight.values():
                if entry.bank == bank and entry.turn.id == turn_id:
                    entry.forget = True
                    in_flight = True
            self._kick()
            self._room.notify_all()
            if in_flight:
                return IN_FLIGHT
            return REMOVED if found else ABSENT

    def retry_failed(self, bank: str | None = None, turn_ids: list[str] | None = None) -> int:
        """Requeue failed turns (all, one bank's, or the given ids) with fresh attempts."""
        wanted = set(turn_ids) if turn_ids is not None else None
        n = 0
        with self._lock:
            for uid, entry in list(self._failed.items()):
                if bank is not None and entry.bank != bank:
                    continue
                if wanted is not None and entry.turn.id not in wanted:
                    continue
                del self._failed[uid]
                entry.attempts = 0
                entry.solo = False
                entry.state = "pending"
                od = self._pending.get(entry.bank)
                if od is not None and entry.turn.id in od:      # a newer version waits already
                    entry.state = "replaced"
                    self._journal.append(("del", entry, False))
                    continue
                self._enqueue(entry)
                self._journal.append(("unfail", entry, False))
                n += 1
            self._kick()
        return n

    def forgotten(self, bank: str, turn_ids: list[str] | None = None) -> None:
        """The worker forgot these stored turns (None: it cleared the bank). Their held copies
        leave the spool at once, so that no replay stores them again, and so does a newer
        version still waiting (another client may have forgotten them: it must not come back)."""
        with self._lock:
            self._drop_held(bank, None if turn_ids is None else {str(t) for t in turn_ids})
            self._kick()
        for turn_id in turn_ids or ():
            self.remove(bank, str(turn_id))

    # ── what the UI shows ───────────────────────────────────────────────────────────────
    def counts(self) -> dict[str, Any]:
        with self._lock:
            retrying = sum(1 for od in self._pending.values() for e in od.values() if e.attempts)
            return {
                "pending": self._npending,
                "in_flight": len(self._inflight),
                "done": self._done,             # stored (or already stored, unchanged)
                "skipped": self._skipped,       # not stored on purpose: the memory mode's gate, prune
                "unflushed": sum(len(held) for _, held in self._held.values()),   # done, kept spooled
                "dropped": self._dropped_n,
                "failed": len(self._failed),
                "paused_reason": self._paused,
                "retrying": retrying,
                "unspooled": self._unspooled,
                "replayed": self._replayed,
                "block_timeouts": self._block_timeouts,
                "corrupt_lines": self._corrupt,
                "spool_error": self._spool_error,
            }

    def dropped(self) -> list[DroppedTurn]:
        with self._lock:
            return list(self._dropped)

    def failed(self) -> list[FailedTurn]:
        with self._lock:
            return [FailedTurn(e.bank, e.turn.id, e.error, e.attempts) for e in self._failed.values()]

    def in_flight_ids(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(e.bank, e.turn.id) for e in self._inflight.values()]

    def waiting(self, bank: str) -> int:
        """How many turns of `bank` wait to be ingested."""
        with self._lock:
            return len(self._pending.get(bank) or ())

    def pending_ids(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(b, tid) for b, od in self._pending.items() for tid in od]

    @property
    def problems(self) -> list[str]:
        with self._lock:
            return list(self._problems)

    @property
    def spool_path(self) -> Path | None:
        spool = self._writer._spool
        return spool.path if spool is not None else None

    def _interruptible_sleep(self, seconds: float) -> None:
        self._wake.wait(max(0.0, seconds))
