"""The browser's Queue view: the ingestion queue, the worker (state, restarts, last error)
and every bank's counts and LLM spending."""
from __future__ import annotations

from datetime import datetime

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView, QFrame, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QScrollArea,
    QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget,
)

from memoryplus.ui.common import (
    READ_TIMEOUT_S, ElidedLabel, fmt_count, fmt_duration, fmt_source, one_line, plural, printable,
)
from memoryplus.ui.views import View, make_tree
from memoryplus.wire.protocol import BankParams


class QueueView(View):
    title = "Queue"
    STATS_EVERY_MS = 15000

    def __init__(self, browser):
        super().__init__(browser)
        self.values: dict[str, QLabel] = {}
        self._stats_gen = 0

        def form(title: str, rows: list[tuple[str, str]], wide: tuple[str, ...]) -> QGroupBox:
            """Label/value pairs two to a row; `wide` ones take a whole row (elided, whole in
            the tooltip). No wrapping label: a theme's padding can never squeeze rows together."""
            box = QGroupBox(title)
            grid = QGridLayout(box)
            grid.setHorizontalSpacing(14)
            row = col = 0
            for key, label in rows:
                if key in wide:
                    value = ElidedLabel("—")
                    if col:
                        row, col = row + 1, 0
                    grid.addWidget(QLabel(label), row, 0)
                    grid.addWidget(value, row, 1, 1, 3)
                    row += 1
                else:
                    value = QLabel("—")
                    value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
                    grid.addWidget(QLabel(label), row, col)
                    grid.addWidget(value, row, col + 1)
                    col += 2
                    if col == 4:
                        row, col = row + 1, 0
                self.values[key] = value
            grid.setColumnStretch(1, 1)
            grid.setColumnStretch(3, 1)
            return box

        queue_box = form("Ingestion queue", [("pending", "Pending"), ("in_flight", "In flight"),
                                             ("retrying", "Retrying"), ("failed", "Failed"),
                                             ("dropped", "Dropped"), ("done", "Stored this session"),
                                             ("skipped", "Skipped by memory mode"),
                                             ("paused", "Paused")], wide=("paused",))
        worker_box = form("Worker", [("state", "State"), ("pid", "Process id"), ("uptime", "Uptime"),
                                     ("rss", "Memory (RSS)"), ("mode", "Engine mode"),
                                     ("extraction", "Extraction"), ("restarts", "Restarts"),
                                     ("last_error", "Last error")], wide=("mode", "last_error"))
        self.restart_btn = QPushButton("Restart worker")
        self.restart_btn.setToolTip("Start a new worker process (also after three crashes in a row, "
                                    "when it is not restarted by itself), then retry the failed turns")
        self.restart_btn.clicked.connect(self.restart_worker)
        worker_box.layout().addWidget(self.restart_btn, worker_box.layout().rowCount(), 0, 1, 4)
        self.retry_btn = QPushButton("Retry failed")
        self.retry_btn.setEnabled(False)
        self.retry_btn.clicked.connect(self.retry)
        self.failed = make_tree(["Bank", "Turn", "Attempts", "Error"], {0: 90, 1: 110}, stretch=3, fit=(2,))
        self.dropped = make_tree(["Bank", "Turn", "When", "Reason"], {0: 90, 1: 110, 2: 115}, stretch=3)
        self.stats = make_tree(["Bank", "Turns", "Entities", "Facts (current)", "LLM calls today",
                                "LLM calls total", "Tokens total (in / out)", "Embedder"],
                               {0: 110}, stretch=7, fit=(1, 2, 3, 4, 5, 6))
        for tree in (self.failed, self.dropped, self.stats):
            tree.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.stats_note = ElidedLabel()      # no wrapping: see the scroll area below

        top = QHBoxLayout()
        top.addWidget(queue_box, 1)
        top.addWidget(worker_box, 1)

        failed_box = QGroupBox("Failed turns (kept on disk; never dropped)")
        fl = QVBoxLayout(failed_box)
        fh = QHBoxLayout()
        self.failed_label = QLabel("None.")
        fh.addWidget(self.failed_label, 1)
        fh.addWidget(self.retry_btn)
        fl.addLayout(fh)
        fl.addWidget(self.failed)
        dropped_box = QGroupBox("Dropped turns (queue full or stopped)")
        dl = QVBoxLayout(dropped_box)
        dl.addWidget(self.dropped)
        lists = QHBoxLayout()
        lists.addWidget(failed_box, 1)
        lists.addWidget(dropped_box, 1)

        stats_box = QGroupBox("Banks")
        sl = QVBoxLayout(stats_box)
        sl.addWidget(self.stats)
        sl.addWidget(self.stats_note)

        for tree in (self.failed, self.dropped, self.stats):
            tree.setMinimumHeight(64)
        content = QWidget()
        cl = QVBoxLayout(content)
        cl.setContentsMargins(6, 4, 6, 4)
        cl.addLayout(top)
        cl.addLayout(lists, 1)
        cl.addWidget(stats_box, 1)
        scroll = QScrollArea()            # a roomy theme scrolls instead of squeezing rows
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setWidget(content)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(scroll)

        self.timer = QTimer(self)
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.refresh_live)
        self.stats_timer = QTimer(self)
        self.stats_timer.setInterval(self.STATS_EVERY_MS)
        self.stats_timer.timeout.connect(self.refresh_stats)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh_live()
        self.timer.start()
        self.stats_timer.start()

    def hideEvent(self, event) -> None:
        super().hideEvent(event)
        self.timer.stop()
        self.stats_timer.stop()

    def reload(self) -> None:
        self.refresh_live()
        self.refresh_stats()

    def refresh_live(self) -> None:
        """Queue counts and worker status: both are read without waiting (GUI thread)."""
        v = self.values
        plugin = self.b.plugin
        q = plugin.queue
        if q is None:
            for key in ("pending", "in_flight", "retrying", "failed", "dropped", "done", "skipped", "paused"):
                v[key].setText("—")
            v["paused"].setText("MemoryPlus is not running")
        else:
            c = q.counts()
            for key in ("pending", "in_flight", "retrying", "failed", "dropped", "done", "skipped"):
                v[key].setText(fmt_count(c.get(key, 0)))
            v["paused"].setText(str(c.get("paused_reason") or "no"))
            failed = q.failed()
            self._fill(self.failed, [[printable(f.bank), fmt_source(f.turn_id), str(f.attempts), one_line(f.error)]
                                     for f in failed])
            self.failed_label.setText(f"{plural(len(failed), 'failed turn')}." if failed else "None.")
            self.retry_btn.setEnabled(bool(failed))
            dropped = q.dropped()[-200:][::-1]
            self._fill(self.dropped, [[printable(d.bank), fmt_source(d.turn_id),
                                       datetime.fromtimestamp(d.at).strftime("%Y-%m-%d %H:%M"), d.reason]
                                      for d in dropped])
        service = getattr(plugin, "service", None)
        st = service.status() if service is not None else {}
        v["state"].setText(str(st.get("state") or "not running"))
        v["pid"].setText(str(st.get("pid") or "—"))
        v["uptime"].setText(fmt_duration(st.get("uptime_s")))
        v["rss"].setText(f"{st['rss_mb']:.0f} MB" if st.get("rss_mb") else "—")
        mode = st.get("mode") or "—"
        if st.get("using") and st.get("using") != mode:
            mode += f" (using {st['using']})"
        v["mode"].setText(mode)
        v["extraction"].setText(str(st.get("extraction") or "—"))
        v["restarts"].setText(str(st.get("restarts", "—")))
        v["last_error"].setText(one_line(st.get("last_error") or "none"))

    @staticmethod
    def _fill(tree: QTreeWidget, rows: list[list[str]]) -> None:
        current = [[tree.topLevelItem(i).text(c) for c in range(tree.columnCount())]
                   for i in range(tree.topLevelItemCount())]
        if current == rows:
            return
        tree.clear()
        for row in rows:
            item = QTreeWidgetItem(row)
            item.setToolTip(len(row) - 1, row[-1])
            tree.addTopLevelItem(item)

    def restart_worker(self) -> None:
        plugin = self.b.plugin
        fut = plugin.restart_worker() if hasattr(plugin, "restart_worker") else None
        if fut is None:
            self.b.say("MemoryPlus is not running.")
            return
        self.b.say("Restarting the worker…")
        self.refresh_live()

    def retry(self) -> None:
        q = self.b.plugin.queue
        if q is not None:
            n = q.retry_failed()
            self.b.say(f"{plural(n, 'failed turn')} queued again.")
        self.refresh_live()

    def refresh_stats(self) -> None:
        service = self.b.service
        if service is None:
            self.stats_note.setText("MemoryPlus is not running.")
            return
        self._stats_gen += 1
        gen = self._stats_gen
        self.b.post.run(service.banks(timeout=READ_TIMEOUT_S), lambda banks: self._banks(banks, gen),
                        lambda err: self._banks_failed(err, gen))

    def _banks_failed(self, err: str, gen: int) -> None:
        if gen == self._stats_gen:
            self.stats_note.setText(f"Cannot read the banks: {err}")

    def _banks(self, banks: list, gen: int) -> None:
        if gen != self._stats_gen:
            return
        names = [b.name for b in banks]
        self.b.update_banks(names)
        results: dict[str, tuple] = {}
        if not names:
            self.stats.clear()
            self.stats_note.setText("No bank yet: nothing has been stored.")
            return

        def got(name, st, err=None):
            if gen != self._stats_gen:
                return
            results[name] = (name, st, err)
            if len(results) == len(names):
                self._show_stats([results[n] for n in names])
        for name in names:
            self.b.post.run(self.b.service.stats(BankParams(bank=name), timeout=READ_TIMEOUT_S),
                            lambda st, n=name: got(n, st), lambda err, n=name: got(n, None, err))

    def _show_stats(self, rows: list[tuple]) -> None:
        """(bank name, its BankStats or None, the error when None) per bank."""
        self.stats.clear()
        for name, st, err in rows:
            if st is None:
                item = QTreeWidgetItem([printable(name), "—", "—", "—", "—", "—", "—", err])
            else:
                item = QTreeWidgetItem([
                    printable(st.name), fmt_count(st.episodes), fmt_count(st.entities),
                    f"{fmt_count(st.facts)} ({fmt_count(st.current_facts)})",
                    fmt_count(st.llm_calls_today), fmt_count(st.llm_calls),
                    f"{fmt_count(st.llm_input_tokens)} / {fmt_count(st.llm_output_tokens)}",
                    st.embedder or "—"])
                for c in range(1, 7):
                    item.setTextAlignment(c, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            item.setToolTip(7, item.text(7) + (f" — {st.embedder_note}" if st is not None and st.embedder_note else ""))
            if st is not None and st.llm_fallbacks:   # turns the LLM could not extract, stored by rules
                item.setToolTip(5, f"{st.llm_fallbacks} turn(s) stored by local extraction: "
                                   f"the LLM's answers were unusable")
            self.stats.addTopLevelItem(item)
        self.stats_note.setText(f"Updated {datetime.now().strftime('%H:%M:%S')}. Local extraction makes "
                                "no LLM calls; tokens are counted per bank since it was created.")
