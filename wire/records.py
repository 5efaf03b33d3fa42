"""Typed records at the engine's boundary: what goes in, what comes out.

The CLI, the worker's wire protocol and the plugin all speak these; they are plain pydantic
models so that they serialise to JSON and validate on the way back in. Every operation of the
service (service/base.py) answers with one of them (or a list of them, or a plain number):
none answers with a dict. Times the engine reports as stored text (browse rows, export
records) stay ISO text, so that an export is written back byte for byte as it was read.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def as_utc(value: datetime) -> datetime:
    """A naive time is local time (what a user typing a date means)."""
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(timezone.utc)


class Record(BaseModel):
    # Validators are built on first use, not at import: PyGPT's start-up imports the plugin.
    model_config = ConfigDict(defer_build=True)


class Credentials(Record):
    """Keys and endpoints that come from PyGPT or the environment, not from our settings.

    Never logged; travels to the worker over stdin only.
    """
    openai_api_key: str = ""
    openai_base_url: str = ""
    google_api_key: str = ""
    ollama_base_url: str = ""
    # The provider PyGPT uses for the chosen Graphiti model, when known (openai, ollama, google...)
    model_provider: str = ""

    @classmethod
    def from_env(cls) -> "Credentials":
        """Keys the CLI and the MCP server may use: the environment variables the providers'
        own SDKs read (here, not in engine/providers: a command would import graphiti for it)."""
        import os
        env = os.environ
        return cls(openai_api_key=env.get("OPENAI_API_KEY", ""),
                   openai_base_url=env.get("OPENAI_BASE_URL", ""),
                   google_api_key=env.get("GOOGLE_API_KEY", "") or env.get("GEMINI_API_KEY", ""),
                   ollama_base_url=env.get("OLLAMA_BASE_URL", ""))


class Turn(Record):
    """One chat turn to remember. `id` is the caller's stable id (PyGPT's ctx id)."""
    id: str = Field(min_length=1, max_length=512)
    user: str = ""
    assistant: str = ""
    time: datetime = Field(default_factory=utc_now)
    tags: list[str] = Field(default_factory=list)
    # An explicit memory (/remember_this): stored even when pruning or the gate would skip it.
    explicit: bool = False

    @field_validator("time")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return as_utc(v)

    def body(self) -> str:
        """The episode text graphiti reads: 'speaker: text' lines."""
        parts = []
        if self.user.strip():
            parts.append(f"User: {self.user.strip()}")
        if self.assistant.strip():
            parts.append(f"Assistant: {self.assistant.strip()}")
        return "\n".join(parts)


class IngestReport(Record):
    stored: list[str] = Field(default_factory=list)       # new or replaced episodes (caller ids)
    replaced: list[str] = Field(default_factory=list)     # same id, different content
    unchanged: list[str] = Field(default_factory=list)    # same id, same content: nothing written
    skipped: dict[str, str] = Field(default_factory=dict)  # caller id -> reason (pruned, gate)
    llm_calls: int = 0
    engine: Literal["local", "llm"] = "local"
    # False: written to Kuzu's log but not yet flushed (the caller asked to defer the flush);
    # a worker that dies before flushing may lose it in a failed replay, so the caller keeps
    # such turns until a flushed answer from the same engine `instance`.
    flushed: bool = True
    # True: the bank had nothing unflushed when this batch began, so the turns this `instance`
    # answered unflushed before are flushed (by a later batch or the idle maintenance)
    flushed_before: bool = False
    instance: str = ""
    # caller id -> why: turns the LLM could not extract (unusable answers), stored by local
    # extraction instead and marked so
    fallbacks: dict[str, str] = Field(default_factory=dict)
    # the bank's embedder and why it has it ({"id", "why"}), for the settings page
    embedder: dict[str, str] = Field(default_factory=dict)


ResultKind = Literal["fact", "entity", "episode"]


class SearchResult(Record):
    id: str
    kind: ResultKind
    text: str
    valid_at: datetime | None = None
    invalid_at: datetime | None = None
    tags: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)  # caller ids, most relevant first
    score: float = 0.0
    name: str = ""                                     # entity name / relation type

    def current(self) -> bool:
        return self.invalid_at is None


class TimelineFact(Record):
    """One fact about an entity: since when it held, until when (None: still true), and
    when it was said (the turn that first told it)."""
    id: str
    fact: str
    valid_at: datetime | None = None
    invalid_at: datetime | None = None
    said_at: datetime | None = None


class Timeline(Record):
    """What is known about one entity, ordered by validity; replaced facts included."""
    entity: str                                          # as asked
    matched: list[str] = Field(default_factory=list)     # the entity names it resolved to
    facts: list[TimelineFact] = Field(default_factory=list)


class ForgetReport(Record):
    forgotten: list[str] = Field(default_factory=list)  # result ids removed
    episodes_removed: int = 0
    sources: list[str] = Field(default_factory=list)    # caller ids of the removed episodes
    # For a text match not yet confirmed: what would go.
    matches: list[SearchResult] = Field(default_factory=list)
    dry_run: bool = False


class BankStats(Record):
    name: str
    backend: str
    episodes: int = 0
    entities: int = 0
    facts: int = 0
    current_facts: int = 0
    llm_calls: int = 0
    llm_input_tokens: int = 0
    llm_output_tokens: int = 0
    llm_calls_today: int = 0
    skipped_by_gate: int = 0
    pruned: int = 0
    embedder: str = ""
    embedder_note: str = ""       # why the bank has this embedder (decided when it was built)
    embedding_dim: int = 0
    engine: str = ""
    llm_fallbacks: int = 0        # turns stored by local extraction because the LLM's answers were unusable


class BankInfo(Record):
    name: str
    episodes: int = 0
    entities: int = 0
    facts: int = 0
    backend: str = "kuzu"


# ── browse: pages for the memory browser ──────────────────────────────────────────────────
class FactRow(Record):
    """A fact (a relation between two entities), as the browser lists it."""
    id: str
    relation: str = ""
    text: str = ""
    source: str = ""                  # entity names
    target: str = ""
    valid_at: str | None = None
    invalid_at: str | None = None
    current: bool = True


class EpisodeRow(Record):
    """A stored turn, newest first."""
    id: str
    source: str = ""                  # the caller's id of the turn (pygpt:meta:ctx, remember:...)
    text: str = ""
    tags: list[str] = Field(default_factory=list)
    vibe: float | None = None
    explicit: bool = False
    fallback: str = ""                # why local extraction stored it ("" when it did not)
    valid_at: str | None = None
    stored_at: str | None = None
    facts: int = 0
    complete: bool = True


class EntityRow(Record):
    """An entity with the facts that touch it."""
    id: str
    name: str = ""
    labels: list[str] = Field(default_factory=list)
    summary: str = ""
    relations: list[FactRow] = Field(default_factory=list)


BROWSE_ROWS: dict[str, type[Record]] = {"episodes": EpisodeRow, "facts": FactRow, "entities": EntityRow}
BrowseRow = Union[EpisodeRow, FactRow, EntityRow]


# ── export and import: lossless records, one JSON line each ──────────────────────────────
class _Exported(Record):
    # Lossless: a field the engine adds later travels too.
    model_config = ConfigDict(defer_build=True, extra="allow")


class ExportedBank(_Exported):
    type: Literal["bank"] = "bank"
    name: str
    embedder: str = ""
    embedding_dim: int = 0
    format: int = 1


class ExportedEpisode(_Exported):
    type: Literal["episode"] = "episode"
    uuid: str
    name: str = ""
    content: str = ""
    source_description: str = ""
    valid_at: str | None = None
    created_at: str | None = None
    entity_edges: list[str] = Field(default_factory=list)


class ExportedEntity(_Exported):
    type: Literal["entity"] = "entity"
    uuid: str
    name: str = ""
    labels: list[str] = Field(default_factory=list)
    summary: str = ""
    attributes: dict[str, Any] = Field(default_factory=dict)
    created_at: str | None = None
    name_embedding: list[float] | None = None


class ExportedFact(_Exported):
    type: Literal["fact"] = "fact"
    uuid: str
    source: str
    target: str
    name: str = ""
    fact: str = ""
    episodes: list[str] = Field(default_factory=list)
    valid_at: str | None = None
    invalid_at: str | None = None
    expired_at: str | None = None
    created_at: str | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    fact_embedding: list[float] | None = None


class ExportedMention(_Exported):
    type: Literal["mention"] = "mention"
    episode: str
    entity: str


ExportRecord = Annotated[Union[ExportedBank, ExportedEpisode, ExportedEntity, ExportedFact, ExportedMention],
                         Field(discriminator="type")]


class ImportReport(Record):
    episodes: int = 0
    entities: int = 0
    facts: int = 0
    mentions: int = 0
    problems: list[str] = Field(default_factory=list)   # "line i: ..." of the records given


# ── the worker and its engine ─────────────────────────────────────────────────────────────
class EmbedderInfo(Record):
    id: str = ""
    why: str = ""
    provider: str = ""


class EmbedderStatus(Record):
    """The embedder a new bank gets and why, and the one each open bank was built with."""
    new_banks: EmbedderInfo = Field(default_factory=EmbedderInfo)
    banks: dict[str, EmbedderInfo] = Field(default_factory=dict)


class Health(Record):
    """The engine's health; through a worker also the worker's identity and load."""
    model_config = ConfigDict(defer_build=True, extra="allow")
    ok: bool = True
    pid: int = 0
    backend: str = ""
    extraction: str | None = None
    mode: str = ""
    banks_open: list[str] = Field(default_factory=list)
    embedder: EmbedderStatus | None = None
    # the worker's (absent in process)
    protocol: int | None = None
    role: str | None = None
    socket: str | None = None
    python: str | None = None
    uptime_s: float | None = None
    rss_mb: float | None = None
    in_flight: int | None = None
    ops: int | None = None
    sockets: int | None = None
    memory_returned_mb: float | None = None
    app: str | None = None


class Pong(Record):
    pid: int


class SettingsApplied(Record):
    """What update_settings did: applied at once (the extraction and backend now in use), or
    not (`reason`: it applies from the next worker process, or the worker is another's)."""
    applied: bool = True
    reason: str = ""
    extraction: str = ""
    backend: str = ""


class ShutdownReport(Record):
    closed: bool = True
    reason: str = ""
    pid: int = 0
