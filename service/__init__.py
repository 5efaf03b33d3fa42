"""The typed memory service every interface calls (see base.py for the why of its shape).

    MemoryService          the interface (base.py)
    LocalMemoryService     the engine in this process (local.py)
    RemoteMemoryService    over a worker client (remote.py)
    open_service()         the one an interface (the CLI, the MCP server) uses for a data directory
"""
from __future__ import annotations

import os

from memoryplus.service.base import MemoryService
from memoryplus.service.local import LocalMemoryService
from memoryplus.service.remote import RemoteMemoryService
from memoryplus.wire.records import Credentials

__all__ = ["MemoryService", "LocalMemoryService", "RemoteMemoryService", "open_service"]


def open_service(settings, data_dir: str | os.PathLike, credentials=None, *,
                 app: str = "the memoryplus command", connect_timeout: float = 5.0,
                 share: bool = False) -> MemoryService:
    """The running worker of `data_dir` (PyGPT's, found by its worker.json and reached by its
    socket) when there is one: it holds the banks' Kuzu locks, so nobody else can open them;
    the operations then run with that worker's settings and credentials, not `settings`.
    Else the engine in this process, with `settings`.

    `share=True` (the MCP server and the CLI's data commands: cli/session.py) never opens the
    banks in this process: its client joins the running worker, or starts one that every other
    process can join (this process is then its owner, for as long as it runs), and takes over
    when the owner exits."""
    if share:
        from memoryplus.client.worker_client import WorkerClient
        if credentials is None:     # the worker it may start extracts with the keys of the environment
            credentials = Credentials.from_env()
        # per-call processes would hold a bank's Kuzu lock each time: one shared worker instead
        mode = "auto" if settings.engine_mode == "auto" else "persistent"
        return RemoteMemoryService(WorkerClient(settings, data_dir, credentials, mode=mode, app=app).start())
    from memoryplus.client.worker_client import connect_existing
    # our settings go in the hello: what differs from the governing ones is in status()["conflicts"]
    client = connect_existing(data_dir, timeout=connect_timeout, app=app, settings=settings)
    if client is not None:
        return RemoteMemoryService(client)
    return LocalMemoryService.open(settings, data_dir, credentials, app=app)
