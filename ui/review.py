"""Memory Review Interval: every N days (0 = off) a gentle, non-modal prompt offers to review
the memories added since the last review; "Review now" opens the browser filtered to them.

The last review time lives in the plugin's data directory (review.json), so it survives PyGPT
dropping the plugin's settings. The first time the reminder runs it starts the clock (no
prompt on a fresh install); a prompt is shown only when something was added since.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, QTimer

from memoryplus.ui.common import READ_TIMEOUT_S, JsonState, fmt_date, parse_time

log = logging.getLogger("memoryplus.ui")

REVIEW_FILE = "review.json"
FIRST_CHECK_MS = 90_000          # after PyGPT started (the worker is up by then)
CHECK_EVERY_MS = 3_600_000
SNOOZE = timedelta(days=1)
COUNT_PAGE = 200


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class ReviewState:
    def __init__(self, directory: Path):
        self.file = JsonState(Path(directory) / REVIEW_FILE)

    def last_review(self) -> datetime | None:
        return parse_time(self.file.load().get("last_review"))

    def snoozed_until(self) -> datetime | None:
        return parse_time(self.file.load().get("snoozed_until"))

    def set_last_review(self, when: datetime) -> None:
        data = self.file.load()
        data["last_review"] = when.astimezone(timezone.utc).isoformat()
        data.pop("snoozed_until", None)
        self.file.save(data)

    def snooze(self, until: datetime) -> None:
        data = self.file.load()
        data["snoozed_until"] = until.astimezone(timezone.utc).isoformat()
        self.file.save(data)


class ReviewReminder(QObject):
    """Checks hourly (and once soon after start) whether a review is due; `clock` is
    injectable for tests."""

    def __init__(self, ui, clock: Callable[[], datetime] = utcnow, parent: QObject | None = None):
        super().__init__(parent)
        self.ui = ui
        self.clock = clock
        self.prompt = None
        self._checking = False
        self.timer = QTimer(self)
        self.timer.setInterval(CHECK_EVERY_MS)
        self.timer.timeout.connect(self.check)
        self.timer.start()
        QTimer.singleShot(FIRST_CHECK_MS, self.check)

    @property
    def plugin(self):
        return self.ui.plugin

    def state(self) -> ReviewState:
        return ReviewState(self.plugin.user_dir())

    def interval(self) -> int:
        try:
            return int(self.plugin.get_option_value("review_interval_days") or 0)
        except Exception:
            return int(self.plugin.settings.review_interval_days)

    def due(self, now: datetime | None = None) -> bool:
        """Is a review due now (interval on, last review old enough, not snoozed)?"""
        now = now or self.clock()
        days = self.interval()
        if days <= 0:
            return False
        st = self.state()
        last = st.last_review()
        if last is None:
            st.set_last_review(now)        # a fresh install starts the clock
            return False
        snoozed = st.snoozed_until()
        if snoozed is not None and now < snoozed:
            return False
        return now - last >= timedelta(days=days)

    def check(self, now: datetime | None = None) -> bool:
        """If due, count what was added since the last review (async) and show the prompt when
        there is something. Returns whether a check was started."""
        now = now or self.clock()
        service = getattr(self.plugin, "service", None)
        if self._checking or service is None or not self.due(now):
            return False
        if self.prompt is not None and self.prompt.isVisible():
            return False
        since = self.state().last_review()
        bank = self.ui.current_bank()
        self._checking = True
        from memoryplus.wire.protocol import BrowseParams    # pydantic: not at PyGPT's start-up
        fut = service.browse(BrowseParams(bank=bank, what="episodes", offset=0, limit=COUNT_PAGE),
                             timeout=READ_TIMEOUT_S)
        # an error: nothing stored yet, or the worker is busy: ask later
        self.ui.post.run(fut, lambda rows: self._counted(rows, bank, since, now), self._not_counted)
        return True

    def _not_counted(self, _err: str) -> None:
        self._checking = False

    def _counted(self, rows: list, bank: str, since: datetime, now: datetime) -> None:
        self._checking = False
        added = [r for r in rows if (parse_time(r.stored_at) or since) >= since]
        if not added:
            return
        n = f"{len(added)}+" if len(added) == len(rows) == COUNT_PAGE else str(len(added))
        text = (f"<b>Time for a look at your memories?</b><br>MemoryPlus stored {n} conversation "
                f"{'turn' if n == '1' else 'turns'} since your last review on {fmt_date(since)}. "
                "You can go through them and forget what should not be kept.")
        self.show_prompt(text, bank, since)

    def show_prompt(self, text: str, bank: str, since: datetime) -> None:
        from memoryplus.ui.dialogs import ReviewPrompt
        if self.prompt is not None:
            self.prompt.close()
            self.prompt.deleteLater()
        self.prompt = ReviewPrompt(self.ui.main_window(), text,
                                   on_review=lambda: self.review_now(bank, since),
                                   on_later=self.later)
        self.prompt.place()
        self.prompt.show()

    def review_now(self, bank: str, since: datetime) -> None:
        self.state().set_last_review(self.clock())
        self.ui.open_browser(bank=bank, since=since)

    def later(self) -> None:
        self.state().snooze(self.clock() + SNOOZE)
