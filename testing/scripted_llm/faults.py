"""Fault injection: what an injected fault is, the queue of pending ones, and how each
kind answers a request (an error status, a held connection, a broken or prefixed body)."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

FAULT_KINDS = ('429', '500', '401', 'timeout', 'garbage', 'think')


@dataclass
class Fault:
    kind: str
    remaining: int
    retry_after: float = 1
    llm: bool = True
    embeddings: bool = False
    structured_only: bool = False

    def applies(self, kind: str, structured: bool) -> bool:
        if kind == 'embeddings':
            return self.embeddings
        if kind in ('chat', 'responses'):
            return self.llm and (structured or not self.structured_only)
        return False


class FaultQueue:
    """The faults waiting for their calls, and a count of those applied (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._applied: Counter = Counter()

    def add(self, kind: str, count: int = 1, retry_after: float = 1, *, embeddings: bool = False,
            llm: bool = True, structured_only: bool = False) -> None:
        """See ScriptedLLMServer.inject."""
        kind = str(kind)
        if kind not in FAULT_KINDS:
            raise ValueError(f'unknown fault kind {kind!r}; expected one of {FAULT_KINDS}')
        if count < 1:
            return
        with self._lock:
            self._faults.append(Fault(kind, int(count), retry_after, llm, embeddings, structured_only))

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset(self) -> None:
        """Forget the queued faults and the count of those applied."""
        with self._lock:
            self._faults.clear()
            self._applied.clear()

    @property
    def pending(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(f.kind, f.remaining) for f in self._faults]

    @property
    def applied(self) -> Counter:
        with self._lock:
            return Counter(self._applied)

    def take(self, kind: str, structured: bool) -> Fault | None:
        """The first fault that applies to this call, counted (and gone once used up)."""
        with self._lock:
            for f in self._faults:
                if f.applies(kind, structured):
                    f.remaining -= 1
                    if f.remaining <= 0:
                        self._faults.remove(f)
                    self._applied[f.kind] += 1
                    return f
        return None


def answer_fault(handler: Any, owner: Any, fault: Fault) -> bool:
    """Answer the request as `fault` says (an error status, or a connection held for
    ``owner.timeout_hold_s``); True when the request is answered (nothing else to send)."""
    if fault.kind == '429':
        ra = fault.retry_after
        ra_text = str(int(ra)) if float(ra).is_integer() else str(ra)
        handler._send_error_json(429, 'Rate limit reached (scripted fault).', 'requests', 'rate_limit_exceeded',
                                 {'Retry-After': ra_text})
        return True
    elif fault.kind == '500':
        handler._send_error_json(500, 'The server had an error (scripted fault).', 'server_error')
        return True
    elif fault.kind == '401':
        handler._send_error_json(401, 'Incorrect API key provided (scripted fault).',
                                 'invalid_request_error', 'invalid_api_key')
        return True
    elif fault.kind == 'timeout':
        owner._sleep(owner.timeout_hold_s)
        if owner._stopping.is_set():
            handler.close_connection = True
            return True
    return False


def mangle(text: str, fault: Fault | None) -> str:
    """An LLM answer as a "garbage" (cut short, not JSON) or "think" (a <think> block first) fault
    makes it."""
    if fault is not None and fault.kind == 'garbage':
        text = text[: max(1, len(text) // 2)] + '\u2026 <<truncated'
        if not text.startswith('{'):
            text = '{"' + text
    elif fault is not None and fault.kind == 'think':
        text = ('<think>\nLet me think about this step by step. The user wants a JSON answer; '
                'I will produce it now.\n</think>\n') + text
    return text


def cut_short(raw: bytes) -> bytes:
    """An embeddings answer as a "garbage" fault sends it: the first half of its JSON."""
    return raw[: max(1, len(raw) // 2)]
