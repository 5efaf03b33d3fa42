"""The ingestion queue's spool: its file and the thread that writes it.

The **spool writer** appends every handed-over turn to a JSON-lines spool file in
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
A turn the worker answers `flushed=False` (a persistent worker flushes Kuzu's log with a
later batch or when idle) is *held*: counted as done but kept in the spool until an answer
for its bank from the same worker engine (`IngestReport.instance`) says it is flushed
(`flushed`, or `flushed_before`: the bank had nothing unflushed when that batch began).
An answer from another engine means the one that held it died before its flush: held
turns are queued again. So a log Kuzu cannot replay loses nothing, even when PyGPT dies
with the worker.
"""
from __future__ import annotations

import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryplus.config.paths import fsync_dir
from memoryplus.plugin.queue_state import _Entry
from memoryplus.wire.records import Turn

try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None
try:
    import msvcrt as _msvcrt
except ImportError:
    _msvcrt = None

log = logging.getLogger(__name__)

SPOOL_RETRY_S = 1.0             # pause after a failed spool write before trying again
EXIT_RETRY_S = 0.2              # the same while stopping, until stop()'s timeout
MAX_SLOTS = 64
SPOOL_VERSION = 1

_SLOT_RE = re.compile(r"ingest-(\d+)\.jsonl")


def _add_line(entry: Any) -> str:
    """A queue entry's "add" record, serialised once (off the GUI thread)."""
    if entry.line is None:
        entry.line = json.dumps({"v": SPOOL_VERSION, "op": "add", "uid": entry.uid, "bank": entry.bank,
                                 "turn": entry.turn.model_dump(mode="json")},
                                ensure_ascii=True, separators=(",", ":"))
    return entry.line


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


# ── the writer thread ─────────────────────────────────────────────────────────────────

class SpoolWriter:
    """The spool writer thread of an IngestQueue `q` (see the module docstring): it drains the
    queue's journal into the spool file, compacts it, and replays it on start. Its own state
    (the file, the slot lock, what the file holds) is touched by this thread only; the queue's
    bookkeeping under the queue's lock."""

    def __init__(self, q: Any, spool_dir: Path):
        self.q = q
        self._dir = spool_dir
        self._spool: _SpoolFile | None = None
        self._slot_fd: int | None = None
        self._file_live: set[str] = set()
        self._file_lines = 0
        self._compact_wanted = False
        self._write_retry_at = 0.0

    def run(self) -> None:
        q = self.q
        try:
            self._open_spool()
        except Exception as exc:
            with q._lock:
                q._spool_error = f"spool unavailable: {exc}"
                q._problem(f"ingestion spool in {self._dir} unavailable ({exc}); turns are kept "
                           f"in memory only until it works again")
        finally:
            with q._lock:
                q._replay_done = True
                q._kick()
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
        q = self.q
        while True:
            with q._lock:
                while True:
                    now = time.monotonic()
                    if now < self._write_retry_at:      # the disk failed: not before the pause
                        q._wcv.wait(self._write_retry_at - now)
                        continue
                    if q._writer_exit or q._journal or self._compact_wanted or q._drops_unlogged:
                        break
                    q._wcv.wait()
                drops, q._drops_unlogged = q._drops_unlogged, 0
                last_drop = q._dropped[-1] if drops and q._dropped else None
                if not q._journal and q._writer_exit:
                    return
                ops, q._journal = q._journal, []
                q._writer_busy = True
            if last_drop is not None:
                log.warning("ingestion queue dropped %d turn(s); the last of bank %r: %s",
                            drops, last_drop.bank, last_drop.reason)
            ok = False
            try:
                if not q._spool_ready:
                    self._open_spool()
                ok = self._write_ops(ops)
                if ok:
                    self._maybe_compact()
            except Exception as exc:
                ok = False
                with q._lock:
                    q._journal[:0] = ops
                    message = f"spool write failed: {exc}"
                    if message != q._spool_error:
                        q._problem(f"ingestion spool write failed ({exc}); the turns stay in "
                                   f"memory and the write is retried")
                    q._spool_error = message
            finally:
                with q._lock:
                    q._writer_busy = False
                    q._kick()
                    if not ok:
                        if q._writer_exit:
                            # Stopping (PyGPT quits) with turns the disk refused: keep trying
                            # until stop()'s deadline, not once: they exist nowhere else.
                            if time.monotonic() + EXIT_RETRY_S < q._writer_deadline:
                                self._write_retry_at = time.monotonic() + EXIT_RETRY_S
                                continue
                            q._problem(f"ingestion spool still failing when the queue stopped: "
                                       f"{q._unspooled} turn(s) could not be saved and are lost")
                            return
                        self._write_retry_at = time.monotonic() + SPOOL_RETRY_S

    def _write_ops(self, ops: list[tuple[str, _Entry, bool]]) -> bool:
        """Append ops to the spool. Lines are serialised here, off the GUI thread."""
        q = self.q
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
                lines.append(_add_line(entry))
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
        with q._lock:
            q._unspooled -= n_adds
            if q._spool_error and q._spool_error.startswith("spool write failed"):
                q._spool_error = None
        return True

    def _maybe_compact(self) -> None:
        q = self.q
        if not self._file_live and self._file_lines:
            with q._lock:
                if q._journal:          # more to write first; compact on the next round
                    return
            self._spool.truncate()
            self._file_lines = 0
            self._compact_wanted = False
        elif self._compact_wanted or self._file_lines > 2 * len(self._file_live) + 64:
            self._rewrite()

    def _final_compaction(self) -> None:
        q = self.q
        if self._spool is None or not q._spool_ready:
            return
        if not self._file_live and self._file_lines:
            self._spool.truncate()
            self._file_lines = 0
        elif self._compact_wanted:
            self._rewrite()

    def _rewrite(self) -> None:
        """Rewrite the spool with exactly the live turns (drains the journal)."""
        q = self.q
        with q._lock:
            entries = q._live_entries()
            ops, q._journal = q._journal, []
            n_adds = sum(1 for op, _, _ in ops if op == "add")
        try:
            lines = []
            for entry in entries:
                lines.append(_add_line(entry))
                if entry.state == "failed":
                    lines.append(json.dumps({"v": SPOOL_VERSION, "op": "fail", "uid": entry.uid,
                                             "error": entry.error, "attempts": entry.attempts},
                                            ensure_ascii=True))
            self._spool.rewrite(lines)
        except BaseException:
            with q._lock:
                q._journal[:0] = ops
            raise
        self._file_live = {e.uid for e in entries}
        self._file_lines = len(lines)
        self._compact_wanted = False
        with q._lock:
            q._unspooled -= n_adds

    # ── spool opening and replay ───────────────────────────────────────────────────────
    def _open_spool(self) -> None:
        q = self.q
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
        q._merge(list(records.values()))
        self._rewrite()                        # our file = every live turn, journal drained
        for path, fd in adopted:
            try:
                path.unlink()
            except OSError:
                pass
            _unlock(fd)
        with q._lock:
            q._spool_ready = True
            if q._spool_error and q._spool_error.startswith("spool unavailable"):
                q._spool_error = None

    def _read_spool(self, path: Path, records: dict[str, _Record]) -> None:
        q = self.q
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
                with q._lock:
                    q._corrupt += 1
                    q._problem(f"ingestion spool {path.name} line {number} is corrupt "
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
