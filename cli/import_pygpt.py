"""`memoryplus import-pygpt`: backfill memory from PyGPT's own conversation history.

PyGPT keeps its conversations in `db.sqlite` in its workdir: `ctx_meta` (one row per
conversation, with its `preset_id`) and `ctx_item` (one row per turn: `input`, `output`,
`input_ts`, `is_internal`, ...). Each real turn goes to the bank the plugin would have used
(`host.bank_for` on the conversation's preset) under the plugin's own turn id
`pygpt:<meta id>:<item id>`, cleaned by the same sanitizer, so an import and a later live turn
never store the same turn twice, and running the import again adds nothing (the engine's
episodes are idempotent by id: that is also what makes an interrupted import resumable).
Imported turns keep their original date (`Turn.time` = the input time); expiry counts from
when they are stored.

With LLM extraction the import first estimates what it will spend and asks before going on.
"""
from __future__ import annotations

import sqlite3
import sys
import types
from collections import OrderedDict
from datetime import datetime, timezone
from pathlib import Path

from memoryplus.common.isodates import parse_iso
from memoryplus.wire.records import Turn, as_utc
from memoryplus.common.wording import plural

# Measured with the scripted LLM (tests/test_import_pygpt.py::test_llm_estimate_prompt_and_yes,
# graphiti 0.31, Chatbot mode, two turns into a new bank): 2.5 LLM calls per stored turn
# (graphiti's combined extraction, fact dedupe and summaries, engine/llm_combined.py) of about
# 1,450 input tokens each (characters / 4), rounded up. Prompts grow with what a bank already
# holds, so real imports into big banks cost somewhat more.
LLM_CALLS_PER_TURN = 3
LLM_INPUT_TOKENS_PER_CALL = 1500

_FLAGS = ("internal", "sub_call", "stopped", "turn_continuation", "agent_call")


class HistoryError(Exception):
    """A problem with the PyGPT database; the CLI prints it as one line."""


def _flagged(extra) -> bool:
    return isinstance(extra, dict) and any(extra.get(flag) for flag in _FLAGS)


def read_history(db_path: Path, settings, *, since: datetime | None = None,
                 preset: str | None = None, problems: list[str] | None = None
                 ) -> "OrderedDict[str, list[Turn]]":
    """Real turns of PyGPT's history grouped by bank, oldest first, as the plugin would store them.

    A row that cannot be read (a text where a number belongs, a date out of range, ...) is
    skipped and described in `problems`; the other rows are kept."""
    import json

    from memoryplus.plugin.host import bank_for
    from memoryplus.plugin.sanitize import Sanitizer

    if not db_path.is_file():
        raise HistoryError(f"no PyGPT database at {db_path} (use --workdir to point at PyGPT's "
                           f"user data directory)")
    try:
        con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        raise HistoryError(f"cannot open {db_path}: {exc}") from None
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(ctx_item)")}
        mcols = {r[1] for r in con.execute("PRAGMA table_info(ctx_meta)")}
        if not cols or not mcols:
            raise HistoryError(f"{db_path} has no PyGPT conversations (tables ctx_item/ctx_meta missing)")
        deleted = "m.is_deleted" if "is_deleted" in mcols else "0"
        internal = "i.is_internal" if "is_internal" in cols else "0"
        extra = "i.extra" if "extra" in cols else "NULL"
        rows = con.execute(
            f"SELECT i.id, i.meta_id, i.input, i.output, i.input_ts, i.output_ts, {internal}, {extra}, "
            f"m.preset_id, m.created_ts, {deleted} FROM ctx_item i JOIN ctx_meta m ON m.id = i.meta_id "
            f"ORDER BY COALESCE(NULLIF(i.input_ts, 0), i.output_ts, m.created_ts), i.id").fetchall()
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"cannot read {db_path} as PyGPT's database: {exc}") from None
    except sqlite3.Error as exc:
        raise HistoryError(f"cannot read {db_path}: {exc}") from None
    finally:
        con.close()

    sanitizer = Sanitizer(settings)
    out: OrderedDict[str, list[Turn]] = OrderedDict()
    cutoff = as_utc(since) if since else None
    for (item_id, meta_id, user, assistant, in_ts, out_ts, is_internal, extra_raw, preset_id,
         created_ts, is_deleted) in rows:
        try:
            if is_deleted or is_internal:
                continue
            try:
                extra_val = json.loads(extra_raw) if extra_raw else None
            except (ValueError, TypeError):
                extra_val = None
            if _flagged(extra_val):
                continue
            if not _text(user).strip() or not _text(assistant).strip():
                continue
            ctx = types.SimpleNamespace(meta=types.SimpleNamespace(
                preset=preset_id if isinstance(preset_id, str) else None))
            bank = bank_for(ctx, settings)
            if preset is not None and preset not in (preset_id, bank):
                continue
            when = _when(in_ts, out_ts, created_ts)
            if cutoff is not None and when < cutoff:
                continue
            turn = Turn(id=f"pygpt:{int(meta_id)}:{int(item_id)}", user=sanitizer.clean(_text(user)),
                        assistant=sanitizer.clean(_text(assistant)), time=when)
        except (ValueError, TypeError, OverflowError, OSError) as exc:
            if problems is not None:
                problems.append(f"ctx_item {item_id!r}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        out.setdefault(bank, []).append(turn)
    return out


def _text(value) -> str:
    """PyGPT stores text; a BLOB or a number in a text column is read as text, not as b'...'."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _when(*stamps) -> datetime:
    """The first usable timestamp (seconds since the epoch; PyGPT stores integers)."""
    for stamp in stamps:
        if stamp in (None, "", 0):
            continue
        return datetime.fromtimestamp(int(float(stamp)), timezone.utc)
    return datetime.now(timezone.utc)


def _confirm(question: str) -> bool:
    print(question + " [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def run_import(args) -> int:
    from memoryplus.cli.session import CliError, open_for, progress, settings_for
    from memoryplus.config.paths import pygpt_workdir
    from memoryplus.engine.providers import llm_available
    from memoryplus.wire.records import Credentials

    settings, banks_dir = settings_for(args)
    workdir = Path(args.workdir).expanduser() if args.workdir else pygpt_workdir()
    since = None
    if args.since:
        try:
            since = parse_iso(args.since)
        except ValueError:
            raise CliError(f"--since: not an ISO date: {args.since!r} (e.g. 2025-01-31)") from None
    if args.batch is not None and args.batch < 1:
        raise CliError("--batch must be at least 1")
    problems: list[str] = []
    try:
        by_bank = read_history(workdir / "db.sqlite", settings, since=since, preset=args.preset,
                               problems=problems)
    except HistoryError as exc:
        raise CliError(str(exc)) from None
    total = sum(len(t) for t in by_bank.values())
    if problems:
        print(f"memoryplus: {plural(len(problems), 'unreadable row')} of PyGPT's history skipped, the "
              f"others kept: " + "; ".join(problems[:5]), file=sys.stderr)

    if args.dry_run:
        for bank, turns in by_bank.items():
            first, last = turns[0].time.date().isoformat(), turns[-1].time.date().isoformat()
            print(f"{bank}\t{plural(len(turns), 'turn')} would be imported ({first} .. {last})")
        print(f"{plural(total, 'turn')} in {plural(len(by_bank), 'bank')} would be imported; nothing stored (dry run)")
        return 0
    if total == 0:
        print("nothing to import: no real turns in PyGPT's history match")
        return 0

    extraction = settings.extraction_engine
    if extraction == "auto":
        extraction = "llm" if llm_available(settings, Credentials.from_env()) else "local"
    if extraction == "llm":
        calls = total * LLM_CALLS_PER_TURN
        tokens = calls * LLM_INPUT_TOKENS_PER_CALL
        print(f"LLM extraction: importing {total} turns takes about {calls} LLM calls and "
              f"{tokens:,} input tokens with the model {settings.graphiti_model} (turns already "
              f"stored cost nothing).", file=sys.stderr)
        if not args.yes:
            if not sys.stdin.isatty():
                raise CliError("LLM extraction spends tokens: run again with --yes to go on "
                               "(or use --extraction local, or --dry-run to see what would be imported)")
            if not _confirm("Go on?"):
                print("nothing imported", file=sys.stderr)
                return 1

    from memoryplus.wire.protocol import IngestParams
    size = args.batch or settings.batch_size
    service = open_for(args, settings, banks_dir, doing="importing")
    totals = {"stored": 0, "unchanged": 0, "skipped": 0}
    done = 0
    try:
        for bank, turns in by_bank.items():
            counts = {"stored": 0, "unchanged": 0, "skipped": 0}
            for i in range(0, len(turns), size):
                batch = turns[i:i + size]
                rep = service.ingest(IngestParams(bank=bank, turns=batch),
                                     timeout=max(60.0, settings.runner_timeout_s * len(batch))).result()
                service.maintain().result()   # keeps the worker's Kuzu native memory bounded on long imports
                counts["stored"] += len(rep.stored)
                counts["unchanged"] += len(rep.unchanged)
                counts["skipped"] += len(rep.skipped)
                done += len(batch)
                progress(done, total)
            print(f"{bank}: {counts['stored']} stored, {counts['unchanged']} already there, "
                  f"{counts['skipped']} skipped")
            for k in totals:
                totals[k] += counts[k]
    finally:
        service.close(timeout=120.0)
    print(f"{totals['stored']} stored, {totals['unchanged']} already there, {totals['skipped']} "
          f"skipped ({extraction} extraction) from {workdir / 'db.sqlite'}"
          + (f"; {plural(len(problems), 'unreadable row')} skipped" if problems else ""))
    return 1 if problems else 0
