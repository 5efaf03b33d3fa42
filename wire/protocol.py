"""The wire protocol between the graph worker and its clients: JSON lines, requests matched by id.

One message per line, UTF-8, ASCII-escaped JSON (so a line never contains a raw newline or
an unpaired surrogate). The same protocol runs over the worker's stdin/stdout (the process
that started it) and over its transport (other processes of the same user: wire/transport.py).

Client → worker:

    {"type": "config", "settings": {...}, "credentials": {...}, "data_dir": "...", ...}
        the first line on stdin, and only there: the only way secrets reach a worker
    {"id": "…", "op": "search", "params": {...}, "lane": "read"}

Worker → client:

    {"id": "…", "ok": true, "result": <JSON>}
    {"id": "…", "ok": false, "error": {"type": "UnknownBankError", "message": "…", "code": "unknown_bank"}}
    {"event": "ready", "data": {"pid": …, "extraction": "local", …}}
    {"event": "recycling", "data": {"reason": "…"}}      the worker is about to exit cleanly
    {"event": "fatal", "data": {"type": …, "message": …}}  the worker cannot start

An error of type "NotAccepted" means the worker is stopping and did not run the request: the
client sends it to the next worker.

Every request carries a client-chosen id; the answer carries it back. A client drops an
answer whose id it no longer waits for (a request that timed out). Writes are idempotent in
the engine (caller ids on every turn), so a client may re-send any unanswered request to a
new worker after a crash.

One worker per data directory, and what it owes its clients
-------------------------------------------------------------

The process that starts a persistent worker (PyGPT's plugin, or the CLI when nothing else
runs) is its *owner*: its config message, on the worker's stdin, carries the settings and the
credentials that govern every bank of that data directory for the worker's whole life, and
only the owner may change them (`update_settings`) or stop the worker (`shutdown`):
`OWNER_ONLY`. Every other process is a *socket client*: it reaches the worker through the
transport of wire/transport.py (the address and token in worker.json), and its own settings
and credentials are never sent nor applied. What governs a bank besides: the embedder the
bank was built with, recorded in its manifest; settings that resolve another embedder get
`EmbeddingMismatchError`, naming what the bank was built with and how to fix it (re-embed, or
switch the embedding settings back), from every operation on that bank, for every client.

A socket client therefore says who it is first (`hello`, before any other request): its app,
its protocol version, and the fingerprint of its settings, which is the values of the options
in `GOVERNING_SETTINGS` minus the secrets (secrets are not compared and never leave the
client). The worker answers a `HelloResult`: the owner, every governing option whose value
differs from the client's (`differs`: the worker's value, which is used, and the client's,
which is not), and every bank whose recorded embedder differs from what the client's
embedding settings would choose (`embedders`: what it was built with, and the fix). Nothing
is refused for a difference: the client works under the owner's settings and is told so
(`WorkerClient.status()["conflicts"]`, and one warning in its log). A client of another
protocol version is refused (`ProtocolMismatch`).

Events the worker pushes to every client (the owner and each socket client), before it
answers the request that caused them, so that a client's caches never outlive what another
client changed:

    {"event": "bank_changed", "data": {"bank": "…", "op": "ingest", "origin": "socket#2"}}
        after an ingest, remember, import, clear, reembed, rate, prune or expire that
        succeeded (`cleared`: true after a clear)
    {"event": "forgotten", "data": {"bank": "…", "ids": [...], "caller_ids": [...], "origin": …}}
        after a forget that removed something: the result ids and the caller ids (the
        plugin's turn ids) of the episodes removed
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from memoryplus.wire.records import (
    BankInfo, BankStats, BrowseRow, Credentials, ExportRecord, ForgetReport, Health, ImportReport,
    IngestReport, Pong, SearchResult, SettingsApplied, ShutdownReport, Timeline, Turn,
)

PROTOCOL_VERSION = 1
Lane = Literal["read", "write", "control"]
Role = Literal["persistent", "oneshot"]
# Priority of a lane on a client's outgoing queue: control first, then reads, then writes.
LANE_PRIORITY = {"control": 0, "read": 1, "write": 2}
# Environment variable enabling the test-only ops (sleep, junk, log, fail, crash) in a worker.
TEST_HOOKS_ENV = "MEMORYPLUS_TEST_HOOKS"
# The worker is started by module name (`python -m`, or a frozen build's spawn child): the
# client side never imports it.
WORKER_MODULE = "memoryplus.worker.process"
WORKER_FILE = "worker.json"
WORKER_LOCK = "worker.lock"
LOG_DIR = "logs"
LOG_FILE = "worker.log"
# Events pushed to every client when a bank changes (see the module docstring).
BANK_CHANGED, FORGOTTEN = "bank_changed", "forgotten"
BANK_EVENTS = frozenset({BANK_CHANGED, FORGOTTEN})
# The options the engine reads: the worker's owner's values govern every bank of the data
# directory (tests/test_shared_worker.py checks that every option engine/ reads is here).
GOVERNING_SETTINGS = frozenset({
    "backend", "neo4j_uri", "neo4j_user", "neo4j_password", "neo4j_database", "kuzu_buffer_pool_mb",
    "memory_mode", "custom_analysis_prompt", "extraction_engine", "llm_provider", "graphiti_model",
    "graphiti_temperature", "max_context_tokens", "override_base_url", "override_api_key",
    "insight_model", "insight_temperature", "embedding_provider", "embedding_model",
    "embedding_base_url", "embedding_api_key", "max_memory_length", "emotion_tagging",
    "emotion_sensitivity", "topic_tagging", "vibe_scoring", "auto_prune", "low_value_threshold",
    "memory_expiry_days", "custom_memory_tags", "search_depth", "bank_idle_close_s",
})


class ProtocolError(ValueError):
    """A line that is not a message of this protocol."""


class _Msg(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)   # built on first use


# ── start-up ──────────────────────────────────────────────────────────────────────────────
class WorkerLimits(_Msg):
    """Recycling, idleness and shutdown knobs of a persistent worker."""
    recycle_after_ops: int = Field(5000, ge=0)       # 0: never recycle for the op count
    recycle_rss_mb: int = Field(2048, ge=0)          # 0: never recycle for memory
    idle_s: float = Field(2.0, ge=0.05)              # idle this long before maintenance/recycling
    shutdown_grace_s: float = Field(10.0, ge=0.0)    # in-flight requests get this long at shutdown
    # Between operations, freed heap is given back once the resident size has grown this much
    # since the last trim (worker/maintenance.py trim_if_grown).
    trim_growth_mb: float = Field(32.0, gt=0)


class ConfigMessage(_Msg):
    type: Literal["config"] = "config"
    protocol: int = PROTOCOL_VERSION
    settings: dict[str, Any] = Field(default_factory=dict)   # Settings.model_dump()
    credentials: Credentials = Field(default_factory=Credentials)
    data_dir: str
    app: str = "memoryplus"
    role: Role = "persistent"
    owner_pid: int | None = None                      # the process that started the worker
    limits: WorkerLimits = Field(default_factory=WorkerLimits)
    # Test hooks (honoured only when MEMORYPLUS_TEST_HOOKS=1 in the worker's environment).
    test: dict[str, Any] = Field(default_factory=dict)


# ── requests and their parameters ─────────────────────────────────────────────────────────
class Request(_Msg):
    id: str = Field(min_length=1, max_length=200)
    op: str
    params: dict[str, Any] = Field(default_factory=dict)
    lane: Lane = "read"


class ErrorInfo(_Msg):
    type: str
    message: str
    code: str = "internal"      # what the caller does about it: wire/errors.py's codes


class Response(_Msg):
    id: str
    ok: bool
    result: Any = None
    error: ErrorInfo | None = None


class Event(_Msg):
    event: str
    data: dict[str, Any] = Field(default_factory=dict)


class NoParams(_Msg):
    pass


class BankParams(_Msg):
    bank: str = Field(min_length=1)


class IngestParams(BankParams):
    turns: list[Turn]
    # the answer may come before Kuzu's log is flushed (IngestReport.flushed): a later batch or
    # the worker's idle maintenance flushes it, off the path of the next search
    defer_flush: bool = False
    backlog: bool = False         # more turns of this bank follow at once: no search is near


class RememberParams(BankParams):
    text: str
    key: str | None = None
    tags: list[str] = Field(default_factory=list)


class SearchParams(BankParams):
    query: str
    limit: int = 10
    as_of: datetime | None = None
    now: datetime | None = None     # the conversation's time (default: the machine's)


class ForgetParams(BankParams):
    last: bool = False
    ids: list[str] | None = None
    text: str | None = None
    confirm: bool = True


MAX_ENTITY_CHARS = 200      # a name, not a text: longer is a mistake (or an attack)


class TimelineParams(BankParams):
    """What is known about one entity (a person, place or thing), with each fact's validity."""
    entity: str = Field(min_length=1, max_length=MAX_ENTITY_CHARS)
    limit: int = Field(50, ge=1, le=500)
    as_of: datetime | None = None       # only what had begun by then (and was said by then)

    @field_validator("bank")
    @classmethod
    def _bank_name(cls, v: str) -> str:
        from memoryplus.wire.banks import check_name
        return check_name(v)

    @field_validator("entity")
    @classmethod
    def _entity(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("the entity is empty: name a person, place or thing")
        return v


class RateParams(BankParams):
    id: str
    value: int


class PruneParams(BankParams):
    threshold: int | None = None


class ExpireParams(BankParams):
    days: int | None = None


class BrowseParams(BankParams):
    what: Literal["episodes", "facts", "entities"] = "episodes"
    offset: int = Field(0, ge=0)
    limit: int = Field(50, ge=1, le=1000)


class ImportParams(BankParams):
    records: list[dict[str, Any]]


class UpdateSettingsParams(_Msg):
    settings: dict[str, Any]
    credentials: Credentials | None = None


class ShutdownParams(_Msg):
    grace_s: float | None = Field(None, ge=0.0)


class CancelParams(_Msg):
    id: str


class HelloParams(_Msg):
    """A socket client's first request: who it is and its settings' fingerprint."""
    app: str = "memoryplus"
    protocol: int = PROTOCOL_VERSION
    settings: dict[str, Any] = Field(default_factory=dict)    # settings_fingerprint()


class SettingDifference(_Msg):
    option: str
    worker: Any = None        # the value that governs the bank (the owner's)
    client: Any = None        # the client's own value, which is not applied


class EmbedderConflict(_Msg):
    bank: str
    built_with: str           # the embedder id the bank's manifest records
    dim: int = 0
    yours: str                # what the client's embedding settings would choose
    message: str              # what the bank was built with, and how to fix it


class HelloResult(_Msg):
    pid: int
    app: str                  # the owner's app ("PyGPT")
    owner_pid: int | None = None
    protocol: int = PROTOCOL_VERSION
    differs: list[SettingDifference] = Field(default_factory=list)
    embedders: list[EmbedderConflict] = Field(default_factory=list)

    def conflicts(self) -> list[str]:
        """One line per difference, for a status view or a log (values are not secrets)."""
        out = [f"{d.option}: the worker of {self.app} uses {d.worker!r}, not yours ({d.client!r})"
               for d in self.differs]
        return out + [e.message for e in self.embedders]


def settings_fingerprint(settings: Any) -> dict[str, Any]:
    """What a client tells a worker of its settings: the governing options, secrets left out."""
    from memoryplus.config.schema import SECRET_OPTIONS
    data = settings.model_dump(mode="json") if isinstance(settings, BaseModel) else dict(settings)
    return {k: data[k] for k in sorted(GOVERNING_SETTINGS - SECRET_OPTIONS) if k in data}


class BankChangedData(_Msg):
    bank: str
    op: str
    origin: str = ""
    cleared: bool = False


class ForgottenData(_Msg):
    bank: str
    ids: list[str] = Field(default_factory=list)          # result ids removed
    caller_ids: list[str] = Field(default_factory=list)   # caller ids (turn ids) of the episodes removed
    origin: str = ""


# test-only ops
class SleepParams(_Msg):
    seconds: float = Field(ge=0.0, le=3600.0)
    blocking: bool = False       # block the whole event loop (a stuck native call)


class JunkParams(_Msg):
    lines: list[str] = Field(default_factory=lambda: ["this is not json", "{broken", '{"id": 1}'])
    binary: bool = True          # also write undecodable bytes


class LogParams(_Msg):
    message: str
    level: Literal["debug", "info", "warning", "error"] = "warning"


class FailParams(_Msg):
    message: str


class CrashParams(_Msg):
    code: int = 9


@dataclass(frozen=True)
class OpSpec:
    name: str
    params: type[_Msg]
    lane: Lane
    result: Any = Any               # type of the result, for decode_result
    bank: bool = False              # works on one bank (per-call mode serializes by bank)
    all_banks: bool = False         # touches every bank
    exclusive: bool = False         # runs alone in the worker (waits for the others)
    test: bool = False              # exists only with MEMORYPLUS_TEST_HOOKS=1
    counts: bool = True             # counts as work (recycling, idleness)
    # Safe to send again to a new worker when the one it went to died without answering
    # (idempotent in the engine). A rating is not: it might count twice.
    replay: bool = True

    @property
    def cancellable(self) -> bool:
        """Only reads are cancelled when their caller gives up; a write runs to the end
        (Kuzu has no transactions; the engine finishes or recovers it)."""
        return self.lane != "write"


def _op(name, params, lane, result=Any, **kw) -> tuple[str, OpSpec]:
    return name, OpSpec(name, params, lane, result, **kw)


OPS: dict[str, OpSpec] = dict([
    _op("ingest", IngestParams, "write", IngestReport, bank=True),
    _op("remember", RememberParams, "write", IngestReport, bank=True),
    _op("search", SearchParams, "read", list[SearchResult], bank=True),
    _op("forget", ForgetParams, "write", ForgetReport, bank=True),
    _op("rate", RateParams, "write", int, bank=True, replay=False),
    _op("prune", PruneParams, "write", int, bank=True),
    _op("expire", ExpireParams, "write", int, bank=True),
    # clear and reembed close the bank under whatever else uses it: they run alone
    _op("clear", BankParams, "write", type(None), bank=True, exclusive=True),
    _op("reembed", BankParams, "write", int, bank=True, exclusive=True),
    _op("browse", BrowseParams, "read", list[BrowseRow], bank=True),
    _op("timeline", TimelineParams, "read", Timeline, bank=True),
    _op("stats", BankParams, "read", BankStats, bank=True),
    _op("banks", NoParams, "read", list[BankInfo], all_banks=True),
    _op("export", BankParams, "read", list[ExportRecord], bank=True),
    _op("import", ImportParams, "write", ImportReport, bank=True),
    _op("health", NoParams, "control", Health, counts=False),
    _op("ping", NoParams, "control", Pong, counts=False),
    _op("cancel", CancelParams, "control", bool, counts=False),
    _op("update_settings", UpdateSettingsParams, "control", SettingsApplied, exclusive=True),
    _op("shutdown", ShutdownParams, "control", ShutdownReport, counts=False),
    _op("hello", HelloParams, "control", HelloResult, counts=False),
    # test hooks
    _op("sleep", SleepParams, "read", float, test=True),
    _op("junk", JunkParams, "control", int, test=True),
    _op("log", LogParams, "control", bool, test=True),
    _op("fail", FailParams, "read", type(None), test=True),
    _op("crash", CrashParams, "write", type(None), test=True),
])
NOT_ACCEPTED = "NotAccepted"
PROTOCOL_MISMATCH = "ProtocolMismatch"
# Ops another process may not send through the socket: the worker belongs to its starter.
OWNER_ONLY = frozenset({"update_settings", "shutdown"})
# Ops the client sends itself (its methods and its connection set-up), never through submit().
CLIENT_INTERNAL = OWNER_ONLY | {"cancel", "ping", "hello"}


def op_spec(op: str) -> OpSpec:
    try:
        return OPS[op]
    except KeyError:
        raise ProtocolError(f"unknown operation {op!r}") from None


def validate_params(op: str, params: dict[str, Any] | BaseModel | None) -> dict[str, Any]:
    """Parameters checked against the op's model, as JSON-ready data (Turns, datetimes...)."""
    spec = op_spec(op)
    if isinstance(params, BaseModel):
        params = params.model_dump()
    model = spec.params.model_validate(params or {})
    return model.model_dump(mode="json", exclude_unset=False)


_ANY = TypeAdapter(Any)


def to_jsonable(value: Any) -> Any:
    """Engine results (pydantic models, lists of them, datetimes) as plain JSON data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return _ANY.dump_python(value, mode="json")


_RESULT_ADAPTERS: dict[str, TypeAdapter] = {}


def decode_result(op: str, result: Any) -> Any:
    """A result as the engine's typed records (SearchResult, IngestReport, …)."""
    adapter = _RESULT_ADAPTERS.get(op)
    if adapter is None:
        adapter = _RESULT_ADAPTERS[op] = TypeAdapter(op_spec(op).result)
    return adapter.validate_python(result)


def encode(message: BaseModel | dict[str, Any]) -> bytes:
    """One protocol line (bytes, newline-terminated)."""
    if isinstance(message, BaseModel):
        data = message.model_dump(mode="json", exclude_none=isinstance(message, Response))
    else:
        data = message
    return (json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False) + "\n").encode("ascii")


Message = Union[Request, Response, Event, ConfigMessage]


def decode(line: bytes | str) -> Message:
    """The message on one line, or ProtocolError (garbage is never fatal to a reader)."""
    try:
        if isinstance(line, bytes):
            line = line.decode("utf-8")
        data = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"not a JSON line: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError("not a JSON object")
    try:
        if "event" in data:
            return Event.model_validate(data)
        if "ok" in data:
            return Response.model_validate(data)
        if "op" in data:
            return Request.model_validate(data)
        if data.get("type") == "config":
            return ConfigMessage.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(f"malformed message: {exc.errors()[0].get('msg', exc)}") from None
    raise ProtocolError("not a message of this protocol")


def error_response(request_id: str, exc: BaseException | str, type_: str | None = None,
                   code: str | None = None) -> Response:
    """An error answer; the caller redacts the message first. The code: `code`, else the
    exception's own (wire/errors.py), else "internal"."""
    code = code or getattr(exc, "code", None) or "internal"
    if isinstance(exc, BaseException):
        return Response(id=request_id, ok=False,
                        error=ErrorInfo(type=type_ or type(exc).__name__, code=code,
                                        message=str(exc) or type(exc).__name__))
    return Response(id=request_id, ok=False, error=ErrorInfo(type=type_ or "Error", message=exc, code=code))


# ── finding a running worker: worker.json in the data directory ───────────────────────────
class WorkerInfo(_Msg):
    """What worker.json (0600) records of the persistent worker serving a data directory."""
    pid: int
    socket: str                       # the address: a socket path, a pipe name, or 127.0.0.1:port
    family: str = "AF_UNIX"           # wire/transport.py's family
    token: str = ""                   # proves a client may talk to it (wire/transport.py)
    app: str = "memoryplus"
    owner_pid: int | None = None
    started: float = 0.0
    protocol: int = PROTOCOL_VERSION
    recycling: bool = False           # it is restarting on purpose; its owner starts the next


def pid_alive(pid: int | None) -> bool:
    """A running process (a zombie, killed but not yet reaped, counts as dead)."""
    if not pid or pid <= 0:
        return False
    try:
        import psutil
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


def socket_path_for(data_dir) -> str:
    """The worker's socket: in the data directory, or (Unix socket paths are limited to about
    100 bytes) in a private per-user directory under the temporary directory."""
    import hashlib
    import os
    import tempfile
    from pathlib import Path
    data_dir = Path(data_dir).resolve()
    path = data_dir / "worker.sock"
    if len(os.fsencode(str(path))) < 100:
        return str(path)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    private = Path(tempfile.gettempdir()) / f"memoryplus-{uid}"
    private.mkdir(mode=0o700, exist_ok=True)
    st = private.stat()
    if hasattr(os, "getuid") and (st.st_uid != uid or st.st_mode & 0o077):
        raise OSError(f"{private} is not a private directory of this user")
    digest = hashlib.sha256(str(data_dir).encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return str(private / f"{digest}.sock")


def read_worker_file(data_dir) -> WorkerInfo | None:
    from pathlib import Path
    try:
        return WorkerInfo.model_validate_json(Path(data_dir, WORKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_worker_file(data_dir, info: WorkerInfo) -> None:
    import os
    from pathlib import Path
    path = Path(data_dir, WORKER_FILE)
    tmp = path.with_name(f".{WORKER_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(info.model_dump_json())
    os.replace(tmp, path)


def remove_worker_file(data_dir, pid: int) -> None:
    """Remove worker.json if it is this worker's."""
    from pathlib import Path
    info = read_worker_file(data_dir)
    if info is not None and info.pid == pid:
        try:
            Path(data_dir, WORKER_FILE).unlink()
        except OSError:
            pass


def live_worker(data_dir) -> WorkerInfo | None:
    """The running worker of a data directory, if worker.json names a live process that is
    not recycling (a stale file, whose pid is dead, is ignored: the next worker replaces it)."""
    import os
    info = read_worker_file(data_dir)
    if info is None or info.recycling or not pid_alive(info.pid):
        return None
    if info.family == "AF_UNIX" and not os.path.exists(info.socket):
        return None
    return info


def restart_expected(data_dir) -> WorkerInfo | None:
    """worker.json of a worker that is gone or recycling while the process that owns it is
    alive: that process is starting the next one, so another client should wait for it."""
    info = read_worker_file(data_dir)
    if info is None or not (info.recycling or not pid_alive(info.pid)):
        return None
    return info if pid_alive(info.owner_pid) else None
