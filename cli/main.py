"""The `memoryplus` command: the engine for people and scripts.

Exit status: 0 on success (a search, or a forget of a text or of the last turn, that finds
nothing included), 2 for usage errors (a bad argument: a one-line usage message), 1 for
anything else (`forget --id` with an id the bank does not hold included), with a one-line
error on stderr and no traceback. A reader that stops early (`| head`) ends the command
quietly with 141, as for a program stopped by SIGPIPE.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import logging
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")

from memoryplus.cli.session import CliError, open_for, progress, settings_for  # noqa: E402
from memoryplus.config.paths import default_data_dir  # noqa: E402
from memoryplus.config.schema import MEMORY_MODES, SettingsError  # noqa: E402
from memoryplus.common.isodates import parse_iso  # noqa: E402
from memoryplus.wire.records import Turn  # noqa: E402
from memoryplus.common.wording import plural, readable, shorten  # noqa: E402


_UNITS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1),
          "week": timedelta(weeks=1), "month": timedelta(days=30), "year": timedelta(days=365)}
_AGO = re.compile(r"^(\d+|an?|one)\s+(minute|hour|day|week|month|year)s?\s+ago$")
_LAST = {"now": timedelta(0), "today": timedelta(0), "yesterday": timedelta(days=1),
         **{f"last {unit}": step for unit, step in _UNITS.items() if unit != "minute"}}
TIME_FORMS = ("an ISO-8601 date or time (2025-01-31, 2025-01-31T14:00, 2025-01-31T14:00:00+01:00) "
              "or now, yesterday, last week/month/year, N days/weeks/months ago")


def count_arg(value: str) -> int:
    """A number of turns, results or queries: a whole number of at least 1 (else status 2)."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n


def time_arg(value: str) -> str:
    """--as-of and --since: checked here, where a bad value is a usage error (status 2). The
    relative forms become an ISO time in UTC; an ISO value is passed on as written."""
    low = " ".join(value.lower().split())
    back = _LAST.get(low)
    m = _AGO.match(low)
    if m:
        n = 1 if m.group(1) in ("a", "an", "one") else int(m.group(1))
        back = n * _UNITS[m.group(2)]
    if back is not None:
        return (datetime.now(timezone.utc) - back).isoformat(timespec="seconds")
    text = value.strip()
    try:
        parse_iso(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date or time: {value!r}; use {TIME_FORMS}") from None
    return text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memoryplus", description=(
        "Time-aware long-term memory for PyGPT: store, search and forget memories in a "
        "local graph (Kuzu) or Neo4j."), epilog=(
        "Exit status: 0 on success, 2 for a usage error, 1 for anything else. "
        "`memoryplus COMMAND --help` describes each command."))
    p.add_argument("--data-dir", help=f"data directory (default: {default_data_dir()})")
    p.add_argument("--backend", choices=["kuzu", "neo4j"],
                   help="graph database (default: the saved Database setting)")
    p.add_argument("--extraction", choices=["auto", "local", "llm"],
                   help="how turns become facts: local (no LLM), llm, or auto (the LLM when a key "
                        "is set); default: the saved setting")
    p.add_argument("--mode", choices=MEMORY_MODES, metavar="MODE",
                   help="memory mode (what is remembered): " + ", ".join(MEMORY_MODES))
    p.add_argument("-v", "--verbose", action="store_true", help="log what the engine does")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    bank_help = "the memory bank: a PyGPT preset's id, or the fallback bank's name (see `memoryplus banks`)"
    json_help = "print JSON instead of text"

    c = sub.add_parser("ingest", help="store chat turns from a JSON-lines file")
    c.add_argument("--bank", required=True, help=bank_help)
    c.add_argument("file", help='one turn per line: {"id", "user", "assistant", "time"}')
    c.add_argument("--batch", type=count_arg, default=0, help="turns per batch (default: Batch Size)")

    c = sub.add_parser("remember", help="store a text as an explicit memory")
    c.add_argument("--bank", required=True, help=bank_help)
    c.add_argument("text", help="what to remember, e.g. \"My passport expires in March 2027\"")

    c = sub.add_parser("search", help="search a bank")
    c.add_argument("--bank", required=True, help=bank_help)
    c.add_argument("--limit", type=count_arg, default=10, help="at most this many results (default: 10)")
    c.add_argument("--as-of", type=time_arg, metavar="TIME",
                   help=f"facts valid at this time: {TIME_FORMS}")
    c.add_argument("--json", action="store_true", help=json_help + " (one list of results)")
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("query", nargs="?", help="what to look for, in plain words")
    g.add_argument("--queries", help="a file with one query per line; one JSON list per line out")

    c = sub.add_parser("timeline", help="what a bank knows about one person, place or thing, fact by "
                                        "fact, with when each held")
    c.add_argument("--bank", required=True, help=bank_help)
    c.add_argument("--limit", type=count_arg, default=50, help="at most this many facts, newest kept "
                                                              "(default: 50, at most 500)")
    c.add_argument("--as-of", type=time_arg, metavar="TIME",
                   help=f"only what had begun by this time: {TIME_FORMS}")
    c.add_argument("--json", action="store_true", help=json_help)
    c.add_argument("entity", help="a name as the conversation used it, e.g. \"Maria\" or \"Lisbon\" (\"User\": yourself)")

    c = sub.add_parser("forget", help="forget the last turn, memories by id, or memories matching a text",
                       description="Forget memories with the stored turns behind them. Without --yes "
                                   "it only shows what would be forgotten.")
    c.add_argument("--bank", required=True, help=bank_help)
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("--last", action="store_true", help="the turn stored last")
    g.add_argument("--id", nargs="+", dest="ids", metavar="ID",
                   help="memory ids (the `id` of `search --json` results) or turn ids (the `id` of "
                        "a line of the ingest file)")
    g.add_argument("text", nargs="?", help="the memories that match this text strongly")
    c.add_argument("--yes", action="store_true", help="forget without asking first")
    c.add_argument("--json", action="store_true", help=json_help)

    for name, help_ in (("stats", "counts and LLM spending of a bank"),):
        c = sub.add_parser(name, help=help_)
        c.add_argument("--bank", required=True, help=bank_help)
        c.add_argument("--json", action="store_true", help=json_help)

    c = sub.add_parser("export", help="write a bank as lossless JSON lines")
    c.add_argument("--bank", required=True, help=bank_help)
    c.add_argument("--out", help="file (default: standard output)")

    c = sub.add_parser("import", help="merge a JSON-lines export into a bank, by id")
    c.add_argument("--bank", required=True, help=bank_help + "; created if new")
    c.add_argument("file", help="a file written by `memoryplus export`")

    c = sub.add_parser("banks", help="list the banks")
    c.add_argument("--json", action="store_true", help=json_help)

    c = sub.add_parser("reembed", help="recompute a bank's vectors after changing the embedder")
    c.add_argument("--bank", required=True, help=bank_help)

    sub.add_parser("demo", help="a scripted conversation showing memory at work (offline)")
    c = sub.add_parser("chaos", help="the real plugin, worker and Kuzu under injected faults; "
                                     "checks nothing is lost, duplicated or leaked")
    c.add_argument("--turns", type=count_arg, default=200, help="chat turns to send (default: 200)")
    c.add_argument("--seed", type=int, default=1, help="seed of the fault schedule (default: 1)")
    c.add_argument("--json", dest="chaos_json", metavar="FILE", help="write the figures to this file")
    c = sub.add_parser("bench", help="measure speed, cost, memory and recall against the targets",
                       description="Without --smoke or --quick: the full run, the bank growing to 20,000 "
                                   "turns with figures at 100, 500, 2,000, 5,000, 10,000 and 20,000 "
                                   "(not timed whole yet; over an hour on 2 cores). See docs/PERFORMANCE.md.")
    size = c.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_const", const="smoke", dest="bench_mode", default=None,
                      help="tiny sizes, under a minute: only checks that every figure is written")
    size.add_argument("--quick", action="store_const", const="quick", dest="bench_mode",
                      help="banks of up to 500 turns, under 10 minutes")
    c.add_argument("--json", dest="bench_json", metavar="FILE", help="write every figure to this JSON file")
    c.add_argument("--recall", dest="bench_recall", metavar="FILE",
                   help="recall on real conversations: a LongMemEval JSON file (plain or gzipped, e.g. the "
                        "official longmemeval_s.json). Alone: only this section; with --quick: a subset")
    c.add_argument("--limit", dest="bench_limit", type=count_arg, metavar="N",
                   help="with --recall: a stratified subset of N questions (by question type)")

    c = sub.add_parser("import-pygpt", help="backfill memory from PyGPT's conversation history")
    c.add_argument("--workdir", help="PyGPT's user data directory (default: PYGPT_WORKDIR or "
                                     "~/.config/pygpt-net)")
    c.add_argument("--dry-run", action="store_true", help="show per bank what would be imported")
    c.add_argument("--since", type=time_arg, metavar="TIME", help=f"only turns from this time on: {TIME_FORMS}")
    c.add_argument("--preset", help="only this preset's conversations (a preset id or a bank name)")
    c.add_argument("--yes", action="store_true", help="do not ask before spending LLM tokens")
    c.add_argument("--batch", type=count_arg, default=None, help="turns per batch (default: Batch Size)")

    c = sub.add_parser("doctor", help="check the installation, with a fix for each problem")
    c.add_argument("--json", action="store_true", help=json_help)

    c = sub.add_parser("launch", help="start PyGPT with MemoryPlus registered (PyGPT's own "
                                      "arguments pass through)")
    c.add_argument("pygpt_args", nargs=argparse.REMAINDER, metavar="PYGPT_ARGS",
                   help="arguments for PyGPT itself, e.g. --workdir DIR")

    c = sub.add_parser("mcp", help="serve the memory to MCP clients (stdio; --http for Streamable HTTP)",
                       description="An MCP server over the same banks as PyGPT's plugin: it joins the "
                                   "worker PyGPT runs, or starts the one PyGPT then joins.")
    from memoryplus.mcp_server.main import add_arguments as mcp_arguments
    mcp_arguments(c)
    return p


def _read_turns(path: str) -> list[Turn]:
    turns, problems = [], []
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
            user, assistant = str(rec.get("user", "")), str(rec.get("assistant", ""))
            when = rec.get("time")
            when = parse_iso(when) if when else None
            ident = rec.get("id") or hashlib.sha256(
                json.dumps([rec.get("time") or "", user, assistant]).encode("utf-8", "surrogatepass")
            ).hexdigest()[:24]
            turns.append(Turn(id=str(ident), user=user, assistant=assistant,
                              **({"time": when} if when else {}), tags=list(rec.get("tags") or [])))
        except (ValueError, TypeError) as exc:
            problems.append(f"line {i}: {str(exc).splitlines()[0][:120]}")
    if problems:
        raise CliError(f"{path}: {plural(len(problems), 'bad line')}, nothing stored: " + "; ".join(problems[:5]))
    return turns


_LINE = re.compile(r"^line (\d+):")


def _file_line(problem: str, line_of: list[int]) -> str:
    """'line K: ...' about the K-th record given to the engine, as the file's line number."""
    m = _LINE.match(problem)
    if m is None or not 1 <= int(m.group(1)) <= len(line_of):
        return problem
    return f"line {line_of[int(m.group(1)) - 1]}:" + problem[m.end():]


def _result_json(r) -> dict:
    d = r.model_dump(mode="json", include={"id", "kind", "text", "valid_at", "invalid_at", "tags",
                                           "sources", "score"})
    return d


def _print_results(results, as_json: bool, scores: bool = True) -> None:
    if as_json:
        print(json.dumps([_result_json(r) for r in results], ensure_ascii=False))
        return
    if not results:
        print("(no memories found)")
    for r in results:
        when = r.valid_at.date().isoformat() if r.valid_at else "?"
        state = "current" if r.invalid_at is None else f"until {r.invalid_at.date().isoformat()}"
        tags = " ".join(f"[{t}]" for t in r.tags)
        score = f"{r.score:.3f}  " if scores else "  "
        print(f"{score}{r.kind:<7} {shorten(readable(r.text), 160)}  ({when}, {state}) {tags}".rstrip())


def _timeline(service, args) -> int:
    from memoryplus.wire.protocol import TimelineParams
    request = TimelineParams(bank=args.bank, entity=args.entity, limit=min(args.limit, 500),
                             as_of=parse_iso(args.as_of) if args.as_of else None)
    tl = service.timeline(request, timeout=READ_S).result()
    if args.json:
        print(json.dumps(tl.model_dump(mode="json"), ensure_ascii=False))
        return 0
    if not tl.facts:
        print(f"(nothing known about {shorten(args.entity, 80)!r}"
              + (f": {', '.join(tl.matched)} has no facts)" if tl.matched else ")"))
        return 0
    print(f"{', '.join(tl.matched)}:")
    for f in tl.facts:
        since = f.valid_at.date().isoformat() if f.valid_at else "undated"
        until = "current" if f.invalid_at is None else f"until {f.invalid_at.date().isoformat()}"
        said = f"  (said {f.said_at.date().isoformat()})" if f.said_at else ""
        print(f"  {since} {until:<16} {shorten(readable(f.fact), 160)}{said}")
    return 0


def launch(pygpt_args: list[str]) -> int:
    """Run PyGPT with the plugin registered, telling a first-time user how to switch it on."""
    from memoryplus.config.paths import pygpt_workdir
    try:
        enabled = json.loads((pygpt_workdir() / "config.json").read_text()).get(
            "plugins_enabled", {}).get("memoryplus")
    except (OSError, ValueError):
        enabled = False
    if not enabled:
        print("MemoryPlus is registered. To switch it on: Plugins menu → tick MemoryPlus; "
              "settings in Plugins → Settings… → MemoryPlus.", file=sys.stderr)
    from pygpt_net.app import run

    from memoryplus.plugin.plugin import Plugin
    sys.argv = ["pygpt", *pygpt_args]
    run(plugins=[Plugin()])
    return 0


# How long the command waits for an operation (through a worker; in process it waits to the end)
READ_S, WRITE_S, LONG_S = 120.0, 600.0, 3600.0


def _run(args) -> int:
    if args.command == "import-pygpt":
        from memoryplus.cli.import_pygpt import run_import
        return run_import(args)
    settings, banks_dir = settings_for(args)
    service = open_for(args, settings, banks_dir)
    try:
        return _dispatch(service, settings, args)
    finally:
        service.close(timeout=120.0)


def _dispatch(service, settings, args) -> int:
    from memoryplus.wire.protocol import BankParams, ImportParams, IngestParams, RememberParams, SearchParams
    cmd = args.command
    if cmd == "ingest":
        turns = _read_turns(args.file)
        size = args.batch or settings.batch_size
        stored = unchanged = skipped = 0
        for i in range(0, len(turns), size):
            batch = turns[i:i + size]
            rep = service.ingest(IngestParams(bank=args.bank, turns=batch),
                                 timeout=max(60.0, settings.runner_timeout_s * len(batch))).result()
            stored += len(rep.stored)
            unchanged += len(rep.unchanged)
            skipped += len(rep.skipped)
            service.maintain().result()   # keeps Kuzu's native memory bounded on long imports
            progress(min(i + size, len(turns)), len(turns))
        print(f"{stored} stored, {unchanged} already there, {skipped} skipped "
              f"({service.status().get('extraction')} extraction) in bank {args.bank!r}")
        return 0
    if cmd == "remember":
        rep = service.remember(RememberParams(bank=args.bank, text=args.text), timeout=WRITE_S).result()
        print("remembered" if rep.stored else "already remembered")
        return 0
    if cmd == "search":
        as_of = parse_iso(args.as_of) if args.as_of else None   # time_arg has checked it

        def search(query: str):
            return service.search(SearchParams(bank=args.bank, query=query, limit=args.limit, as_of=as_of),
                                  timeout=READ_S).result()
        if args.queries:
            try:
                queries = Path(args.queries).read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise CliError(f"cannot read {args.queries}: {exc.strerror or exc}") from None
            for query in queries:
                print(json.dumps([_result_json(r) for r in search(query)], ensure_ascii=False), flush=True)
            return 0
        _print_results(search(args.query), args.json)
        return 0
    if cmd == "timeline":
        return _timeline(service, args)
    if cmd == "forget":
        return _forget(service, args)
    if cmd == "stats":
        st = service.stats(BankParams(bank=args.bank), timeout=READ_S).result()
        if args.json:
            print(json.dumps(st.model_dump(), ensure_ascii=False))
        else:
            for k, v in st.model_dump().items():
                print(f"{k:>18}: {v}")
        return 0
    if cmd == "export":
        records = service.export(BankParams(bank=args.bank), timeout=LONG_S).result()
        text = "".join(json.dumps(r.model_dump(mode="json"), ensure_ascii=False) + "\n" for r in records)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
            print(f"{plural(len(records), 'record')} written to {args.out}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return 0
    if cmd == "import":
        records, problems, line_of = [], [], []
        try:
            lines = Path(args.file).read_bytes().splitlines()
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        for i, raw in enumerate(lines, 1):
            if raw.strip():
                try:
                    records.append(json.loads(raw.decode("utf-8")))
                    line_of.append(i)
                except UnicodeDecodeError:
                    problems.append(f"line {i}: not UTF-8 text")
                except ValueError:
                    problems.append(f"line {i}: not JSON (cut short or garbled)")
        if not records and problems:
            raise CliError(f"{args.file}: not a MemoryPlus export: {plural(len(problems), 'bad line')}, "
                           f"nothing imported: " + "; ".join(problems[:5]))
        out = service.import_records(ImportParams(bank=args.bank, records=records), timeout=LONG_S).result()
        # the engine numbers the records it was given; report the file's own line numbers
        problems += [_file_line(p, line_of) for p in out.problems]
        problems.sort(key=lambda p: int(m.group(1)) if (m := _LINE.match(p)) else 0)
        print(f"imported {plural(out.episodes, 'episode')}, {plural(out.entities, 'entity', 'entities')}, "
              f"{plural(out.facts, 'fact')}")
        if problems:
            print(f"memoryplus: {plural(len(problems), 'bad line')} skipped, the other lines imported: "
                  + "; ".join(problems[:5]), file=sys.stderr)
            return 1
        return 0
    if cmd == "banks":
        banks = service.banks(timeout=READ_S).result()
        if args.json:
            print(json.dumps([b.model_dump() for b in banks], ensure_ascii=False))
        else:
            for b in banks:
                print(f"{b.name}\t{plural(b.episodes, 'turn')}\t{plural(b.entities, 'entity', 'entities')}\t"
                      f"{plural(b.facts, 'fact')}\t{b.backend}")
        return 0
    if cmd == "reembed":
        n = service.reembed(BankParams(bank=args.bank), timeout=LONG_S).result()
        print(f"re-embedded {plural(n, 'vector')}")
        return 0
    raise CliError(f"unknown command {cmd}")


def _forget(service, args) -> int:
    """Every form shows first what would go, and forgets only with --yes; ids the bank does
    not hold are an error before anything is removed."""
    from memoryplus.wire.protocol import ForgetParams
    ids = list(dict.fromkeys(args.ids or []))
    request = ForgetParams(bank=args.bank, last=args.last, ids=ids, text=args.text, confirm=False)
    preview = service.forget(request, timeout=WRITE_S).result()
    if ids:
        missing = [i for i in ids if i not in preview.forgotten]
        if missing:
            raise CliError(f"{plural(len(missing), 'id')} not in bank {args.bank!r}: "
                           f"{', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}; nothing was "
                           "forgotten (an id is a memory's `id` from `search --json` or a turn's `id` "
                           "from the ingest file)")
    if not args.yes:
        if args.json:
            print(json.dumps({"forgotten": [], "episodes_removed": 0,
                              "would_forget": [_result_json(m) for m in preview.matches]},
                             ensure_ascii=False))
        elif not preview.matches:
            print("nothing matches strongly; nothing would be forgotten" if args.text else
                  "the bank holds no stored turn; nothing would be forgotten")
        else:
            what = (f"{plural(len(preview.matches), 'memory matches', 'memories match')} strongly"
                    if args.text else
                    f"{plural(len(preview.matches), 'stored turn')} would be forgotten")
            print(f"{what}; run again with --yes to forget {'it' if len(preview.matches) == 1 else 'them'}:")
            _print_results(preview.matches, False, scores=bool(args.text))
        return 0
    rep = service.forget(request.model_copy(update={"confirm": True}), timeout=WRITE_S).result()
    if args.json:
        print(json.dumps({"forgotten": rep.forgotten, "episodes_removed": rep.episodes_removed}))
    else:
        print(f"forgot {plural(len(rep.forgotten), 'memory', 'memories')} and "
              f"{plural(rep.episodes_removed, 'stored turn')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as a program stopped by SIGPIPE does.
        # Standard output now points at /dev/null so that the flush at exit raises nothing.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR,
                        format="%(levelname)s %(name)s: %(message)s")
    from memoryplus.common.redact import install_log_filter
    install_log_filter()
    if not args.verbose:
        logging.getLogger("graphiti_core").setLevel(logging.CRITICAL)
    if args.command == "launch":
        return launch(args.pygpt_args)
    if args.command == "mcp":
        from memoryplus.mcp_server.main import run as run_mcp
        return run_mcp(args, args.data_dir)
    if args.command == "doctor":
        from memoryplus.cli.doctor import run_doctor
        return run_doctor(args)
    if args.command == "demo":
        from memoryplus.cli.demo import run_demo
        return run_demo()
    if args.command == "chaos":
        from memoryplus.cli.chaos import ok, print_result, run_chaos
        result = run_chaos(args.turns, args.seed, args.chaos_json)
        print_result(result)
        return 0 if ok(result) else 1
    if args.command == "bench":
        from memoryplus.cli.bench import run_bench
        if args.bench_limit is not None and args.bench_limit < 1:
            print("memoryplus bench: --limit must be at least 1", file=sys.stderr)
            return 2
        if args.bench_recall and not os.path.isfile(args.bench_recall):
            print(f"memoryplus bench: no such file: {args.bench_recall}", file=sys.stderr)
            return 2
        mode = args.bench_mode or ("recall" if args.bench_recall else "full")
        run_bench(mode, args.bench_json, recall_file=args.bench_recall, recall_limit=args.bench_limit)
        return 0
    try:
        return _run(args)
    except BrokenPipeError:
        raise
    except KeyboardInterrupt:
        print("memoryplus: interrupted", file=sys.stderr)
        return 1
    except (SettingsError, CliError) as exc:
        print(f"memoryplus: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # one clear line, never a traceback
        from memoryplus.common.redact import redact
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"memoryplus: {redact(msg)}", file=sys.stderr)
        if args.verbose:
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
