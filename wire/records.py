"""Typed records at the engine's boundary: what goes in, what comes out.

The CLI, the worker's wire protocol and the plugin all speak these; they are plain pydantic
models so that they serialise to JSON and validate on the way back in.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal

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
