"""The app driver's environment: PyGPT offline and headless, its seeded config.json, an
editable memoryplus hidden, MemoryPlus's worker processes found; a timer and JSON helpers."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

T0 = time.monotonic()
PLUGIN_ID = "memoryplus"


def _now() -> float:
    return round(time.monotonic() - T0, 3)



def tiktoken_cache_dir() -> str | None:
    """llama_index (a PyGPT dependency) ships tiktoken's cl100k/o200k files."""
    try:
        import importlib.util
        spec = importlib.util.find_spec("llama_index.core")
        if spec and spec.submodule_search_locations:
            path = Path(list(spec.submodule_search_locations)[0]) / "_static" / "tiktoken_cache"
            if path.is_dir():
                return str(path)
    except Exception:
        pass
    return None


def offline_env(workdir: Path, home: Path | None = None) -> dict[str, str]:
    """The environment variables PyGPT needs to start offline and headless."""
    env = {
        "PYGPT_WORKDIR": str(workdir),
        "QT_QPA_PLATFORM": "offscreen",
        "QTWEBENGINE_DISABLE_SANDBOX": "1",
        "GRAPHITI_TELEMETRY_ENABLED": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    cache = tiktoken_cache_dir()
    if cache:
        env["TIKTOKEN_CACHE_DIR"] = cache
    if home is not None:
        env["HOME"] = str(home)
    return env


def plugin_options(extra: dict | None = None) -> dict[str, Any]:
    opts = {"extraction_engine": "local", "embedding_provider": "local", "engine_mode": "persistent"}
    opts.update(extra or {})
    return opts


def seed_config(workdir: Path, base_url: str, *, model: str = "gpt-4o", responses_api: bool = True,
                enable_plugin: bool = True, options: dict | None = None, extra: dict | None = None) -> Path:
    """Write PyGPT's default config.json with what a user would have set, before start."""
    import pygpt_net
    defaults = Path(pygpt_net.__file__).parent / "data" / "config" / "config.json"
    data = json.loads(defaults.read_text(encoding="utf-8"))
    data.update({
        "license.accepted": True,
        "mode": "chat",
        "model": model,
        "updater.check.launch": False,
        "updater.check.bg": False,
        "layout.tray": False,
        "layout.tray.minimize": False,
        "ctx.auto_summary": False,         # no title side-call: the requests are ours to count
        "app_banners_api_url": "",
        "remote_tools.global.web_search": False,
        "api_proxy.enabled": False,
    })
    data["current_model"] = dict(data.get("current_model") or {}, chat=model)
    data["providers"] = {"openai": {"api_key": "sk-scripted-e2e", "api_base": base_url,
                                    "extra": {"responses_api": bool(responses_api)}}}
    enabled = dict(data.get("plugins_enabled") or {})
    enabled[PLUGIN_ID] = bool(enable_plugin)
    data["plugins_enabled"] = enabled
    plugins = dict(data.get("plugins") or {})
    plugins[PLUGIN_ID] = plugin_options(options)
    data["plugins"] = plugins
    data.update(extra or {})       # what else the user set in PyGPT (e.g. app.env)
    workdir.mkdir(parents=True, exist_ok=True)
    target = workdir / "config.json"
    target.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return target


def hide_installed_memoryplus() -> list[str]:
    """Remove an editable/pip `memoryplus` from this process's import system, so that an add-on
    copy is imported from its own directory (what a user without `pip install` gets)."""
    removed = []
    for finder in list(sys.meta_path):
        mod = getattr(finder, "__module__", "") or getattr(type(finder), "__module__", "")
        if "__editable__" in mod and "memoryplus" in mod:
            sys.meta_path.remove(finder)
            removed.append(f"meta_path:{mod}")
    for hook in list(sys.path_hooks):
        mod = getattr(hook, "__module__", "") or ""
        if "__editable__" in mod and "memoryplus" in mod:
            sys.path_hooks.remove(hook)
            removed.append(f"path_hook:{mod}")
    for entry in list(sys.path):   # a PYTHONPATH pointing at a checkout's parent (development)
        if entry and os.path.isfile(os.path.join(entry, "memoryplus", "__init__.py")):
            sys.path.remove(entry)
            removed.append(f"sys.path:{entry}")
    sys.path_importer_cache.clear()
    for name in [m for m in sys.modules if m == "memoryplus" or m.startswith("memoryplus.")]:
        del sys.modules[name]
    return removed


def worker_processes(under: str | os.PathLike | None = None) -> list[dict]:
    """Live MemoryPlus worker processes; with `under`, only those whose working directory
    (the worker runs in its data directory) is inside that folder, so that workers of other
    programs on the machine are not counted."""
    try:
        import psutil
    except ImportError:
        return []
    root = os.path.realpath(under) if under else None
    out = []
    for p in psutil.process_iter(["pid", "ppid", "cmdline"]):
        try:
            cmd = " ".join(p.info.get("cmdline") or [])
            if "memoryplus.worker.process" not in cmd:
                continue
            try:
                cwd = p.cwd()
            except Exception:
                cwd = None
            if root and not (cwd and (os.path.realpath(cwd) + os.sep).startswith(root + os.sep)):
                continue
            try:
                pythonpath = p.environ().get("PYTHONPATH")
            except Exception:
                pythonpath = None
            out.append({"pid": p.info["pid"], "ppid": p.info["ppid"], "cwd": cwd, "cmdline": cmd[:300],
                        "status": p.status(), "pythonpath": pythonpath})
        except Exception:
            continue
    return out


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, dict):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple, set)):
            return [_jsonable(v) for v in value]
        return repr(value)[:500]
