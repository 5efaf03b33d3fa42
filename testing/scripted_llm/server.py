"""The scripted LLM's server: its life cycle on 127.0.0.1, what it records, and the
standalone command (``python -m memoryplus.testing.scripted_llm``)."""

from __future__ import annotations

import argparse
import logging
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from memoryplus.testing.scripted_llm.brain import ScriptedBrain
from memoryplus.testing.scripted_llm.faults import FaultQueue
from memoryplus.testing.scripted_llm.handler import _Handler
from memoryplus.testing.scripted_llm.own_text import DEFAULT_EMBEDDING_DIM
from memoryplus.testing.scripted_llm.wire import DEFAULT_MODEL_ID, _bearer, mask_secret

log = logging.getLogger(__name__)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler, owner: ScriptedLLMServer):
        self.owner = owner
        self._lock = threading.Lock()
        self._conn_threads: set[threading.Thread] = set()
        self._conns: set[socket.socket] = set()
        super().__init__(addr, handler)

    def process_request(self, request, client_address):  # one thread per connection
        t = threading.Thread(target=self._serve_conn, args=(request, client_address),
                             name='scripted-llm-conn', daemon=True)
        with self._lock:
            self._conn_threads.add(t)
            self._conns.add(request)
        t.start()

    def _serve_conn(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            with self._lock:
                self._conns.discard(request)
                self._conn_threads.discard(threading.current_thread())

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return
        log.exception('scripted LLM server: error while serving %s', client_address)

    def close_connections(self) -> list[threading.Thread]:
        with self._lock:
            conns = list(self._conns)
            threads = list(self._conn_threads)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return threads


class ScriptedLLMServer:
    """OpenAI-compatible scripted LLM on 127.0.0.1 (see the module docstring).

    Attributes
    ----------
    base_url: ``http://127.0.0.1:<port>/v1`` once started.
    latency_s: per-call sleep for chat/responses calls (settable at runtime);
        ``latency_embeddings=True`` applies it to /v1/embeddings too.
    timeout_hold_s: how long a "timeout" fault holds the connection (default 5 s).
    serve_embeddings: set False to answer /v1/embeddings with 404 (a chat-only server).
    max_embedding_inputs: texts one /v1/embeddings request may carry; more get a 400, as
        OpenAI answers past its 2,048 (the default).
    requests: snapshot list of ``(path, parsed json body or None)``.
    calls: Counter per response-model / prompt kind (``'ExtractedEntities'``, ...,
        ``'chat'``, ``'rerank'``, ``'json_object'``, ``'embeddings'``).
    input_tokens: estimated prompt tokens (chars/4) over all LLM calls.
    tokens_by_name: Counter of those estimates per call name.
    faults_applied: Counter per fault kind actually applied.
    brain: the :class:`ScriptedBrain` (its fact memory lives as long as the server).
    """

    def __init__(self, latency_s: float = 0.0, chat_reply: Callable[[dict], str | dict] | None = None, *,
                 port: int = 0, embedding_dim: int = DEFAULT_EMBEDDING_DIM, timeout_hold_s: float = 5.0,
                 model_ids: Iterable[str] = (DEFAULT_MODEL_ID,), max_recorded: int = 20000) -> None:
        self.latency_s = float(latency_s)
        self.chat_reply = chat_reply
        self.port = int(port)
        self.embedding_dim = int(embedding_dim)
        self.timeout_hold_s = float(timeout_hold_s)
        self.latency_embeddings = False
        # False: /v1/embeddings answers 404, as a chat-only OpenAI-compatible server does
        self.serve_embeddings = True
        self.max_embedding_inputs = 2048
        self.stream_chunk_delay_s = 0.0
        self.model_ids = list(model_ids)
        self.max_recorded = int(max_recorded)
        self.brain = ScriptedBrain()
        self.base_url: str | None = None
        self._lock = threading.Lock()
        self._requests: list[tuple[str, Any]] = []
        self._keys: list[tuple[str, str | None]] = []   # (path, masked API key), as requests
        self._calls: Counter = Counter()
        self._tokens_by_name: Counter = Counter()
        self._input_tokens = 0
        self._embedding_tokens = 0
        self._faults = FaultQueue()
        self._brain_errors: list[tuple[str | None, str]] = []
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------
    def start(self) -> ScriptedLLMServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        self._httpd = _HTTPServer(('127.0.0.1', self.port), _Handler, self)
        self.port = self._httpd.server_address[1]
        self.base_url = f'http://127.0.0.1:{self.port}/v1'
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={'poll_interval': 0.05},
                                        name='scripted-llm-server', daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        conn_threads = httpd.close_connections()
        httpd.server_close()
        deadline = time.monotonic() + timeout
        for t in [thread, *conn_threads]:
            if t is not None and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        self._httpd = None
        self._thread = None

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- faults -----------------------------------------------------------------------
    def inject(self, kind: str, count: int = 1, retry_after: float = 1, *, embeddings: bool = False,
               llm: bool = True, structured_only: bool = False) -> None:
        """Queue a fault for the next ``count`` matching calls.

        kind: "429" (Retry-After header), "500", "timeout" (hold ``timeout_hold_s`` then
        answer), "401" (a refused key), "garbage" (200 with truncated/invalid JSON), "think" (valid answer
        prefixed by a <think> block).  By default it hits chat/responses calls (any,
        or only structured ones with ``structured_only=True``); ``embeddings=True`` lets
        it hit /v1/embeddings too (``llm=False`` for embeddings only).
        """
        self._faults.add(kind, count, retry_after, embeddings=embeddings, llm=llm, structured_only=structured_only)

    def clear_faults(self) -> None:
        self._faults.clear()

    @property
    def faults_pending(self) -> list[tuple[str, int]]:
        return self._faults.pending

    @property
    def faults_applied(self) -> Counter:
        return self._faults.applied

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(max(0.0, seconds))

    # -- recording --------------------------------------------------------------------
    def _record(self, path: str, body: Any, headers: Any = None) -> None:
        key = _bearer(headers)
        with self._lock:
            self._requests.append((path, body))
            self._keys.append((path, mask_secret(key) if key else None))
            if self.max_recorded and len(self._requests) > self.max_recorded:
                del self._requests[: len(self._requests) - self.max_recorded]
                del self._keys[: len(self._keys) - self.max_recorded]

    def _count(self, name: str, input_tokens: int, embedding_tokens: int = 0) -> None:
        with self._lock:
            self._calls[name] += 1
            self._tokens_by_name[name] += input_tokens
            self._input_tokens += input_tokens
            self._embedding_tokens += embedding_tokens

    def _brain_error(self, name: str | None, exc: BaseException) -> None:
        with self._lock:
            self._brain_errors.append((name, repr(exc)))

    @property
    def requests(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self._requests)

    @property
    def api_keys(self) -> list[tuple[str, str | None]]:
        """(path, masked API key the request carried, or None) per recorded request; the key
        itself is never kept (compare with ``mask_secret(expected)``)."""
        with self._lock:
            return list(self._keys)

    def keys_sent_to(self, route: str) -> set[str | None]:
        """The masked keys of the requests whose path ends with `route` ('/embeddings', ...)."""
        return {k for p, k in self.api_keys if urlsplit(p).path.rstrip('/').endswith(route)}

    @property
    def texts_embedded(self) -> list[int]:
        """The number of texts of each embeddings request received, in order."""
        return [len(b["input"]) if isinstance(b["input"], list) else 1
                for p, b in self.requests if urlsplit(p).path.rstrip('/').endswith('/embeddings')]

    @property
    def calls(self) -> Counter:
        with self._lock:
            return Counter(self._calls)

    @property
    def tokens_by_name(self) -> Counter:
        with self._lock:
            return Counter(self._tokens_by_name)

    @property
    def input_tokens(self) -> int:
        with self._lock:
            return self._input_tokens

    @property
    def embedding_tokens(self) -> int:
        with self._lock:
            return self._embedding_tokens

    @property
    def unanswered(self) -> Counter:
        """Schemas answered only with a minimal valid instance (no handler knows them)."""
        with self.brain._lock:
            return Counter(self.brain.unanswered)

    @property
    def brain_errors(self) -> list[tuple[str | None, str]]:
        with self._lock:
            return list(self._brain_errors)

    def reset(self) -> None:
        """Forget recorded requests, counters and queued faults (not the brain's memory)."""
        with self._lock:
            self._requests.clear()
            self._keys.clear()
            self._calls.clear()
            self._tokens_by_name.clear()
            self._input_tokens = 0
            self._embedding_tokens = 0
            self._brain_errors.clear()
        self._faults.reset()
        with self.brain._lock:
            self.brain.unanswered.clear()
            self.brain.gate_decisions.clear()



# --------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog='python -m memoryplus.testing.scripted_llm',
        description='Run the scripted OpenAI-compatible LLM on 127.0.0.1 until Ctrl-C.',
    )
    parser.add_argument('--port', type=int, default=0, help='TCP port on 127.0.0.1 (0 = any free port)')
    parser.add_argument('--latency-ms', type=float, default=0.0, help='sleep per LLM call, in milliseconds')
    parser.add_argument('--embedding-dim', type=int, default=DEFAULT_EMBEDDING_DIM,
                        help='embedding size when the request has no "dimensions"')
    parser.add_argument('--verbose', action='store_true', help='log every request')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format='%(message)s')
    server = ScriptedLLMServer(latency_s=args.latency_ms / 1000.0, port=args.port, embedding_dim=args.embedding_dim)
    server.start()
    print(f'scripted LLM listening on {server.base_url}  (Ctrl-C to stop)', flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        calls = server.calls
        print(f'stopped; {sum(calls.values())} calls: {dict(calls)}', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
