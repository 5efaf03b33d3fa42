"""The request table: every request not yet answered, the answers matched to them by id,
timeouts, cancellation of reads their caller gave up on, and the internal requests (health
checks, cancels, shutdown) the client sends itself."""
from __future__ import annotations

import concurrent.futures as cf
import itertools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from memoryplus.client.channel import Channel
from memoryplus.client.errors import RequestTimeout, answer_error, settle
from memoryplus.client.state import Shared
from memoryplus.common import redact
from memoryplus.wire import protocol as P

log = logging.getLogger("memoryplus.client")
DEFAULT_TIMEOUTS = {"read": 30.0, "write": 600.0, "control": 30.0}


@dataclass(eq=False)
class Pending:
    id: str
    op: str
    params: dict[str, Any]
    spec: P.OpSpec
    future: cf.Future
    deadline: float | None
    seq: int
    timeout: float | None
    route: str = "worker"            # "worker" or "percall"
    sent_gen: int = 0                # the channel it was last sent to
    internal: str = ""               # "", "health", "cancel", "shutdown"
    submitted: float = field(default_factory=time.monotonic)
    _line: bytes | None = None

    def line(self) -> bytes:
        """The request line, encoded once (re-sends reuse it)."""
        if self._line is None:
            self._line = P.encode(P.Request(id=self.id, op=self.op, params=self.params, lane=self.spec.lane))
        return self._line


class RequestTable:
    def __init__(self, shared: Shared):
        self.s = shared
        self.pending: dict[str, Pending] = {}
        self._seq = itertools.count(1)
        self.late = 0                # answers nobody waited for any more
        self.garbage = 0             # lines that were not protocol

    def new(self, op: str, params: Any, timeout: float | None, internal: str = "") -> Pending:
        """A request checked against its op's model (ValueError when it does not fit)."""
        try:
            spec = P.op_spec(op)
            data = P.validate_params(op, params)
        except (P.ProtocolError, ValueError) as exc:
            raise ValueError(str(exc)) from None
        if timeout is None:
            timeout = DEFAULT_TIMEOUTS[spec.lane]
        now = time.monotonic()
        p = Pending(id=uuid.uuid4().hex, op=op, params=data, spec=spec, future=cf.Future(),
                    deadline=now + timeout if timeout and timeout > 0 else None, seq=next(self._seq),
                    timeout=timeout, internal=internal)
        try:
            p.line()            # encode outside the lock
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{op}: parameters cannot be sent: {exc}") from None
        return p

    def internal(self, op: str, params: dict[str, Any], kind: str, timeout: float | None) -> Pending:
        """A request the client sends itself (caller holds the lock), registered."""
        p = Pending(id=uuid.uuid4().hex, op=op, params=params, spec=P.OPS[op], future=cf.Future(),
                    deadline=time.monotonic() + timeout if timeout else None, seq=next(self._seq),
                    timeout=timeout, internal=kind)
        self.pending[p.id] = p
        return p

    def send(self, ch: Channel, p: Pending) -> None:
        """Queue a request on a channel (caller holds the lock)."""
        p.sent_gen = ch.gen
        prio = 50 if p.internal == "shutdown" else P.LANE_PRIORITY[p.spec.lane]
        ch.put(prio, p.seq, p.line())

    def caller_cancelled(self, p: Pending) -> None:
        with self.s.lock:
            if self.pending.get(p.id) is p:
                del self.pending[p.id]
                self.cancel_remote(p)

    def cancel_remote(self, p: Pending) -> None:
        """Ask the worker to stop a read its caller gave up on (caller holds the lock)."""
        ch = self.s.ch
        if (p.route == "worker" and p.spec.cancellable and ch is not None and p.sent_gen == ch.gen
                and ch.ready and not ch.ended.is_set() and not p.internal):
            self.send(ch, self.internal("cancel", {"id": p.id}, "cancel", 10))

    def fail_worker_requests(self, exc: BaseException) -> None:
        with self.s.lock:
            failed = [p for p in self.pending.values() if p.route == "worker"]
            for p in failed:
                del self.pending[p.id]
        for p in failed:
            if not p.internal:
                settle(p.future, exc=exc)

    def forget_internal(self, gen: int | None = None) -> None:
        """Drop the internal requests (of one channel): nobody waits for them (lock held)."""
        for p in [p for p in self.pending.values() if p.internal and (gen is None or p.sent_gen == gen)]:
            del self.pending[p.id]

    def expire(self, now: float) -> tuple[list[Pending], bool]:
        """Take out the requests past their deadline (lock held); True when one was the health
        check of the current channel (it hangs)."""
        expired, hung = [], False
        for p in list(self.pending.values()):
            if p.deadline is not None and now >= p.deadline:
                del self.pending[p.id]
                expired.append(p)
                if p.internal == "health" and self.s.ch is not None and p.sent_gen == self.s.ch.gen:
                    hung = True
                self.cancel_remote(p)
        return expired, hung

    @staticmethod
    def time_out(expired: list[Pending]) -> None:
        for p in expired:
            if not p.internal:
                settle(p.future, exc=RequestTimeout(f"{p.op} was not answered within {p.timeout:.1f} s"))

    # ── what comes back ────────────────────────────────────────────────────────────────
    def on_line(self, ch: Channel, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            msg = P.decode(raw)
        except P.ProtocolError as exc:
            with self.s.lock:
                self.garbage += 1
            log.warning("skipped a line from %s that is not protocol (%s): %r", ch.describe(), exc,
                        redact.redact(raw[:120].decode("utf-8", "replace")))
            return
        if isinstance(msg, P.Event):
            self.on_event(ch, msg)
            return
        if not isinstance(msg, P.Response):
            with self.s.lock:
                self.garbage += 1
            return
        with self.s.lock:
            p = self.pending.get(msg.id)
            if p is None or p.route != "worker" or p.sent_gen != ch.gen:
                self.late += 1
                log.debug("dropped an answer nobody waits for (%s)", msg.id)
                return
            if not msg.ok and msg.error is not None and msg.error.type == P.NOT_ACCEPTED:
                p.sent_gen = 0     # not run: goes to the next worker
                return
            del self.pending[msg.id]
            if p.internal == "health" and msg.ok and isinstance(msg.result, dict):
                self.s.health = msg.result
        if msg.ok:
            settle(p.future, msg.result)
        else:
            settle(p.future, exc=answer_error(msg))

    def on_event(self, ch: Channel, ev: P.Event) -> None:
        if ev.event in P.BANK_EVENTS:
            self.s.deliver(ev.event, ev.data)
            return
        with self.s.lock:
            if ev.event == "ready":
                ch.info = dict(ev.data)
                ch.ready = True
            elif ev.event == "recycling":
                ch.draining = True
                log.info("%s is recycling: %s", ch.describe(), ev.data.get("reason", ""))
            elif ev.event == "fatal":
                ch.fatal = dict(ev.data)
            self.s.changed.notify_all()

    def channel_ended(self, ch: Channel) -> None:
        with self.s.lock:
            ch.ended.set()
            self.s.changed.notify_all()
