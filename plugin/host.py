"""What MemoryPlus reads from PyGPT: API keys and endpoints, the bank of a turn, options."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memoryplus.config.schema import options

if TYPE_CHECKING:   # pydantic: imported when first needed, off PyGPT's start-up path
    from memoryplus.config.schema import Settings
    from memoryplus.wire.records import Credentials

# PyGPT providers that speak our LLM clients' protocols natively; any other provider of a
# model (anthropic, deepseek, open_router, ...) is reached as an OpenAI-compatible endpoint.
NATIVE_PROVIDERS = {"openai": "openai", "ollama": "ollama", "google": "google"}


def bank_for(ctx: Any, settings: Settings) -> str:
    """The bank of a turn: its saved preset, else the fallback. Unsaved `current.<mode>`
    presets all share the fallback, so switching modes does not split a default user's memory."""
    if not settings.link_db_to_preset:
        return settings.fallback_bank
    meta = getattr(ctx, "meta", None)
    preset = getattr(meta, "preset", None) if meta is not None else None
    if not isinstance(preset, str) or not preset.strip() or preset.startswith("current."):
        return settings.fallback_bank
    return preset


def credentials(window: Any, settings: Settings) -> Credentials:
    """Keys and endpoints for the Graphiti model, from PyGPT's own provider configuration."""
    from memoryplus.wire.records import Credentials
    creds: dict[str, str] = {}
    try:
        models = window.core.models
        model = models.get(settings.graphiti_model) if models.has(settings.graphiti_model) else None
        llm = window.core.llm
        openai = llm.get("openai")
        if openai is not None:
            creds["openai_api_key"] = openai.get_config("api_key", "") or ""
        google = llm.get("google")
        if google is not None and google.has_config("api_key"):
            creds["google_api_key"] = google.get_config("api_key", "") or ""
        try:
            creds["ollama_base_url"] = models.ollama.get_base_url().rstrip("/") + "/v1"
        except Exception:  # no Ollama configured
            pass
        if model is not None:
            provider = str(getattr(model, "provider", "") or "")
            args = models.prepare_client_args(model=model)
            creds["model_provider"] = NATIVE_PROVIDERS.get(provider, "openai_compatible")
            if provider not in ("google", "ollama"):
                creds["openai_api_key"] = args.get("api_key") or creds.get("openai_api_key", "")
                creds["openai_base_url"] = args.get("base_url") or ""
    except Exception:
        # A PyGPT without some of these parts: run with what we have (local engine at worst).
        pass
    return Credentials(**{k: str(v) for k, v in creds.items() if v is not None})


def option_kwargs(info) -> dict[str, Any]:
    """PyGPT add_option() arguments for one schema option."""
    kw: dict[str, Any] = {"value": info.default, "label": info.label, "description": info.description,
                          "tab": info.tab, "advanced": info.advanced, "secret": info.secret}
    if info.kind == "combo":
        if info.use:
            kw["use"] = info.use
            kw["use_params"] = {"allow_empty": False}
        else:
            kw["keys"] = list(info.choices)
    if info.kind in ("int", "float"):
        kw["min"], kw["max"] = info.ge, info.le
        if info.step:
            kw["step"] = info.step
    return kw


def register_options(plugin: Any) -> None:
    from memoryplus.plugin import tools
    for info in options():
        if info.kind == "cmd":      # a model tool: PyGPT's command, its switch `cmd.<id>`
            tools.declare(plugin, info)
        else:
            plugin.add_option(info.id, info.kind, **option_kwargs(info))


def read_settings(plugin: Any) -> tuple[Settings, list[str]]:
    """The plugin's option values as Settings; a bad value keeps its default and is reported."""
    from memoryplus.config.schema import validate_lenient
    values = {}
    for info in options():
        if info.kind == "cmd":
            if plugin.has_option(f"cmd.{info.id}"):
                values[info.id] = plugin.has_cmd(info.id)
        elif plugin.has_option(info.id):
            values[info.id] = plugin.get_option_value(info.id)
    return validate_lenient(values)


def pygpt_values(values: dict[str, Any]) -> dict[str, Any]:
    """Settings values under the keys PyGPT stores them by (a tool's switch: `cmd.<id>`)."""
    cmds = {info.id for info in options() if info.kind == "cmd"}
    return {f"cmd.{k}" if k in cmds else k: v for k, v in values.items()}


def set_value(plugin: Any, key: str, value: Any) -> None:
    """Set one option by PyGPT's key; a command keeps its declaration, only its switch changes."""
    if not plugin.has_option(key):
        return
    if key.startswith("cmd.") and isinstance(plugin.options[key].get("value"), dict):
        plugin.options[key]["value"]["enabled"] = bool(value)
        plugin.refresh_option(key)
    else:
        plugin.set_option_value(key, value)
