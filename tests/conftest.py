"""Shared fixtures: real Kuzu on disk, the real engine, offline providers."""
from __future__ import annotations

import os

os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")

import pytest  # noqa: E402

from memoryplus.config.schema import Settings  # noqa: E402
from memoryplus.engine.memory_engine import MemoryEngine  # noqa: E402


@pytest.fixture
async def make_engine(tmp_path):
    """Engines over a temporary data directory; closed (locks released) after the test."""
    engines = []

    def make(directory=None, credentials=None, **values):
        values.setdefault("extraction_engine", "local")
        values.setdefault("embedding_provider", "local")
        eng = MemoryEngine(Settings(**values), directory or tmp_path / "data", credentials)
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        await eng.close()


@pytest.fixture
async def engine(tmp_path):
    eng = MemoryEngine(Settings(extraction_engine="local", embedding_provider="local"), tmp_path / "data")
    yield eng
    await eng.close()


@pytest.fixture
def host(tmp_path):
    """PyGPT's real plugin registry and dispatcher (testing/pygpt_host.py) with MemoryPlus
    registered and started on offline settings (plus `values`); destroyed after the test."""
    from memoryplus.plugin.plugin import Plugin
    from memoryplus.testing.pygpt_host import LOCAL, HostWindow
    windows = []

    def make(workdir=None, **values):
        window = HostWindow(workdir or tmp_path / "pygpt")
        plugin = Plugin()
        stored = window.core.config.data.setdefault("plugins", {}).setdefault("memoryplus", {})
        stored.update({**LOCAL, **values})
        window.register(plugin)
        plugin._ensure_started()
        windows.append((window, plugin))
        return window, plugin

    yield make
    for window, plugin in windows:
        plugin.destroy()
