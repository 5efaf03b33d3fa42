"""What the memory browser does to memories: 👍/👎, Forget and Remember, and the long bank
operations (Export, Import, Re-embed, Clear) with their progress bar and Cancel.

A mixin of `ui.browser.MemoryBrowser` (its widgets, bank and service are the browser's).
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from memoryplus.ui.common import WRITE_TIMEOUT_S, elide, plural, printable
from memoryplus.ui.dialogs import ClearBankDialog, ForgetDialog, RememberDialog
from memoryplus.ui.operations import ClearOp, ExportOp, ImportOp, LongOp, ReembedOp
from memoryplus.wire.protocol import ForgetParams, RateParams, RememberParams


class BrowserActions:
    # ── rating ─────────────────────────────────────────────────────────────────────────
    def rate(self, value: int) -> None:
        items = self.tabs.currentWidget().selected_memories()
        if len(items) != 1 or not items[0].rateable or self.service is None or not self.feedback_on():
            return
        m, bank = items[0], self.bank
        fut = self.service.rate(RateParams(bank=bank, id=m.id, value=value), timeout=WRITE_TIMEOUT_S)

        def got(rating):
            self.ratings.set(bank, m.id, int(rating))
            cache = getattr(self.plugin, "cache", None)
            if cache is not None:
                cache.invalidate(bank)
            bounded = " (the most it can move)" if abs(int(rating)) >= 2 else ""
            self.say(f"{'👍' if value > 0 else '👎'} “{m.short(60)}”: rating now {int(rating):+d}{bounded}. "
                     "It ranks accordingly in later recall.")
            self.recall._fill()                      # the rating beside the score
            if self.graph.selected:
                self.graph._info(self.graph.selected)
        self.post.run(fut, got, lambda err: self.say(f"Could not rate it: {err}"))

    # ── forgetting ─────────────────────────────────────────────────────────────────────
    def ask_forget(self) -> None:
        items = self.tabs.currentWidget().selected_memories()
        if not items or self.service is None:
            return
        self.forget_dialog = ForgetDialog(self, self.bank, items)
        self.forget_dialog.confirmed.connect(lambda ms, bank=self.bank: self.forget(bank, ms))
        self.forget_dialog.open()

    def forget(self, bank: str, items: list) -> None:
        fut = self.service.forget(ForgetParams(bank=bank, ids=[m.id for m in items]), timeout=WRITE_TIMEOUT_S)
        self.say(f"Forgetting {plural(len(items), 'memory', 'memories')}…")

        def got(report):
            self.plugin.forgotten(bank, report)
            turns = report.episodes_removed
            gone = len(report.forgotten)
            if not gone and not turns:
                self.say("Nothing was forgotten: it is not stored any more.")
            else:
                self.say(f"Forgot {plural(gone or len(items), 'memory', 'memories')} and the "
                         f"{plural(turns, 'conversation turn')} behind {'it' if len(items) == 1 else 'them'}.")
            if bank == self.bank:
                self.changed()
        self.post.run(fut, got, lambda err: self.say(f"Could not forget: {err}"))

    # ── remembering ────────────────────────────────────────────────────────────────────
    def ask_remember(self) -> None:
        if self.service is None:
            self.say("MemoryPlus is not running: enable it in the Plugins menu.")
            return
        self.remember_dialog = RememberDialog(self, self.bank)
        self.remember_dialog.confirmed.connect(lambda text, bank=self.bank: self.remember(bank, text))
        self.remember_dialog.open()

    def remember(self, bank: str, text: str) -> None:
        fut = self.service.remember(RememberParams(bank=bank, text=text), timeout=WRITE_TIMEOUT_S)
        self.say(f"Remembering “{elide(text, 60)}”…")

        def got(report):
            skipped = report.skipped
            self.say(f"Remembered “{elide(text, 80)}”." if not skipped else
                     f"Not stored: {'; '.join(skipped.values())}")
            if bank == self.bank:
                self.changed()
            self.load_banks()
        self.post.run(fut, got, lambda err: self.say(f"Could not remember it: {err}"))

    # ── long operations ────────────────────────────────────────────────────────────────
    def ask_export(self) -> None:
        safe = re.sub(r"[^\w.-]+", "_", self.bank).strip("._") or "bank"
        default = str(Path.home() / f"memoryplus-{safe}.jsonl")
        path, _ = QFileDialog.getSaveFileName(self, f"Export bank “{printable(self.bank)}”", default,
                                              "JSON lines (*.jsonl);;All files (*)")
        if path:
            self.start_export(path)

    def ask_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, f"Import into bank “{printable(self.bank)}”",
                                              str(Path.home()), "JSON lines (*.jsonl *.json);;All files (*)")
        if path:
            self.start_import(path)

    def ask_clear(self) -> None:
        if self.service is None:
            return
        self.clear_dialog = ClearBankDialog(self, self.bank)
        self.clear_dialog.confirmed.connect(lambda bank=self.bank: self.start_clear(bank))
        self.clear_dialog.open()

    def ask_reembed(self) -> None:
        if self.service is None:
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Re-embed bank",
                          f"Recompute every vector of bank “{printable(self.bank)}” with the embedder now "
                          "configured? Needed after changing the Embedding Provider or Model. The bank is "
                          "busy (no recall from it) until it is done.",
                          QMessageBox.StandardButton.Ok | QMessageBox.StandardButton.Cancel, self)
        box.button(QMessageBox.StandardButton.Ok).setText("Re-embed")
        box.accepted.connect(self.start_reembed)
        self.reembed_box = box
        box.open()

    def start_export(self, path) -> LongOp | None:
        return self.start_op(ExportOp(self.post, self.service, self.bank, path)) if self.service else None

    def start_import(self, path, batch: int | None = None) -> LongOp | None:
        if self.service is None:
            return None
        op = ImportOp(self.post, self.service, self.bank, path, **({"batch": batch} if batch else {}))
        return self.start_op(op)

    def start_clear(self, bank: str | None = None) -> LongOp | None:
        if self.service is None:
            return None
        return self.start_op(ClearOp(self.post, self.service, bank or self.bank))

    def start_reembed(self) -> LongOp | None:
        if self.service is None:
            return None
        return self.start_op(ReembedOp(self.post, self.service, self.bank))

    def start_op(self, op: LongOp) -> LongOp | None:
        if self.op is not None:
            self.say(f"Wait for the {self.op.title.lower()} to finish (or cancel it) first.")
            return None
        self.op = op
        op.on_progress = self._op_progress
        op.on_done = lambda ok, msg, op=op: self._op_done(op, ok, msg)
        self.cancel_btn.setToolTip(op.cancel_note)
        self.cancel_btn.setEnabled(True)
        self.progress_box.show()
        self._busy(True)
        op.start()
        return op

    def _op_progress(self, done: int, total: int, text: str) -> None:
        note = self.op.cancel_note if self.op is not None else ""
        self.op_label.setText(f"{html.escape(text)}<br><small>{html.escape(note)}</small>")
        if total <= 0:
            self.progress.setRange(0, 0)          # busy: no measurable progress
        else:
            self.progress.setRange(0, total)
            self.progress.setValue(min(done, total))
            self.progress.setFormat("%v / %m")

    def _op_done(self, op: LongOp, ok: bool, message: str) -> None:
        if op is not self.op:
            return
        self.op = None
        self.progress_box.hide()
        self._busy(False)
        self.say(message)
        if isinstance(op, (ImportOp, ClearOp, ReembedOp)):
            if isinstance(op, ClearOp) and ok:
                self.ratings.forget_bank(op.bank)
                self.plugin.forgotten(op.bank, None)
            self.load_banks()
            if op.bank == self.bank:
                self.changed()

    def cancel_op(self) -> None:
        if self.op is not None:
            self.op.cancel()

    def _busy(self, busy: bool) -> None:
        for b in (self.export_btn, self.import_btn, self.reembed_btn, self.clear_btn):
            b.setEnabled(not busy)
        self.selection_changed()
