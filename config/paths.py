"""Where MemoryPlus keeps its data: one place for the plugin and the memoryplus command."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from memoryplus.config.schema import Settings, validate_lenient

SETTINGS_FILE = "settings.json"


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in `path` durable (POSIX; a no-op elsewhere or on error)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def pygpt_workdir() -> Path:
    """PyGPT's user data directory (its own rule: PYGPT_WORKDIR, else ~/.config/pygpt-net)."""
    env = os.environ.get("PYGPT_WORKDIR")
    return Path(env).expanduser() if env else Path.home() / ".config" / "pygpt-net"


def default_data_dir() -> Path:
    return pygpt_workdir() / "memoryplus"


def data_dir(settings: Settings | None = None, override: str | os.PathLike | None = None) -> Path:
    """The data directory: an explicit override, the Kuzu Storage Path setting, or the default."""
    if override:
        return Path(override).expanduser()
    if settings is not None and settings.kuzu_storage_path.strip():
        return Path(settings.kuzu_storage_path.strip()).expanduser()
    return default_data_dir()


def load_settings(directory: Path) -> tuple[Settings, list[str]]:
    """The settings mirrored in a data directory (defaults where absent or invalid)."""
    path = Path(directory) / SETTINGS_FILE
    try:
        values: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Settings(), []
    except (OSError, ValueError) as exc:
        return Settings(), [f"{path}: unreadable ({type(exc).__name__}); using defaults"]
    if not isinstance(values, dict):
        return Settings(), [f"{path}: not a settings object; using defaults"]
    return validate_lenient(values)


def save_settings(directory: Path, settings: Settings) -> None:
    """Mirror the settings (PyGPT drops a plugin's values if it ever starts without it)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = directory / SETTINGS_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(settings.model_dump(), fh, ensure_ascii=False, indent=1)
    os.replace(tmp, path)
