"""Finding the worker another process runs for the data directory (worker.json) and joining
it: the transport's token challenge, then the hello (wire/protocol.py): this client's
settings fingerprint in, what governs the banks out. While that worker's owner restarts it,
wait for the next one (bounded)."""
from __future__ import annotations

import logging
import time
import uuid

from memoryplus.client.channel import PeerChannel
from memoryplus.client.launcher import Launcher
from memoryplus.client.requests import RequestTable
from memoryplus.client.state import Shared
from memoryplus.common import redact
from memoryplus.wire import protocol as P
from memoryplus.wire import transport as T

log = logging.getLogger("memoryplus.client")


class Discovery:
    def __init__(self, shared: Shared, launcher: Launcher, table: RequestTable, reconnect_s: float,
                 state_settings: bool = True):
        self.s, self.launcher, self.table, self.reconnect_s = shared, launcher, table, reconnect_s
        self.state_settings = state_settings
        self.had_socket = False

    def other_worker(self, mode: str) -> PeerChannel | None:
        """Connect to the worker another process (or another client) runs for this data
        directory; while its owner is restarting it, wait for it (bounded by reconnect_s)."""
        deadline = time.monotonic() + self.reconnect_s
        data_dir = self.launcher.data_dir
        while True:
            info = P.live_worker(data_dir)
            if info is not None and info.pid not in self.s.own_pids:
                ch = self.join(info)
                if ch is not None:
                    return ch
            elif mode != "socket" or not self.had_socket:
                expected = P.restart_expected(data_dir)
                if expected is None or expected.pid in self.s.own_pids:
                    return None
            with self.s.lock:
                if self.s.closing or time.monotonic() >= deadline:
                    return None
                if self.s.state not in ("starting", "restarting"):
                    self.s.state = "restarting"
            self.s.wait(0.2)

    def join(self, info: P.WorkerInfo) -> PeerChannel | None:
        redact.register(info.token)
        try:
            conn = T.connect(info.family, info.socket, info.token)
        except OSError as exc:
            return self._failed(info, exc)
        try:
            hello = self._hello(conn)
            ping = self._ask(conn, "health", {})
        except (OSError, EOFError) as exc:
            conn.close()
            return self._failed(info, exc)
        self.had_socket = True
        ch = PeerChannel(next(self.s.gens), conn, info.pid)
        ch.info = dict(ping or {})
        ch.ready = True
        with self.s.lock:
            self.s.conflicts = hello.conflicts()
        if self.s.conflicts:
            log.warning("the worker of %s governs the banks; of this process's settings: %s", info.app,
                        "; ".join(self.s.conflicts))
        ch.start(self.table.on_line, self.table.channel_ended)
        log.info("using the running worker of %s (pid %d) through %s", info.app, info.pid, info.socket)
        return ch

    def _failed(self, info: P.WorkerInfo, exc: BaseException) -> None:
        with self.s.lock:
            self.s.last_error = f"cannot reach the worker of {info.app} (pid {info.pid}): {exc}"
        log.info(self.s.last_error)
        return None

    def _hello(self, conn) -> P.HelloResult:
        mine = P.settings_fingerprint(self.launcher.settings) if self.state_settings else {}
        params = P.HelloParams(app=self.launcher.app, settings=mine)
        return P.HelloResult.model_validate(self._ask(conn, "hello", params.model_dump(mode="json")))

    @staticmethod
    def _ask(conn, op: str, params: dict, timeout: float = 5.0):
        rid = uuid.uuid4().hex
        conn.send_bytes(P.encode(P.Request(id=rid, op=op, params=params, lane="control")))
        deadline = time.monotonic() + timeout
        while True:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                raise ConnectionError(f"the worker did not answer {op} within {timeout:.0f} s")
            try:
                msg = P.decode(conn.recv_bytes())
            except P.ProtocolError:
                continue
            if isinstance(msg, P.Response) and msg.id == rid:
                if not msg.ok:
                    raise ConnectionError(msg.error.message if msg.error else f"{op} failed")
                return msg.result
