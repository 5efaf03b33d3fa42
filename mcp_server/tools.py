"""The MCP tools and resources over a MemoryService.

Every input is checked here before it reaches the service, and every failure is a ToolError
(an MCP error result with one clear line), never a traceback: a bank name an attacker chose,
an oversized text, a date that is not one, a worker that is not there.

Forgetting asks the *user*: through MCP elicitation when the client offers it (the answer
comes from the person at the client, and the model's `confirm` argument is then ignored);
otherwise the first call only lists the strong matches, and a second call with
`confirm=true` forgets exactly those. That confirmation comes from the model, which is
why the Allow Forgetting over MCP setting can switch the tool off.
"""
from __future__ import annotations

import asyncio
import json
import logging
import unicodedata
from typing import Any, Callable
from urllib.parse import quote, unquote

from mcp import types as mt
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ResourceError, ToolError
from pydantic import BaseModel, Field

from memoryplus.common.isodates import parse_iso
from memoryplus.common.redact import redact
from memoryplus.wire import errors
from memoryplus.wire.banks import BankNameError, check_name
from memoryplus.wire.protocol import (
    MAX_ENTITY_CHARS, BankParams, ForgetParams, RememberParams, SearchParams, TimelineParams,
)

log = logging.getLogger("memoryplus.mcp")

# What one call may carry: far above any real memory or question, far below what would hurt.
MAX_BANK_CHARS = 200
MAX_QUERY_CHARS = 2000
MAX_TEXT_CHARS = 20000
MAX_RESULTS = 50
READ_S, WRITE_S = 120.0, 600.0
BANK_URI = "memoryplus://bank/{name}"
BANKS_URI = "memoryplus://banks"


class ForgetConfirmation(BaseModel):
    """What the client asks the user (MCP elicitation)."""
    forget: bool = Field(description="Forget these memories for good")


def check_bank(name: str) -> str:
    """A bank name as a PyGPT preset id can be: text of at most MAX_BANK_CHARS characters,
    without control characters or path separators. ValueError says what is wrong."""
    try:
        check_name(name)
    except BankNameError as exc:
        raise ValueError(str(exc)) from None
    if len(name) > MAX_BANK_CHARS:
        raise ValueError(f"a bank name may have at most {MAX_BANK_CHARS} characters, not {len(name)}")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in name):
        raise ValueError("a bank name may not contain control or invisible formatting characters")
    if "/" in name or "\\" in name or not name.strip(". "):
        raise ValueError("a bank name may not contain / or \\ nor be only dots")
    return name


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{what} must be a non-empty text")
    if len(value) > limit:
        raise ToolError(f"{what} has {len(value)} characters; at most {limit} are accepted")
    if "\x00" in value:
        raise ToolError(f"{what} may not contain NUL characters")
    return value


def _when(value: Any, what: str):
    """An optional ISO date or time argument."""
    if value in (None, ""):
        return None
    try:
        return parse_iso(_text(value, what, 64))
    except (TypeError, ValueError):
        raise ToolError(f"{what} is not an ISO date or time: {str(value)[:64]!r}") from None


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def _result(r) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "text": r.text, "name": r.name,
            "valid_at": _iso(r.valid_at), "invalid_at": _iso(r.invalid_at),
            "current": r.invalid_at is None, "score": round(r.score, 4)}


async def _wait(fut) -> Any:
    """The service's Future, awaited; its failures as one-line MCP errors."""
    try:
        return await asyncio.wrap_future(fut)
    except errors.ServiceError as exc:
        raise ToolError(redact(str(exc).splitlines()[0] if str(exc) else exc.code)) from None


def _elicitation_offered(ctx: Context) -> bool:
    try:
        return ctx.session.check_client_capability(mt.ClientCapabilities(elicitation=mt.ElicitationCapability()))
    except Exception:
        return False


class MemoryMCP(FastMCP):
    """FastMCP whose resource list also names every bank (a bank is made by its first write,
    so the list is asked of the service each time)."""

    banks_lister: Callable[[], Any] | None = None

    async def list_resources(self) -> list[mt.Resource]:
        out = await super().list_resources()
        if self.banks_lister is not None:
            for b in await self.banks_lister():
                out.append(mt.Resource(uri=BANK_URI.format(name=quote(b.name, safe="")), name=b.name,
                                       description=f"bank {b.name!r}: {b.episodes} turns, {b.facts} facts",
                                       mimeType="application/json"))
        return out


def build(service, *, default_bank: str | None, settings_now: Callable[[], Any],
          transport_security=None) -> MemoryMCP:
    """The server. `settings_now()` gives the current settings (re-read at each forget, so a
    change in PyGPT's settings applies without restarting the server)."""
    mcp = MemoryMCP(name="memoryplus", log_level="WARNING", transport_security=transport_security, instructions=(
        "A time-aware long-term memory of the user, shared with PyGPT and other assistants on this "
        "machine. Search it before answering questions about the user's life; remember what the "
        "user asks you to keep. Facts carry validity dates: 'current: false' means no longer true."))

    def bank_of(bank: str | None) -> str:
        name = bank if bank not in (None, "") else default_bank
        if not name:
            raise ToolError("no bank given: pass `bank` (see list_banks), or start the server with --bank NAME")
        try:
            return check_bank(name)
        except ValueError as exc:
            raise ToolError(f"bad bank name: {exc}") from None

    async def banks():
        return await _wait(service.banks(timeout=READ_S))
    mcp.banks_lister = banks

    @mcp.tool()
    async def search(query: str, bank: str | None = None, limit: int = 10,
                     as_of: str | None = None) -> dict[str, Any]:
        """Search the memory for facts, entities and past conversation turns about the query.
        `as_of` (an ISO date) asks what was true then; results no longer true have current=false."""
        name, q = bank_of(bank), _text(query, "query", MAX_QUERY_CHARS)
        if not isinstance(limit, int) or not 1 <= limit <= MAX_RESULTS:
            raise ToolError(f"limit must be a whole number from 1 to {MAX_RESULTS}")
        when = _when(as_of, "as_of")
        found = await _wait(service.search(SearchParams(bank=name, query=q, limit=limit, as_of=when),
                                           timeout=READ_S))
        return {"bank": name, "results": [_result(r) for r in found]}

    @mcp.tool()
    async def remember(text: str, bank: str | None = None) -> dict[str, Any]:
        """Store a text as an explicit memory, as the user's /remember_this does in PyGPT. Answers
        once the memory is stored durably."""
        name, body = bank_of(bank), _text(text, "text", MAX_TEXT_CHARS)
        rep = await _wait(service.remember(RememberParams(bank=name, text=body, tags=["mcp"]), timeout=WRITE_S))
        return {"bank": name, "stored": bool(rep.stored), "ids": rep.stored or rep.unchanged,
                "message": "remembered" if rep.stored else "already remembered"}

    @mcp.tool()
    async def forget(query: str, ctx: Context, bank: str | None = None, confirm: bool = False) -> dict[str, Any]:
        """Forget the memories that match the query strongly, with the conversation turns behind
        them. The user is asked first. If the answer lists matches with confirmation_needed,
        show them to the user and call again with confirm=true only if the user agrees."""
        if not settings_now().mcp_forget:
            raise ToolError("forgetting over MCP is switched off (the Allow Forgetting over MCP setting)")
        name, q = bank_of(bank), _text(query, "query", MAX_QUERY_CHARS)
        preview = await _wait(service.forget(ForgetParams(bank=name, text=q, confirm=False), timeout=WRITE_S))
        matches = [_result(m) for m in preview.matches]
        if not matches:
            return {"bank": name, "forgotten": [], "matches": [], "message": "nothing matches strongly; nothing forgotten"}
        if _elicitation_offered(ctx):
            listing = "\n".join(f"- {m['text'][:200]}" for m in matches)
            try:
                answer = await ctx.elicit(f"Forget {len(matches)} memor{'y' if len(matches) == 1 else 'ies'} "
                                          f"of bank {name!r} for good?\n{listing}", ForgetConfirmation)
            except Exception as exc:   # the client failed to ask: nothing is forgotten
                raise ToolError(f"could not ask the user to confirm ({type(exc).__name__}); nothing forgotten") from None
            if answer.action != "accept" or not answer.data.forget:
                return {"bank": name, "forgotten": [], "matches": matches, "message": "the user kept them"}
        elif not confirm:
            return {"bank": name, "forgotten": [], "matches": matches, "confirmation_needed": True,
                    "message": "nothing forgotten yet: show these to the user, and call forget again with "
                               "confirm=true only if the user agrees"}
        rep = await _wait(service.forget(ForgetParams(bank=name, ids=[m["id"] for m in matches], confirm=True),
                                         timeout=WRITE_S))
        return {"bank": name, "forgotten": rep.forgotten, "episodes_removed": rep.episodes_removed,
                "message": f"forgot {len(rep.forgotten)} memories and {rep.episodes_removed} stored turns"}

    @mcp.tool()
    async def timeline(entity: str, bank: str | None = None, limit: int = 50,
                       as_of: str | None = None) -> dict[str, Any]:
        """What is known about one person, place or thing, oldest first: each fact with when it
        became true (valid_at), when it stopped being true (invalid_at; null: still true) and
        when it was said. `as_of` (an ISO date) keeps only what had begun by then."""
        name, who = bank_of(bank), _text(entity, "entity", MAX_ENTITY_CHARS)
        if not isinstance(limit, int) or not 1 <= limit <= 500:
            raise ToolError("limit must be a whole number from 1 to 500")
        tl = await _wait(service.timeline(TimelineParams(bank=name, entity=who, limit=limit,
                                                         as_of=_when(as_of, "as_of")), timeout=READ_S))
        return {"bank": name, "entity": tl.entity, "matched": tl.matched, "facts": [
            {"id": f.id, "fact": f.fact, "valid_at": _iso(f.valid_at), "invalid_at": _iso(f.invalid_at),
             "said_at": _iso(f.said_at), "current": f.invalid_at is None} for f in tl.facts]}

    @mcp.tool()
    async def list_banks() -> dict[str, Any]:
        """The memory banks (one per PyGPT preset, plus the fallback bank) and their sizes."""
        return {"default": default_bank, "banks": [b.model_dump() for b in await banks()]}

    @mcp.tool()
    async def stats(bank: str | None = None) -> dict[str, Any]:
        """Counts of a bank: stored turns, entities, facts (current ones), LLM spending."""
        return (await _wait(service.stats(BankParams(bank=bank_of(bank)), timeout=READ_S))).model_dump()

    @mcp.resource(BANKS_URI, name="banks", mime_type="application/json")
    async def banks_resource() -> str:
        """Every bank and its size."""
        return json.dumps([b.model_dump() for b in await banks()], ensure_ascii=False)

    @mcp.resource(BANK_URI, name="bank", mime_type="application/json")
    async def bank_resource(name: str) -> str:
        """One bank's counts (its name URL-encoded in the URI)."""
        try:
            bank = check_bank(unquote(name))
            return json.dumps((await _wait(service.stats(BankParams(bank=bank), timeout=READ_S))).model_dump(),
                              ensure_ascii=False)
        except (ValueError, ToolError) as exc:
            raise ResourceError(f"bank {unquote(name)[:80]!r}: {exc}") from None

    return mcp
