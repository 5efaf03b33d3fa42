"""The ingestion queue's scheduler: the ingest thread.

The **ingest thread** takes batches: up to `batch_size` turns of ONE bank, waiting at most
`batch_delay_ms` (counted from the oldest waiting turn) to fill one, and calls
`sink(bank, turns)` — a blocking call into the worker. Banks are served round-robin and a
bank waiting for a retry is parked, so other banks keep flowing. A failed batch is retried
after `retry_backoff_ms · 2^(attempt-1) · (1 + JITTER·random())`, or after the error's
`retry_after` when that is longer, up to `retry_attempts` attempts in all; then its turns are
kept as *failed* (spooled, listed by `failed()`, requeued by `retry_failed()`), never
vanished. An `IngestError(retryable=False)` fails a single turn at once; in a batch of
several it first splits the batch so one bad turn does not fail its neighbours.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from memoryplus.plugin.queue_state import BatchDone, IngestError, _Entry

log = logging.getLogger(__name__)

JITTER = 0.25                   # retry delays are stretched by up to 25 %
MAX_RETRY_DELAY_S = 3600.0      # no retry waits longer, whatever Retry-After says


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


class Scheduler:
    """The ingest thread of an IngestQueue `q` (see the module docstring); all it touches is
    the queue's bookkeeping, under the queue's lock."""

    def __init__(self, q: Any):
        self.q = q

    def run(self) -> None:
        q = self.q
        with q._lock:
            while not q._replay_done and not q._stopping:
                q._work.wait()
        while True:
            try:
                job = self._next_batch()
                if job is None:
                    return
                self._run_batch(*job)
            except Exception:  # never let the thread die: turns would wait forever
                log.exception("ingestion queue: unexpected error in the ingest thread")
                q._wake.wait(0.5)

    def _next_batch(self) -> tuple[str, list[_Entry]] | None:
        q = self.q
        with q._lock:
            while True:
                if q._stopping:
                    return None
                q._wake.clear()
                if q._paused is not None:
                    q._work.wait()
                    continue
                bank, real_wait, clock_wait = self._choose()
                if bank is not None:
                    return bank, self._take(bank)
                if real_wait is not None and (clock_wait is None or real_wait <= clock_wait):
                    q._work.wait(real_wait)
                elif clock_wait is not None:
                    q._lock.release()
                    try:
                        q._sleep(clock_wait)
                    finally:
                        q._lock.acquire()
                else:
                    q._work.wait()

    def _choose(self) -> tuple[str | None, float | None, float | None]:
        """The next bank with a ready batch (round-robin), else how long to wait: in real time
        (a batch filling) and in clock time (a parked bank)."""
        q = self.q
        now_real = time.monotonic()
        now = q._clock()
        real_wait = clock_wait = None
        for bank in list(q._rr):
            od = q._pending.get(bank)
            if not od:
                continue
            park = q._parked.get(bank)
            if park is not None:
                if now < park:
                    clock_wait = park - now if clock_wait is None else min(clock_wait, park - now)
                    continue
                del q._parked[bank]
            head = next(iter(od.values()))
            due = head.t_enq + q.batch_delay_s
            if (len(od) >= q.batch_size or q._flushing or head.solo or head.attempts
                    or now_real >= due):
                return bank, None, None
            real_wait = due - now_real if real_wait is None else min(real_wait, due - now_real)
        return None, real_wait, clock_wait

    def _take(self, bank: str) -> list[_Entry]:
        q = self.q
        od = q._pending[bank]
        batch: list[_Entry] = []
        for entry in od.values():
            if entry.solo and batch:
                break
            batch.append(entry)
            if entry.solo or len(batch) >= q.batch_size:
                break
        for entry in batch:
            del od[entry.turn.id]
            entry.state = "in_flight"
            q._inflight[entry.uid] = entry
        q._npending -= len(batch)
        # round-robin: this bank goes to the back of the line
        if bank in q._rr:
            q._rr.remove(bank)
        q._rr.append(bank)
        q._tidy_bank(bank)
        q._room.notify_all()
        return batch

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        q = self.q
        delay = q.retry_backoff_s * (2 ** max(0, attempts - 1)) * (1.0 + JITTER * q._rand())
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_RETRY_DELAY_S)

    def _run_batch(self, bank: str, batch: list[_Entry]) -> None:
        q = self.q
        turns = [e.turn for e in batch]
        report: Any = None
        error: BaseException | None = None
        try:
            report = q._sink(bank, turns)
        except BaseException as exc:  # noqa: BLE001 - every failure is retried or kept as failed
            error = exc
        forget: list[str] = []
        with q._lock:
            for entry in batch:
                q._inflight.pop(entry.uid, None)
            if error is None:
                skipped = _ids(report, "skipped")
                flushed = bool(_field(report, "flushed", True))
                instance = str(_field(report, "instance", "") or "")
                if instance:
                    q._requeue_lost(instance, {(bank, e.turn.id) for e in batch})
                written = set() if flushed else _ids(report, "stored", "replaced")
                held: list[_Entry] = []
                for entry in batch:
                    entry.state = "done"
                    if entry.turn.id in written and not entry.forget:
                        held.append(entry)             # stays spooled until the worker flushes
                    else:
                        q._journal.append(("del", entry, entry.forget))
                    if not q._spool_ready:          # only needed for a late replay
                        q._done_keys.add((bank, entry.turn.id))
                    if entry.forget:
                        forget.append(entry.turn.id)
                if flushed or _field(report, "flushed_before", False):
                    q._drop_held(bank, None)        # flushed with this batch, or before it
                if not flushed and held:
                    _, before = q._held.get(bank, ("", []))
                    q._held[bank] = (instance, before + held)
                nskip = sum(1 for entry in batch if entry.turn.id in skipped)
                q._skipped += nskip
                q._done += len(batch) - nskip
                q._parked.pop(bank, None)
            else:
                self._handle_failure(bank, batch, error)
            q._kick()
            q._room.notify_all()
        if error is None and q._on_done is not None:
            try:
                q._on_done(BatchDone(bank, turns, report, forget))
            except Exception:
                log.exception("ingestion queue: on_done callback failed")

    def _handle_failure(self, bank: str, batch: list[_Entry], error: BaseException) -> None:
        q = self.q
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
                q._journal.append(("del", entry, True))
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
            if not retryable or entry.attempts >= q.retry_attempts:
                entry.state = "failed"
                q._failed[entry.uid] = entry
                q._journal.append(("fail", entry, False))
            else:
                requeue.append(entry)
        od = q._pending.get(bank)
        for entry in reversed(requeue):
            if od is not None and entry.turn.id in od:      # regenerated while in flight
                entry.state = "replaced"
                q._journal.append(("del", entry, False))
                continue
            q._enqueue(entry, front=True)
            od = q._pending.get(bank)
        if requeue and not split and not paused:
            attempts = max(e.attempts for e in requeue)
            q._parked[bank] = q._clock() + self._backoff(attempts, retry_after)
