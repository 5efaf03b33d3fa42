"""What a WorkerClient's futures fail with."""
from __future__ import annotations

import concurrent.futures as cf
from typing import Any

from memoryplus.common import redact
from memoryplus.wire import protocol as P


class WorkerError(RuntimeError):
    """The worker answered with an error; `type` is the engine's exception class name, `code`
    what the caller does about it (wire/errors.py)."""

    def __init__(self, type_: str, message: str, code: str = "internal"):
        super().__init__(message)
        self.type = type_
        self.code = code


class WorkerUnavailable(RuntimeError):
    """No worker can serve the request (circuit breaker open, start failure, gone)."""


class WorkerClosed(WorkerUnavailable):
    """The client was closed."""


class RequestTimeout(TimeoutError):
    """The request was not answered in time; a late answer is dropped."""


def answer_error(msg: P.Response) -> WorkerError:
    """The exception a failed answer stands for, its message cleared of secrets."""
    e = msg.error or P.ErrorInfo(type="Error", message="unknown error")
    return WorkerError(e.type, redact.redact(e.message), e.code)


def settle(future: cf.Future, result: Any = None, exc: BaseException | None = None) -> None:
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except cf.InvalidStateError:  # cancelled by its caller, or settled already
        pass
