"""`memoryplus mcp` (mcp_server/) through the MCP SDK's own clients, on a real worker process and
real Kuzu: the tools, forgetting with the user's confirmation (elicitation, or the confirm
argument), banks that never cross, a server killed mid-write, and the HTTP transport's token
and Host checks."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from memoryplus.config.paths import save_settings
from memoryplus.config.schema import Settings
from memoryplus.testing import wait_until
from memoryplus.testing.mcp_client import McpProcess
from memoryplus.wire import protocol as P

LOCAL = {"extraction_engine": "local", "embedding_provider": "local", "engine_mode": "persistent"}


@pytest.fixture
def data_dir(tmp_path) -> Path:
    d = tmp_path / "data"
    save_settings(d, Settings(**LOCAL))
    return d


def exported(data_dir: Path, bank: str) -> str:
    """`memoryplus export` of a bank (through the running worker, or in its own process)."""
    out = subprocess.run([sys.executable, "-m", "memoryplus", "--data-dir", str(data_dir), "export",
                          "--bank", bank], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def texts(answer: dict) -> str:
    return " | ".join(r["text"] for r in answer["results"])


def test_the_tools_remember_search_and_two_banks_never_cross(data_dir):
    with McpProcess(data_dir, "--bank", "work") as m:
        tools = {t.name for t in m.run(m.session.list_tools()).tools}
        assert {"search", "remember", "forget", "timeline", "list_banks", "stats"} <= tools
        assert m.call("remember", {"text": "My manager Aurelia Brandt runs the Osaka office."})["stored"]
        assert m.call("remember", {"text": "My cat Pimpernel sleeps on the piano.", "bank": "home"})["stored"]
        assert "Aurelia" in texts(m.call("search", {"query": "Who runs the Osaka office?"}))
        assert "Pimpernel" not in texts(m.call("search", {"query": "Who sleeps on the piano?"}))
        home = texts(m.call("search", {"query": "Who sleeps on the piano?", "bank": "home"}))
        assert "Pimpernel" in home and "Aurelia" not in texts(
            m.call("search", {"query": "Who runs the Osaka office?", "bank": "home"}))
        banks = {b["name"]: b for b in m.call("list_banks")["banks"]}
        assert {"work", "home"} <= set(banks)
        assert m.call("stats", {"bank": "home"})["episodes"] == 1
        uris = {str(r.uri) for r in m.run(m.session.list_resources()).resources}
        assert {"memoryplus://banks", "memoryplus://bank/work", "memoryplus://bank/home"} <= uris
        page = m.run(m.session.read_resource("memoryplus://bank/home")).contents[0].text
        assert json.loads(page)["name"] == "home"
    assert "Pimpernel" not in exported(data_dir, "work") and "Aurelia" not in exported(data_dir, "home")


def test_the_timeline_gives_each_fact_its_validity(data_dir):
    with McpProcess(data_dir, "--bank", "default") as m:
        m.call("remember", {"text": "I live in Lisbon."})
        m.call("remember", {"text": "I moved to Berlin last week."})
        tl = m.call("timeline", {"entity": "me"})
        facts = {f["fact"]: f for f in tl["facts"]}
        assert "User" in tl["matched"]
        assert facts["User lives in Lisbon"]["invalid_at"] is not None, "replaced, with its end"
        assert facts["User lives in Berlin"]["current"] and facts["User lives in Berlin"]["invalid_at"] is None
        assert "at most 200" in m.error("timeline", {"entity": "e" * 201})
        assert m.call("timeline", {"entity": "Nobody Atall"})["facts"] == []


def test_forget_asks_the_user_through_elicitation(data_dir):
    answers = [None, {"forget": True}]        # the user first declines, then agrees
    with McpProcess(data_dir, "--bank", "default", elicit=lambda message: answers.pop(0)) as m:
        m.call("remember", {"text": "My locker code at the gym is 4711."})
        kept = m.call("forget", {"query": "locker code at the gym"})
        assert kept["forgotten"] == [] and kept["matches"], kept
        assert "4711" in m.asked[0], "the user is shown what would be forgotten"
        assert "4711" in texts(m.call("search", {"query": "What is my locker code?"}))
        gone = m.call("forget", {"query": "locker code at the gym", "confirm": False})
        assert gone["forgotten"], "the user's yes counts, whatever the model's confirm says"
        assert "4711" not in texts(m.call("search", {"query": "What is my locker code?"}))
    assert "locker code" not in exported(data_dir, "default")


@pytest.mark.option("mcp_forget")
def test_forget_without_elicitation_needs_the_confirm_argument_and_the_setting(data_dir):
    with McpProcess(data_dir, "--bank", "default") as m:
        m.call("remember", {"text": "My bike lock combination is 2390."})
        first = m.call("forget", {"query": "bike lock combination"})
        assert first["confirmation_needed"] and first["forgotten"] == []
        assert any("2390" in x["text"] for x in first["matches"])
        assert "2390" in texts(m.call("search", {"query": "bike lock combination"})), "not forgotten yet"
        second = m.call("forget", {"query": "bike lock combination", "confirm": True})
        assert second["forgotten"] and second["episodes_removed"] == 1, second
        assert "2390" not in texts(m.call("search", {"query": "bike lock combination"}))

        m.call("remember", {"text": "My safe deposit box is number 88 at the Zentralbank."})
        save_settings(data_dir, Settings(**LOCAL, mcp_forget=False))      # switched off in PyGPT
        assert "switched off" in m.error("forget", {"query": "safe deposit box", "confirm": True})
        assert "Zentralbank" in texts(m.call("search", {"query": "safe deposit box"}))
    text = exported(data_dir, "default")
    assert "bike lock" not in text and "Zentralbank" in text


def test_hostile_bank_names_and_oversized_inputs_get_clear_errors(data_dir):
    with McpProcess(data_dir) as m:
        assert "no bank given" in m.error("search", {"query": "anything"})
        for bad in ("../../etc/passwd", "a\x00b", "x" * 5000, "\u202eevil", "..", "tab\there"):
            msg = m.error("remember", {"text": "hello", "bank": bad})
            assert msg.count("bad bank name") == 1 and "Traceback" not in msg, msg
        assert "at most 20000" in m.error("remember", {"text": "y" * 20001, "bank": "ok"})
        assert "at most 2000" in m.error("search", {"query": "z" * 2001, "bank": "ok"})
        assert "non-empty" in m.error("search", {"query": "   ", "bank": "ok"})
        assert "limit" in m.error("search", {"query": "q", "bank": "ok", "limit": 10_000})
        assert "not an ISO date" in m.error("search", {"query": "q", "bank": "ok", "as_of": "last Tuesdayish"})
        assert m.call("list_banks")["banks"] == [], "nothing was stored, no bank was made"
    bad_default = subprocess.run([sys.executable, "-m", "memoryplus", "--data-dir", str(data_dir), "mcp",
                                  "--bank", "../up"], capture_output=True, text=True, timeout=120)
    assert bad_default.returncode == 2 and "bad --bank" in bad_default.stderr


def test_a_server_killed_mid_write_loses_nothing_it_acknowledged(data_dir):
    import asyncio
    texts_ = [f"Note {i}: the spare key number {1000 + i} hangs in the shed." for i in range(16)]
    with McpProcess(data_dir, "--bank", "default") as m:
        m.call("remember", {"text": "My neighbour Oskar waters the plants."})   # the worker is up
        owner = P.read_worker_file(data_dir).owner_pid
        acked: list[str] = []

        async def one(text):
            res = await m.session.call_tool("remember", {"text": text})
            if not res.isError:
                acked.append(text)

        async def burst():
            tasks = [asyncio.create_task(one(t)) for t in texts_]
            while not acked:
                await asyncio.sleep(0.01)
            os.kill(owner, signal.SIGKILL)                 # the server dies with writes in flight
            await asyncio.wait(tasks, timeout=60)
        m.run(burst())
        assert 1 <= len(acked) < len(texts_), len(acked)
    assert wait_until(lambda: P.live_worker(data_dir) is None, 60), "its worker stops by itself"
    with McpProcess(data_dir, "--bank", "default") as m:
        for text in acked:
            key = text.split(" hangs")[0].split("number ")[1]
            assert key in texts(m.call("search", {"query": f"spare key number {key}", "limit": 20})), text
    dump = exported(data_dir, "default")
    assert all(t in dump for t in acked) and "Oskar" in dump


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_needs_the_bearer_token_and_a_local_host_header(data_dir):
    import anyio
    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client
    port, secret = _free_port(), "s3cret-token-for-the-test"
    env = {**os.environ, "MEMORYPLUS_MCP_TOKEN": secret, "GRAPHITI_TELEMETRY_ENABLED": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "memoryplus", "--data-dir", str(data_dir), "mcp", "--http",
                             "--port", str(port), "--bank", "default"], env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    try:
        def up():
            try:
                return httpx.post(url, json=init, headers=accept, timeout=2).status_code > 0
            except httpx.HTTPError:
                return False
        assert wait_until(up, 60), proc.stderr.read() if proc.poll() is not None else "not listening"
        assert httpx.post(url, json=init, headers=accept).status_code == 401
        assert httpx.post(url, json=init, headers={**accept, "Authorization": "Bearer wrong"}).status_code == 401
        good = {**accept, "Authorization": f"Bearer {secret}"}
        assert httpx.post(url, json=init, headers={**good, "Host": "evil.example:80"}).status_code in (400, 421)
        assert httpx.post(url, json=init, headers={**good, "Origin": "http://evil.example"}).status_code in (400, 403)

        async def session():
            async with streamablehttp_client(url, headers={"Authorization": f"Bearer {secret}"}) as (r, w, _):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    await s.call_tool("remember", {"text": "My dentist is Dr Okafor."})
                    res = await s.call_tool("search", {"query": "Who is my dentist?"})
                    return res.structuredContent
        assert "Okafor" in texts(anyio.run(session))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        err = proc.stderr.read()
    assert secret not in err, "the token never reaches a log"


def test_the_add_on_route_runs_the_module_with_pygpts_python(tmp_path, data_dir):
    """PyGPT's add-on route has no `memoryplus` command: PyGPT's Python runs the module from the
    add-on folder (addons/plugins/memoryplus in PyGPT's user directory), as the README's
    snippet says; the worker it starts finds the package there too."""
    import shutil
    root = Path(__file__).resolve().parents[1]
    addon = tmp_path / "pygpt" / "addons" / "plugins" / "memoryplus"
    shutil.copytree(root, addon, ignore=shutil.ignore_patterns(".*", "__pycache__", "tests", "docs", "scripts",
                                                               "dist", "build", "*.egg-info"))
    env = {"PYTHONPATH": str(addon.parent)}
    with McpProcess(data_dir, "--bank", "default", module="memoryplus.mcp_server", env=env) as m:
        assert m.call("remember", {"text": "My tailor Konstantin works near the harbour."})["stored"]
        assert "Konstantin" in texts(m.call("search", {"query": "Where does my tailor work?"}))
        worker = P.live_worker(data_dir)
        assert worker is not None
        environ = dict(v.split("=", 1) for v in Path(f"/proc/{worker.pid}/environ").read_bytes()
                       .decode(errors="replace").split("\x00") if "=" in v)
        assert environ["PYTHONPATH"].split(os.pathsep)[0] == str(addon.parent), "the worker runs the add-on's copy"


def test_an_api_key_reaches_no_argv_environment_or_log(data_dir):
    secret = "sk-test-mcp-9f8e7d6c5b4a39281706"
    with McpProcess(data_dir, "--bank", "default", env={"OPENAI_API_KEY": secret}) as m:
        m.call("remember", {"text": "My yoga class is on Mondays."})
        worker = P.live_worker(data_dir)
        for part in ("cmdline", "environ"):
            assert secret not in Path(f"/proc/{worker.pid}/{part}").read_bytes().decode(errors="replace"), part
        owner = worker.owner_pid
        assert secret not in Path(f"/proc/{owner}/cmdline").read_bytes().decode(errors="replace")
    logs = [p for p in data_dir.rglob("*.log")]
    assert logs and not any(secret in p.read_text(errors="replace") for p in logs)
