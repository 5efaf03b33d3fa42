"""Long operations on a bank — export, import, clear, re-embed — off the GUI thread, with
progress and a Cancel that means something definite for each:

- Export: the worker stops reading the bank (a read is cancelled in the worker) or the file
  writer stops; no file is written (the partial file is removed; an existing file is untouched).
- Import: stops between batches. The batch being written when you cancel is still merged (a
  write is never cut half-way); batches already sent stay imported. Records merge by id, so
  importing the same file again completes it.
- Clear and Re-embed: one request the worker runs to the end (a half-cleared or half
  re-embedded bank would be broken). Cancel only stops waiting for it and ignores the answer.

Each operation reports through `on_progress(done, total, text)` (total 0: no measurable
progress) and ends with exactly one `on_done(ok, message)`, always on the GUI thread.
"""
from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Callable

from memoryplus.ui.common import LONG_TIMEOUT_S, GuiPost, outcome, printable
from memoryplus.wire.protocol import BankParams, ImportParams

TYPE_ORDER = {"bank": 0, "episode": 1, "entity": 2, "fact": 3, "mention": 4}
IMPORT_BATCH = 500


class Cancelled(Exception):
    pass


class LongOp:
    title = "operation"
    cancel_note = ""

    def __init__(self, post: GuiPost, service, bank: str):
        self.post, self.service, self.bank = post, service, bank
        self.on_progress: Callable[[int, int, str], None] = lambda d, t, s: None
        self.on_done: Callable[[bool, str], None] = lambda ok, msg: None
        self.cancelled = False
        self.finished = False
        self.phase = "starting"
        self._stop = threading.Event()

    def start(self) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        if self.finished:
            return
        self.cancelled = True
        self._stop.set()
        self._cancelled()

    def _cancelled(self) -> None:
        self._finish(False, f"{self.title} cancelled.")

    def _progress(self, done: int, total: int, text: str) -> None:
        if not self.finished:
            self.on_progress(done, total, text)

    def _finish(self, ok: bool, message: str) -> None:
        if self.finished:
            return
        self.finished = True
        self.phase = "done"
        self.on_done(ok, message)


class ExportOp(LongOp):
    title = "Export"
    cancel_note = "Cancel stops the export; no file is written."

    def __init__(self, post, service, bank: str, path: str | os.PathLike):
        super().__init__(post, service, bank)
        self.path = Path(path)
        self.future = None
        self.records = 0

    def start(self) -> None:
        self.phase = "reading"
        self._progress(0, 0, f"Reading bank {printable(self.bank)} from the worker…")
        self.future = self.service.export(BankParams(bank=self.bank), timeout=LONG_TIMEOUT_S)
        self.post.run(self.future, self._got, self._failed)

    def _failed(self, err: str) -> None:
        if not self.cancelled:
            self._finish(False, f"Export failed: {err}")

    def _got(self, rows: list) -> None:
        if self.cancelled:
            return
        self.phase = "writing"
        self.post.in_thread(lambda: self._write(rows), self._written, name="memoryplus-export")

    def _write(self, rows: list) -> int:
        """On a helper thread: JSON lines into a .part file, renamed when complete."""
        tmp = self.path.with_name(self.path.name + ".part")
        n = len(rows)
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                for i, rec in enumerate(rows, 1):
                    if self._stop.is_set():
                        raise Cancelled()
                    fh.write(json.dumps(rec.model_dump(mode="json"), ensure_ascii=False) + "\n")
                    if i % 200 == 0 or i == n:
                        self.post.post(lambda i=i: self._progress(i, n, f"Writing {self.path.name}…"))
            if self._stop.is_set():
                raise Cancelled()
            os.replace(tmp, self.path)
            return n
        finally:
            if tmp.exists():
                tmp.unlink(missing_ok=True)

    def _written(self, fut) -> None:
        if self.cancelled:
            return
        n, err = outcome(fut)
        if err:
            self._finish(False, f"Export failed: {err}")
            return
        self.records = n
        self._finish(True, f"Exported {n:,} records of bank {printable(self.bank)} to {self.path}.")

    def _cancelled(self) -> None:
        if self.future is not None:
            self.future.cancel()         # a read: the worker stops it
        self._finish(False, "Export cancelled: no file was written.")


class ImportOp(LongOp):
    title = "Import"
    cancel_note = ("Cancel stops between batches: the batch being written is still merged, "
                   "and importing the file again completes it (records merge by id).")

    def __init__(self, post, service, bank: str, path: str | os.PathLike, batch: int = IMPORT_BATCH):
        super().__init__(post, service, bank)
        self.path = Path(path)
        self.batch = max(1, batch)
        self.records: list[tuple[int, dict]] = []
        self.bad: list[str] = []
        self.sent = 0          # records in batches sent
        self.imported = 0      # records in batches the worker confirmed
        self.counts = {"episodes": 0, "entities": 0, "facts": 0, "mentions": 0}
        self.problems: list[str] = []
        self._batches: list[list[tuple[int, dict]]] = []
        self._next = 0

    def start(self) -> None:
        self.phase = "reading"
        self._progress(0, 0, f"Reading {self.path.name}…")
        self.post.in_thread(self._read, self._parsed, name="memoryplus-import")

    def _read(self) -> tuple[list[tuple[int, dict]], list[str]]:
        """On a helper thread: JSON lines, each a record; bad lines reported by number."""
        records, bad = [], []
        size = max(1, self.path.stat().st_size)
        done = 0
        with open(self.path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if self._stop.is_set():
                    raise Cancelled()
                done += len(line.encode("utf-8"))
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict):
                        raise ValueError("not a JSON object")
                    records.append((lineno, rec))
                except ValueError as exc:
                    bad.append(f"line {lineno}: {exc}"[:200])
                if lineno % 500 == 0:
                    self.post.post(lambda d=done: self._progress(d, size, f"Reading {self.path.name}…"))
        # dependencies first: a fact needs its entities, a mention its episode and entity
        records.sort(key=lambda p: TYPE_ORDER.get(str(p[1].get("type")), 9))
        return records, bad

    def _parsed(self, fut) -> None:
        if self.cancelled:
            return
        got, err = outcome(fut)
        if err:
            self._finish(False, f"Import failed: cannot read {self.path.name}: {err}")
            return
        self.records, self.bad = got
        if not self.records:
            self._finish(False, f"Import: no record in {self.path.name}" +
                         (f" ({len(self.bad)} bad lines)" if self.bad else "") + ".")
            return
        self._batches = [self.records[i:i + self.batch] for i in range(0, len(self.records), self.batch)]
        self.phase = "importing"
        self._send()

    def _send(self) -> None:
        if self.cancelled:
            return
        if self._next >= len(self._batches):
            self._complete()
            return
        chunk = self._batches[self._next]
        self._next += 1
        self.sent += len(chunk)
        self._progress(self.imported, len(self.records),
                       f"Importing into {printable(self.bank)}: batch {self._next} of {len(self._batches)}…")
        fut = self.service.import_records(ImportParams(bank=self.bank, records=[r for _, r in chunk]),
                                          timeout=LONG_TIMEOUT_S)
        self.post.run(fut, lambda report, c=chunk: self._sent(report, c), self._failed)

    def _failed(self, err: str) -> None:
        if not self.cancelled:
            self._finish(False, f"Import failed after {self.imported:,} of {len(self.records):,} "
                         f"records: {err}")

    def _sent(self, report, chunk) -> None:
        self.imported += len(chunk)
        for k in self.counts:
            self.counts[k] += int(getattr(report, k))
        for p in report.problems:      # "line i" of the batch: the file's line
            m = re.match(r"line (\d+):(.*)", p)
            if m and 0 < int(m.group(1)) <= len(chunk):
                p = f"line {chunk[int(m.group(1)) - 1][0]}:{m.group(2)}"
            self.problems.append(p)
        if self.cancelled:
            return
        self._progress(self.imported, len(self.records), f"Imported {self.imported:,} of {len(self.records):,} records…")
        self._send()

    def _complete(self) -> None:
        c = self.counts
        msg = (f"Imported into {printable(self.bank)}: {c['episodes']:,} turns, {c['entities']:,} entities, "
               f"{c['facts']:,} facts.")
        problems = self.bad + self.problems
        if problems:
            msg += f" {len(problems)} records skipped: " + "; ".join(problems[:3]) + (" …" if len(problems) > 3 else "")
        self._finish(not problems, msg)

    def _cancelled(self) -> None:
        if self.phase == "reading":
            self._finish(False, "Import cancelled before anything was imported.")
            return
        in_flight = self.sent - self.imported
        self._finish(False, f"Import cancelled: {self.imported:,} of {len(self.records):,} records were imported"
                     + (f" and the batch being written ({in_flight:,} records) is still merged" if in_flight else "")
                     + ". Import the file again to complete it: records merge by id.")


class _OneRequest(LongOp):
    verb = ""

    def request(self):
        """The service's Future for this operation."""
        raise NotImplementedError

    def start(self) -> None:
        self.phase = "running"
        self._progress(0, 0, f"{self.verb} {printable(self.bank)}…")
        self.future = self.request()
        self.post.run(self.future, self._got, self._failed)

    def _failed(self, err: str) -> None:
        if not self.cancelled:
            self._finish(False, f"{self.title} failed: {err}")

    def _got(self, result) -> None:
        if not self.cancelled:
            self._finish(True, self.success(result))

    def success(self, result) -> str:
        return f"{self.title} done."

    def _cancelled(self) -> None:
        self.future.cancel()             # stop waiting; the worker runs a write to the end
        self._finish(False, f"Stopped waiting. {self.cancel_note}")


class ClearOp(_OneRequest):
    title = "Clear bank"
    verb = "Clearing"
    cancel_note = ("Clearing cannot be interrupted part-way: the worker finishes clearing the bank; "
                   "Cancel only stops waiting for it.")

    def request(self):
        return self.service.clear(BankParams(bank=self.bank), timeout=LONG_TIMEOUT_S)

    def success(self, result) -> str:
        return f"Bank {printable(self.bank)} cleared: every memory in it is gone."


class ReembedOp(_OneRequest):
    title = "Re-embed"
    verb = "Re-embedding"
    cancel_note = ("Re-embedding runs to the end in the worker (a half re-embedded bank could not be "
                   "searched); Cancel only stops waiting, and the bank stays busy until it finishes.")

    def request(self):
        return self.service.reembed(BankParams(bank=self.bank), timeout=LONG_TIMEOUT_S)

    def success(self, result) -> str:
        return f"Re-embedded {int(result or 0):,} vectors of bank {printable(self.bank)} with the current embedder."
