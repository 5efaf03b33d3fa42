"""The MCP server and PyGPT's plugin (in PyGPT's real host) on the same bank at once: one worker
per data directory whoever starts first, a memory remembered or forgotten on one side is what
the other sees next, and when the owner dies the other takes over, losing no spooled turn and
no acknowledged write (docs/RELIABILITY.md, "One worker per data directory")."""
from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from memoryplus.config.paths import save_settings
from memoryplus.config.schema import Settings
from memoryplus.testing import wait_until
from memoryplus.testing.mcp_client import McpProcess
from memoryplus.testing.pygpt_host import LOCAL, chat_turn
from memoryplus.wire import protocol as P

BANK = "default"
TAG = "memoryplus_memories"
MCP_APP = "the MemoryPlus MCP server"


def block_of(prompt: str) -> str:
    m = re.search(rf"<{TAG}>(.*?)</{TAG}>", prompt or "", re.S)
    return m.group(1) if m else ""


def texts(answer: dict) -> str:
    return " | ".join(r["text"] for r in answer["results"])


def banks_dir(tmp_path: Path) -> Path:
    """The plugin's data directory in the host fixture's PyGPT workdir, with its settings."""
    d = tmp_path / "pygpt" / "memoryplus"
    save_settings(d, Settings(**LOCAL))
    return d


def owner_app(data_dir: Path) -> str | None:
    info = P.live_worker(data_dir)
    return info.app if info else None


def test_plugin_first_an_mcp_memory_is_in_the_next_turn_and_forget_that_removes_it_from_mcp(host, tmp_path):
    window, plugin = host()
    data_dir = plugin.banks_dir()
    assert wait_until(lambda: owner_app(data_dir) == "PyGPT")
    question = "Where does my cousin Theodora work?"
    assert "Vienna" not in block_of(chat_turn(window, question, "I don't know.", ctx_id=1))   # cached now
    with McpProcess(data_dir, "--bank", BANK) as m:
        assert m.call("remember", {"text": "My cousin Theodora works at the opera house in Vienna."})["stored"]
        assert owner_app(data_dir) == "PyGPT", "the MCP server joined PyGPT's worker"
        assert "Vienna" in block_of(chat_turn(window, question, "At the opera.", ctx_id=2)), \
            "the next PyGPT turn's block has it (no cached answer)"
        assert chat_turn(window, "/forget_that Theodora works at the opera house", "unused") is None
        assert "/forget_that yes" in window.wait_chat(1)[0][1]
        assert chat_turn(window, "/forget_that yes", "unused") is None
        window.wait_chat(2)
        assert "Vienna" not in texts(m.call("search", {"query": question}))
        assert "Vienna" not in block_of(chat_turn(window, question, "?", ctx_id=3))


def test_a_turn_forgotten_over_mcp_leaves_the_plugins_spool_and_is_not_stored_again(host):
    window, plugin = host()
    data_dir = plugin.banks_dir()
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted.", ctx_id=1)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    plugin.queue.pause("test: turns wait in the spool")
    chat_turn(window, "My sister Ilse lives in Graz.", "Noted, Graz it is.", ctx_id=1)   # regenerated
    assert "Graz it is" in plugin.queue.spool_path.read_text(encoding="utf-8")
    with McpProcess(data_dir, "--bank", BANK) as m:
        assert m.call("forget", {"query": "sister Ilse lives in Graz", "confirm": True})["episodes_removed"] >= 1
        assert wait_until(lambda: "Graz it is" not in plugin.queue.spool_path.read_text(encoding="utf-8")), \
            "the forgotten turn's pending version left the spool"
        plugin.queue.resume()
        assert plugin.queue.flush(timeout=120), plugin.queue.counts()
        assert "Graz" not in texts(m.call("search", {"query": "Where does my sister Ilse live?"}))
        assert "Graz" not in block_of(chat_turn(window, "Where does my sister Ilse live?", "?", ctx_id=2))


def test_mcp_first_the_plugin_joins_and_an_mcp_forget_leaves_its_next_block(host, tmp_path):
    data_dir = banks_dir(tmp_path)
    with McpProcess(data_dir, "--bank", BANK) as m:
        m.call("remember", {"text": "My landlord Benedikt Horvath lives on the top floor."})
        assert owner_app(data_dir) == MCP_APP, "the first to need the data directory owns its worker"
        window, plugin = host()
        assert plugin.banks_dir() == data_dir
        question = "Who is my landlord?"
        assert "Horvath" in block_of(chat_turn(window, question, "Let me check.", ctx_id=1))
        assert plugin.client.status()["using"] == "socket", "PyGPT is not locked out: it joined"
        chat_turn(window, "My dentist Dr Yilmaz moved her practice to Linz.", "Noted.", ctx_id=2)
        assert plugin.queue.flush(timeout=120), plugin.queue.counts()
        assert "Linz" in texts(m.call("search", {"query": "Where is Dr Yilmaz's practice?"}))
        assert m.call("forget", {"query": "landlord Benedikt Horvath top floor", "confirm": True})["forgotten"]
        assert "Horvath" not in block_of(chat_turn(window, question, "?", ctx_id=3)), \
            "not from the plugin's cache, nor from its spool"


def test_the_mcp_owner_killed_the_plugin_takes_over_with_its_spooled_turn(host, tmp_path):
    data_dir = banks_dir(tmp_path)
    with McpProcess(data_dir, "--bank", BANK) as m:
        assert m.call("remember", {"text": "My brother Casimir repairs clocks in Lyon."})["stored"]   # acknowledged
        window, plugin = host()
        chat_turn(window, "My neighbour Rosalind keeps bees in her garden.", "Lovely.", ctx_id=1)
        assert plugin.queue.flush(timeout=120), plugin.queue.counts()
        plugin.queue.pause("test: the next turn waits in the spool")
        chat_turn(window, "My piano teacher Ignatius lives in Salzburg.", "Noted.", ctx_id=2)
        assert "Ignatius" in plugin.queue.spool_path.read_text(encoding="utf-8")
        mcp_pid = P.read_worker_file(data_dir).owner_pid
        os.kill(mcp_pid, signal.SIGKILL)
    assert wait_until(lambda: owner_app(data_dir) == "PyGPT", 120), "PyGPT took the data directory over"
    assert wait_until(lambda: plugin.client.status()["state"] == "ready", 60)
    assert plugin.client.status()["using"] == "persistent"
    plugin.queue.resume()
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    prompt = chat_turn(window, "Who lives in Salzburg, who keeps bees and who repairs clocks?", "?", ctx_id=3)
    for name in ("Ignatius", "Rosalind", "Casimir"):
        assert name in block_of(prompt), (name, prompt)


def test_the_plugin_owner_gone_the_mcp_server_takes_over(host, tmp_path):
    window, plugin = host()
    data_dir = plugin.banks_dir()
    chat_turn(window, "My aunt Wilhelmina grows tulips in Haarlem.", "Nice.", ctx_id=1)
    assert plugin.queue.flush(timeout=120), plugin.queue.counts()
    with McpProcess(data_dir, "--bank", BANK) as m:
        assert "Haarlem" in texts(m.call("search", {"query": "Where does Wilhelmina grow tulips?"}))
        plugin.destroy()            # PyGPT quits: its worker goes with it
        assert wait_until(lambda: owner_app(data_dir) == MCP_APP, 120), owner_app(data_dir)
        assert m.call("remember", {"text": "My uncle Leopold sails on Lake Constance."})["stored"]
        assert "Haarlem" in texts(m.call("search", {"query": "Where does Wilhelmina grow tulips?"}))
        window2, plugin2 = host(workdir=tmp_path / "pygpt")    # PyGPT again: it joins the MCP server's worker
        assert "Leopold" in block_of(chat_turn(window2, "Where does my uncle Leopold sail?", "?", ctx_id=2))
        assert plugin2.client.status()["using"] == "socket"


def test_the_owner_killed_two_clients_share_one_new_worker(host, tmp_path):
    """Two clients lose the owner at once: both try to take over, one worker wins the data
    directory, and the other joins it instead of keeping a worker nobody can reach."""
    data_dir = banks_dir(tmp_path)
    with McpProcess(data_dir, "--bank", BANK) as first:
        first.call("remember", {"text": "My godmother Philippa paints lighthouses."})
        window, plugin = host()
        with McpProcess(data_dir, "--bank", BANK) as second:
            assert "Philippa" in texts(second.call("search", {"query": "What does Philippa paint?"}))
            chat_turn(window, "My colleague Evander collects old maps.", "Fun.", ctx_id=1)
            assert plugin.queue.flush(timeout=120), plugin.queue.counts()
            killed = P.read_worker_file(data_dir).owner_pid
            os.kill(killed, signal.SIGKILL)
            assert wait_until(lambda: (info := P.live_worker(data_dir)) is not None and info.owner_pid != killed, 120)
            assert second.call("remember", {"text": "My uncle Bartholomew brews cider."})["stored"]
            prompt = chat_turn(window, "What does Bartholomew brew, Evander collect, Philippa paint?", "?", ctx_id=2)
            for name in ("Bartholomew", "Evander", "Philippa"):
                assert name in block_of(prompt), (name, prompt)
            assert "Evander" in texts(second.call("search", {"query": "What does Evander collect?"}))


def test_the_readmes_row_for_pygpts_own_mcp_plugin_works_through_its_own_parsing(tmp_path, monkeypatch):
    """The README's row for PyGPT's MCP plugin, read by that plugin's own code (pygpt_net's
    plugin/mcp/runtime.py: the stdio command line, the env JSON, the timeouts), reaches the
    server; only the launcher's path is this checkout's interpreter here."""
    import asyncio
    import json
    import sys
    from pygpt_net.plugin.mcp.runtime import build_env, float_option, parse_stdio, tool_allowed
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("**PyGPT's own MCP plugin**", 1)[1]
    row = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    row["server_address"] = row["server_address"].replace("/home/you/memoryplus/.venv/bin/memoryplus",
                                                          f"{sys.executable} -m memoryplus")
    monkeypatch.setenv("PYGPT_WORKDIR", str(tmp_path / "pygpt"))       # the server's default data directory
    banks_dir(tmp_path)
    env = build_env(row)
    assert env is not None and env["GRAPHITI_TELEMETRY_ENABLED"] == "false", "the env JSON parses"
    command, args = parse_stdio(row["server_address"])
    assert row["transport"] == "stdio" and float_option(row, "tool_timeout_sec", 60.0) == 120.0

    async def session():
        params = StdioServerParameters(command=command, args=args, env=env)
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await asyncio.wait_for(s.initialize(), float_option(row, "startup_timeout_sec", 15.0))
                names = [t.name for t in (await s.list_tools()).tools]
                await s.call_tool("remember", {"text": "My piano tuner Hieronymus comes on Thursdays."})
                found = await s.call_tool("search", {"query": "When does the piano tuner come?"})
                return names, found.structuredContent
    names, found = asyncio.run(session())
    assert all(tool_allowed(n, None, set(filter(None, row["disabled_commands"].split(",")))) for n in names)
    assert "Hieronymus" in texts(found)
