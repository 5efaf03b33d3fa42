"""`memoryplus mcp` in a subprocess, driven by the MCP SDK's own stdio client from any thread.

The session lives on an event loop of its own thread, so that a test can call tools between
PyGPT turns (which run on the Qt thread) with plain blocking calls.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable


class McpProcess:
    """`with McpProcess(data_dir, "--bank", "default") as m: m.call("search", {...})`."""

    def __init__(self, data_dir: Path, *args: str, elicit: Callable[[str], dict | None] | None = None,
                 env: dict[str, str] | None = None, module: str = "memoryplus"):
        self.data_dir, self.args, self.elicit, self.module = Path(data_dir), list(args), elicit, module
        self.env = {**os.environ, "GRAPHITI_TELEMETRY_ENABLED": "false", **(env or {})}
        self.asked: list[str] = []     # the messages the server asked the user (elicitation)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="mcp-client")
        self._stop: asyncio.Event | None = None
        self._task = None
        self.session = None

    def command(self) -> list[str]:
        base = ["-m", self.module] + (["--data-dir", str(self.data_dir), "mcp"] if self.module == "memoryplus"
                                      else ["--data-dir", str(self.data_dir)])
        return [sys.executable, *base, *self.args]

    def __enter__(self) -> "McpProcess":
        self._thread.start()
        ready = asyncio.run_coroutine_threadsafe(self._open(), self._loop)
        self._task = ready.result(120)
        return self

    async def _open(self):
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp import types as mt
        self._stop = asyncio.Event()
        opened: asyncio.Future = self._loop.create_future()

        async def on_elicit(ctx, params):
            self.asked.append(params.message)
            answer = self.elicit(params.message) if self.elicit else None
            if answer is None:
                return mt.ElicitResult(action="decline")
            return mt.ElicitResult(action="accept", content=answer)

        async def hold():
            cmd = self.command()
            params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=self.env)
            try:
                async with stdio_client(params) as (r, w):
                    async with ClientSession(r, w, elicitation_callback=on_elicit if self.elicit else None,
                                             read_timeout_seconds=timedelta(seconds=300)) as s:
                        await s.initialize()
                        self.session = s
                        opened.set_result(True)
                        await self._stop.wait()
            except BaseException as exc:    # the server died: a test may have killed it
                if not opened.done():
                    opened.set_exception(exc)
        task = self._loop.create_task(hold())
        await opened
        return task

    def run(self, coro, timeout: float = 300):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call_raw(self, tool: str, args: dict[str, Any] | None = None, timeout: float = 300):
        return self.run(self.session.call_tool(tool, args or {}), timeout)

    def call(self, tool: str, args: dict[str, Any] | None = None, timeout: float = 300) -> Any:
        """The tool's structured answer; AssertionError with the text of an error result."""
        res = self.call_raw(tool, args, timeout)
        text = " ".join(getattr(c, "text", "") for c in res.content)
        assert not res.isError, text
        return res.structuredContent if res.structuredContent is not None else json.loads(text)

    def error(self, tool: str, args: dict[str, Any]) -> str:
        """The text of the error result the call must give."""
        res = self.call_raw(tool, args)
        text = " ".join(getattr(c, "text", "") for c in res.content)
        assert res.isError, f"{tool} did not fail: {text}"
        return text

    def __exit__(self, *exc) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._task is not None:
            task = self._task

            async def ended():
                await asyncio.wait({task}, timeout=60)
            try:
                asyncio.run_coroutine_threadsafe(ended(), self._loop).result(70)
            except Exception:
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
