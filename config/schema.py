"""The one schema of every MemoryPlus setting.

Every option the plugin shows in PyGPT, the worker validates and the CLI reads is declared
here, once: id, type, default, range, tab, label, description. Nothing else in the code base
declares a default; everything else asks this module.

The options are declared on a plain class (`Options`), so that PyGPT's start-up can register
them without importing pydantic (about 70 ms on the GUI thread); the pydantic model `Settings`
is built from that declaration the first time it is asked for (`from ... import Settings`
works as ever: PEP 562 module `__getattr__`).
"""
from __future__ import annotations

import threading
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

if TYPE_CHECKING:
    from pydantic import BaseModel as Settings   # the model built by _model()

TABS: dict[str, str] = {
    "general": "General",
    "database": "Database",
    "models": "Models",
    "sanitization": "Sanitization",
    "intelligence": "Intelligence",
    "lifecycle": "Lifecycle",
    "advanced": "Advanced",
    "tools": "Model Tools",
}

# The nine memory modes, declared here once (engine/modes.py gives each its ontology, in this order).
MemoryMode = Literal[
    "Identity", "Assistant", "Chatbot", "Productivity", "Research",
    "Discourse", "ResolveEntities", "MemoryGate", "CustomPrompt",
]
MEMORY_MODES: tuple[str, ...] = get_args(MemoryMode)


@dataclass(frozen=True)
class Opt:
    """One option's declaration: its default and what the settings page and the docs need.

    `kind` is PyGPT's widget type (text, textarea, int, float, bool, combo); it is derived
    from the default when not given. `issue` names the issue that implements the option.
    """
    default: Any
    _: KW_ONLY
    tab: str
    label: str
    description: str
    kind: str = ""
    ge: float | None = None
    le: float | None = None
    step: float | None = None
    secret: bool = False
    use: str | None = None
    issue: int = 2
    advanced: bool = False

    def __post_init__(self) -> None:
        if not self.kind:
            kind = {bool: "bool", int: "int", float: "float", str: "text"}[type(self.default)]
            object.__setattr__(self, "kind", kind)


def opt(default: Any, **declaration: Any) -> Any:
    """An option's declaration (`Opt`), turned into a pydantic Field by `_model()`; typed Any so
    that the class body below reads as the options' types."""
    return Opt(default, **declaration)


class Options:
    """Every MemoryPlus option. Field names are the option ids PyGPT stores in config.json."""

    # ── General ────────────────────────────────────────────────────────────────────────
    auto_ingest: bool = opt(True, tab="general", label="Auto-Ingest", issue=4, description=(
        "Store every chat turn (user input + AI response) in memory after the answer. Off: only "
        "turns flagged with /remember_this are stored."))
    engine_mode: Literal["auto", "persistent", "subprocess"] = opt(
        "auto", kind="combo", tab="general", label="Engine Mode", issue=3, description=(
            "How the graph engine runs. auto: a persistent worker process, falling back to one "
            "process per call when it cannot start or keeps dying. persistent: one long-lived "
            "worker process (recommended). subprocess: a fresh process for every operation."))
    inject_context: bool = opt(True, tab="general", label="Inject Context", issue=4, description=(
        "Put the memories found for a message into the system prompt of that same turn."))
    context_limit: int = opt(10, tab="general", label="Context Limit", ge=1, le=100, issue=4,
                             description="The most memories injected into one turn's system prompt.")
    max_injected_tokens: int = opt(1200, tab="general", label="Max Injected Tokens", ge=50, le=32000,
                                   issue=4, description=(
        "The most tokens the injected memory block may take; lines past it are left out."))
    disable_default_vector_store: bool = opt(
        False, tab="general", label="Disable Default Vector Store", issue=4, description=(
            "Add an instruction asking the model to prefer MemoryPlus memories over any other "
            "vector store or context source."))

    # ── Database ───────────────────────────────────────────────────────────────────────
    backend: Literal["kuzu", "neo4j"] = opt(
        "kuzu", kind="combo", tab="database", label="Database Backend", description=(
            "kuzu: embedded, one database directory per bank, no server. neo4j: a Neo4j server; "
            "banks are group_id partitions of one database."))
    link_db_to_preset: bool = opt(True, tab="database", label="Link DB to Preset", issue=4,
                                  description=(
        "Give each saved PyGPT preset its own memory bank. Unsaved presets (current.*) share the "
        "fallback bank. Off: every chat uses the fallback bank."))
    neo4j_uri: str = opt("bolt://localhost:7687", tab="database", label="Neo4j URI", description=(
        "Connection URI of the Neo4j server (bolt://, neo4j://, or bolt+s:// / neo4j+s:// for TLS)."))
    neo4j_user: str = opt("neo4j", tab="database", label="Neo4j User",
                          description="User name for the Neo4j server.")
    neo4j_password: str = opt("password", tab="database", label="Neo4j Password", secret=True,
                              description="Password for the Neo4j server (never logged or shown).")
    neo4j_database: str = opt("neo4j", tab="database", label="Neo4j Database", description=(
        "The Neo4j database holding every bank (Neo4j Community has exactly one)."))
    fallback_bank: str = opt("default", tab="database", label="Database Name (Fallback)",
                             description=(
        "The bank used when Link DB to Preset is off, for unsaved presets, and when a turn's "
        "preset cannot be determined. Any name works."))
    kuzu_storage_path: str = opt("", tab="database", label="Kuzu Storage Path", description=(
        "Root directory of the Kuzu banks (one subdirectory per bank). Empty: a 'memoryplus' "
        "folder in PyGPT's user data directory, the same one the memoryplus command uses."))
    kuzu_buffer_pool_mb: int = opt(128, tab="database", label="Kuzu Buffer Pool (MB)", ge=64,
                                   le=16384, advanced=True, description=(
        "Memory Kuzu may cache per open bank, at least: a bigger bank gets three quarters of "
        "its file plus 64 MB (Kuzu needs that much to flush its log), and is reopened with "
        "more when it outgrows its pool."))
    bank_idle_close_s: int = opt(300, tab="database", label="Close Idle Banks After (s)", ge=0,
                                 le=86400, advanced=True, issue=16, description=(
        "A Kuzu bank nobody used for this long is closed, giving back its memory (about 100 MB "
        "each, however small the bank); it reopens by itself on its next use, which then takes "
        "up to a few seconds for a large bank. 0: banks stay open."))

    # ── Models and embeddings ──────────────────────────────────────────────────────────
    memory_mode: MemoryMode = opt("Chatbot", kind="combo", tab="models", label="Memory Mode",
                                  description=(
        "The lens for what is extracted from each turn: each mode is its own set of entity types, "
        "relation types and extraction instructions (see the README)."))
    extraction_engine: Literal["auto", "local", "llm"] = opt(
        "auto", kind="combo", tab="models", label="Extraction Engine", description=(
            "llm: graphiti extracts entities and facts with the Graphiti model. local: rules and "
            "lexicons, no LLM, no network. auto: llm when the provider has credentials, else local. "
            "A turn whose LLM answers are unusable (not valid JSON) is stored by local extraction "
            "and marked; at most 40 LLM requests per turn."))
    llm_provider: Literal["auto", "openai", "ollama", "google", "openai_compatible"] = opt(
        "auto", kind="combo", tab="models", label="LLM Provider", description=(
            "Who serves the Graphiti and Insight models. auto: the provider PyGPT uses for the "
            "chosen model, at PyGPT's endpoint (OpenAI outside PyGPT; PyGPT's OpenAI provider "
            "pointed at another server is spoken to with Chat Completions). openai_compatible: "
            "any server at Override Base URL."))
    insight_model: str = opt("gpt-4o", kind="combo", use="models", tab="models",
                             label="Insight Model", description=(
        "Model for emotion, topic and vibe analysis and for the memory gate, when those need "
        "their own call (most of it is folded into graphiti's extraction call)."))
    graphiti_model: str = opt("gpt-4o", kind="combo", use="models", tab="models",
                              label="Graphiti Internal Model", description=(
        "Model graphiti uses to extract entities and facts and to resolve duplicates."))
    max_context_tokens: int = opt(8192, tab="models", label="Max Context Tokens", ge=1024, le=128000,
                                  description=(
        "Context window of the Graphiti model; each prompt's episode text is trimmed to fit and "
        "answers are capped at a quarter of it."))
    graphiti_temperature: float = opt(0.0, tab="models", label="Graphiti Model Temperature",
                                      ge=0.0, le=2.0, step=0.1, description=(
        "Temperature of the Graphiti model (extraction wants 0)."))
    embedding_provider: Literal["auto", "local", "openai", "ollama", "google"] = opt(
        "auto", kind="combo", tab="models", label="Embedding Provider", description=(
            "Who computes embeddings. local: an offline model shipped with MemoryPlus (no "
            "download, no network). auto: the provider PyGPT is set up with, at PyGPT's endpoint "
            "(an OpenAI-compatible server or Ollama; local if it serves no embeddings), else OpenAI "
            "with PyGPT's OpenAI key, else local; decided once per bank. A bank keeps the embedder "
            "it was built with; changing it needs a re-embed."))
    embedding_model: str = opt("", tab="models", label="Embedding Model", description=(
        "Embedding model name. Empty: the provider's default (text-embedding-3-small, "
        "nomic-embed-text, gemini-embedding-001, or the local model)."))
    embedding_base_url: str = opt("", tab="models", label="Embedding Base URL", description=(
        "Endpoint for embeddings (e.g. http://localhost:11434/v1 for Ollama). Empty: the "
        "provider's default. Never borrowed from the LLM's override."))
    embedding_api_key: str = opt("", tab="models", label="Embedding API Key", secret=True,
                                 description="Key for the embedding provider. Empty: the provider's key from PyGPT or the environment.")
    override_base_url: str = opt("", tab="models", label="Override Base URL", description=(
        "(Advanced) API base URL for the Graphiti and Insight models, e.g. a proxy or a local "
        "OpenAI-compatible server."))
    override_api_key: str = opt("", tab="models", label="Override API Key", secret=True, description=(
        "(Advanced) API key for the Graphiti and Insight models; takes precedence over PyGPT's key."))

    # ── Sanitization ───────────────────────────────────────────────────────────────────
    sanitize_tool_calls: bool = opt(True, tab="sanitization", label="Sanitize Tool Calls", issue=4,
                                    description="Strip tool-call blocks (<tool>…</tool>, ~###~…~###~) before storing.")
    sanitize_code_blocks: bool = opt(True, tab="sanitization", label="Sanitize Code Blocks", issue=4,
                                     description="Strip markdown code blocks before storing.")
    preserve_tagged_code: bool = opt(True, tab="sanitization", label="Preserve Tagged Code", issue=4,
                                     description="Keep code blocks tagged [KEEP_CODE] when code blocks are stripped.")
    max_memory_length: int = opt(4096, tab="sanitization", label="Max Memory Length", ge=100,
                                 le=10000, description="Truncate each stored turn to this many tokens.")

    # ── Intelligence ───────────────────────────────────────────────────────────────────
    emotion_tagging: bool = opt(True, tab="intelligence", label="Enable Emotion Tagging",
                                description="Tag each stored turn with the emotions it shows, e.g. [EMOTION: amused].")
    emotion_sensitivity: Literal["Low", "Medium", "High"] = opt(
        "Medium", kind="combo", tab="intelligence", label="Emotion Sensitivity", description=(
            "Low: only strong, explicit emotions. Medium: clear ones. High: mild cues too."))
    topic_tagging: bool = opt(True, tab="intelligence", label="Enable Topic Tagging",
                              description="Tag each stored turn with its topics, e.g. [TOPIC: linux].")
    vibe_scoring: bool = opt(False, tab="intelligence", label="Enable Vibe Scoring", description=(
        "Score each turn's emotional tone from 0 (negative) to 1 (positive)."))

    # ── Lifecycle ──────────────────────────────────────────────────────────────────────
    auto_prune: bool = opt(False, tab="lifecycle", label="Auto-Prune Low-Value Memories", description=(
        "Skip trivial turns (greetings, one-word answers) with fewer words than the threshold."))
    low_value_threshold: int = opt(3, tab="lifecycle", label="Low-Value Threshold", ge=1, le=50,
                                   description=(
        "Fewest words (role labels not counted) a turn needs to be kept when pruning is on."))
    manual_flagging: bool = opt(True, tab="lifecycle", label="Enable Manual Memory Flagging", issue=4,
                                description="Enable the chat commands /remember_this and /forget_that.")
    memory_expiry_days: int = opt(0, tab="lifecycle", label="Memory Expiry (Days)", ge=0, le=3650,
                                  description=(
        "Delete memories stored more than this many days ago (counted from when they were stored, "
        "checked daily). 0 keeps memories forever."))
    mcp_forget: bool = opt(True, tab="lifecycle", label="Allow Forgetting over MCP", issue=15, description=(
        "Let MCP clients (`memoryplus mcp`) forget memories. The user confirms each forget where the "
        "client can ask (MCP elicitation); where it cannot, the confirmation comes from the model. "
        "Off: the forget tool refuses."))

    # ── Advanced ───────────────────────────────────────────────────────────────────────
    custom_sanitization_rules: str = opt("", tab="advanced", label="Custom Sanitization Rules", issue=4,
                                         description=(
        "Semicolon-separated regular expressions; matching text is removed before storing. "
        "An invalid rule is reported, not skipped silently."))
    custom_memory_tags: str = opt("", tab="advanced", label="Custom Memory Tags", description=(
        "Comma-separated tags applied to every stored turn."))
    insight_temperature: float = opt(0.3, tab="advanced", label="Insight Model Temperature", ge=0.0,
                                     le=1.0, step=0.1, description="Temperature of the Insight Model.")
    review_interval_days: int = opt(7, tab="advanced", label="Memory Review Interval (Days)", ge=0,
                                    le=365, issue=5, description=(
        "Every N days, offer to review the memories added since the last review. 0 disables it."))
    memory_feedback: bool = opt(True, tab="advanced", label="Enable Memory Feedback", description=(
        "Rate memories 👍/👎 in the memory browser; ratings move a memory up or down in later "
        "recall, within bounds."))
    search_depth: int = opt(10, tab="advanced", label="Memory Search Depth", ge=1, le=100,
                            description=(
        "Candidates retrieved per search, from which the best (up to Context Limit) are injected."))
    search_cache: bool = opt(True, tab="advanced", label="Enable Search Cache", issue=4,
                             description="Cache recent search results per bank.")
    search_cache_size: int = opt(8, tab="advanced", label="Search Cache Size", ge=0, le=100, issue=4,
                                 description="Most cached searches kept; 0 disables the cache.")
    search_cache_ttl: int = opt(45, tab="advanced", label="Search Cache TTL (s)", ge=0, le=600, issue=4,
                                description="Seconds a cached result stays valid.")
    search_cache_similarity: float = opt(0.85, tab="advanced", label="Search Cache Similarity", ge=0.0,
                                         le=1.0, step=0.05, issue=4, description=(
        "How alike two queries must be to share a cached result. Short or opposite queries never match."))
    queue_size: int = opt(50, tab="advanced", label="Ingestion Queue Size", ge=0, le=1000, issue=4,
                          description="Most turns waiting to be stored; 0 is unbounded.")
    overflow_policy: Literal["drop_new", "drop_oldest", "block"] = opt(
        "drop_new", kind="combo", tab="advanced", label="Ingestion Overflow Policy", issue=4,
        description=(
            "When the queue is full: drop_new discards the new turn, drop_oldest the oldest waiting "
            "one, block waits a short fixed time, then drops the new turn (counted and shown)."))
    batch_size: int = opt(5, tab="advanced", label="Ingestion Batch Size", ge=1, le=100, issue=4,
                          description="Most turns stored together in one batch.")
    batch_delay_ms: int = opt(250, tab="advanced", label="Ingestion Batch Delay (ms)", ge=0, le=5000,
                              issue=4, description="Longest wait to fill a batch before storing it.")
    retry_attempts: int = opt(3, tab="advanced", label="Ingestion Retry Attempts", ge=1, le=10, issue=4,
                              description="Attempts before a turn is kept as failed (retryable, never dropped).")
    retry_backoff_ms: int = opt(500, tab="advanced", label="Ingestion Retry Backoff (ms)", ge=100,
                                le=5000, issue=4, description=(
        "First retry delay; it doubles with each attempt, with jitter, and honours a provider's Retry-After."))
    runner_timeout_s: int = opt(45, tab="advanced", label="Runner Timeout (s)", ge=5, le=180, issue=3,
                                description="Longest a single per-call worker operation may run.")
    custom_analysis_prompt: str = opt("", kind="textarea", tab="advanced",
                                      label="Custom Analysis Prompt", description=(
        "Extraction instructions used when Memory Mode is CustomPrompt."))
    max_llm_calls_per_hour: int = opt(0, tab="advanced", label="Max LLM Calls per Hour", ge=0,
                                      le=1000000, issue=4, description=(
        "Pause ingestion (turns stay queued on disk) once this many LLM calls were made in the "
        "last hour. 0: no limit."))
    worker_python: str = opt("", tab="advanced", label="Worker Python", issue=3, description=(
        "Python interpreter for the worker process. Empty: the one PyGPT runs under, with "
        "PyGPT's import path (its add-on packages included); in a frozen PyGPT, PyGPT's own "
        "executable. Set: that interpreter, which must have graphiti-core and kuzu itself."))

    # ── Model Tools: PyGPT plugin commands the model may call (kind "cmd": PyGPT stores each
    # as `cmd.<id>`, its switch; plugin/tools.py declares the command's instruction and params)
    memory_search: bool = opt(True, kind="cmd", tab="tools", label="Tool: memory_search", issue=15,
                              description=(
        "Let the model search this chat's memory (the bank its turns inject from), ranked and "
        "dated as the injected block, with replaced facts marked no longer true when asked "
        "about the past. On by default: it only reads what the injection could show anyway."))
    memory_timeline: bool = opt(True, kind="cmd", tab="tools", label="Tool: memory_timeline",
                                issue=15, description=(
        "Let the model ask what this chat's memory knows about one person, place or thing, "
        "each fact with when it held. On by default: it only reads this chat's bank."))
    memory_remember: bool = opt(True, kind="cmd", tab="tools", label="Tool: memory_remember",
                                issue=15, description=(
        "Let the model store an explicit memory in this chat's bank, as /remember_this TEXT "
        "does; each one is shown in the chat, so you see it and can /forget_that it. On by "
        "default: it stores what was said in this chat, which Auto-Ingest stores anyway."))
    memory_forget: bool = opt(True, kind="cmd", tab="tools", label="Tool: memory_forget", issue=15,
                              description=(
        "Let the model propose forgetting: the memories strongly matching its query are shown "
        "to you in the chat, and nothing is forgotten until you confirm with /forget_that yes "
        "(the model cannot confirm). On by default: only you can confirm."))


@dataclass(frozen=True, kw_only=True)
class OptionInfo(Opt):
    """What PyGPT's settings page and the docs need to know of one option: its declaration,
    its id and, for a combo, its choices."""
    id: str
    choices: tuple[str, ...] = ()


_lock = threading.Lock()
_declared: tuple[tuple[str, Any, Opt], ...] | None = None   # (id, type, declaration)
_infos: tuple[OptionInfo, ...] | None = None


def _declarations() -> tuple[tuple[str, Any, Opt], ...]:
    """(id, annotation, Opt) of every option, in declaration order."""
    global _declared
    if _declared is None:
        import typing
        hints = typing.get_type_hints(Options, globalns=globals())
        _declared = tuple((name, hints[name], value) for name, value in vars(Options).items()
                          if isinstance(value, Opt))
    return _declared


def options() -> list[OptionInfo]:
    """Every option, in declaration order (the order of the settings page)."""
    global _infos
    if _infos is None:
        out = []
        for name, annotation, o in _declarations():
            choices = tuple(getattr(annotation, "__args__", ()) or ())
            out.append(OptionInfo(**{**vars(o), "description": o.description or ""}, id=name,
                                  choices=choices if o.kind == "combo" else ()))
        _infos = tuple(out)
    return list(_infos)


def option(name: str) -> OptionInfo:
    for info in options():
        if info.id == name:
            return info
    raise KeyError(name)


def defaults() -> dict[str, Any]:
    """Every option's default, by id (what `Settings()` holds), without pydantic."""
    return {info.id: info.default for info in options()}


SECRET_OPTIONS = frozenset(i.id for i in options() if i.secret)


def _model() -> type[Settings]:
    """The pydantic model of the options, built once (thread-safe) on first use."""
    model = globals().get("Settings")
    if model is not None:
        return model
    with _lock:
        model = globals().get("Settings")
        if model is None:
            from pydantic import ConfigDict, Field, create_model
            fields: dict[str, Any] = {}
            for name, annotation, o in _declarations():
                extra: dict[str, Any] = {"tab": o.tab, "label": o.label, "kind": o.kind,
                                         "secret": o.secret, "issue": o.issue, "advanced": o.advanced}
                if o.step is not None:
                    extra["step"] = o.step
                if o.use is not None:
                    extra["use"] = o.use
                fields[name] = (annotation, Field(o.default, ge=o.ge, le=o.le, description=o.description,
                                                  json_schema_extra=extra))
            model = create_model(
                "Settings", __config__=ConfigDict(extra="ignore", validate_assignment=True, frozen=False),
                __doc__=Options.__doc__, __module__=__name__, **fields)
            globals()["Settings"] = model
    return model


def __getattr__(name: str) -> Any:   # PEP 562: `Settings` is built when first asked for
    if name == "Settings":
        return _model()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class SettingsError(ValueError):
    """Invalid settings, with one clear line per bad option naming it."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def _describe(err: dict) -> str:
    name = str(err["loc"][0]) if err.get("loc") else "?"
    try:
        label = option(name).label
    except KeyError:
        label = name
    value = err.get("input")
    shown = "(hidden)" if name in SECRET_OPTIONS else repr(value)
    return f"setting '{label}' ({name}): {err['msg']}, got {shown}"


def validate(values: dict[str, Any]) -> Settings:
    """Settings from a dict of option values, or SettingsError naming every bad option."""
    from pydantic import ValidationError
    try:
        return _model().model_validate(values)
    except ValidationError as exc:
        raise SettingsError([_describe(e) for e in exc.errors()]) from None


def validate_lenient(values: dict[str, Any]) -> tuple[Settings, list[str]]:
    """Settings keeping the default of every bad option, and the list of problems found.

    Used where refusing to start would be worse than running on defaults (inside PyGPT).
    """
    from pydantic import ValidationError
    model = _model()
    good: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in values.items():
        if name not in model.model_fields:
            continue
        try:
            model.model_validate({name: value})
            good[name] = value
        except ValidationError as exc:
            problems.extend(_describe(e) for e in exc.errors())
    return model.model_validate(good), problems
