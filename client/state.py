"""What the parts of a WorkerClient share: one lock (a condition on it wakes the waiting
threads), the state the UI shows, the current channel, and the listeners of bank events."""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import logging
import threading
import time
from typing import Any, Callable

from memoryplus.client.channel import Channel
from memoryplus.client.errors import settle

log = logging.getLogger("memoryplus.client")


class Shared:
    def __init__(self):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.state = "stopped"           # stopped starting ready restarting fallback broken closed
        self.using: str | None = None    # persistent, socket, subprocess
        self.last_error = ""
        self.ch: Channel | None = None
        self.gens = itertools.count(1)   # numbers the channels
        self.own_pids: set[int] = set()  # the workers this client started
        self.closing = False
        self.closed = False
        self.started = False
        self.restart_requested = False
        self.restart_waiters: list[cf.Future] = []
        self.health: dict[str, Any] = {}
        self.conflicts: list[str] = []   # what the worker's hello said differs (wire/protocol.py)
        self._listeners: list[Callable[[str, dict[str, Any]], None]] = []

    def set_state(self, state: str, using: str | None = ...) -> None:  # type: ignore[assignment]
        with self.lock:
            self.state = state
            if using is not ...:
                self.using = using
            self.changed.notify_all()

    def wait(self, seconds: float, until=None) -> None:
        """Sleep, waking early when closing, a restart is asked, or `until()` holds."""
        end = time.monotonic() + seconds
        with self.lock:
            while not self.closing and not self.restart_requested and not (until and until()):
                left = end - time.monotonic()
                if left <= 0:
                    return
                self.changed.wait(min(left, 0.25))

    def broken_message(self) -> str:
        return f"the memory worker is not available: {self.last_error or 'unknown error'}"

    def resolve_restart_waiters(self, exc: BaseException | None = None) -> None:
        with self.lock:
            waiters, self.restart_waiters = self.restart_waiters, []
            status = {"state": self.state, "using": self.using}
        for w in waiters:
            settle(w, status if exc is None else None, exc)

    # ── bank events (wire/protocol.py): the worker's, handed to whoever listens ─────────
    def subscribe(self, listener: Callable[[str, dict[str, Any]], None]) -> Callable[[], None]:
        with self.lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self.lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
        return unsubscribe

    def deliver(self, event: str, data: dict[str, Any]) -> None:
        """On the reader's thread, outside the lock: a listener must be quick."""
        with self.lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(event, dict(data))
            except Exception:
                log.exception("a listener of %s failed", event)
