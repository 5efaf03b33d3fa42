"""How to install MemoryPlus's optional parts into PyGPT's environment, said the same way
by the worker (the embedder's reason), the plugin (settings page, alerts) and the doctor."""
from __future__ import annotations

# The offline embedder. WordLlama declares numpy>=2 but runs on the numpy 1.26 PyGPT pins; a
# plain `pip install wordllama` would replace PyGPT's numpy, so it is installed without its
# dependencies (its other needs come with pygpt-net). The pins of requirements-nodeps.txt.
LOCAL_EMBEDDER_PINS = "wordllama==0.4.0.post1 toml==0.10.2"


def local_embedder_command(python: str = "<PyGPT's python>") -> str:
    return f'"{python}" -m pip install --no-deps {LOCAL_EMBEDDER_PINS}'


def local_embedder_hint(python: str = "<PyGPT's python>") -> str:
    return (f"To install it into PyGPT's environment: {local_embedder_command(python)} "
            f"(--no-deps keeps PyGPT's numpy 1.26), then restart PyGPT; banks built before keep "
            f"hashed features until re-embedded (memory browser → Re-embed).")
