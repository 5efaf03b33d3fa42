"""The ingestion queue's bookkeeping, shared by the GUI side (plugin/queue.py), the ingest
thread (plugin/scheduler.py) and the spool writer (plugin/spool.py): what waits, what is in
flight, failed, held or dropped, and the journal of changes the spool writer still has to
write. Every method here runs with the queue's lock held."""
from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from memoryplus.wire.records import Turn

log = logging.getLogger(__name__)

DROPPED_KEPT = 1000             # dropped turns listed (all are counted)
MAX_PROBLEMS = 200


class IngestError(Exception):
    """What a sink raises to say how a failure should be handled.

    retry_after: seconds the provider asked us to wait (HTTP Retry-After), if any.
    retryable: False when retrying cannot help (the turn is kept as failed at once).
    Any other exception a sink raises counts as retryable with no Retry-After.
    """

    def __init__(self, message: str = "", *, retry_after: float | None = None, retryable: bool = True,
                 paused: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.retryable = retryable
        # The sink paused the queue (e.g. an LLM budget): the batch goes back, no attempt counted.
        self.paused = paused


@dataclass(frozen=True)
class DroppedTurn:
    bank: str
    turn_id: str
    reason: str
    at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class FailedTurn:
    bank: str
    turn_id: str
    error: str
    attempts: int


@dataclass(frozen=True)
class BatchDone:
    """Passed to `on_done` after a batch was ingested (on the ingest thread)."""
    bank: str
    turns: list[Turn]
    report: Any
    forget: list[str]          # ids removed by the user while in flight: forget them now

class _Entry:
    __slots__ = ("uid", "bank", "turn", "seq", "t_enq", "attempts", "error", "state", "line",
                 "forget", "solo")

    def __init__(self, uid: str, bank: str, turn: Turn, seq: int, t_enq: float):
        self.uid = uid
        self.bank = bank
        self.turn = turn
        self.seq = seq
        self.t_enq = t_enq
        self.attempts = 0
        self.error = ""
        self.state = "pending"
        self.line: str | None = None     # the spool's "add" record, serialised once (spool.py)
        self.forget = False
        self.solo = False


class QueueState:
    """The shared bookkeeping (see the module docstring); IngestQueue is one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)    # the ingest thread waits here
        self._room = threading.Condition(self._lock)    # put() under policy `block` waits here
        self._wcv = threading.Condition(self._lock)     # the spool writer waits here
        self._idle = threading.Condition(self._lock)    # flush() / wait_spooled() wait here
        self._wake = threading.Event()                  # interrupts the default retry sleep

        self._session = secrets.token_hex(4)
        self._seq = 0
        self._pending: dict[str, OrderedDict[str, _Entry]] = {}
        self._npending = 0
        self._rr: list[str] = []                        # banks, next to serve first
        self._parked: dict[str, float] = {}             # bank -> clock() of its next attempt
        self._inflight: dict[str, _Entry] = {}          # uid -> entry
        self._failed: OrderedDict[str, _Entry] = OrderedDict()
        # bank -> (worker engine instance, turns it stored but has not flushed yet): still spooled
        self._held: dict[str, tuple[str, list[_Entry]]] = {}
        self._journal: list[tuple[str, _Entry, bool]] = []   # (op, entry, urgent) for the writer
        self._unspooled = 0
        self._done = 0
        self._skipped = 0       # handled, but skipped on purpose by the worker (memory mode, prune)
        self._done_keys: set[tuple[str, str]] = set()
        self._dropped_n = 0
        self._dropped: deque[DroppedTurn] = deque(maxlen=DROPPED_KEPT)
        self._block_timeouts = 0
        self._drops_unlogged = 0
        self._replayed = 0
        self._corrupt = 0
        self._paused: str | None = None
        self._flushing = 0
        self._started = False
        self._stopping = False
        self._writer_exit = False
        self._writer_deadline = 0.0     # stop(): retry a failing spool write until then
        self._writer_busy = False
        self._replay_done = False
        self._spool_ready = False
        self._spool_error: str | None = None
        self._problems: list[str] = []

    # ── bookkeeping (lock held) ───────────────────────────────────────────────────────
    def _kick(self) -> None:
        self._work.notify_all()
        self._idle.notify_all()
        self._wcv.notify_all()
        self._wake.set()

    def _full(self) -> bool:
        return self.queue_size > 0 and self._npending >= self.queue_size

    def _new_entry(self, bank: str, turn: Turn, *, seq: int | None = None, t_enq: float | None = None,
                   uid: str | None = None) -> _Entry:
        self._seq += 1
        return _Entry(uid or f"{self._session}-{self._seq}", bank, turn,
                      self._seq if seq is None else seq,
                      time.monotonic() if t_enq is None else t_enq)

    def _journal_add(self, entry: _Entry) -> None:
        self._journal.append(("add", entry, False))
        self._unspooled += 1

    def _enqueue(self, entry: _Entry, front: bool = False) -> None:
        od = self._pending.get(entry.bank)
        if od is None:
            od = self._pending[entry.bank] = OrderedDict()
        if entry.bank not in self._rr:
            self._rr.append(entry.bank)
        entry.state = "pending"
        od[entry.turn.id] = entry
        if front:
            od.move_to_end(entry.turn.id, last=False)
        self._npending += 1

    def _tidy_bank(self, bank: str) -> None:
        if not self._pending.get(bank):
            self._pending.pop(bank, None)
            self._parked.pop(bank, None)
            if bank in self._rr:
                self._rr.remove(bank)

    def _record_drop(self, bank: str, turn_id: str, reason: str) -> None:
        self._dropped_n += 1
        self._dropped.append(DroppedTurn(bank, turn_id, reason))
        self._drops_unlogged += 1       # logged by the writer thread: a log handler may do I/O
        self._wcv.notify_all()

    def _drop_oldest(self) -> None:
        oldest: _Entry | None = None
        for od in self._pending.values():
            head = next(iter(od.values()))
            if oldest is None or head.seq < oldest.seq:
                oldest = head
        if oldest is None:
            return
        del self._pending[oldest.bank][oldest.turn.id]
        self._npending -= 1
        self._tidy_bank(oldest.bank)
        oldest.state = "dropped"
        self._journal.append(("del", oldest, False))
        self._record_drop(oldest.bank, oldest.turn.id, f"dropped as the oldest: queue full ({self.queue_size})")

    def _take_failed(self, bank: str, turn_id: str, urgent: bool = False) -> bool:
        hit = [uid for uid, e in self._failed.items() if e.bank == bank and e.turn.id == turn_id]
        for uid in hit:
            entry = self._failed.pop(uid)
            entry.state = "removed"
            self._journal.append(("del", entry, urgent))
        return bool(hit)

    def _drop_held(self, bank: str, turn_ids: set[str] | None) -> None:
        """Held turns of `bank` (those in `turn_ids`, or all) leave the spool."""
        instance, held = self._held.get(bank, ("", []))
        keep = [] if turn_ids is None else [e for e in held if e.turn.id not in turn_ids]
        for entry in held:
            if entry not in keep:
                entry.state = "done"
                # urgent (compact now) when one turn goes: it may be a forgotten one
                self._journal.append(("del", entry, turn_ids is not None))
        if keep:
            self._held[bank] = (instance, keep)
        else:
            self._held.pop(bank, None)

    def _requeue_lost(self, instance: str, newer: set[tuple[str, str]]) -> None:
        """An answer from worker engine `instance`: turns held for another engine were never
        flushed by it (it died), so they are queued again, unless a newer version of the same
        turn is queued, failed or in `newer` (just stored)."""
        for bank, (owner, held) in list(self._held.items()):
            if owner == instance:
                continue
            del self._held[bank]
            latest: dict[str, _Entry] = {}
            for entry in sorted(held, key=lambda e: e.seq):
                latest[entry.turn.id] = entry
            od = self._pending.get(bank) or {}
            failed = {e.turn.id for e in self._failed.values() if e.bank == bank}
            again = []
            for entry in held:
                if (latest[entry.turn.id] is not entry or entry.turn.id in od or entry.turn.id in failed
                        or (bank, entry.turn.id) in newer):
                    entry.state = "replaced"
                    self._journal.append(("del", entry, False))
                else:
                    again.append(entry)
            for entry in sorted(again, key=lambda e: e.seq, reverse=True):
                self._enqueue(entry, front=True)
            self._done -= len(again)
            if again:
                log.warning("ingestion queue: the worker stopped before flushing bank %r; storing %d "
                            "turn(s) again", bank, len(again))

    def _problem(self, message: str) -> None:
        log.warning("%s", message)
        if len(self._problems) < MAX_PROBLEMS:
            self._problems.append(message)

    def _live_entries(self) -> list[_Entry]:
        entries = [e for od in self._pending.values() for e in od.values()]
        entries += list(self._inflight.values())
        entries += list(self._failed.values())
        entries += [e for _, held in self._held.values() for e in held]
        entries.sort(key=lambda e: e.seq)
        return entries

    def _merge(self, records: list[Any]) -> None:
        """Bring replayed turns into memory, before the turns put since start."""
        with self._lock:
            busy = {(e.bank, e.turn.id) for e in self._inflight.values()}
            busy |= {(e.bank, e.turn.id) for e in self._failed.values()}
            busy |= {(b, tid) for b, od in self._pending.items() for tid in od}
            base = -len(records) - 1
            replayed_pending: dict[str, list[_Entry]] = {}
            replayed_failed: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
            for i, rec in enumerate(records):
                key = (rec.bank, rec.turn.id)
                if key in busy or key in self._done_keys:
                    continue                                  # a newer version is here already
                entry = _Entry(rec.uid, rec.bank, rec.turn, base + i, time.monotonic())
                # the same id twice (regenerated before a crash): the later one wins
                replayed_failed.pop(key, None)
                lst = replayed_pending.setdefault(rec.bank, [])
                lst[:] = [e for e in lst if e.turn.id != rec.turn.id]
                if rec.failed is not None:
                    entry.error, entry.attempts = rec.failed
                    entry.state = "failed"
                    replayed_failed[key] = entry
                else:
                    lst.append(entry)
            failed = OrderedDict((e.uid, e) for e in replayed_failed.values())
            failed.update(self._failed)
            self._failed = failed
            for bank, entries in replayed_pending.items():
                for entry in reversed(entries):
                    self._enqueue(entry, front=True)
            self._replayed += len(replayed_failed) + sum(len(v) for v in replayed_pending.values())
            self._kick()
