"""Failures a user can fix, recognised by their error's class (or, for what arrives only as
text, its words) and said once, with the fix.

The plugin shows each cause once per session (and again after the settings change, when
the user may have fixed it), never once per turn. Texts carry no secrets: the error text is
redacted, endpoints are named by host only.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_MISSING = re.compile(r"No module named '([A-Za-z0-9_.]+)'")
_UNREACHABLE = ("connection error", "connection refused", "connecterror", "apiconnectionerror",
                "name or service not known", "nodename nor servname", "temporary failure in name",
                "failed to establish a new connection", "network is unreachable")
_AUTH = re.compile(r"\b401\b|incorrect api key|invalid api key|invalid_api_key|authenticationerror|"
                   r"unauthorized", re.I)
_NOT_FOUND = re.compile(r"\b404\b|NotFoundError|model .{0,80}not found", re.I)
_REQUIREMENTS = Path(__file__).resolve().parents[1] / "manifest.json"


@dataclass(frozen=True)
class Problem:
    cause: str      # one message per cause
    text: str       # what happened and how to fix it


def requirement(module: str) -> str:
    """The pinned requirement that brings `module` (manifest.json's list, what the add-on
    installer installs), or the module's own name."""
    top = module.split(".")[0]
    wanted = top.replace("_", "-").lower()
    try:
        deps = json.loads(_REQUIREMENTS.read_text(encoding="utf-8")).get("external_dependencies") or []
    except (OSError, ValueError):
        deps = []
    for dep in deps:
        name = re.split(r"[\[<>=!~ ]", dep, maxsplit=1)[0].lower()
        if name == wanted:
            return dep
    return top


def diagnose(error: str | BaseException, *, python: str = "", endpoints: str = "") -> Problem | None:
    """The fixable cause behind an error, or None (then the status bar says it). A failed
    operation's error is known by its class (its wire code); what comes only as text (the
    worker's start-up, a provider's answer inside a provider error) by its words."""
    from memoryplus.common.redact import redact
    from memoryplus.wire import errors
    text = str(error or "")
    low = text.lower()
    python = python or sys.executable
    m = _MISSING.search(text)
    if m:
        req = requirement(m.group(1))
        return Problem(f"missing:{m.group(1).split('.')[0]}", redact(
            f"MemoryPlus cannot run its memory worker: the Python package '{m.group(1)}' is not "
            f"installed for {python}.\n\nFix: install MemoryPlus's requirements into that "
            f"environment, e.g.\n  \"{python}\" -m pip install \"{req}\"\nthen restart PyGPT "
            f"(see the README, Install). Until then your turns are kept on disk, not stored."))
    # the words count only where no code says what it is (text, or an unclassified failure)
    by_words = not isinstance(error, errors.ServiceError) or isinstance(error, errors.Internal)
    if isinstance(error, errors.BankInUse) or by_words and ("is in use by" in low or "could not set lock" in low):
        return Problem("bank_in_use", redact(
            f"MemoryPlus cannot open a memory bank: {text.splitlines()[0][:300]}\n\nFix: close the "
            f"other program using it (another PyGPT, or a `memoryplus` command), then use Restart "
            f"worker in the memory browser. Your turns are kept and stored once it is free."))
    where = f" ({endpoints})" if endpoints else ""
    if _AUTH.search(text):
        return Problem("auth", redact(
            f"MemoryPlus's model server refused the API key (HTTP 401){where}.\n\nFix: correct the "
            f"key in PyGPT's provider settings, or MemoryPlus's Override API Key / Embedding API "
            f"Key (Plugins → Settings → MemoryPlus → Models), or choose Extraction Engine local "
            f"and Embedding Provider local. Your turns are kept and stored once it works."))
    if any(k in low for k in _UNREACHABLE):
        return Problem("unreachable", redact(
            f"MemoryPlus cannot reach its model server{where}: {text.splitlines()[0][:200]}\n\n"
            f"Fix: start the server, or correct its address in PyGPT's provider settings (or "
            f"MemoryPlus's Override Base URL / Embedding Base URL), or choose Extraction Engine "
            f"local and Embedding Provider local. Your turns are kept and stored once it answers."))
    if _NOT_FOUND.search(text):
        return Problem("not_found", redact(
            f"MemoryPlus's model server does not serve what MemoryPlus asked for (HTTP 404){where}: "
            f"{text.splitlines()[0][:200]}\n\nFix: choose a model that server serves as Graphiti "
            f"Internal Model (Plugins → Settings → MemoryPlus → Models), or correct the server's "
            f"address, or choose Extraction Engine local. Your turns are kept and stored once it works."))
    if isinstance(error, errors.EmbeddingMismatch) or by_words and "was built with the embedder" in low:
        return Problem("embedder_mismatch", redact(f"MemoryPlus: {text.splitlines()[0][:600]}"))
    return None


def llm_fallback(reason: str, model: str) -> Problem:
    """Said once when the LLM's answers could not be used and local extraction stored turns."""
    return Problem("llm_output", (
        f"MemoryPlus: the Graphiti model ({model}) gave answers that are not valid JSON of the "
        f"shape graphiti asks for ({reason}); those turns were stored by local extraction instead "
        f"and are marked so in the memory browser and export.\n\nFix: choose a model that supports "
        f"structured output as Graphiti Internal Model, or set Extraction Engine to local."))
