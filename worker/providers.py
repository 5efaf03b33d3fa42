"""LLM, embedder and cross-encoder clients for graphiti, built from the settings.

Rules: never a client that needs the network unless the user configured that provider; the
embedder never borrows the LLM's endpoint or key; graphiti always gets all three clients
(its defaults build OpenAI clients that fail without OPENAI_API_KEY).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from graphiti_core.cross_encoder.client import CrossEncoderClient
from graphiti_core.embedder.client import EmbedderClient
from graphiti_core.llm_client import LLMClient, LLMConfig
from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient

from memoryplus.config.schema import Settings
from memoryplus.worker.embedders import HashEmbedder, LocalEmbedder
from memoryplus.worker.records import Credentials

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


def credentials_from_env() -> Credentials:
    """Keys the CLI may use: the same environment variables the providers' own SDKs read."""
    return Credentials(
        openai_api_key=os.environ.get("OPENAI_API_KEY", ""),
        openai_base_url=os.environ.get("OPENAI_BASE_URL", ""),
        google_api_key=os.environ.get("GOOGLE_API_KEY", "") or os.environ.get("GEMINI_API_KEY", ""),
        ollama_base_url=os.environ.get("OLLAMA_BASE_URL", ""),
    )


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

    @property
    def id(self) -> str:
        return f"{self.provider}:{self.model}:{self.dim}"


def resolve_embedder(settings: Settings, creds: Credentials, recorded: str = "") -> EmbedderChoice:
    """The embedder for a bank. `recorded` is the embedder id the bank was built with: under
    `auto`, a bank keeps it while it is still usable, so adding an API key later does not
    strand a bank built offline (and vice versa)."""
    provider = settings.embedding_provider
    openai_key = settings.embedding_api_key or creds.openai_api_key
    google_key = settings.embedding_api_key or creds.google_api_key
    if provider == "auto":
        rec = recorded.split(":", 1)[0] if recorded else ""
        usable = {"local": True, "hash": True, "openai": bool(openai_key), "google": bool(google_key),
                  "ollama": bool(settings.embedding_base_url or creds.ollama_base_url)}
        if rec and usable.get(rec):
            provider = rec
        elif openai_key:
            provider = "openai"
        elif google_key:
            provider = "google"
        else:
            provider = "local"
    if provider == "local":
        if not LocalEmbedder.available():
            # A PyGPT add-on install may lack WordLlama (see README); hashed features still
            # give keyword-like vectors, under their own id, so no bank mixes the two.
            return EmbedderChoice("hash", "hash", 384)
        return EmbedderChoice("local", "wordllama-l2-256", LocalEmbedder.dim)
    if provider == "hash":  # tests and benchmarks only; not offered in the settings
        return EmbedderChoice("hash", "hash", 384)
    default_model, default_dim = DEFAULT_EMBEDDING_MODELS[provider]
    model = settings.embedding_model or default_model
    dim = KNOWN_DIMS.get(model, default_dim)
    if recorded and recorded.startswith(f"{provider}:{model}:"):
        dim = int(recorded.rsplit(":", 1)[1])
    if provider == "openai":
        if not openai_key:
            raise ProviderError("no API key for OpenAI embeddings: set 'Embedding API Key' or "
                                "PyGPT's OpenAI key, or choose the local embedder")
        return EmbedderChoice("openai", model, dim, openai_key, settings.embedding_base_url)
    if provider == "google":
        if not google_key:
            raise ProviderError("no API key for Google embeddings: set 'Embedding API Key' or "
                                "PyGPT's Google key, or choose the local embedder")
        return EmbedderChoice("google", model, dim, google_key, settings.embedding_base_url)
    base = settings.embedding_base_url or creds.ollama_base_url or OLLAMA_DEFAULT_URL
    return EmbedderChoice("ollama", model, dim, settings.embedding_api_key or "ollama", base)


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
