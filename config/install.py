"""How to install MemoryPlus's optional parts, said the same way by the worker (the embedder's
reason), the plugin (settings page, alerts) and the doctor."""
from __future__ import annotations

import sys
from pathlib import Path

# The offline embedder. WordLlama declares numpy>=2 but runs on the numpy 1.26 PyGPT pins; a
# plain `pip install wordllama` would replace PyGPT's numpy (and PyGPT's own add-on installer
# cannot install it: it holds numpy at 1.26), so it is installed without its dependencies
# (its other needs come with pygpt-net). The pins of requirements-nodeps.txt.
LOCAL_EMBEDDER_PINS = "wordllama==0.4.0.post1 toml==0.10.2"


def _extra_packages() -> str:
    """PyGPT's folder of add-on packages (<workdir>/extra_packages/3.X), if on this path."""
    return next((p for p in sys.path if "extra_packages" in Path(p).parts), "")


def local_embedder_command(python: str = "") -> str:
    """The command that installs the offline embedder for the interpreter the memory worker
    runs on (`python`, default this one), keeping its numpy."""
    if getattr(sys, "frozen", False) and not python:
        # A frozen PyGPT has no pip: a Python of its version installs into its extra packages.
        target = _extra_packages() or "<PyGPT's extra_packages folder>"
        return (f"python{sys.version_info.major}.{sys.version_info.minor} -m pip install "
                f"--no-deps --target \"{target}\" {LOCAL_EMBEDDER_PINS}")
    return f'"{python or sys.executable}" -m pip install --no-deps {LOCAL_EMBEDDER_PINS}'


def local_embedder_hint(python: str = "") -> str:
    return (f"To install it where the memory worker runs: {local_embedder_command(python)} "
            f"(--no-deps keeps PyGPT's numpy 1.26), then restart PyGPT; banks built before keep "
            f"hashed features until re-embedded (memory browser → Re-embed).")
