"""What every part of the memory UI shares: getting results from other threads onto the GUI
thread, the memories a view can select, and how dates, validity and tags are shown.

Threading rule of the whole UI: the GUI thread never waits on the worker. Requests go out
through the plugin's MemoryService (a Future, at once) and come back with `GuiPost.run()`:
the result, or the error worded for the user, on the GUI thread. Any progress from a helper
thread comes back through `GuiPost.post()`, a signal queued to the GUI thread. No widget is
ever touched from another thread.
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QSizePolicy, QSplitter, QWidget

from memoryplus.common.isodates import parse_iso
from memoryplus.wire import errors
# the one plural and one-line helpers (plain text, shared with the chat commands and the CLI)
from memoryplus.common.wording import one_line, plural  # noqa: F401

log = logging.getLogger("memoryplus.ui")

READ_TIMEOUT_S = 60.0
WRITE_TIMEOUT_S = 120.0
LONG_TIMEOUT_S = 1800.0


class GuiPost(QObject):
    """Run callables on the GUI thread, posted from any thread."""

    _posted = Signal(object)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._posted.connect(self._run, Qt.ConnectionType.QueuedConnection)

    def post(self, fn: Callable[[], Any]) -> None:
        """Thread-safe: `fn` runs later on the GUI thread (always later, even from it)."""
        try:
            self._posted.emit(fn)
        except RuntimeError:      # the receiver is gone (PyGPT is closing): nothing to show
            pass

    def watch(self, future: cf.Future, callback: Callable[[cf.Future], Any]) -> cf.Future:
        """`callback(future)` on the GUI thread once the future is done."""
        future.add_done_callback(lambda f: self.post(lambda: callback(f)))
        return future

    def run(self, future: cf.Future, done: Callable[[Any], Any],
            error: Callable[[str], Any] | None = None) -> cf.Future:
        """The one way a view calls the service: `done(result)` on the GUI thread once the
        Future succeeds, else `error(a message for the user)` (if given)."""
        def settle(f: cf.Future) -> None:
            result, err = outcome(f)
            if err is None:
                done(result)
            elif error is not None:
                error(err)
        return self.watch(future, settle)

    def in_thread(self, fn: Callable[[], Any], callback: Callable[[cf.Future], Any] | None = None,
                  name: str = "memoryplus-ui") -> cf.Future:
        """Run `fn` on a daemon thread (file I/O, parsing, layout); its Future comes back to
        `callback` on the GUI thread."""
        fut: cf.Future = cf.Future()

        def run():
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn())
            except BaseException as exc:  # delivered to the callback
                fut.set_exception(exc)
        if callback is not None:
            self.watch(fut, callback)
        threading.Thread(target=run, name=name, daemon=True).start()
        return fut

    @Slot(object)
    def _run(self, fn) -> None:
        try:
            fn()
        except Exception:   # a slot must not raise into Qt (PyGPT would print and go on)
            log.exception("memory UI callback failed")


def outcome(future: cf.Future) -> tuple[Any, str | None]:
    """(result, None) or (None, a message for the user)."""
    if future.cancelled():
        return None, "cancelled"
    exc = future.exception()
    if exc is None:
        return future.result(), None
    if isinstance(exc, errors.UnknownBank):
        return None, "nothing is stored in this bank yet"
    return None, str(exc) or type(exc).__name__


@dataclass
class Memory:
    """One selectable memory in any view: what Forget and 👍/👎 act on."""
    id: str
    kind: str                    # fact, entity, episode
    text: str
    name: str = ""
    sources: list[str] | None = None      # caller ids of the turns behind it, when known
    when: str | None = None

    @property
    def rateable(self) -> bool:
        return self.kind in ("fact", "entity")

    def short(self, n: int = 90) -> str:
        return elide(self.text or self.name, n)


class ElidedLabel(QLabel):
    """One line that never widens its window: cut with “…” to the space it has (whole in the
    tooltip). `text()` is the whole text."""

    def __init__(self, text: str = ""):
        super().__init__(text)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(80)

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text)

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setPen(self.palette().windowText().color())
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())
        p.drawText(self.contentsRect(), int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), shown)


# ── formatting ────────────────────────────────────────────────────────────────────────────
def parse_time(value: Any) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        dt = value
    else:
        try:
            dt = parse_iso(str(value))
        except ValueError:
            return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt


def fmt_date(value: Any) -> str:
    dt = parse_time(value)
    return dt.astimezone().strftime("%Y-%m-%d") if dt else "—"


def fmt_time(value: Any) -> str:
    dt = parse_time(value)
    return dt.astimezone().strftime("%Y-%m-%d %H:%M") if dt else "—"


def validity(valid_at: Any, invalid_at: Any, current: bool | None = None) -> str:
    """'current since 2025-03-01' or 'superseded on 2025-04-02'."""
    if invalid_at or current is False:
        return f"superseded on {fmt_date(invalid_at)}" if invalid_at else "superseded"
    return f"current since {fmt_date(valid_at)}" if valid_at else "current"


def fmt_tags(tags: list[str] | None) -> str:
    """'topic: health, family · emotion: amused' (tags grouped by their prefix)."""
    groups: dict[str, list[str]] = {}
    for tag in tags or []:
        kind, sep, name = str(tag).partition(":")
        groups.setdefault(kind if sep else "", []).append(name if sep else kind)
    return " · ".join(f"{k}: {', '.join(v)}" if k else ", ".join(v) for k, v in groups.items())


KIND_LABELS = {"episode": "turn", "fact": "fact", "entity": "entity"}


def kind_label(kind: str) -> str:
    """What a person calls a result's kind: an episode is a conversation turn."""
    return KIND_LABELS.get(kind, kind)




def result_validity(r, as_of: datetime | None = None) -> str:
    """A search result's (SearchResult) validity window, worded for its kind (and for a
    time-travel search)."""
    if r.kind == "episode":
        return f"said on {fmt_date(r.valid_at)}"
    if r.kind == "entity":
        return f"known since {fmt_date(r.valid_at)}"
    end = parse_time(r.invalid_at)
    if as_of is not None and end is not None and end > as_of:
        return f"true then; superseded {fmt_date(end)}"
    return validity(r.valid_at, r.invalid_at)


def elide(text: str, n: int) -> str:
    t = one_line(text)
    return t if len(t) <= n else t[: n - 1].rstrip() + "…"


def printable(text: str) -> str:
    """Control characters (a bank name may hold any) shown as escapes."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))


def fmt_source(caller_id: str) -> str:
    """A turn's caller id for people: 'chat 3, msg 17' for PyGPT's, 'typed in' for Remember."""
    cid = str(caller_id or "")
    if cid.startswith("pygpt:"):
        parts = cid.split(":")
        if len(parts) == 3:
            return f"chat {parts[1]}, msg {parts[2]}"
    if cid.startswith("remember:"):
        return "typed in"
    return cid


def fmt_sources(ids: list[str] | None) -> str:
    return "; ".join(fmt_source(s) for s in ids or [])


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def fmt_count(n: Any) -> str:
    try:
        return f"{int(n):,}"
    except (TypeError, ValueError):
        return "—"


# ── small persistent UI state in the plugin's data directory ─────────────────────────────
class JsonState:
    """A small JSON file (atomic writes); unreadable or missing reads as empty."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def save(self, data: dict[str, Any]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
            tmp.replace(self.path)
        except OSError as exc:
            log.warning("cannot save %s: %s", self.path, exc)


@dataclass
class Ratings:
    """The ratings the engine returned for 👍/👎 (it keeps the real ones in the graph; the UI
    remembers them to show them and to hide demoted memories)."""
    state: JsonState
    data: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> "Ratings":
        st = JsonState(path)
        return cls(st, {b: {k: int(v) for k, v in d.items()} for b, d in st.load().items()
                        if isinstance(d, dict)})

    def get(self, bank: str, memory_id: str) -> int:
        return self.data.get(bank, {}).get(memory_id, 0)

    def set(self, bank: str, memory_id: str, rating: int) -> None:
        self.data.setdefault(bank, {})[memory_id] = int(rating)
        self.state.save(self.data)

    def forget_bank(self, bank: str) -> None:
        if self.data.pop(bank, None) is not None:
            self.state.save(self.data)


def splitter(orientation: Qt.Orientation, first: QWidget, second: QWidget, stretch: tuple[int, int],
             sizes: list[int] | None = None) -> QSplitter:
    """Two panes that share space in a fixed proportion and can never be collapsed away."""
    split = QSplitter(orientation)
    split.addWidget(first)
    split.addWidget(second)
    split.setStretchFactor(0, stretch[0])
    split.setStretchFactor(1, stretch[1])
    if sizes:
        split.setSizes(sizes)
    split.setChildrenCollapsible(False)
    return split
