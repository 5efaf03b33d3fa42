"""The transport other processes reach a persistent worker by, and the worker.json naming it.

One worker per data directory: the listener first takes `worker.lock` (an exclusive lock
that dies with the process); a second worker for the same directory does not listen (its
owner's engine then meets Kuzu's own lock). The address, family and token go into
worker.json (0600). Each peer is served by a thread of its own: the token challenge
(wire/transport.py, bounded), then one protocol line per message, handed to the event loop.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from memoryplus.wire import protocol as P
from memoryplus.wire import transport as T
from memoryplus.worker.connections import SocketConn

log = logging.getLogger("memoryplus.worker")


def _lock_exclusive(fd: int) -> None:
    """An exclusive, non-blocking lock on the whole file; OSError when another holds it."""
    try:
        import fcntl
    except ImportError:              # Windows
        import msvcrt
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        return
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


class Listener:
    """Accepts peers; `on_open(conn)`, `on_line(conn, data)` and `on_close(conn)` run on the
    event loop."""

    def __init__(self, data_dir: Path, app: str, owner_pid: int | None, loop: asyncio.AbstractEventLoop,
                 on_open: Callable, on_line: Callable, on_close: Callable):
        self.data_dir, self.app, self.owner_pid, self.loop = data_dir, app, owner_pid, loop
        self.on_open, self.on_line, self.on_close = on_open, on_line, on_close
        self.address: str | None = None
        self.family = ""
        self.conns: set[SocketConn] = set()
        self._listener = None
        self._token = ""
        self._lock_fd: int | None = None
        self._accepting = False
        self._n = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        try:
            fd = os.open(self.data_dir / P.WORKER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                _lock_exclusive(fd)
            except OSError:
                os.close(fd)
                other = P.read_worker_file(self.data_dir)
                log.warning("another worker (pid %s) already serves %s; not listening",
                            other.pid if other else "?", self.data_dir)
                return
            self._lock_fd = fd
            fam = T.family()
            listener, address, token = T.listen(fam, P.socket_path_for(self.data_dir)
                                                if fam == "AF_UNIX" else "",
                                                f"memoryplus-{os.getpid()}")
            self._listener, self.address, self.family, self._token = listener, address, fam, token
            P.write_worker_file(self.data_dir, P.WorkerInfo(
                pid=os.getpid(), socket=address, family=fam, token=token, app=self.app,
                owner_pid=self.owner_pid, started=time.time()))
        except OSError as exc:
            log.warning("cannot listen for other processes: %s", exc)
            return
        self._accepting = True
        self._thread = threading.Thread(target=self._accept, name="protocol-accept", daemon=True)
        self._thread.start()
        log.info("listening for other processes on %s (%s)", self.address, self.family)

    def _accept(self) -> None:
        while self._accepting:
            try:
                conn = self._listener.accept()
            except OSError:
                if not self._accepting:
                    return
                time.sleep(0.05)
                continue
            if not self._accepting:
                conn.close()
                return
            self._n += 1
            threading.Thread(target=self._serve, args=(conn, self._n), daemon=True,
                             name=f"protocol-peer-{self._n}").start()

    def _serve(self, raw, n: int) -> None:
        try:
            T.accept_peer(raw, self._token)
        except T.AuthenticationError as exc:
            log.warning("refused a connection: %s", exc)
            return
        conn = SocketConn(raw, n)
        try:
            self.loop.call_soon_threadsafe(self._opened, conn)
            while True:
                data = raw.recv_bytes()
                self.loop.call_soon_threadsafe(self.on_line, conn, data)
        except (EOFError, OSError, RuntimeError):
            pass
        finally:
            try:
                self.loop.call_soon_threadsafe(self._closed, conn)
            except RuntimeError:     # the loop is gone already
                pass

    def _opened(self, conn: SocketConn) -> None:
        self.conns.add(conn)
        self.on_open(conn)

    def _closed(self, conn: SocketConn) -> None:
        conn.closed = True
        self.conns.discard(conn)
        self.on_close(conn)
        conn.writer.close(0)
        try:
            conn.conn.close()
        except OSError:
            pass

    def mark_recycling(self) -> None:
        info = P.read_worker_file(self.data_dir)
        if info is not None and info.pid == os.getpid():
            info.recycling = True
            try:
                P.write_worker_file(self.data_dir, info)
            except OSError:
                pass

    def stop_accepting(self) -> None:
        """No new peer from now on (the ones connected stay until close_peers)."""
        if not self._accepting:
            return
        self._accepting = False
        try:        # wake the accepting thread: it sees the flag and ends
            from multiprocessing.connection import Client
            Client(T.endpoint(self.family, self.address), self.family).close()
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(2)

    def close(self, *, keep_file: bool) -> None:
        """Stop listening, release the lock, and remove worker.json unless a recycling worker
        leaves it for its successor (its clients wait for the next one)."""
        self.stop_accepting()
        if self._listener is not None:
            if not keep_file:
                P.remove_worker_file(self.data_dir, os.getpid())
            try:
                self._listener.close()      # an AF_UNIX socket file goes with it
            except OSError:
                pass
            self._listener = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the lock
            self._lock_fd = None

    def close_peers(self) -> None:
        for conn in list(self.conns):
            conn.close()
