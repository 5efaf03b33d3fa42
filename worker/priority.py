"""The worker's CPU priority: below PyGPT's.

The worker is a background helper on the user's machine, often one with two cores. At the
same priority, its search and ingest threads (Kuzu's among them) take cores the GUI thread
of PyGPT is waiting for, or that a plugin thread holding the GIL needs to finish and let
the GUI thread have it. Measured with 200 chat turns through PyGPT's events on a 300-turn
bank, the worker reniced between rounds, 8 rounds each way alternating: the GUI thread's
p99 per turn 6.6–14.1 ms (median 7.6) at the same priority, 3.5–5.9 ms (median 4.8) at
nice 10; the memories reached the prompt as fast (inject p95 105–180 ms against 102–108 ms).
The price: on a machine whose cores are all busy, the worker gets a smaller share, and a
turn may go ahead without its memories (a late turn; nothing is lost).
"""
from __future__ import annotations

import os
import sys

NICE = 10   # the usual step for background work; Linux and macOS cap it at 19
_BELOW_NORMAL_PRIORITY_CLASS = 0x00004000   # Windows' class for the same


def lower() -> str | None:
    """Lower this process's CPU priority. Call it first thing: on Linux, niceness is per
    thread and a thread inherits it when created, so threads started before keep theirs.
    Returns why it could not, for the log (which does not exist yet), or None."""
    try:
        if sys.platform == "win32":
            import ctypes
            kernel32 = ctypes.windll.kernel32   # type: ignore[attr-defined]
            if not kernel32.SetPriorityClass(kernel32.GetCurrentProcess(), _BELOW_NORMAL_PRIORITY_CLASS):
                raise ctypes.WinError()     # it returns 0 on failure, it does not raise
        else:
            os.nice(NICE)
    except (OSError, AttributeError) as exc:   # a sandbox may refuse it: run as we are
        return f"the worker's priority stays as it was: {exc}"
    return None
