"""`RemoteMemoryService`: the memory operations over a worker client (client/worker_client.py).

The only place that sends an operation by name: every op goes out as its params model dumped
to JSON, and its answer comes back decoded into the op's records. The client's failures
become the `wire.errors` classes: a worker's error answer by its code, a request not
answered in time as `Timeout`, no worker to serve it as `WorkerUnavailable`.
"""
from __future__ import annotations

import concurrent.futures as cf
from typing import Any

from memoryplus.service.base import MemoryService, Status, chain, decode
from memoryplus.wire import errors


def client_error(exc: BaseException) -> BaseException:
    """The wire error a worker client's exception stands for."""
    from memoryplus.client.worker_client import RequestTimeout, WorkerError, WorkerUnavailable
    if isinstance(exc, errors.ServiceError):
        return exc
    if isinstance(exc, WorkerError):
        return errors.from_code(exc.code, str(exc), origin=exc.type)
    if isinstance(exc, RequestTimeout):
        return errors.Timeout(str(exc), origin=type(exc).__name__)
    if isinstance(exc, WorkerUnavailable):
        return errors.WorkerUnavailable(str(exc), origin=type(exc).__name__)
    if isinstance(exc, ValueError):
        return errors.BadParams(str(exc), origin=type(exc).__name__)
    if isinstance(exc, Exception):
        return errors.Internal(str(exc) or type(exc).__name__, origin=type(exc).__name__)
    return exc


class RemoteMemoryService(MemoryService):
    """A worker client's operations, typed. `client`: a started `WorkerClient`; the service
    owns it (close() closes it: a client of another process's worker only disconnects)."""

    def __init__(self, client):
        self.client = client

    def _submit(self, op: str, request: Any, timeout: float | None) -> cf.Future:
        params = request.model_dump(mode="json") if request is not None else {}
        try:
            inner = self.client.submit(op, params, timeout=timeout)
        except Exception as exc:    # a client that cannot take requests at all
            inner = cf.Future()
            inner.set_exception(exc)
        return chain(inner, lambda raw: decode(op, request, raw), client_error)

    def update_settings(self, settings, credentials=None, *, timeout: float | None = None) -> cf.Future:
        return chain(self.client.update_settings(settings, credentials, timeout=timeout),
                     lambda raw: decode("update_settings", None, raw), client_error)

    def status(self) -> Status:
        return self.client.status()

    def restart(self) -> cf.Future:
        return chain(self.client.restart(), lambda raw: raw, client_error)

    def close(self, timeout: float = 15.0) -> None:
        self.client.close(timeout=timeout)
