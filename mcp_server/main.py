"""The command line of the MCP server: `memoryplus mcp` and `python -m memoryplus.mcp_server`.

Standard output is the MCP channel on stdio: everything else (notes, logs) goes to stderr.
Exit status: 0 when the client hangs up, 2 for a usage error, 1 for anything else.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("GRAPHITI_TELEMETRY_ENABLED", "false")   # the worker it may start
# The SDK's own pydantic-settings model warns at import; the MCP client would show it as an error.
warnings.filterwarnings("ignore", message="Field 'lifespan' has an incomplete definition")

from memoryplus.config.paths import data_dir, default_data_dir, load_settings  # noqa: E402

APP = "the MemoryPlus MCP server"
log = logging.getLogger("memoryplus.mcp")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bank", help="the bank a call without `bank` uses (a PyGPT preset's id, or the "
                                  "fallback bank's name; default: none, each call names its bank)")
    p.add_argument("--http", action="store_true",
                   help="serve Streamable HTTP on 127.0.0.1 instead of stdio (a bearer token is required)")
    p.add_argument("--port", type=int, default=8765, help="the HTTP port (default: 8765)")
    p.add_argument("--token-file", metavar="FILE",
                   help="with --http: the file holding the bearer token (default: the "
                        "MEMORYPLUS_MCP_TOKEN environment variable, else DATA_DIR/mcp_token, made if missing)")


def run(args, data_dir_override: str | None) -> int:
    """Serve until the client hangs up (stdio) or the process is stopped (HTTP)."""
    import anyio

    from memoryplus.common.redact import install_log_filter
    from memoryplus.mcp_server import http
    from memoryplus.mcp_server.tools import build, check_bank
    from memoryplus.service import open_service
    install_log_filter()
    if args.bank is not None:
        try:
            check_bank(args.bank)
        except ValueError as exc:
            print(f"memoryplus mcp: bad --bank: {exc}", file=sys.stderr)
            return 2
    if not 1 <= args.port <= 65535:
        print(f"memoryplus mcp: --port must be from 1 to 65535, not {args.port}", file=sys.stderr)
        return 2
    home = Path(data_dir_override).expanduser() if data_dir_override else default_data_dir()
    settings, problems = load_settings(home)
    for p in problems:
        print(f"memoryplus mcp: warning: {p}", file=sys.stderr)
    banks_dir = home if data_dir_override else data_dir(settings)
    expected = ""
    if args.http:
        try:
            expected, where = http.token(home, args.token_file)
        except (OSError, ValueError) as exc:
            print(f"memoryplus mcp: {exc}", file=sys.stderr)
            return 1
        from memoryplus.common import redact
        redact.register(expected)

    def settings_now():
        return load_settings(home)[0]

    service = open_service(settings, banks_dir, app=APP, share=True)
    try:
        mcp = build(service, default_bank=args.bank, settings_now=settings_now,
                    transport_security=http.security() if args.http else None)
        if args.http:
            print(f"memoryplus mcp: serving http://{http.HOST}:{args.port}/mcp (bearer token from {where})",
                  file=sys.stderr, flush=True)
            anyio.run(http.serve, mcp, expected, args.port)
        else:
            anyio.run(mcp.run_stdio_async)
        return 0
    finally:
        service.close(timeout=30.0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m memoryplus.mcp_server", description=(
        "MemoryPlus as an MCP server (stdio by default): the same banks as PyGPT's plugin."))
    p.add_argument("--data-dir", help=f"data directory (default: {default_data_dir()})")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the server does (on stderr)")
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return run(args, args.data_dir)
    except KeyboardInterrupt:
        return 0
