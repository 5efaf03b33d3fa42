"""The ingestion queue between PyGPT's GUI thread and the graph worker.

`put(bank, turn)` only appends to in-memory structures under a lock (microseconds: no disk
I/O, no waiting — except overflow policy `block`, which waits at most `GUI_BLOCK_BUDGET_S`
(20 ms) for room and then drops the new turn, counted as dropped and as a block timeout).

Two daemon threads do the rest:

* the **spool writer** appends every handed-over turn to a JSON-lines spool file in
  `spool_dir` (mode 0600, directory 0700) and fsyncs it. It wakes on every put and writes at
  once, so a turn is durable within **`SPOOL_WINDOW_S` = 200 ms** of `put()` returning (a few
  milliseconds on a healthy disk; only a disk that stalls its own fsync can stretch it, and a
  failing one is reported in `counts()["spool_error"]` while the turns stay in memory and are
  still ingested). Completions, removals, drops and failures are appended as small records; the
  file is compacted (rewritten through a temporary file and an atomic rename) when it holds no
  live turn (truncated), when dead records outnumber live ones, and right after a turn is
  removed by `/forget_that` (the forgotten text leaves the disk). On start, turns spooled but
  not completed are replayed — from our own spool and from the spool of any crashed instance —
  so quitting PyGPT or a crash loses nothing spooled. A corrupt spool line (e.g. a line cut
  short by a crash) is skipped, copied to `ingest-N.corrupt.jsonl` and reported in `problems`;
  the other lines are kept. Each running queue holds an exclusive lock on its spool slot
  (`ingest-N.lock`), so two PyGPT instances on one data directory never share a spool file.
  A turn completed whose completion record was not yet written when the process died is
  replayed and ingested again: the worker's deterministic episode ids make that a no-op.
  A turn the worker answers `flushed=False` (with a backlog it may flush Kuzu's log once for
  several batches) is *held*: counted as done but kept in the spool until a flushed answer for
  its bank from the same worker engine (`IngestReport.instance`). An answer from another
  engine means the one that held it died before its flush: held turns are queued again. So a
  log Kuzu cannot replay loses nothing, even when PyGPT dies with the worker.

* the **ingest thread** takes batches: up to `batch_size` turns of ONE bank, waiting at most
  `batch_delay_ms` (counted from the oldest waiting turn) to fill one, and calls
  `sink(bank, turns)` — a blocking call into the worker. Banks are served round-robin and a
  bank waiting for a retry is parked, so other banks keep flowing. A failed batch is retried
  after `retry_backoff_ms · 2^(attempt-1) · (1 + JITTER·random())`, or after the error's
  `retry_after` when that is longer, up to `retry_attempts` attempts in all; then its turns are
  kept as *failed* (spooled, listed by `failed()`, requeued by `retry_failed()`), never
  vanished. An `IngestError(retryable=False)` fails a single turn at once; in a batch of
  several it first splits the batch so one bad turn does not fail its neighbours.

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

import json
import logging
import os
import random as _random
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from memoryplus.config.paths import fsync_dir
from memoryplus.wire.records import IngestReport, Turn

try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None
try:
    import msvcrt as _msvcrt
except ImportError:
    _msvcrt = None

log = logging.getLogger(__name__)

GUI_BLOCK_BUDGET_S = 0.020      # the longest put() waits under policy `block`
SPOOL_WINDOW_S = 0.200          # a handed-over turn is on disk (fsynced) within this time
JITTER = 0.25                   # retry delays are stretched by up to 25 %
MAX_RETRY_DELAY_S = 3600.0      # no retry waits longer, whatever Retry-After says
SPOOL_RETRY_S = 1.0             # pause after a failed spool write before trying again
EXIT_RETRY_S = 0.2              # the same while stopping, until stop()'s timeout
DROPPED_KEPT = 1000             # dropped turns listed (all are counted)
MAX_PROBLEMS = 200
MAX_SLOTS = 64
SPOOL_VERSION = 1

QUEUED, DROPPED, REPLACED = "queued", "dropped", "replaced"
REMOVED, IN_FLIGHT, ABSENT = "removed", "in_flight", "absent"

_SLOT_RE = re.compile(r"ingest-(\d+)\.jsonl")


def _field(report: Any, name: str, default: Any = None) -> Any:
    """One field of a sink's report (an IngestReport, or its dict form)."""
    return report.get(name, default) if isinstance(report, dict) else getattr(report, name, default)


def _ids(report: Any, *names: str) -> set[str]:
    """The turn ids listed under the report's fields `names` (lists, or dicts keyed by id)."""
    out: set[str] = set()
    for name in names:
        try:
            out |= {str(k) for k in (_field(report, name) or ())}
        except TypeError:
            pass
    return out


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
        self.line: str | None = None     # the spool's "add" record, serialised once
        self.forget = False
        self.solo = False

    def add_line(self) -> str:
        if self.line is None:
            self.line = json.dumps({"v": SPOOL_VERSION, "op": "add", "uid": self.uid, "bank": self.bank,
                                    "turn": self.turn.model_dump(mode="json")},
                                   ensure_ascii=True, separators=(",", ":"))
        return self.line


# ── the spool file ─────────────────────────────────────────────────────────────────────

def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if _fcntl is not None:
            _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        elif _msvcrt is not None:  # pragma: no cover
            _msvcrt.locking(fd, _msvcrt.LK_NBLCK, 1)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fd: int | None) -> None:
    if fd is None:
        return
    try:
        if _fcntl is not None:
            _fcntl.flock(fd, _fcntl.LOCK_UN)
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class _SpoolFile:
    """One slot's spool file. Used by the writer thread only."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)
        self.fd = fd

    def append(self, lines: list[str]) -> None:
        if self.fd is None:
            self.open()
        _write_all(self.fd, ("\n".join(lines) + "\n").encode("utf-8"))
        os.fsync(self.fd)

    def truncate(self) -> None:
        if self.fd is None:
            self.open()
        os.ftruncate(self.fd, 0)
        os.fsync(self.fd)

    def rewrite(self, lines: list[str]) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if hasattr(os, "fchmod"):
                os.fchmod(fd, 0o600)
            if lines:
                _write_all(fd, ("\n".join(lines) + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        self.close()                 # Windows cannot replace an open file
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self.open()

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


@dataclass
class _Record:
    uid: str
    bank: str
    turn: Turn
    failed: tuple[str, int] | None = None


# ── the queue ─────────────────────────────────────────────────────────────────────────

class IngestQueue:
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
        self._ingest_thread: threading.Thread | None = None
        self._writer_thread: threading.Thread | None = None

        # writer-thread state (touched by the writer thread only)
        self._spool: _SpoolFile | None = None
        self._slot_fd: int | None = None
        self._file_live: set[str] = set()
        self._file_lines = 0
        self._compact_wanted = False
        self._write_retry_at = 0.0

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
        self._writer_thread = threading.Thread(target=self._writer_main, name="memoryplus-spool",
                                               daemon=True)
        self._ingest_thread = threading.Thread(target=self._ingest_main, name="memoryplus-ingest",
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
            self._write_retry_at = 0.0          # a last write at once, whatever the pause
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
        spool = self._spool
        return spool.path if spool is not None else None

    # ── internals: bookkeeping (lock held) ─────────────────────────────────────────────
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

    # ── internals: the ingest thread ───────────────────────────────────────────────────
    def _interruptible_sleep(self, seconds: float) -> None:
        self._wake.wait(max(0.0, seconds))

    def _ingest_main(self) -> None:
        with self._lock:
            while not self._replay_done and not self._stopping:
                self._work.wait()
        while True:
            try:
                job = self._next_batch()
                if job is None:
                    return
                self._run_batch(*job)
            except Exception:  # never let the thread die: turns would wait forever
                log.exception("ingestion queue: unexpected error in the ingest thread")
                self._wake.wait(0.5)

    def _next_batch(self) -> tuple[str, list[_Entry]] | None:
        with self._lock:
            while True:
                if self._stopping:
                    return None
                self._wake.clear()
                if self._paused is not None:
                    self._work.wait()
                    continue
                bank, real_wait, clock_wait = self._choose()
                if bank is not None:
                    return bank, self._take(bank)
                if real_wait is not None and (clock_wait is None or real_wait <= clock_wait):
                    self._work.wait(real_wait)
                elif clock_wait is not None:
                    self._lock.release()
                    try:
                        self._sleep(clock_wait)
                    finally:
                        self._lock.acquire()
                else:
                    self._work.wait()

    def _choose(self) -> tuple[str | None, float | None, float | None]:
        """The next bank with a ready batch (round-robin), else how long to wait: in real time
        (a batch filling) and in clock time (a parked bank)."""
        now_real = time.monotonic()
        now = self._clock()
        real_wait = clock_wait = None
        for bank in list(self._rr):
            od = self._pending.get(bank)
            if not od:
                continue
            park = self._parked.get(bank)
            if park is not None:
                if now < park:
                    clock_wait = park - now if clock_wait is None else min(clock_wait, park - now)
                    continue
                del self._parked[bank]
            head = next(iter(od.values()))
            due = head.t_enq + self.batch_delay_s
            if (len(od) >= self.batch_size or self._flushing or head.solo or head.attempts
                    or now_real >= due):
                return bank, None, None
            real_wait = due - now_real if real_wait is None else min(real_wait, due - now_real)
        return None, real_wait, clock_wait

    def _take(self, bank: str) -> list[_Entry]:
        od = self._pending[bank]
        batch: list[_Entry] = []
        for entry in od.values():
            if entry.solo and batch:
                break
            batch.append(entry)
            if entry.solo or len(batch) >= self.batch_size:
                break
        for entry in batch:
            del od[entry.turn.id]
            entry.state = "in_flight"
            self._inflight[entry.uid] = entry
        self._npending -= len(batch)
        # round-robin: this bank goes to the back of the line
        if bank in self._rr:
            self._rr.remove(bank)
        self._rr.append(bank)
        self._tidy_bank(bank)
        self._room.notify_all()
        return batch

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        delay = self.retry_backoff_s * (2 ** max(0, attempts - 1)) * (1.0 + JITTER * self._rand())
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_RETRY_DELAY_S)

    def _run_batch(self, bank: str, batch: list[_Entry]) -> None:
        turns = [e.turn for e in batch]
        report: Any = None
        error: BaseException | None = None
        try:
            report = self._sink(bank, turns)
        except BaseException as exc:  # noqa: BLE001 - every failure is retried or kept as failed
            error = exc
        forget: list[str] = []
        with self._lock:
            for entry in batch:
                self._inflight.pop(entry.uid, None)
            if error is None:
                skipped = _ids(report, "skipped")
                flushed = bool(_field(report, "flushed", True))
                instance = str(_field(report, "instance", "") or "")
                if instance:
                    self._requeue_lost(instance, {(bank, e.turn.id) for e in batch})
                written = set() if flushed else _ids(report, "stored", "replaced")
                held: list[_Entry] = []
                for entry in batch:
                    entry.state = "done"
                    if entry.turn.id in written and not entry.forget:
                        held.append(entry)             # stays spooled until the worker flushes
                    else:
                        self._journal.append(("del", entry, entry.forget))
                    if not self._spool_ready:          # only needed for a late replay
                        self._done_keys.add((bank, entry.turn.id))
                    if entry.forget:
                        forget.append(entry.turn.id)
                if flushed:
                    self._drop_held(bank, None)        # flushed with this batch
                elif held:
                    _, before = self._held.get(bank, ("", []))
                    self._held[bank] = (instance, before + held)
                nskip = sum(1 for entry in batch if entry.turn.id in skipped)
                self._skipped += nskip
                self._done += len(batch) - nskip
                self._parked.pop(bank, None)
            else:
                self._handle_failure(bank, batch, error)
            self._kick()
            self._room.notify_all()
        if error is None and self._on_done is not None:
            try:
                self._on_done(BatchDone(bank, turns, report, forget))
            except Exception:
                log.exception("ingestion queue: on_done callback failed")

    def _handle_failure(self, bank: str, batch: list[_Entry], error: BaseException) -> None:
        retryable = not (isinstance(error, IngestError) and not error.retryable)
        retry_after = getattr(error, "retry_after", None)
        try:
            retry_after = float(retry_after) if retry_after is not None else None
            if retry_after is not None and not retry_after >= 0:
                retry_after = None
        except (TypeError, ValueError):
            retry_after = None
        message = f"{type(error).__name__}: {error}"[:500]
        log.warning("ingestion of %d turn(s) into bank %r failed: %s", len(batch), bank, message)
        paused = isinstance(error, IngestError) and error.paused
        split = not retryable and len(batch) > 1 and not paused
        requeue: list[_Entry] = []
        for entry in batch:
            if entry.forget:                            # the user forgot it meanwhile
                entry.state = "removed"
                self._journal.append(("del", entry, True))
                continue
            entry.error = message
            if split:
                entry.solo = True                       # try alone: find the one bad turn
                requeue.append(entry)
                continue
            if paused:
                requeue.append(entry)
                continue
            entry.attempts += 1
            if not retryable or entry.attempts >= self.retry_attempts:
                entry.state = "failed"
                self._failed[entry.uid] = entry
                self._journal.append(("fail", entry, False))
            else:
                requeue.append(entry)
        od = self._pending.get(bank)
        for entry in reversed(requeue):
            if od is not None and entry.turn.id in od:      # regenerated while in flight
                entry.state = "replaced"
                self._journal.append(("del", entry, False))
                continue
            self._enqueue(entry, front=True)
            od = self._pending.get(bank)
        if requeue and not split and not paused:
            attempts = max(e.attempts for e in requeue)
            self._parked[bank] = self._clock() + self._backoff(attempts, retry_after)

    # ── internals: the spool writer ────────────────────────────────────────────────────
    def _writer_main(self) -> None:
        try:
            self._open_spool()
        except Exception as exc:
            with self._lock:
                self._spool_error = f"spool unavailable: {exc}"
                self._problem(f"ingestion spool in {self._dir} unavailable ({exc}); turns are kept "
                              f"in memory only until it works again")
        finally:
            with self._lock:
                self._replay_done = True
                self._kick()
        try:
            self._writer_loop()
        finally:
            try:
                self._final_compaction()
            except Exception as exc:
                log.warning("ingestion spool: final compaction failed: %s", exc)
            if self._spool is not None:
                self._spool.close()
            _unlock(self._slot_fd)
            self._slot_fd = None

    def _writer_loop(self) -> None:
        while True:
            with self._lock:
                while True:
                    now = time.monotonic()
                    if now < self._write_retry_at:      # the disk failed: not before the pause
                        self._wcv.wait(self._write_retry_at - now)
                        continue
                    if self._writer_exit or self._journal or self._compact_wanted or self._drops_unlogged:
                        break
                    self._wcv.wait()
                drops, self._drops_unlogged = self._drops_unlogged, 0
                last_drop = self._dropped[-1] if drops and self._dropped else None
                if not self._journal and self._writer_exit:
                    return
                ops, self._journal = self._journal, []
                self._writer_busy = True
            if last_drop is not None:
                log.warning("ingestion queue dropped %d turn(s); the last of bank %r: %s",
                            drops, last_drop.bank, last_drop.reason)
            ok = False
            try:
                if not self._spool_ready:
                    self._open_spool()
                ok = self._write_ops(ops)
                if ok:
                    self._maybe_compact()
            except Exception as exc:
                ok = False
                with self._lock:
                    self._journal[:0] = ops
                    message = f"spool write failed: {exc}"
                    if message != self._spool_error:
                        self._problem(f"ingestion spool write failed ({exc}); the turns stay in "
                                      f"memory and the write is retried")
                    self._spool_error = message
            finally:
                with self._lock:
                    self._writer_busy = False
                    self._kick()
                    if not ok:
                        if self._writer_exit:
                            # Stopping (PyGPT quits) with turns the disk refused: keep trying
                            # until stop()'s deadline, not once: they exist nowhere else.
                            if time.monotonic() + EXIT_RETRY_S < self._writer_deadline:
                                self._write_retry_at = time.monotonic() + EXIT_RETRY_S
                                continue
                            self._problem(f"ingestion spool still failing when the queue stopped: "
                                          f"{self._unspooled} turn(s) could not be saved and are lost")
                            return
                        self._write_retry_at = time.monotonic() + SPOOL_RETRY_S

    def _write_ops(self, ops: list[tuple[str, _Entry, bool]]) -> bool:
        """Append ops to the spool. Lines are serialised here, off the GUI thread."""
        added_now = {e.uid for op, e, _ in ops if op == "add"}
        deleted_now = {e.uid for op, e, _ in ops if op == "del"}
        live = set(self._file_live)
        lines: list[str] = []
        urgent = False
        n_adds = 0
        for op, entry, flag in ops:
            if op == "add":
                n_adds += 1
                if entry.uid in deleted_now:             # added and gone in the same breath
                    continue
                lines.append(entry.add_line())
                live.add(entry.uid)
            elif entry.uid in live:
                if op == "del":
                    lines.append(json.dumps({"v": SPOOL_VERSION, "op": "del", "uid": entry.uid}))
                    live.discard(entry.uid)
                    urgent = urgent or flag
                elif op == "fail":
                    lines.append(json.dumps({"v": SPOOL_VERSION, "op": "fail", "uid": entry.uid,
                                             "error": entry.error, "attempts": entry.attempts},
                                            ensure_ascii=True))
                elif op == "unfail":
                    lines.append(json.dumps({"v": SPOOL_VERSION, "op": "unfail", "uid": entry.uid}))
            elif op in ("fail", "unfail") and entry.uid not in added_now:
                # its add line went in a rewrite; nothing to record
                pass
        if lines:
            self._spool.append(lines)
        self._file_live = live
        self._file_lines += len(lines)
        if urgent:
            self._compact_wanted = True
        with self._lock:
            self._unspooled -= n_adds
            if self._spool_error and self._spool_error.startswith("spool write failed"):
                self._spool_error = None
        return True

    def _maybe_compact(self) -> None:
        if not self._file_live and self._file_lines:
            with self._lock:
                if self._journal:          # more to write first; compact on the next round
                    return
            self._spool.truncate()
            self._file_lines = 0
            self._compact_wanted = False
        elif self._compact_wanted or self._file_lines > 2 * len(self._file_live) + 64:
            self._rewrite()

    def _final_compaction(self) -> None:
        if self._spool is None or not self._spool_ready:
            return
        if not self._file_live and self._file_lines:
            self._spool.truncate()
            self._file_lines = 0
        elif self._compact_wanted:
            self._rewrite()

    def _live_entries(self) -> list[_Entry]:
        entries = [e for od in self._pending.values() for e in od.values()]
        entries += list(self._inflight.values())
        entries += list(self._failed.values())
        entries += [e for _, held in self._held.values() for e in held]
        entries.sort(key=lambda e: e.seq)
        return entries

    def _rewrite(self) -> None:
        """Rewrite the spool with exactly the live turns (drains the journal)."""
        with self._lock:
            entries = self._live_entries()
            ops, self._journal = self._journal, []
            n_adds = sum(1 for op, _, _ in ops if op == "add")
        try:
            lines = []
            for entry in entries:
                lines.append(entry.add_line())
                if entry.state == "failed":
                    lines.append(json.dumps({"v": SPOOL_VERSION, "op": "fail", "uid": entry.uid,
                                             "error": entry.error, "attempts": entry.attempts},
                                            ensure_ascii=True))
            self._spool.rewrite(lines)
        except BaseException:
            with self._lock:
                self._journal[:0] = ops
            raise
        self._file_live = {e.uid for e in entries}
        self._file_lines = len(lines)
        self._compact_wanted = False
        with self._lock:
            self._unspooled -= n_adds

    # ── spool opening and replay (writer thread) ───────────────────────────────────────
    def _open_spool(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self._slot_fd is None:
            for n in range(MAX_SLOTS):
                fd = _try_lock(self._dir / f"ingest-{n}.lock")
                if fd is not None:
                    self._slot_fd = fd
                    self._spool = _SpoolFile(self._dir / f"ingest-{n}.jsonl")
                    break
            else:
                raise OSError(f"all {MAX_SLOTS} spool slots are locked by other processes")
        own = self._spool.path
        adopted: list[tuple[Path, int]] = []
        records: dict[str, _Record] = {}
        if own.exists():
            self._read_spool(own, records)
        for path in sorted(self._dir.iterdir()):
            m = _SLOT_RE.fullmatch(path.name)
            if not m or path == own:
                continue
            fd = _try_lock(self._dir / f"ingest-{m.group(1)}.lock")
            if fd is None:
                continue                       # a live instance owns it
            self._read_spool(path, records)
            adopted.append((path, fd))
        self._merge(list(records.values()))
        self._rewrite()                        # our file = every live turn, journal drained
        for path, fd in adopted:
            try:
                path.unlink()
            except OSError:
                pass
            _unlock(fd)
        with self._lock:
            self._spool_ready = True
            if self._spool_error and self._spool_error.startswith("spool unavailable"):
                self._spool_error = None

    def _read_spool(self, path: Path, records: dict[str, _Record]) -> None:
        with open(path, "rb") as fh:
            data = fh.read()
        corrupt: list[bytes] = []
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
                if not isinstance(rec, dict):
                    raise ValueError("not a JSON object")
                op, uid = rec.get("op"), rec.get("uid")
                if not isinstance(uid, str) or not uid:
                    raise ValueError("no uid")
                if op == "add":
                    bank = rec.get("bank")
                    if not isinstance(bank, str) or not bank:
                        raise ValueError("no bank")
                    turn = Turn.model_validate(rec.get("turn"))
                    records.setdefault(uid, _Record(uid, bank, turn))
                elif op == "del":
                    records.pop(uid, None)
                elif op == "fail":
                    if uid in records:
                        records[uid].failed = (str(rec.get("error", "")), int(rec.get("attempts", 0)))
                elif op == "unfail":
                    if uid in records:
                        records[uid].failed = None
                else:
                    raise ValueError(f"unknown op {op!r}")
            except Exception as exc:
                corrupt.append(raw)
                with self._lock:
                    self._corrupt += 1
                    self._problem(f"ingestion spool {path.name} line {number} is corrupt "
                                  f"({type(exc).__name__}: {str(exc)[:120]}); skipped, the other "
                                  f"lines are kept")
        if corrupt:
            quarantine = path.with_name(path.stem + ".corrupt.jsonl")
            try:
                fd = os.open(quarantine, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    _write_all(fd, b"\n".join(corrupt) + b"\n")
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                log.warning("could not keep corrupt spool lines in %s: %s", quarantine, exc)

    def _merge(self, records: list[_Record]) -> None:
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
