"""LLM, embedder and cross-encoder clients for graphiti, built from the settings.

Rules: never a client that needs the network unless the user configured that provider; the
embedder never borrows the LLM's endpoint or key; graphiti always gets all three clients
(its defaults build OpenAI clients that fail without OPENAI_API_KEY).
"""
from __future__ import annotations

import contextvars
import json
import os
import re
from dataclasses import dataclass, field

from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.embedder.client import EmbedderClient
from graphiti_core.llm_client import LLMClient, LLMConfig
from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient

from memoryplus.config.install import local_embedder_hint
from memoryplus.config.schema import Settings
from memoryplus.engine.embedders import HashEmbedder, LocalEmbedder
from memoryplus.wire.records import Credentials
from memoryplus.common.redact import host_of

OLLAMA_DEFAULT_URL = "http://localhost:11434/v1"
LLM_TIMEOUT_S = 120.0   # one LLM call; the SDK retries twice (honouring Retry-After) on top
DEFAULT_EMBEDDING_MODELS = {
    "openai": ("text-embedding-3-small", 1536),
    "ollama": ("nomic-embed-text", 768),
    "google": ("gemini-embedding-001", 768),
}
KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
              "text-embedding-ada-002": 1536, "nomic-embed-text": 768, "mxbai-embed-large": 1024,
              "all-minilm": 384, "gemini-embedding-001": 768, "text-embedding-004": 768}
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


class ProviderError(RuntimeError):
    """A provider cannot be built from the settings; the message says which setting to fix."""


class ThinkStrippingClient(OpenAIGenericClient):
    """OpenAI-compatible client that drops reasoning models' `<think>` blocks before parsing."""

    @staticmethod
    def _strip_code_fences(text: str) -> str:
        return OpenAIGenericClient._strip_code_fences(_THINK.sub("", text))


class OverlapReranker(CrossEncoderClient):
    """Word-overlap scores, no model and no network. Our search recipes do not rerank with a
    cross-encoder; graphiti still needs one so that it does not build an OpenAI reranker."""

    async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
        q = set(re.findall(r"\w+", query.lower()))
        scored = [(p, len(q & set(re.findall(r"\w+", p.lower()))) / (len(q) or 1)) for p in passages]
        return sorted(scored, key=lambda x: x[1], reverse=True)


# One stored turn may ask the LLM at most this many times (graphiti's extraction of a short
# turn takes 5 calls, more with many entities); an answer that is not valid JSON of the
# requested shape is asked again once, at once. Past either bound the turn is stored by
# local extraction and marked (see MemoryEngine._store). Transport retries of the SDK
# (429, 5xx, timeouts: at most 2 per request) come on top and are not the model's fault.
MAX_LLM_CALLS_PER_TURN = 40
INVALID_ANSWER_RETRIES = 1


class UnusableLLMOutput(RuntimeError):
    """The model's answers for a turn cannot be used; asking again will not fix it."""


@dataclass
class TurnBudget:
    limit: int = MAX_LLM_CALLS_PER_TURN
    calls: int = 0
    gave_up: str = ""


# The budget of the turn being stored (graphiti's concurrent calls share it: tasks copy the
# context, and the object is shared).
turn_budget: contextvars.ContextVar[TurnBudget | None] = contextvars.ContextVar(
    "memoryplus_turn_budget", default=None)


def unusable_answer(exc: BaseException) -> bool:
    """An answer that is not valid JSON, or not of the requested schema, or empty/refused:
    the model's doing, which a retry of the whole turn would only repeat."""
    from pydantic import ValidationError
    from graphiti_core.llm_client.errors import EmptyResponseError, RefusalError
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (UnusableLLMOutput, json.JSONDecodeError, ValidationError,
                            EmptyResponseError, RefusalError)):
            return True
        if type(exc) is Exception and str(exc).startswith("Invalid response from LLM"):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _bounded(client: LLMClient) -> None:
    """Each request to the model (graphiti's own retries included) counts against the turn's
    budget; an invalid answer is asked again at once, INVALID_ANSWER_RETRIES times, then the
    turn gives up (graphiti's generic client would otherwise retry it 4 times, 5-120 s apart)."""
    inner = client._generate_response

    async def attempt(*args, **kwargs):
        budget = turn_budget.get()
        if budget is None:
            return await inner(*args, **kwargs)
        last: BaseException | None = None
        for _ in range(INVALID_ANSWER_RETRIES + 1):
            if budget.gave_up:
                raise UnusableLLMOutput(budget.gave_up)
            if budget.calls >= budget.limit:
                budget.gave_up = f"more than {budget.limit} LLM calls for one turn"
                raise UnusableLLMOutput(budget.gave_up)
            budget.calls += 1
            try:
                return await inner(*args, **kwargs)
            except Exception as exc:
                if not unusable_answer(exc):
                    raise
                last = exc
        budget.gave_up = (f"the model's answers were not valid JSON of the requested shape "
                          f"({type(last).__name__})")
        raise UnusableLLMOutput(budget.gave_up) from last

    client._generate_response = attempt  # type: ignore[method-assign]


@dataclass
class LLMUsage:
    """LLM calls and tokens spent, by prompt name."""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    by_prompt: dict[str, int] = field(default_factory=dict)


def count_usage(client: LLMClient, usage: LLMUsage) -> LLMClient:
    """Count every call the client makes (graphiti's and ours) into `usage`, and cap each
    answer at the client's max_tokens (graphiti asks for 16384 in some prompts).

    Token counts come from graphiti's tracker where the client records them, else an estimate
    of four characters a token.
    """
    original = client.generate_response
    cap = client.max_tokens

    async def counted(messages, *args, **kwargs):
        if kwargs.get("max_tokens"):
            kwargs["max_tokens"] = min(kwargs["max_tokens"], cap)
        tracker = client.token_tracker
        before = tracker.get_total_usage() if hasattr(tracker, "get_total_usage") else None
        usage.calls += 1
        name = kwargs.get("prompt_name") or "unknown"
        usage.by_prompt[name] = usage.by_prompt.get(name, 0) + 1
        estimate = sum(len(getattr(m, "content", "") or "") for m in messages) // 4
        result = await original(messages, *args, **kwargs)
        after = tracker.get_total_usage() if before is not None else None
        if after is not None and after.input_tokens > before.input_tokens:
            usage.input_tokens += after.input_tokens - before.input_tokens
            usage.output_tokens += after.output_tokens - before.output_tokens
        else:
            usage.input_tokens += estimate
            usage.output_tokens += len(str(result)) // 4
        return result

    client.generate_response = counted  # type: ignore[method-assign]
    _bounded(client)
    return client


@dataclass
class LLMChoice:
    provider: str       # openai, ollama, google, openai_compatible
    api_key: str
    base_url: str
    configured: bool    # the user set this provider up (so llm extraction may use it)


def resolve_llm(settings: Settings, creds: Credentials) -> LLMChoice:
    provider = settings.llm_provider
    if provider == "auto":
        if settings.override_base_url and creds.model_provider not in ("ollama", "google"):
            provider = "openai_compatible"
        elif creds.model_provider in ("openai", "ollama", "google", "openai_compatible"):
            provider = creds.model_provider
        else:
            provider = "openai"
        if provider == "openai" and not is_public_openai(creds.openai_base_url):
            # PyGPT's OpenAI provider pointed at another server: Chat Completions, which every
            # OpenAI-compatible server serves (the Responses API is OpenAI's own).
            provider = "openai_compatible"
    key = settings.override_api_key
    if provider == "openai":
        key = key or creds.openai_api_key
        base = settings.override_base_url or creds.openai_base_url
        return LLMChoice(provider, key, base, bool(key))
    if provider == "google":
        key = key or creds.google_api_key
        return LLMChoice(provider, key, settings.override_base_url, bool(key))
    if provider == "ollama":
        base = settings.override_base_url or creds.ollama_base_url
        chosen = settings.llm_provider == "ollama" or creds.model_provider == "ollama"
        return LLMChoice(provider, key or "ollama", base or OLLAMA_DEFAULT_URL, chosen or bool(base))
    base = settings.override_base_url or creds.openai_base_url
    return LLMChoice("openai_compatible", key or creds.openai_api_key or "none", base, bool(base))


def build_llm(settings: Settings, creds: Credentials, *, model: str | None = None,
              temperature: float | None = None) -> LLMClient:
    choice = resolve_llm(settings, creds)
    if not choice.configured:
        raise ProviderError(
            f"no credentials for the {choice.provider} LLM: set 'Override API Key' (or PyGPT's "
            f"{choice.provider} key), or use the local extraction engine")
    model = model or settings.graphiti_model
    cfg = LLMConfig(api_key=choice.api_key, model=model, small_model=model,
                    base_url=choice.base_url or None,
                    temperature=settings.graphiti_temperature if temperature is None else temperature,
                    max_tokens=max(1024, settings.max_context_tokens // 4))
    if choice.provider == "google":
        from graphiti_core.llm_client.gemini_client import GeminiClient
        return GeminiClient(config=cfg, max_tokens=cfg.max_tokens)
    if choice.provider == "openai_compatible" and not choice.base_url:
        raise ProviderError("the openai_compatible LLM provider needs 'Override Base URL'")
    # graphiti's clients ignore config.max_tokens (they take their own argument) and build an
    # AsyncOpenAI with a 10-minute timeout; a stuck call would hold a bank's writes that long.
    from openai import AsyncOpenAI
    client = AsyncOpenAI(api_key=cfg.api_key, base_url=cfg.base_url, timeout=LLM_TIMEOUT_S, max_retries=2)
    if choice.provider == "openai":  # the Responses API, at OpenAI or a proxy of it
        from graphiti_core.llm_client.openai_client import OpenAIClient
        return OpenAIClient(config=cfg, client=client, max_tokens=cfg.max_tokens)
    return ThinkStrippingClient(config=cfg, client=client, max_tokens=cfg.max_tokens,
                                structured_output_mode="json_schema")


def llm_available(settings: Settings, creds: Credentials) -> bool:
    return resolve_llm(settings, creds).configured


@dataclass
class EmbedderChoice:
    provider: str
    model: str
    dim: int
    api_key: str = ""
    base_url: str = ""
    why: str = ""              # said to the user: why this embedder (settings page, stats)
    # Chosen by `auto` to follow PyGPT's own endpoint: if that endpoint turns out not to serve
    # embeddings, a new bank is built with the local embedder instead (see MemoryEngine._open).
    local_if_unserved: bool = False

    @property
    def id(self) -> str:
        return f"{self.provider}:{self.model}:{self.dim}"


def is_public_openai(url: str) -> bool:
    return not url or host_of(url) == "api.openai.com"


def local_choice(why: str) -> EmbedderChoice:
    """The offline embedder, or hashed features where WordLlama is not installed."""
    if not LocalEmbedder.available():
        # A PyGPT add-on install may lack WordLlama (see README); hashed features still
        # give keyword-like vectors, under their own id, so no bank mixes the two.
        return EmbedderChoice("hash", "hash", 384, why=(
            f"hashed word features (keyword-like): the offline embedder WordLlama is not "
            f"installed. {local_embedder_hint()}"))
    return EmbedderChoice("local", "wordllama-l2-256", LocalEmbedder.dim,
                          why=f"the offline embedder (WordLlama){': ' + why if why else ''}")


def _follow_pygpt(creds: Credentials) -> str:
    """Which endpoint of PyGPT's own provider `auto` embeddings follow: 'ollama', 'endpoint'
    (an OpenAI-compatible base URL other than OpenAI's), or '' (none)."""
    if creds.model_provider == "ollama" and creds.ollama_base_url:
        return "ollama"
    if creds.model_provider != "google" and creds.openai_base_url \
            and not is_public_openai(creds.openai_base_url):
        return "endpoint"
    return ""


def resolve_embedder(settings: Settings, creds: Credentials, recorded: str = "") -> EmbedderChoice:
    """The embedder for a bank. `recorded` is the embedder id the bank was built with: under
    `auto`, a bank keeps it while it is still usable, so adding an API key later does not
    strand a bank built offline (and vice versa).

    `auto`, for a new bank: the provider PyGPT is configured with, at PyGPT's endpoint (an
    OpenAI-compatible server or Ollama; local if it turns out not to serve embeddings), else
    OpenAI with PyGPT's OpenAI key, else Google with PyGPT's Google key, else local. The
    Embedding Base URL setting, when set, wins; the LLM override URL is never borrowed."""
    provider = settings.embedding_provider
    openai_key = settings.embedding_api_key or creds.openai_api_key
    google_key = settings.embedding_api_key or creds.google_api_key
    follow = "" if settings.embedding_base_url else _follow_pygpt(creds)
    why = ""
    followed = False
    if provider == "auto":
        rec = recorded.split(":", 1)[0] if recorded else ""
        usable = {"local": True, "hash": True, "openai": bool(openai_key), "google": bool(google_key),
                  "ollama": bool(settings.embedding_base_url or creds.ollama_base_url),
                  "openai_compatible": follow == "endpoint"}
        if rec and usable.get(rec):
            provider, why = rec, "the bank was built with it (a bank keeps its embedder)"
        elif follow == "endpoint":
            model = settings.embedding_model or DEFAULT_EMBEDDING_MODELS["openai"][0]
            return EmbedderChoice(
                "openai_compatible", model, KNOWN_DIMS.get(model, DEFAULT_EMBEDDING_MODELS["openai"][1]),
                openai_key or "none", creds.openai_base_url, local_if_unserved=True,
                why=f"follows PyGPT's endpoint {host_of(creds.openai_base_url)}")
        elif follow == "ollama":
            provider, why = "ollama", f"follows PyGPT's Ollama at {host_of(creds.ollama_base_url)}"
            followed = True
        elif openai_key:
            provider, why = "openai", "PyGPT has an OpenAI key"
        elif google_key:
            provider, why = "google", "PyGPT has a Google key"
        else:
            return local_choice("no API key or endpoint configured")
    if provider in ("local", "hash") and not why:
        why = "chosen in the settings"
    if provider == "local":
        return local_choice("" if why.startswith("chosen") else why)
    if provider == "hash":  # tests and benchmarks only; not offered in the settings
        return EmbedderChoice("hash", "hash", 384, why=why)
    if provider == "openai_compatible":   # only ever a recorded bank's (see above)
        model, dim = recorded.split(":")[1], int(recorded.rsplit(":", 1)[1])
        return EmbedderChoice("openai_compatible", model, dim, openai_key or "none",
                              creds.openai_base_url, why=why)
    why = why or "chosen in the settings"
    default_model, default_dim = DEFAULT_EMBEDDING_MODELS[provider]
    model = settings.embedding_model or default_model
    dim = KNOWN_DIMS.get(model, default_dim)
    if recorded and recorded.startswith(f"{provider}:{model}:"):
        dim = int(recorded.rsplit(":", 1)[1])
    if provider == "openai":
        if not openai_key:
            raise ProviderError("no API key for OpenAI embeddings: set 'Embedding API Key' or "
                                "PyGPT's OpenAI key, or choose the local embedder")
        return EmbedderChoice("openai", model, dim, openai_key, settings.embedding_base_url, why=why)
    if provider == "google":
        if not google_key:
            raise ProviderError("no API key for Google embeddings: set 'Embedding API Key' or "
                                "PyGPT's Google key, or choose the local embedder")
        return EmbedderChoice("google", model, dim, google_key, settings.embedding_base_url, why=why)
    base = settings.embedding_base_url or creds.ollama_base_url or OLLAMA_DEFAULT_URL
    return EmbedderChoice("ollama", model, dim, settings.embedding_api_key or "ollama", base, why=why,
                          local_if_unserved=followed)


def embeddings_unserved(exc: BaseException) -> bool:
    """The endpoint answered that it does not serve embeddings (or not this model): a 404,
    405, 400 or 422 answer. Not an outage, a timeout or a bad key: those are said to the user."""
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status in (400, 404, 405, 422, 501)


def build_embedder(choice: EmbedderChoice) -> EmbedderClient:
    if choice.provider == "local":
        return LocalEmbedder()
    if choice.provider == "hash":
        return HashEmbedder(choice.dim)
    if choice.provider == "google":
        from graphiti_core.embedder.gemini import GeminiEmbedder, GeminiEmbedderConfig
        return GeminiEmbedder(GeminiEmbedderConfig(api_key=choice.api_key,
                                                   embedding_model=choice.model,
                                                   embedding_dim=choice.dim))
    from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
    return OpenAIEmbedder(OpenAIEmbedderConfig(api_key=choice.api_key, base_url=choice.base_url or None,
                                               embedding_model=choice.model,
                                               embedding_dim=choice.dim))
