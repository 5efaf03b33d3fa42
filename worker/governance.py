"""What the worker owes its clients (wire/protocol.py's docstring has the model): the answer
to a socket client's hello, and the events every client gets when a bank changes."""
from __future__ import annotations

import logging
import os
from typing import Any

from memoryplus.wire import protocol as P

log = logging.getLogger("memoryplus.worker")

# Writes that change what a search of their bank returns (forget has an event of its own).
_CHANGES = frozenset({"ingest", "remember", "import", "clear", "reembed", "rate", "prune", "expire"})


def bank_event(op: str, params: Any, result: Any, origin: str) -> P.Event | None:
    """The event a successful request owes every client, if any (`result` as JSON data)."""
    bank = getattr(params, "bank", None)
    if not bank:
        return None
    if op == "forget":
        report = result if isinstance(result, dict) else {}
        ids, sources = list(report.get("forgotten") or []), list(report.get("sources") or [])
        if report.get("dry_run") or not (ids or sources or report.get("episodes_removed")):
            return None
        data = P.ForgottenData(bank=bank, ids=[str(i) for i in ids],
                               caller_ids=[str(s) for s in sources], origin=origin)
        return P.Event(event=P.FORGOTTEN, data=data.model_dump(mode="json"))
    if op in _CHANGES:
        data = P.BankChangedData(bank=bank, op=op, origin=origin, cleared=op == "clear")
        return P.Event(event=P.BANK_CHANGED, data=data.model_dump(mode="json"))
    return None


def hello(engine, cfg: P.ConfigMessage, params: P.HelloParams) -> P.HelloResult:
    """The owner's governing settings that differ from the client's, and the banks whose
    embedder the client's embedding settings would not choose."""
    ours = P.settings_fingerprint(engine.settings)
    theirs = params.settings
    differs = [P.SettingDifference(option=k, worker=v, client=theirs[k])
               for k, v in ours.items() if k in theirs and theirs[k] != v]
    result = P.HelloResult(pid=os.getpid(), app=cfg.app, owner_pid=cfg.owner_pid, differs=differs)
    result.embedders = _embedder_conflicts(engine, cfg.app, {**ours, **theirs})
    return result


def _embedder_conflicts(engine, app: str, client_values: dict[str, Any]) -> list[P.EmbedderConflict]:
    """Every bank whose recorded embedder is not what the client's embedding settings would
    choose: either the worker uses the recorded one anyway (the client is told), or the
    worker's own settings choose another too (every operation on the bank fails until fixed)."""
    from memoryplus.config.schema import validate
    from memoryplus.engine.providers import resolve_embedder
    try:   # the client's embedding settings, with the owner's credentials (the client's never come)
        client = validate({**engine.settings.model_dump(), **client_values})
    except Exception as exc:
        log.info("a client's settings do not validate here: %s", exc)
        return []
    out = []
    for m in engine.dir.all():
        if not m.embedder:
            continue
        try:
            yours = resolve_embedder(client, engine.credentials, m.embedder).id
            governing = resolve_embedder(engine.settings, engine.credentials, m.embedder).id
        except Exception:
            continue
        if yours == m.embedder:
            continue
        built = f"bank {m.name!r} was built with the embedder {m.embedder} ({m.embedding_dim} dimensions)"
        fix = (f"re-embed it (`memoryplus reembed --bank {m.name}` while {app} is closed, or Re-embed "
               f"in {app}'s memory browser)")
        if governing != m.embedder:
            message = (f"{built} but the settings of {app}'s worker give {governing}: every operation "
                       f"on it fails (EmbeddingMismatchError) until {app}'s embedding settings are "
                       f"switched back or you {fix}")
        else:
            message = (f"{built}; yours would give {yours}: the worker of {app} searches it with "
                       f"the embedder it was built with. To use yours, {fix}, or set your embedding "
                       f"settings back to match")
        out.append(P.EmbedderConflict(bank=m.name, built_with=m.embedder, dim=m.embedding_dim or 0,
                                      yours=yours, message=message))
    return out
