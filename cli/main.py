"""The `memoryplus` command: the engine for people and scripts.

Exit status: 0 on success (a search or forget matching nothing included), 2 for usage errors,
1 for anything else, with a one-line error on stderr and no traceback.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import logging
import os
import sys
from datetime import datetime
from pathlib import Path

os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")

from memoryplus.config.paths import data_dir, default_data_dir, load_settings  # noqa: E402
from memoryplus.config.schema import MEMORY_MODES, SettingsError, validate  # noqa: E402
from memoryplus.worker.records import Turn  # noqa: E402


class CliError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memoryplus", description=(
        "Time-aware long-term memory for PyGPT: store, search and forget memories in a "
        "local graph (Kuzu) or Neo4j."))
    p.add_argument("--data-dir", help=f"data directory (default: {default_data_dir()})")
    p.add_argument("--backend", choices=["kuzu", "neo4j"])
    p.add_argument("--extraction", choices=["auto", "local", "llm"])
    p.add_argument("--mode", choices=MEMORY_MODES)
    p.add_argument("-v", "--verbose", action="store_true", help="log what the engine does")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("ingest", help="store chat turns from a JSON-lines file")
    c.add_argument("--bank", required=True)
    c.add_argument("file", help='one turn per line: {"id", "user", "assistant", "time"}')
    c.add_argument("--batch", type=int, default=0, help="turns per batch (default: Batch Size)")

    c = sub.add_parser("remember", help="store a text as an explicit memory")
    c.add_argument("--bank", required=True)
    c.add_argument("text")

    c = sub.add_parser("search", help="search a bank")
    c.add_argument("--bank", required=True)
    c.add_argument("--limit", type=int, default=10)
    c.add_argument("--as-of", help="facts valid at this ISO-8601 time")
    c.add_argument("--json", action="store_true")
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("query", nargs="?")
    g.add_argument("--queries", help="a file with one query per line; one JSON list per line out")

    c = sub.add_parser("forget", help="forget the last turn, memories by id, or memories matching a text")
    c.add_argument("--bank", required=True)
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("--last", action="store_true")
    g.add_argument("--id", nargs="+", dest="ids")
    g.add_argument("text", nargs="?")
    c.add_argument("--yes", action="store_true", help="forget the text matches without asking")
    c.add_argument("--json", action="store_true")

    for name, help_ in (("stats", "counts and LLM spending of a bank"),):
        c = sub.add_parser(name, help=help_)
        c.add_argument("--bank", required=True)
        c.add_argument("--json", action="store_true")

    c = sub.add_parser("export", help="write a bank as lossless JSON lines")
    c.add_argument("--bank", required=True)
    c.add_argument("--out", help="file (default: standard output)")

    c = sub.add_parser("import", help="merge a JSON-lines export into a bank, by id")
    c.add_argument("--bank", required=True)
    c.add_argument("file")

    c = sub.add_parser("banks", help="list the banks")
    c.add_argument("--json", action="store_true")

    c = sub.add_parser("reembed", help="recompute a bank's vectors after changing the embedder")
    c.add_argument("--bank", required=True)

    sub.add_parser("demo", help="a scripted conversation showing memory at work (offline)")
    c = sub.add_parser("chaos", help="the real plugin, worker and Kuzu under injected faults; "
                                     "checks nothing is lost, duplicated or leaked")
    c.add_argument("--turns", type=int, default=200)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--json", dest="chaos_json", help="write the figures to this file")
    c = sub.add_parser("bench", help="measure speed, cost, memory and recall against the targets",
                       description="Without --smoke or --quick: the full run, banks growing to 5,000 "
                                   "turns with figures at 100, 500, 2,000 and 5,000 (about 30-40 minutes "
                                   "on 2 cores). See docs/PERFORMANCE.md.")
    size = c.add_mutually_exclusive_group()
    size.add_argument("--smoke", action="store_const", const="smoke", dest="bench_mode", default=None,
                      help="tiny sizes, under a minute: only checks that every figure is written")
    size.add_argument("--quick", action="store_const", const="quick", dest="bench_mode",
                      help="banks of up to 500 turns, under 10 minutes")
    c.add_argument("--json", dest="bench_json", help="write every figure to this JSON file")
    c.add_argument("--recall", dest="bench_recall", metavar="FILE",
                   help="recall on real conversations: a LongMemEval JSON file (plain or gzipped, e.g. the "
                        "official longmemeval_s.json). Alone: only this section; with --quick: a subset")
    c.add_argument("--limit", dest="bench_limit", type=int, metavar="N",
                   help="with --recall: a stratified subset of N questions (by question type)")

    c = sub.add_parser("import-pygpt", help="backfill memory from PyGPT's conversation history")
    c.add_argument("--workdir", help="PyGPT's user data directory (default: PYGPT_WORKDIR or "
                                     "~/.config/pygpt-net)")
    c.add_argument("--dry-run", action="store_true", help="show per bank what would be imported")
    c.add_argument("--since", help="only turns from this ISO date/time on")
    c.add_argument("--preset", help="only this preset's conversations (a preset id or a bank name)")
    c.add_argument("--yes", action="store_true", help="do not ask before spending LLM tokens")
    c.add_argument("--batch", type=int, default=None, help="turns per batch (default: Batch Size)")

    c = sub.add_parser("doctor", help="check the installation, with a fix for each problem")
    c.add_argument("--json", action="store_true")

    c = sub.add_parser("launch", help="start PyGPT with MemoryPlus registered (PyGPT's own "
                                      "arguments pass through)")
    c.add_argument("pygpt_args", nargs=argparse.REMAINDER)
    return p


def _settings(args):
    directory = data_dir(override=args.data_dir) if args.data_dir else default_data_dir()
    settings, problems = load_settings(directory)
    for p in problems:
        print(f"memoryplus: warning: {p}", file=sys.stderr)
    values = settings.model_dump()
    for flag, key in (("backend", "backend"), ("extraction", "extraction_engine"), ("mode", "memory_mode")):
        if getattr(args, flag, None):
            values[key] = getattr(args, flag)
    settings = validate(values)
    banks_dir = Path(args.data_dir).expanduser() if args.data_dir else data_dir(settings)
    return settings, banks_dir


def _engine(args):
    from memoryplus.worker.engine import MemoryEngine
    from memoryplus.worker.providers import credentials_from_env
    settings, banks_dir = _settings(args)
    return MemoryEngine(settings, banks_dir, credentials_from_env(), app="the memoryplus command")


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
            when = datetime.fromisoformat(when) if when else None
            ident = rec.get("id") or hashlib.sha256(
                json.dumps([rec.get("time") or "", user, assistant]).encode("utf-8", "surrogatepass")
            ).hexdigest()[:24]
            turns.append(Turn(id=str(ident), user=user, assistant=assistant,
                              **({"time": when} if when else {}), tags=list(rec.get("tags") or [])))
        except (ValueError, TypeError) as exc:
            problems.append(f"line {i}: {str(exc).splitlines()[0][:120]}")
    if problems:
        raise CliError(f"{path}: {len(problems)} bad line(s), nothing stored: " + "; ".join(problems[:5]))
    return turns


_LINE = re.compile(r"^line (\d+):")


def _file_line(problem: str, line_of: list[int]) -> str:
    """'line K: ...' about the K-th record given to the engine, as the file's line number."""
    m = _LINE.match(problem)
    if m is None or not 1 <= int(m.group(1)) <= len(line_of):
        return problem
    return f"line {line_of[int(m.group(1)) - 1]}:" + problem[m.end():]


def _progress(done: int, total: int) -> None:
    if sys.stderr.isatty():
        width = 30
        filled = int(width * done / max(total, 1))
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total}", end="", file=sys.stderr,
              flush=True)
        if done >= total:
            print(file=sys.stderr)


def _result_json(r) -> dict:
    d = r.model_dump(mode="json", include={"id", "kind", "text", "valid_at", "invalid_at", "tags",
                                           "sources", "score"})
    return d


def _print_results(results, as_json: bool) -> None:
    if as_json:
        print(json.dumps([_result_json(r) for r in results], ensure_ascii=False))
        return
    if not results:
        print("(no memories found)")
    for r in results:
        when = r.valid_at.date().isoformat() if r.valid_at else "?"
        state = "current" if r.invalid_at is None else f"until {r.invalid_at.date().isoformat()}"
        tags = " ".join(f"[{t}]" for t in r.tags)
        print(f"{r.score:.3f}  {r.kind:<7} {r.text.replace(chr(10), ' / ')[:160]}  ({when}, {state}) {tags}")


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


async def _run(args) -> int:
    if args.command == "import-pygpt":
        from memoryplus.cli.import_pygpt import run_import
        return await run_import(args)
    engine = _engine(args)
    try:
        return await _dispatch(engine, args)
    finally:
        await engine.close()


async def _dispatch(engine, args) -> int:
    cmd = args.command
    if cmd == "ingest":
        turns = _read_turns(args.file)
        size = args.batch or engine.settings.batch_size
        stored = unchanged = skipped = 0
        for i in range(0, len(turns), size):
            rep = await engine.ingest(args.bank, turns[i:i + size])
            stored += len(rep.stored)
            unchanged += len(rep.unchanged)
            skipped += len(rep.skipped)
            await engine.maintain()   # keeps Kuzu's native memory bounded on long imports
            _progress(min(i + size, len(turns)), len(turns))
        print(f"{stored} stored, {unchanged} already there, {skipped} skipped "
              f"({engine.extraction} extraction) in bank {args.bank!r}")
        return 0
    if cmd == "remember":
        rep = await engine.remember(args.bank, args.text)
        print("remembered" if rep.stored else "already remembered")
        return 0
    if cmd == "search":
        as_of = datetime.fromisoformat(args.as_of) if args.as_of else None
        if args.queries:
            try:
                queries = Path(args.queries).read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise CliError(f"cannot read {args.queries}: {exc.strerror or exc}") from None
            for query in queries:
                results = await engine.search(args.bank, query, args.limit, as_of)
                print(json.dumps([_result_json(r) for r in results], ensure_ascii=False), flush=True)
            return 0
        _print_results(await engine.search(args.bank, args.query, args.limit, as_of), args.json)
        return 0
    if cmd == "forget":
        if args.text and not args.yes:
            rep = await engine.forget(args.bank, text=args.text, confirm=False)
            if args.json:
                print(json.dumps({"forgotten": [], "episodes_removed": 0,
                                  "would_forget": [_result_json(m) for m in rep.matches]}))
            elif rep.matches:
                print(f"{len(rep.matches)} memories match strongly; run again with --yes to forget them:")
                _print_results(rep.matches, False)
            else:
                print("nothing matches strongly; nothing would be forgotten")
            return 0
        rep = await engine.forget(args.bank, last=args.last, ids=args.ids, text=args.text)
        if args.json:
            print(json.dumps({"forgotten": rep.forgotten, "episodes_removed": rep.episodes_removed}))
        else:
            print(f"forgot {len(rep.forgotten)} memories and {rep.episodes_removed} stored turn(s)")
        return 0
    if cmd == "stats":
        st = await engine.stats(args.bank)
        if args.json:
            print(json.dumps(st.model_dump(), ensure_ascii=False))
        else:
            for k, v in st.model_dump().items():
                print(f"{k:>18}: {v}")
        return 0
    if cmd == "export":
        records = await engine.export(args.bank)
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
            print(f"{len(records)} records written to {args.out}", file=sys.stderr)
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
            raise CliError(f"{args.file}: not a MemoryPlus export: {len(problems)} bad line(s), "
                           f"nothing imported: " + "; ".join(problems[:5]))
        out = await engine.import_(args.bank, records)
        # the engine numbers the records it was given; report the file's own line numbers
        problems += [_file_line(p, line_of) for p in out["problems"]]
        problems.sort(key=lambda p: int(m.group(1)) if (m := _LINE.match(p)) else 0)
        print(f"imported {out['episodes']} episodes, {out['entities']} entities, {out['facts']} facts")
        if problems:
            print(f"memoryplus: {len(problems)} bad line(s) skipped, the other lines imported: "
                  + "; ".join(problems[:5]), file=sys.stderr)
            return 1
        return 0
    if cmd == "banks":
        banks = await engine.banks_info()
        if args.json:
            print(json.dumps([b.model_dump() for b in banks], ensure_ascii=False))
        else:
            for b in banks:
                print(f"{b.name}\t{b.episodes} turns\t{b.entities} entities\t{b.facts} facts\t{b.backend}")
        return 0
    if cmd == "reembed":
        n = await engine.reembed(args.bank)
        print(f"re-embedded {n} vectors")
        return 0
    raise CliError(f"unknown command {cmd}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR,
                        format="%(levelname)s %(name)s: %(message)s")
    from memoryplus.worker.redact import install_log_filter
    install_log_filter()
    if not args.verbose:
        logging.getLogger("graphiti_core").setLevel(logging.CRITICAL)
    if args.command == "launch":
        return launch(args.pygpt_args)
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
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        print("memoryplus: interrupted", file=sys.stderr)
        return 1
    except (SettingsError, CliError) as exc:
        print(f"memoryplus: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # one clear line, never a traceback
        from memoryplus.worker.redact import redact
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"memoryplus: {redact(msg)}", file=sys.stderr)
        if args.verbose:
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
