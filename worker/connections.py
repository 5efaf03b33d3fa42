"""The worker's clients: the owner on stdin/stdout, and the peers of its transport."""
from __future__ import annotations

import os
from multiprocessing.connection import Connection

from memoryplus.wire.transport import Sender, hang_up


def stdout_writer(fd: int) -> Sender:
    """Protocol lines to the owner's pipe, written by a thread so that the event loop never
    blocks on a full pipe."""
    file = os.fdopen(fd, "wb", buffering=0)

    def write(data: bytes) -> None:
        file.write(data)

    sender = Sender(write, "protocol-out")
    close = sender.close

    def close_all(timeout: float = 5.0) -> None:
        close(timeout)
        try:
            file.close()
        except OSError:
            pass

    sender.close = close_all          # type: ignore[method-assign]
    return sender


class Conn:
    """One client connection: the starter's stdin/stdout or a transport peer."""
    _next = 0

    def __init__(self, name: str, owner: bool):
        Conn._next += 1
        self.key = Conn._next
        self.name = name
        self.owner = owner
        self.closed = False
        self.app = ""                 # a peer's, from its hello

    def send(self, data: bytes) -> None:
        raise NotImplementedError


class StdioConn(Conn):
    def __init__(self, writer: Sender):
        super().__init__("stdio", owner=True)
        self.writer = writer

    def send(self, data: bytes) -> None:
        self.writer.send(data)


class SocketConn(Conn):
    def __init__(self, conn: Connection, n: int):
        super().__init__(f"socket#{n}", owner=False)
        self.conn = conn
        self.writer = Sender(conn.send_bytes, f"protocol-out-{n}")

    def send(self, data: bytes) -> None:
        if self.closed or self.writer.broken:
            return
        self.writer.send(data)

    def close(self) -> None:
        """Hang up: the peer and this connection's reader see EOF."""
        self.closed = True
        self.writer.close(2.0)
        hang_up(self.conn)
