"""How another process reaches a running worker: `multiprocessing.connection`, on every platform.

The family is chosen by the worker when it starts listening, and recorded in its worker.json
(with the address and the token) for the clients:

- AF_UNIX: a Unix socket (mode 0600) in the data directory, where the platform has them;
- AF_PIPE: a named pipe on Windows;
- AF_INET: a loopback TCP port (127.0.0.1) where neither works, or when the environment
  variable `MEMORYPLUS_TRANSPORT=tcp` forces it (declared here only: tests use it on Linux).

On every family the peers prove to each other that they know the worker's token (32 random
bytes, hex, kept only in worker.json, which is 0600 in a 0700 directory) before a single
protocol message passes: an HMAC-SHA256 challenge each way, bounded in time. A wrong or
missing token is refused and the connection closed, so a loopback port reachable by every
local user still serves only the user who can read worker.json. The token never travels in
clear and is never logged (it is registered with common/redact).

Each protocol line (wire/protocol.py's `encode`) is one `send_bytes` message.
"""
from __future__ import annotations

import collections
import hashlib
import hmac
import os
import secrets
import socket
import sys
import threading
from multiprocessing.connection import Client, Connection, Listener

from memoryplus.common import redact

TRANSPORT_ENV = "MEMORYPLUS_TRANSPORT"
AUTH_TIMEOUT_S = 5.0
_HELLO = b"memoryplus-auth-1 "
_REFUSED = b"refused"
_MAX_AUTH = 256


class AuthenticationError(ConnectionError):
    """The peer does not know the worker's token (or is not the worker worker.json names)."""


def family() -> str:
    """The family a worker listens on here (see the module docstring)."""
    if os.environ.get(TRANSPORT_ENV, "").strip().lower() == "tcp":
        return "AF_INET"
    if sys.platform == "win32":
        return "AF_PIPE"
    return "AF_UNIX" if hasattr(socket, "AF_UNIX") else "AF_INET"


def endpoint(fam: str, address: str):
    """The address as multiprocessing.connection takes it."""
    if fam == "AF_INET":
        host, _, port = address.rpartition(":")
        return host, int(port)
    return address


def listen(fam: str, unix_path: str, pipe_name: str) -> tuple[Listener, str, str]:
    """A listener of that family, its address as worker.json records it, and a fresh token."""
    token = secrets.token_hex(32)
    redact.register(token)
    if fam == "AF_UNIX":
        try:
            os.unlink(unix_path)         # a stale socket of a dead worker (the caller holds the lock)
        except FileNotFoundError:
            pass
        old = os.umask(0o177)
        try:
            listener = Listener(unix_path, "AF_UNIX", backlog=16)
        finally:
            os.umask(old)
        os.chmod(unix_path, 0o600)
        return listener, unix_path, token
    if fam == "AF_PIPE":
        name = rf"\\.\pipe\{pipe_name}-{secrets.token_hex(8)}"
        return Listener(name, "AF_PIPE"), name, token
    listener = Listener(("127.0.0.1", 0), "AF_INET", backlog=16)
    host, port = listener.address
    return listener, f"{host}:{port}", token


def _mac(token: str, label: bytes, nonce: bytes) -> bytes:
    return hmac.new(token.encode("utf-8"), label + nonce, hashlib.sha256).digest()


def _recv(conn: Connection, timeout: float) -> bytes:
    if not conn.poll(timeout):
        raise AuthenticationError("the peer did not answer the token challenge in time")
    return conn.recv_bytes(_MAX_AUTH)


def accept_peer(conn: Connection, token: str, timeout: float = AUTH_TIMEOUT_S) -> None:
    """The worker's side of the challenge; AuthenticationError (and the connection closed)
    unless the peer proves it knows the token."""
    try:
        nonce = os.urandom(32)
        conn.send_bytes(_HELLO + nonce)
        answer = _recv(conn, timeout)
        if len(answer) != 64 or not hmac.compare_digest(answer[:32], _mac(token, b"client", nonce)):
            try:
                conn.send_bytes(_REFUSED)
            except OSError:
                pass
            raise AuthenticationError("a peer without the worker's token was refused")
        conn.send_bytes(b"ok" + _mac(token, b"worker", answer[32:]))
    except AuthenticationError:
        conn.close()
        raise
    except (OSError, EOFError) as exc:
        conn.close()
        raise AuthenticationError(f"the peer left during the token challenge: {exc}") from None


def connect(fam: str, address: str, token: str, timeout: float = AUTH_TIMEOUT_S) -> Connection:
    """A connection to the worker at that address, after the challenge both ways."""
    conn = Client(endpoint(fam, address), fam)
    try:
        hello = _recv(conn, timeout)
        if not hello.startswith(_HELLO) or len(hello) != len(_HELLO) + 32:
            raise AuthenticationError("the peer is not a memoryplus worker")
        mine = os.urandom(32)
        conn.send_bytes(_mac(token or "", b"client", hello[len(_HELLO):]) + mine)
        answer = _recv(conn, timeout)
        if answer == _REFUSED:
            raise AuthenticationError("the worker refused the token (worker.json is not this worker's)")
        if not (answer.startswith(b"ok")
                and hmac.compare_digest(answer[2:], _mac(token or "", b"worker", mine))):
            raise AuthenticationError("the peer does not know the worker's token")
    except (OSError, EOFError) as exc:
        conn.close()
        if isinstance(exc, AuthenticationError):
            raise
        raise ConnectionError(f"the worker closed the connection: {exc}") from None
    return conn


def hang_up(conn: Connection) -> None:
    """Wake a thread blocked reading this connection (it sees EOF), then close nothing more:
    its reader closes it. A socket is shut down through a duplicate of its descriptor."""
    try:
        fd = conn.fileno()
    except (OSError, ValueError):
        return
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        try:
            conn.close()     # a pipe: closing it ends the reads
        except OSError:
            pass
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()


class Sender:
    """Messages to a connection, written by a thread of its own so that the caller (the
    worker's event loop, a client's submit) never blocks on a full pipe."""

    def __init__(self, write, name: str):
        self._write = write
        self._cond = threading.Condition()
        self._items: collections.deque[bytes | None] = collections.deque()
        self.broken = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def send(self, data: bytes) -> None:
        with self._cond:
            self._items.append(data)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items:
                    self._cond.wait()
                data = self._items.popleft()
            if data is None:
                break
            if self.broken:
                continue
            try:
                self._write(data)
            except (OSError, ValueError):   # the peer is gone; its reader sees EOF
                self.broken = True

    def close(self, timeout: float = 5.0) -> None:
        self.send(None)  # type: ignore[arg-type]
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
