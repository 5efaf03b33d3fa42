"""End to end: the whole PyGPT desktop app (pygpt-net 2.9.1), offscreen, with MemoryPlus.

Each test starts the real app in a subprocess through ``testing/app_driver.py``, which types two
messages into PyGPT's input box and clicks Send; PyGPT's OpenAI provider points at a scripted
OpenAI-compatible server on 127.0.0.1 run by the test, which records every request. The memory
of the first turn must be in the system prompt of the second turn's main chat request.

Routes: the ``memoryplus launch`` launcher (``run(plugins=[Plugin()])``), the add-on directory
(``<workdir>/addons/plugins/memoryplus`` with the stock launcher), and the add-on ZIP installed
through PyGPT's own Config → Install Add-on… → ZIP controller.
"""
from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from memoryplus.testing.app_env import offline_env, worker_processes
from memoryplus.testing.scripted_llm import ScriptedLLMServer, last_user_text

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "testing" / "app_driver.py"
RUN_TIMEOUT_S = 150          # one app run, killed after this (a test's whole budget)
STARTUP_MARGIN_S = 30        # of which PyGPT's start and exit; the driver's GUI script gets the rest
# What an add-on carries: the package, not the venv, the tests or git.
ADDON_ITEMS = ("__init__.py", "manifest.json", "addon.py", "config", "common", "wire", "client", "worker",
               "engine", "service", "plugin", "ui", "cli", "mcp_server",
               "testing")
FIRST = "My dentist is Dr Okafor and I live in Lisbon."
SECOND = "Who is my dentist?"
TAG = "<memoryplus_memories>"


def _runtime_missing() -> str | None:
    if importlib.util.find_spec("pygpt_net") is None or importlib.util.find_spec("PySide6") is None:
        return "pygpt-net / PySide6 are not installed in this environment"
    if not ctypes.util.find_library("pulse"):
        return "libpulse0 is missing (PyGPT's Qt runtime needs libpulse.so.0 even offscreen): " \
               "apt-get install -y libpulse0"
    return None


pytestmark = pytest.mark.skipif(_runtime_missing() is not None, reason=_runtime_missing() or "")


# ── the scripted model ─────────────────────────────────────────────────────────────────────
def system_prompt(body: dict) -> str:
    """The system prompt of a main chat request: `instructions` (Responses API) or the system
    messages (Chat Completions)."""
    if not isinstance(body, dict):
        return ""
    if isinstance(body.get("instructions"), str):
        return body["instructions"]
    parts = []
    for m in body.get("messages") or body.get("input") or []:
        if isinstance(m, dict) and m.get("role") in ("system", "developer"):
            c = m.get("content")
            if isinstance(c, list):
                c = " ".join(str(x.get("text", "")) for x in c if isinstance(x, dict))
            parts.append(str(c or ""))
    return "\n".join(parts)


def _reply(body: dict) -> str:
    """Answer from the memory block when there is one, as a real model would."""
    prompt = system_prompt(body)
    user = last_user_text(body)
    if "dentist" in user.lower() and TAG in prompt and "Okafor" in prompt:
        return "From what you told me before: your dentist is Dr Okafor."
    return "Noted, thank you."


def main_chat_requests(server: ScriptedLLMServer) -> list[tuple[str, dict]]:
    """The app's chat turns: streamed /responses or /chat/completions carrying a user message
    (side calls — titles, FORCE_CALL — are not streamed)."""
    out = []
    for path, body in server.requests:
        if not isinstance(body, dict) or not body.get("stream"):
            continue
        if path.rstrip("/").endswith(("/responses", "/chat/completions")):
            out.append((path, body))
    return out


@pytest.fixture
def llm():
    server = ScriptedLLMServer(chat_reply=_reply).start()
    yield server
    server.stop()


# ── running the app ────────────────────────────────────────────────────────────────────────
class AppRun:
    def __init__(self, rc: int, seconds: float, stdout: str, stderr: str, report: dict, workdir: Path,
                 leftover_workers: list[dict], workers_gone_s: float | None):
        self.rc, self.seconds, self.stdout, self.stderr = rc, seconds, stdout, stderr
        self.report, self.workdir, self.leftover_workers = report, workdir, leftover_workers
        self.workers_gone_s = workers_gone_s     # how long workers outlived the app (None: none did)

    def tail(self, n: int = 4000) -> str:
        return (f"--- report error: {self.report.get('error')!r} stage={self.report.get('stage')!r}\n"
                f"--- stdout (tail)\n{self.stdout[-n:]}\n--- stderr (tail)\n{self.stderr[-n:]}")


def run_app(tmp_path: Path, name: str, workdir: Path, *args: str, timeout: float = RUN_TIMEOUT_S,
            python: str | os.PathLike = sys.executable) -> AppRun:
    report_path = tmp_path / f"{name}.report.json"
    home = tmp_path / "home"
    (home / ".config" / "pygpt-net").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(offline_env(workdir, home=home))
    env["GRAPHITI_TELEMETRY_ENABLED"] = "false"
    if python != sys.executable:
        env.pop("PYTHONPATH", None)     # another environment: nothing of ours on its path
    cmd = [str(python), str(DRIVER), "--workdir", str(workdir), "--report", str(report_path),
           "--budget", str(max(20, timeout - STARTUP_MARGIN_S)), *args]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(tmp_path), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)     # the app and what it started, nothing else
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        pytest.fail(f"{name}: the app did not finish within {timeout:.0f}s and was killed\n"
                    f"{out[-4000:]}\n{err[-4000:]}")
    seconds = time.monotonic() - started
    (tmp_path / f"{name}.stdout.txt").write_text(out)
    (tmp_path / f"{name}.stderr.txt").write_text(err)
    # A worker may take a moment to notice its owner has gone; give it a bounded grace.
    exited = time.monotonic()
    deadline = exited + 15
    leftovers = worker_processes(workdir)
    gone_s = None
    if leftovers:
        while leftovers and time.monotonic() < deadline:
            time.sleep(0.1)
            leftovers = worker_processes(workdir)
        gone_s = round(time.monotonic() - exited, 2)
    for w in leftovers:   # don't leave them running for the next test; they are ours (our workdir)
        try:
            os.kill(w["pid"], signal.SIGKILL)
        except OSError:
            pass
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    print(f"\nE2E {name}: app run {seconds:.1f}s (exit {proc.returncode}); driver timings {report.get('timings')}; "
          f"turns (n, reply s, stored after s) "
          f"{[(t.get('n'), t.get('reply_s'), t.get('stored_after_s')) for t in report.get('turns', [])]}; "
          f"workers outlived the app by {gone_s if gone_s is not None else 0}s")
    return AppRun(proc.returncode, seconds, out, err, report, workdir, leftovers, gone_s)


def assert_recall(run: AppRun, server: ScriptedLLMServer) -> None:
    rep = run.report
    assert rep, f"no report was written\n{run.tail()}"
    assert rep.get("ok"), f"the driver did not finish its script\n{run.tail()}"
    assert rep.get("plugin_found") and rep.get("plugin_enabled"), rep
    requests = main_chat_requests(server)
    assert len(requests) >= 2, f"expected two main chat requests, got {[p for p, _ in server.requests]}"
    first, second = system_prompt(requests[0][1]), system_prompt(requests[1][1])
    assert FIRST in json.dumps(requests[0][1]), "the first request does not carry the first message"
    assert SECOND in json.dumps(requests[1][1]), "the second request does not carry the second message"
    assert TAG not in first, f"a memory block in the first turn, before anything was stored:\n{first}"
    assert TAG in second, f"no memory block in the second turn's system prompt:\n{second}\n{run.tail()}"
    block = second[second.index(TAG):]
    assert "Okafor" in block, f"the memory block does not recall the dentist:\n{block}"
    assert second.count(TAG) == 1, "the memory block was injected twice"
    assert "Okafor" in rep["turns"][1]["reply"], rep["turns"][1]
    # the plugin itself: no error, a stored first turn, an injection
    assert rep.get("plugin_last_error") in ("", None), rep.get("plugin_last_error")
    assert rep["plugin_counters"]["errors"] == 0, rep["plugin_counters"]
    assert rep["plugin_counters"]["injected"] >= 1, rep["plugin_counters"]
    assert rep["turns"][0]["queue_after_store"]["done"] >= 1, rep["turns"][0]
    assert not rep.get("unhandled_exceptions"), rep["unhandled_exceptions"]
    # a clean exit
    assert run.rc == 0, f"the app exited with {run.rc}\n{run.tail()}"
    assert rep.get("close") == "window.close() returned", rep.get("close")
    assert not run.leftover_workers, f"MemoryPlus workers outlived the app: {run.leftover_workers}"


def assert_no_restart_after_shutdown(run: AppRun) -> None:
    """PyGPT dispatches events (kernel.terminate, force.stop, preview prompts) after it has
    called the plugins' shutdown(); they must not bring MemoryPlus (and a worker) back up."""
    late = [s for s in run.report.get("memoryplus_machinery_starts", []) if s.get("after_shutdown")]
    assert not late, ("MemoryPlus started its machinery again after PyGPT called shutdown(): "
                      f"{late}; at exit: {run.report.get('at_exit')}")


def copy_addon(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for item in ADDON_ITEMS:
        src = REPO / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / item)
    return dest


# ── the tests ──────────────────────────────────────────────────────────────────────────────
@pytest.fixture(scope="module")
def launcher_run(tmp_path_factory):
    """One run of the `memoryplus launch` route, shared by the tests that read it."""
    tmp_path = tmp_path_factory.mktemp("launcher")
    server = ScriptedLLMServer(chat_reply=_reply).start()
    try:
        run = run_app(tmp_path, "launcher", tmp_path / "pygpt", "--route", "launcher",
                      "--base-url", server.base_url, "--message", FIRST, "--message", SECOND,
                      "--command", COMMAND, "--command", "/forget_that yes")
    finally:
        server.stop()
    return run, server


COMMAND = "/remember_this My bike is the green one with a wicker basket"


def test_launcher_route_a_command_is_answered_in_the_chat_not_by_the_model(launcher_run):
    """In the real app the reply appears on the chat's page under the command, no dialog opens,
    and neither the command nor the reply reaches the model."""
    run, server = launcher_run
    remember, confirm = run.report["commands"]
    assert remember["reply"] == "Remembered: My bike is the green one with a wicker basket", remember
    # a reply given at once, inside PyGPT's INPUT_BEFORE, as well as one that comes later
    assert confirm["reply"] == "Nothing to confirm: use /forget_that TEXT first.", confirm
    for cmd in (remember, confirm):
        assert cmd["command_in_chat"] and cmd["reply_in_chat"], cmd.get("chat_tail")
        assert cmd["ctx_end_events"] == 0 and cmd["alerts"] == [], "no chat turn was made of it, no dialog"
    assert not any("wicker" in json.dumps(body) for _, body in server.requests), "nothing reached the model"


def test_launcher_route_recalls_the_first_turn_in_the_second(launcher_run):
    run, server = launcher_run
    assert run.report.get("plugin_class") == "memoryplus.plugin.plugin.Plugin", run.report
    assert_recall(run, server)


def test_launcher_route_shutdown_leaves_nothing_running(launcher_run):
    run, _ = launcher_run
    assert run.rc == 0, run.tail()
    assert run.report.get("plugin_shutdown_called_at"), "PyGPT never called the plugin's shutdown()"
    assert not run.report.get("workers_right_after_plugin_shutdown"), \
        f"shutdown() returned with the worker still alive: {run.report['workers_right_after_plugin_shutdown']}"
    assert_no_restart_after_shutdown(run)
    assert run.workers_gone_s is None, f"a MemoryPlus worker outlived the app by {run.workers_gone_s}s"


def test_addon_directory_route(tmp_path, llm):
    workdir = tmp_path / "pygpt"
    addon = copy_addon(workdir / "addons" / "plugins" / "memoryplus")
    run = run_app(tmp_path, "addon", workdir, "--route", "addon", "--isolate", "--base-url", llm.base_url,
                  "--message", FIRST, "--message", SECOND)
    assert "[Add-ons] Loaded plugin: memoryplus" in run.stdout, run.tail()
    assert run.report.get("loaded_as_addon"), run.report.get("addons_loaded")
    # the add-on's own copy ran, in the app and in its worker: not the pip/editable install
    assert str(run.report.get("plugin_file", "")).startswith(str(addon)), run.report.get("plugin_file")
    workers = run.report.get("workers_at_start") or []
    assert workers and all(str(addon.parent) in (w.get("pythonpath") or "") for w in workers), workers
    assert_recall(run, llm)


def test_zip_route_through_pygpts_installer(tmp_path, llm):
    staging = copy_addon(tmp_path / "zip-src" / "memoryplus")
    archive = tmp_path / "memoryplus-addon.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(staging.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(staging.parent).as_posix())
    workdir = tmp_path / "pygpt"
    install = run_app(tmp_path, "zip-install", workdir, "--install-zip", str(archive), timeout=60)
    assert install.rc == 0, install.tail()
    assert install.report.get("ok"), (install.report.get("zip_messages"), install.report.get("zip_alerts"),
                                      install.tail())
    installed = {i["id"]: i for i in install.report.get("zip_installed", [])}
    assert "memoryplus" in installed and installed["memoryplus"]["source"] == "zip", installed
    addon = Path(installed["memoryplus"]["path"])
    assert addon == workdir / "addons" / "plugins" / "memoryplus", addon
    assert any("restart" in m.lower() for m in install.report["zip_messages"]), install.report["zip_messages"]

    run = run_app(tmp_path, "zip-run", workdir, "--route", "addon", "--isolate", "--base-url", llm.base_url,
                  "--message", FIRST, "--message", SECOND, timeout=90)
    assert "[Add-ons] Loaded plugin: memoryplus" in run.stdout, run.tail()
    assert str(run.report.get("plugin_file", "")).startswith(str(addon)), run.report.get("plugin_file")
    assert_recall(run, llm)


# ── a PyGPT that has never seen graphiti-core ─────────────────────────────────────────────
def uv_cache() -> Path:
    """uv's download cache for PyGPT's add-on installer, kept across tests (and runs): PyGPT
    points uv at <workdir>/extra_packages/.cache, which the test links here."""
    path = Path(os.environ.get("MEMORYPLUS_TEST_UV_CACHE") or Path.home() / ".cache" / "memoryplus-tests" / "uv")
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_addon_zip_into_a_pygpt_without_graphiti_stores_and_recalls(tmp_path, llm):
    """The add-on route as a PyGPT user takes it: PyGPT's environment has PyGPT's dependencies
    only; Install Add-on… → ZIP (the README's ZIP) makes PyGPT's installer put graphiti-core,
    kuzu and neo4j into its extra_packages folder; after a restart the worker must import them
    from there, store the first turn and recall it in the second."""
    from memoryplus.testing.hostenv import make_pygpt_env
    started = time.monotonic()
    python = make_pygpt_env(tmp_path / "pygpt-env")
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in ('pygpt_net', "
                            "'graphiti_core', 'kuzu', 'neo4j', 'memoryplus') if u.find_spec(m)])"],
                           capture_output=True, text=True, cwd=str(tmp_path), env={"PATH": os.environ["PATH"]})
    assert probe.stdout.strip() == "['pygpt_net']", (probe.stdout, probe.stderr)
    archive = tmp_path / "memoryplus-addon.zip"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_addon_zip.py"), "--out", str(archive)],
                   check=True, capture_output=True)
    workdir = tmp_path / "pygpt"
    extra = workdir / "extra_packages"
    extra.mkdir(parents=True)
    (extra / ".cache").symlink_to(uv_cache(), target_is_directory=True)

    install = run_app(tmp_path, "zip-install-deps", workdir, "--install-zip", str(archive),
                      "--install-timeout", "480", timeout=540, python=python)
    install_s = time.monotonic() - started
    assert install.rc == 0, install.tail()
    assert install.report.get("ok"), (install.report.get("zip_questions"), install.report.get("zip_messages"),
                                      install.report.get("zip_alerts"), install.tail())
    assert any("graphiti-core" in q for q in install.report["zip_questions"]), install.report["zip_questions"]
    site = extra / f"{sys.version_info.major}.{sys.version_info.minor}"
    assert (site / "graphiti_core").is_dir() and (site / "kuzu").is_dir(), sorted(p.name for p in site.iterdir())

    run = run_app(tmp_path, "zip-deps-run", workdir, "--route", "addon", "--base-url", llm.base_url,
                  "--message", FIRST, "--message", SECOND, timeout=120, python=python)
    assert "[Add-ons] Loaded plugin: memoryplus" in run.stdout, run.tail()
    addon = workdir / "addons" / "plugins" / "memoryplus"
    assert str(run.report.get("plugin_file", "")).startswith(str(addon)), run.report.get("plugin_file")
    assert_recall(run, llm)
    workers = run.report.get("workers_at_start") or []
    assert workers and all(str(site) in (w.get("pythonpath") or "") for w in workers), workers
    print(f"\nADD-ON (PyGPT without graphiti): environment + ZIP + install {install_s:.1f}s, "
          f"app run {run.seconds:.1f}s, worker ready at {run.report['timings'].get('worker_ready')}s "
          f"(startup {run.report.get('worker_status_at_start', {}).get('startup_s')}s), "
          f"whole test {time.monotonic() - started:.1f}s")


# ── the model tools (plugin/tools.py) in the real app ─────────────────────────────────────
LOCKER = "My locker code is 4711."


def _last_item(body: dict) -> dict:
    items = body.get("input") if isinstance(body.get("input"), list) else body.get("messages") or []
    return items[-1] if items and isinstance(items[-1], dict) else {}


def _tool_output(body: dict) -> str | None:
    """The tool's result a follow-up request carries (Responses or Chat Completions), else None."""
    last = _last_item(body)
    if last.get("type") == "function_call_output" or last.get("role") == "tool":
        return str(last.get("output") or last.get("content") or "")
    return None


def _tool_model(body: dict):
    """A model that calls MemoryPlus's tools: remember when asked to, search when asked."""
    out = _tool_output(body)
    if out is not None:
        return f"(answered from the tool) {out[:300]}"
    user = last_user_text(body).lower()
    if "please remember" in user:
        return {"tool_calls": [{"name": "memory_remember", "arguments": {"text": LOCKER}}]}
    if "locker" in user:
        return {"tool_calls": [{"name": "memory_search", "arguments": {"query": "What is my locker code?"}}]}
    return "Noted, thank you."


def test_the_model_calls_the_memory_tools_and_the_next_request_carries_their_results(tmp_path):
    server = ScriptedLLMServer(chat_reply=_tool_model).start()
    try:
        run = run_app(tmp_path, "tools", tmp_path / "pygpt", "--route", "launcher", "--base-url", server.base_url,
                      "--message", "Please remember my locker code, it is 4711.",
                      "--message", "What is my locker code?")
    finally:
        server.stop()
    rep = run.report
    assert rep.get("ok"), f"the driver did not finish its script\n{run.tail()}"
    requests = main_chat_requests(server)
    offered = json.dumps(requests[0][1].get("tools") or requests[0][1].get("functions") or [])
    assert "memory_search" in offered and "memory_remember" in offered, requests[0][1].keys()
    outputs = [_tool_output(body) for _, body in requests]
    # each follow-up carries PyGPT's record of the command: the request and our result
    assert any(o and "memory_remember" in o and f"Remembered: {LOCKER}" in o for o in outputs), outputs
    searched = [o for o in outputs if o and "memory_search" in o and TAG in o]
    assert searched and "4711" in searched[0].split(TAG, 1)[1], f"no search result in a follow-up: {outputs}"
    assert not rep.get("unhandled_exceptions"), rep["unhandled_exceptions"]
    assert rep.get("plugin_last_error") in ("", None), rep.get("plugin_last_error")
    assert run.rc == 0 and not run.leftover_workers, run.tail()
