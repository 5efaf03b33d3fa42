"""Entry point when MemoryPlus is installed as a PyGPT add-on (Config → Install Add-on…).

PyGPT loads this file under a private module name; the add-on directory is named
`memoryplus` (its manifest id), so its parent on sys.path makes the very same package
importable as `memoryplus`, for this process and for the worker processes it starts.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import memoryplus  # noqa: F401  (a pip install wins: it is the same code)
except ImportError:
    if os.path.basename(_HERE) == "memoryplus":
        sys.path.insert(0, os.path.dirname(_HERE))

from memoryplus.plugin.plugin import Plugin  # noqa: E402

__all__ = ["Plugin"]
