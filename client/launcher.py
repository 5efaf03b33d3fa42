"""Starting worker processes: which interpreter, how (python -m, or a frozen PyGPT's own
executable through multiprocessing: client/frozen.py), with which environment, and the config
line that carries the settings and secrets on the worker's stdin (never argv or environment).
It also holds the client's configuration: settings, credentials, engine mode."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from memoryplus.client import frozen
from memoryplus.client.errors import WorkerUnavailable
from memoryplus.config.schema import Settings
from memoryplus.wire import protocol as P
from memoryplus.wire.records import Credentials
from memoryplus.wire.transport import TRANSPORT_ENV

# Environment variables a worker may need (paths, locale, certificates, proxies). Nothing else
# of the parent's environment reaches it: no API keys.
_ENV_KEEP = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
    "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "APPDATA", "LOCALAPPDATA",
    "USERPROFILE", "XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY",
    "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
    "VIRTUAL_ENV", "PYTHONPATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "HF_HOME",
    P.TEST_HOOKS_ENV, TRANSPORT_ENV, "MALLOC_ARENA_MAX",
)
# glibc's heap arenas for the worker, unless the user set their own. The default (8 per core)
# gives each Kuzu and worker thread its own arena, and an arena's freed pages are rarely given
# back: with 2 the worker held ~40 MB less with three 2,000-turn banks open (396.8 / 422.8 MB
# -> 367.5 / 363.5 MB; 1 arena: 375.2), 7 MB less with one 5,000-turn bank (2026-12-06).
MALLOC_ARENAS = "2"
# A frozen (PyInstaller) PyGPT's own bookkeeping, which its children need: with them a one-file
# build's child reuses the unpacked bundle instead of unpacking it again.
_FROZEN_ENV_PREFIXES = ("_PYI_", "_MEIPASS")


def _package_root() -> str | None:
    """The directory to put on the worker's PYTHONPATH when memoryplus was not pip-installed
    (a PyGPT add-on copied into a folder named memoryplus)."""
    import memoryplus
    pkg = Path(memoryplus.__file__).resolve().parent
    return str(pkg.parent) if pkg.name == "memoryplus" else None


def _import_path() -> list[str]:
    """The import path for a worker run by this process's own interpreter: the add-on's parent,
    then this process's sys.path as it is now. PyGPT appends its extra_packages folder there at
    start (RuntimePackages.activate), and that is where its add-on installer puts manifest.json's
    dependencies (graphiti-core, kuzu): the worker must see them as PyGPT does."""
    out: list[str] = []
    for entry in [_package_root() or "", *sys.path]:
        if not entry:
            continue   # '' is this process's working directory, not the worker's
        entry = os.path.abspath(entry)
        if entry not in out and os.path.exists(entry):
            out.append(entry)
    return out


class Launcher:
    """The client's configuration, and how it starts a worker process."""

    def __init__(self, settings: Settings, data_dir: Path, credentials: Credentials, *, app: str,
                 mode_arg: str | None, python_arg: str | None, launch_arg: str | None,
                 limits: P.WorkerLimits, test_hooks: dict[str, Any]):
        self.settings, self.data_dir, self.credentials, self.app = settings, data_dir, credentials, app
        self.mode_arg, self.python_arg, self.launch_arg = mode_arg, python_arg, launch_arg
        self.limits, self.test_hooks = limits, test_hooks

    @property
    def mode(self) -> str:
        """The configured engine mode: the constructor's, else the setting; a later change of
        the setting (update_settings) wins over the constructor's."""
        return self.mode_arg or self.settings.engine_mode

    def python(self) -> str:
        """The interpreter for worker processes: the `python` argument, the Worker Python
        setting, or the interpreter this process runs under (in a frozen build: its own
        executable, started through multiprocessing; see client/frozen.py)."""
        if self.python_arg:
            return self.python_arg
        if self.settings.worker_python.strip():
            return os.path.expanduser(self.settings.worker_python.strip())
        return sys.executable

    def python_choice(self) -> str:
        try:
            return self.python()
        except WorkerUnavailable:
            return ""

    def own_interpreter(self) -> bool:
        """The worker runs under this process's interpreter (no Worker Python override)."""
        return not self.python_arg and not self.settings.worker_python.strip()

    def launch(self) -> str:
        """How worker processes start: "multiprocessing" (this process's executable as a
        multiprocessing spawn child: a frozen PyGPT) or "python" (`python -m`)."""
        if self.launch_arg:
            return self.launch_arg
        return "multiprocessing" if self.own_interpreter() and getattr(sys, "frozen", False) else "python"

    def child_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k in _ENV_KEEP or k.startswith("LC_") or k.startswith(_FROZEN_ENV_PREFIXES)}
        env["GRAPHITI_TELEMETRY_ENABLED"] = "false"
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONIOENCODING"] = "utf-8"
        env["HF_HUB_OFFLINE"] = "1"
        env.setdefault("MALLOC_ARENA_MAX", MALLOC_ARENAS)
        # Our own interpreter gets our whole import path (PyGPT's extra_packages included); a
        # Worker Python is another environment: only the add-on's parent is added to its own.
        paths = _import_path() if self.own_interpreter() else [x for x in [_package_root()] if x]
        if paths:
            env["PYTHONPATH"] = os.pathsep.join([*paths, *[x for x in [env.get("PYTHONPATH", "")] if x]])
        return env

    def config_line(self, role: str) -> bytes:
        return P.encode(P.ConfigMessage(
            settings=self.settings.model_dump(), credentials=self.credentials,
            data_dir=str(self.data_dir), app=self.app, role=role, owner_pid=os.getpid(),
            limits=self.limits, test=self.test_hooks))

    def spawn(self) -> subprocess.Popen:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            os.chmod(self.data_dir, 0o700)
        except OSError:
            pass
        kwargs: dict[str, Any] = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      cwd=str(self.data_dir), env=self.child_env(), close_fds=True)
        if os.name == "nt":
            kwargs["creationflags"] = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        if self.launch() == "multiprocessing":
            return frozen.start_worker(self.data_dir, _import_path(), **kwargs)
        return subprocess.Popen([self.python(), "-m", P.WORKER_MODULE], **kwargs)

    def start_failure(self, exc: BaseException) -> str:
        """What a failed spawn says."""
        return str(exc) if isinstance(exc, WorkerUnavailable) else \
            f"cannot start the worker with {self.python_choice()!r}: {exc}"
