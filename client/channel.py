"""One live connection to a worker and its threads: a child process's pipes (`ProcessChannel`)
or another process's worker through the transport (`PeerChannel`, wire/transport.py). A reader
thread hands each line to the client, a writer thread drains a priority queue (control before
reads before writes), a third thread keeps the tail of a child's stderr (secrets masked)."""
from __future__ import annotations

import collections
import logging
import queue
import subprocess
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from memoryplus.common import redact
from memoryplus.wire.transport import hang_up

log = logging.getLogger("memoryplus.client")


class Channel:
    kind = ""

    def __init__(self, gen: int, pid: int | None):
        self.gen, self.pid = gen, pid
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.ended = threading.Event()
        self.draining = False            # recycling announced: send nothing more
        self.stopping = False            # we asked it to shut down
        self.kill_reason = ""            # we killed it, and why
        self.info: dict[str, Any] = {}
        self.fatal: dict[str, Any] | None = None
        self.started = time.monotonic()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.outq: queue.PriorityQueue = queue.PriorityQueue()
        self.threads: list[threading.Thread] = []
        self.last_ping = time.monotonic()

    def put(self, prio: int, seq: int, data: bytes) -> None:
        self.outq.put((prio, seq, data))

    def close_input(self) -> None:
        self.outq.put((99, -1, None))    # after everything queued

    def describe(self) -> str:
        return f"worker pid {self.pid}" if self.kind == "process" else f"the worker at pid {self.pid} (socket)"

    # the transport: one message at a time
    def read(self) -> bytes:
        """The next line, b"" at the end."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def end_output(self) -> None:
        """No more requests: the worker sees the end of its input."""

    def hang_up(self) -> None:
        """End the channel now (the reader sees EOF)."""

    def close(self) -> None:
        raise NotImplementedError

    # its threads
    def start(self, on_line: Callable[["Channel", bytes], None], on_end: Callable[["Channel"], None]) -> None:
        targets = [(lambda: self._reader(on_line, on_end), "reader"), (self._writer, "writer")]
        if self.proc is not None:
            targets.append((self._stderr_reader, "stderr"))
        for target, name in targets:
            t = threading.Thread(target=target, name=f"memoryplus-worker-{name}-{self.gen}", daemon=True)
            t.start()
            self.threads.append(t)

    def _writer(self) -> None:
        try:
            while True:
                _prio, _seq, data = self.outq.get()
                if data is None:
                    break
                self.write(data)
        except (OSError, ValueError):
            pass  # the worker is gone; the reader sees EOF
        finally:
            try:
                self.end_output()
            except (OSError, ValueError):
                pass

    def _reader(self, on_line, on_end) -> None:
        try:
            for raw in iter(self.read, b""):
                try:
                    on_line(self, raw)
                except Exception:  # never let one line kill the reader
                    log.exception("handling a line from the worker failed")
        except (OSError, ValueError, EOFError):
            pass
        finally:
            on_end(self)

    def _stderr_reader(self) -> None:
        try:
            for raw in iter(self.proc.stderr.readline, b""):
                text = redact.redact(raw.decode("utf-8", "replace").rstrip())
                if text:
                    self.stderr_tail.append(text)
                    log.debug("worker %s: %s", self.pid, text)
        except (OSError, ValueError):
            pass

    def kill(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(5)
            except Exception:
                pass
        else:
            self.hang_up()

    def cleanup(self) -> None:
        self.close_input()
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(2)
        self.close()


class ProcessChannel(Channel):
    """Our own worker: JSON lines on its stdin and stdout."""
    kind = "process"

    def __init__(self, gen: int, proc: subprocess.Popen):
        super().__init__(gen, proc.pid)
        self.proc = proc

    def read(self) -> bytes:
        return self.proc.stdout.readline()

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def end_output(self) -> None:
        self.proc.stdin.close()

    def close(self) -> None:
        for f in (self.proc.stdout, self.proc.stdin, self.proc.stderr):
            try:
                if f is not None:
                    f.close()
            except (OSError, ValueError):
                pass


class PeerChannel(Channel):
    """Another process's worker, through its transport (already authenticated)."""
    kind = "socket"

    def __init__(self, gen: int, conn: Connection, pid: int):
        super().__init__(gen, pid)
        self.conn = conn

    def read(self) -> bytes:
        try:
            return self.conn.recv_bytes() or b"\n"    # an empty message is not the end
        except EOFError:
            return b""

    def write(self, data: bytes) -> None:
        self.conn.send_bytes(data)

    def end_output(self) -> None:
        hang_up(self.conn)

    def hang_up(self) -> None:
        hang_up(self.conn)

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
