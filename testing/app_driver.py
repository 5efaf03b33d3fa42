"""Drive the real PyGPT desktop app, offscreen, through two chat turns with MemoryPlus.

Run in a subprocess (it ends with ``sys.exit(app.exec())`` like PyGPT itself)::

    python testing/app_driver.py --workdir W --base-url http://127.0.0.1:PORT/v1 --report R.json \
        [--route launcher|addon] [--isolate] [--install-zip ZIP] [--message TEXT ...]

What it does, in order:

1. Seeds ``W/config.json`` (PyGPT's own default config plus: the OpenAI provider's api key and
   endpoint pointing at ``--base-url``, chat mode, model gpt-4o, the Responses API switch,
   updater/tray/auto-title off, license accepted, ``plugins_enabled.memoryplus`` and
   ``plugins.memoryplus.*``: local extraction, local embeddings, persistent engine), unless
   ``--no-seed``.  Sets the offline environment (``PYGPT_WORKDIR``, ``TIKTOKEN_CACHE_DIR`` from
   llama_index's bundled cache, ``QT_QPA_PLATFORM=offscreen``, ``QTWEBENGINE_DISABLE_SANDBOX=1``,
   ``GRAPHITI_TELEMETRY_ENABLED=false``, ``HF_HUB_OFFLINE=1``) where not set already.
2. Starts the real app: ``pygpt_net.app.run(plugins=[Plugin()])`` for ``--route launcher``, or the
   stock ``pygpt_net.app.run()`` for ``--route addon`` (MemoryPlus then comes from
   ``W/addons/plugins/memoryplus``).  ``--isolate`` removes the editable ``memoryplus`` install
   from the import system first, so an add-on really runs from its own directory, as for a user
   who never pip-installed it.  ``Launcher.run`` is wrapped only to schedule the script below on
   the GUI thread before ``app.exec()``.
3. From ``QTimer`` callbacks on the GUI thread: for each message, types it into
   ``window.ui.nodes['input']``, clicks ``window.ui.nodes['input.send_btn']``, waits for the
   turn's ``CTX_END`` and for PyGPT to be idle, then (between messages) waits until MemoryPlus has
   stored the turn (``plugin.queue.counts()``: pending == 0, in_flight == 0, done >= turns so far).
   Then each ``--command`` the same way, waiting for MemoryPlus's reply and reading the chat
   page's text (``commands`` in the report: the reply, whether the command and the reply's first
   line are on the page).
4. Writes the JSON report (``--report``), closes the main window (PyGPT's ``closeEvent`` →
   ``shutdown`` → every plugin's ``shutdown``), rewrites the report with what shutdown left
   behind, and quits the app.  The process exit status is the app's.

``--install-zip ZIP`` instead installs an add-on ZIP through PyGPT's own Config → Install
Add-on… → ZIP controller (its file dialog answered with ZIP, its question whether to install the
manifest's dependencies into extra_packages answered Yes, its "restart required" message box
recorded instead of shown), reports the result and quits: run the driver again to use it.

The report (plain JSON) holds: ``ok``/``error``/``stage``; ``timings`` (seconds since the driver
started: launcher_run, gui_loop_started, worker_ready, script_end, closed); ``turns`` (text, reply,
reply_s, stored_after_s, queue counts); the plugin's ``plugin_counters``, ``plugin_last_error``,
``queue_counts`` and ``worker_status``; where the plugin came from (``plugin_file``,
``loaded_as_addon``); ``events`` (every ``Event`` PyGPT dispatched, with its thread and
silent/preview flags); ``memoryplus_calls`` and ``memoryplus_thread_events`` (what reached the
plugin's ``handle()``, on which thread); ``memoryplus_machinery_starts`` (each time the plugin
started its queue and worker client, what event it was handling, and whether PyGPT had already
called its ``shutdown()``); MemoryPlus warnings logged; unhandled exceptions on any thread; the
worker processes (by working directory under ``--workdir``) before close, right after
``shutdown()``, after close and at interpreter exit.  ``--sample-gui`` adds where the GUI thread
spent its time.  No network beyond 127.0.0.1.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

# Run from its file (`python testing/app_driver.py`, maybe in an environment without memoryplus):
# the sibling files, and nothing of memoryplus imported before the add-on route hides it.
if __package__:
    from memoryplus.testing.app_env import (PLUGIN_ID, _jsonable, _now, hide_installed_memoryplus, offline_env,
                                            seed_config, worker_processes)
    from memoryplus.testing.app_observer import Observer
else:
    from app_env import PLUGIN_ID, _jsonable, _now, hide_installed_memoryplus, offline_env, seed_config, worker_processes
    from app_observer import Observer

DEFAULT_MESSAGES = ("My dentist is Dr Okafor and I live in Lisbon.", "Who is my dentist?")


# ── the script that runs on the GUI thread ─────────────────────────────────────────────────
class Driver(Observer):
    POLL_MS = 50

    def __init__(self, args, plugin=None):
        self.args = args
        self.plugin = plugin
        self.window = None
        self.app = None
        self.report: dict[str, Any] = {
            "route": args.route,
            "argv": sys.argv,
            "pid": os.getpid(),
            "python": sys.executable,
            "env": {k: os.environ.get(k) for k in ("PYGPT_WORKDIR", "HOME", "TIKTOKEN_CACHE_DIR",
                                                   "QT_QPA_PLATFORM", "QTWEBENGINE_DISABLE_SANDBOX",
                                                   "GRAPHITI_TELEMETRY_ENABLED")},
            "isolated": [],
            "stage": "starting",
            "ok": False,
            "error": "",
            "timings": {},
            "turns": [],
            "commands": [],
            "events": [],
            "unhandled_exceptions": [],
            "log_warnings": [],
            "memoryplus_thread_events": {},
        }
        self._events = self.report["events"]
        self._ctx_ends: list[dict] = []
        self._replies: list[tuple[str, str]] = []    # what MemoryPlus answered chat commands
        self._gen = None
        self._waiting_until = 0.0
        self._finished = False

    # time marks
    def mark(self, name: str) -> None:
        self.report["timings"][name] = _now()

    def write(self) -> None:
        path = Path(self.args.report)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(_jsonable(self.report), indent=1, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)


    def wrap_launcher(self) -> None:
        from pygpt_net.launcher import Launcher
        original = Launcher.run
        driver = self

        def run(launcher_self):
            driver.window = launcher_self.window
            driver.app = launcher_self.app
            driver.mark("launcher_run")
            try:   # before window.setup(): see every Event PyGPT dispatches, start-up included
                driver._observe_dispatch()
                driver.plugin = driver.find_plugin()
                driver._observe_plugin_threads()
            except Exception as exc:
                driver.report["error"] = f"cannot observe PyGPT: {exc!r}"
            from PySide6.QtCore import QTimer
            QTimer.singleShot(0, driver.start)
            return original(launcher_self)
        Launcher.run = run

    # the script
    def start(self) -> None:
        from PySide6.QtCore import QTimer
        self.mark("gui_loop_started")
        self._gen = self.script()
        self._timer = QTimer()
        self._timer.setInterval(self.POLL_MS)
        self._timer.timeout.connect(self._step)
        self._timer.start()
        self.deadline = time.monotonic() + self.args.budget

    def _step(self) -> None:
        if self._finished:
            return
        if time.monotonic() > self.deadline:
            self.report["error"] = self.report["error"] or f"budget of {self.args.budget}s exceeded " \
                                                           f"at stage {self.report['stage']!r}"
            self.finish()
            return
        try:
            next(self._gen)
        except StopIteration:
            self.finish()
        except Exception as exc:
            self.report["error"] = f"driver failed at {self.report['stage']}: {type(exc).__name__}: {exc}"
            self.report["driver_traceback"] = traceback.format_exc()[-6000:]
            self.finish()

    def wait(self, cond, timeout: float, what: str):
        """Yield until cond() is true; raise TimeoutError after `timeout` seconds."""
        end = time.monotonic() + timeout
        while True:
            try:
                if cond():
                    return
            except Exception:
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            yield

    def idle(self) -> bool:
        w = self.window
        inp = w.controller.chat.input
        busy = bool(getattr(inp, "generating", False) or getattr(inp, "locked", False))
        try:
            busy = busy or bool(w.core.ctx.output.has_request())
        except Exception:
            pass
        return not busy

    def find_plugin(self):
        if self.plugin is not None:
            return self.plugin
        try:
            return self.window.core.plugins.get(PLUGIN_ID)
        except Exception:
            return (getattr(self.window.core.plugins, "plugins", {}) or {}).get(PLUGIN_ID)

    def script(self):
        w = self.window
        rep = self.report
        rep["stage"] = "app started"
        if self.args.install_zip:
            yield from self.install_zip(self.args.install_zip)
            return
        plugin = self.find_plugin()
        rep["plugin_found"] = plugin is not None
        rep["registered_plugin_ids_tail"] = list(getattr(w.core.plugins, "plugins", {}).keys())[-5:]
        if plugin is None:
            raise RuntimeError("MemoryPlus is not in window.core.plugins.plugins")
        self.plugin = plugin
        self.record_alerts()
        rep["plugin_class"] = f"{type(plugin).__module__}.{type(plugin).__qualname__}"
        rep["plugin_file"] = getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
        mp = sys.modules.get("memoryplus")
        rep["memoryplus_package_file"] = getattr(mp, "__file__", None)
        try:
            loaded = getattr(w.core.extensions, "_loaded_objects", {}) or {}
            rep["addons_loaded"] = sorted(loaded)
            rep["loaded_as_addon"] = any(o is plugin for objs in loaded.values() for o in objs)
        except Exception:
            rep["addons_loaded"] = None
        rep["plugin_enabled_at_loop_start"] = self.plugin_enabled()
        rep["plugin_options"] = {k: plugin.get_option_value(k) for k in
                                 ("extraction_engine", "embedding_provider", "engine_mode")
                                 if plugin.has_option(k)}
        rep["app_config"] = {"mode": w.core.config.get("mode"), "model": w.core.config.get("model"),
                             "preset": w.core.config.get("preset"),
                             "openai_api_base": w.core.config.get_provider("openai", "api_base")
                             if hasattr(w.core.config, "get_provider") else None,
                             "responses_api": w.core.config.get_provider("openai", "responses_api")
                             if hasattr(w.core.config, "get_provider") else None}

        # MemoryPlus starts its machinery from setup_ui() through a QTimer; wait for the worker
        rep["stage"] = "waiting for the MemoryPlus worker"
        try:
            yield from self.wait(lambda: self.worker_settled(plugin), self.args.worker_timeout,
                                 "the MemoryPlus worker to be ready")
            self.mark("worker_ready")
        except TimeoutError as exc:
            rep["worker_wait"] = str(exc)   # go on: the turn must work anyway (late/no memories)
        rep["worker_status_at_start"] = self.client_status()
        rep["workers_at_start"] = worker_processes(self.args.workdir)

        rep["plugin_enabled"] = self.plugin_enabled()
        done_needed = 0
        for i, text in enumerate(self.args.message or DEFAULT_MESSAGES, 1):
            rep["stage"] = f"turn {i}: sending"
            yield from self.wait(self.idle, 30, "PyGPT to be idle before sending")
            ends_before = len(self._ctx_ends)
            turn = {"n": i, "text": text, "sent_at": _now()}
            rep["turns"].append(turn)
            w.ui.nodes["input"].setPlainText(text)
            w.ui.nodes["input.send_btn"].click()
            rep["stage"] = f"turn {i}: waiting for the reply"
            yield from self.wait(lambda: any(not e["internal"] and e["output"]
                                             for e in self._ctx_ends[ends_before:]) and self.idle(),
                                 self.args.reply_timeout, f"the reply to message {i}")
            end = next(e for e in self._ctx_ends[ends_before:] if not e["internal"] and e["output"])
            turn.update(reply_at=_now(), reply=end["output"], ctx_input=end["input"], ctx_id=end["id"],
                        meta_id=end["meta_id"], preset=end["preset"],
                        ctx_end_events=len(self._ctx_ends) - ends_before)
            turn["reply_s"] = round(turn["reply_at"] - turn["sent_at"], 3)
            done_needed += 1
            if i < len(self.args.message or DEFAULT_MESSAGES) or self.args.wait_last_store:
                rep["stage"] = f"turn {i}: waiting for MemoryPlus to store it"
                start = _now()
                yield from self.wait(lambda n=done_needed: self.stored(n), self.args.store_timeout,
                                     f"MemoryPlus to store turn {i} (queue {self.queue_counts()})")
                turn["stored_after_s"] = round(_now() - start, 3)
                turn["queue_after_store"] = self.queue_counts()
        yield from self.commands()
        rep["stage"] = "done"
        rep["ok"] = True

    def commands(self):
        """Each --command typed and sent like a message; then MemoryPlus's reply (its `replied`
        signal) and whether the command and the reply are on the chat's page."""
        w = self.window
        alerts: list[str] = []

        def alert(msg, *a, **kw):          # recorded, not shown
            alerts.append(str(msg))
            self._replies.append(("(a dialog)", str(msg)))
        w.ui.dialogs.alert = alert
        replied = getattr(self.plugin, "replied", None)    # MemoryPlus's own signal, if it has one
        if replied is not None:
            replied.connect(lambda command, text: self._replies.append((command, text)))
        for j, text in enumerate(self.args.command or [], 1):
            self.report["stage"] = f"command {j}: sending"
            yield from self.wait(self.idle, 30, "PyGPT to be idle before a command")
            seen, ends, shown = len(self._replies), len(self._ctx_ends), len(alerts)
            cmd = {"n": j, "text": text, "sent_at": _now()}
            self.report["commands"].append(cmd)
            w.ui.nodes["input"].setPlainText(text)
            w.ui.nodes["input.send_btn"].click()
            yield from self.wait(lambda: len(self._replies) > seen, self.args.reply_timeout,
                                 f"MemoryPlus's reply to command {j}")
            cmd["reply"] = self._replies[seen][1]
            pause = time.monotonic() + 2.0    # the page renders what it was sent
            yield from self.wait(lambda: time.monotonic() > pause, 5, "the page")
            pages: list[str] = []
            views = self.web_views()
            for view in views:
                view.page().runJavaScript("document.body ? document.body.innerText : ''", 0,
                                          lambda html: pages.append(str(html or "")))
            yield from self.wait(lambda: len(pages) == len(views), 15, "the chat pages' text")
            first = cmd["reply"].splitlines()[0]
            chat = next((p for p in pages if text in p), "")
            cmd.update(command_in_chat=bool(chat), reply_in_chat=first in chat,
                       chat_tail=chat[-600:], ctx_end_events=len(self._ctx_ends) - ends,
                       alerts=alerts[shown:],
                       input_left=w.ui.nodes["input"].toPlainText())

    def stored(self, n: int) -> bool:
        c = self.queue_counts()
        return c.get("pending") == 0 and c.get("in_flight") == 0 and (c.get("done") or 0) + (c.get("skipped") or 0) >= n


    def install_zip(self, zip_path: str):
        """Config → Install Add-on… → ZIP, through PyGPT's own controller and worker."""
        from pygpt_net.controller import packages as pkg_mod
        from pygpt_net.controller.extensions import extensions as ctl_mod
        rep = self.report
        rep["stage"] = "installing the add-on ZIP"
        messages: list[str] = []
        questions: list[str] = []
        ctl_mod.QFileDialog.getOpenFileName = staticmethod(lambda *a, **k: (zip_path, ""))
        ctl_mod.QMessageBox.information = staticmethod(
            lambda parent, title, text, *a, **k: messages.append(f"{title}: {text}"))

        def yes(parent, title, text, *a, **k):   # "install these packages into extra_packages?"
            questions.append(f"{title}: {text}")
            return pkg_mod.QMessageBox.Yes
        pkg_mod.QMessageBox.question = staticmethod(yes)
        rep["zip_questions"] = questions
        alerts: list[str] = []
        dialogs = self.window.ui.dialogs
        original_alert = dialogs.alert
        dialogs.alert = lambda msg, *a, **k: alerts.append(str(msg))
        ctl = self.window.controller.extensions
        rep["zip_before"] = [m.get("id") for m in self.window.core.extensions.list_installed()]
        ctl.import_zip()
        yield from self.wait(lambda: not ctl._workers and (messages or alerts), self.args.install_timeout,
                             "the ZIP install")
        dialogs.alert = original_alert
        rep["zip_messages"] = messages
        rep["zip_alerts"] = alerts
        rep["zip_installed"] = [{"id": m.get("id"), "version": m.get("version"), "path": m.get("_path"),
                                 "source": m.get("source")}
                                for m in self.window.core.extensions.list_installed()]
        rep["stage"] = "done"
        rep["ok"] = bool(messages) and not alerts

    def finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        from PySide6.QtCore import QTimer
        try:
            self._timer.stop()
        except Exception:
            pass
        rep = self.report
        self.mark("script_end")
        if getattr(self, "_sampler_report", None):
            self._sampler_stop.set()
            self._sampler_report()
        p = self.plugin
        if p is not None:
            rep["plugin_counters"] = _jsonable(dict(getattr(p, "counters", {}) or {}))
            rep["plugin_last_error"] = getattr(p, "last_error", None)
            rep["queue_counts"] = self.queue_counts()
            rep["worker_status"] = self.client_status()
            try:
                p.on_post_update()       # PyGPT's 1-second tick, so that the last store shows
                rep["plugin_status_text"] = p.status_text()
                rep["embedding_provider_description"] = p.options["embedding_provider"]["description"]
            except Exception as exc:
                rep["plugin_status_text"] = repr(exc)
        rep["ctx_ends"] = self._ctx_ends
        rep["workers_before_close"] = worker_processes(self.args.workdir)
        self.write()
        # close the window as a user would: PyGPT's closeEvent → shutdown → plugins' shutdown
        t = time.monotonic()
        try:
            self.window.close()
            rep["close"] = "window.close() returned"
        except Exception as exc:
            rep["close"] = f"window.close() raised {type(exc).__name__}: {exc}"
        rep["close_s"] = round(time.monotonic() - t, 3)
        if p is not None:
            rep["plugin_started_after_close"] = getattr(p, "_started", None)
            rep["plugin_last_error_after_close"] = getattr(p, "last_error", None)
            rep["plugin_counters_after_close"] = _jsonable(dict(getattr(p, "counters", {}) or {}))
        rep["workers_after_close"] = worker_processes(self.args.workdir)
        self.mark("closed")
        self.write()
        import atexit
        atexit.register(self.at_exit)
        QTimer.singleShot(0, self.app.quit)

    def at_exit(self) -> None:
        """The last word, as the interpreter exits: what is still alive of MemoryPlus."""
        try:
            rep = self.report
            p = self.plugin
            rep["at_exit"] = {
                "t": _now(),
                "plugin_started": getattr(p, "_started", None),
                "worker_status": self.client_status() if p is not None else None,
                "workers": worker_processes(self.args.workdir),
                "threads": sorted(t.name for t in threading.enumerate() if t.is_alive()),
            }
            self.write()
        except Exception:
            pass


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", required=True, help="PyGPT workdir (PYGPT_WORKDIR)")
    p.add_argument("--report", required=True, help="where to write the JSON report")
    p.add_argument("--base-url", help="the scripted OpenAI-compatible server, http://127.0.0.1:PORT/v1")
    p.add_argument("--route", choices=("launcher", "addon"), default="launcher")
    p.add_argument("--isolate", action="store_true",
                   help="hide the pip/editable memoryplus so an add-on imports from its own directory")
    p.add_argument("--install-zip", help="install this add-on ZIP through PyGPT's controller, then quit")
    p.add_argument("--install-timeout", type=float, default=120.0,
                   help="seconds for the ZIP install (with its dependencies, when PyGPT must install them)")
    p.add_argument("--no-seed", action="store_true", help="use the workdir's config.json as it is")
    p.add_argument("--no-responses-api", action="store_true", help="chat completions instead of /v1/responses")
    p.add_argument("--model", default="gpt-4o")
    p.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                   help="an extra plugins.memoryplus option to seed")
    p.add_argument("--config", action="append", default=[], metavar="KEY=JSON",
                   help="an extra PyGPT config.json key to seed (e.g. app.env)")
    p.add_argument("--message", action="append", help="a message to send (repeatable); default: two")
    p.add_argument("--command", action="append", help="a chat command to send after the messages "
                                                      "(repeatable); the report says if its reply is in the chat")
    p.add_argument("--wait-last-store", action="store_true", help="also wait for the last turn to be stored")
    p.add_argument("--sample-gui", action="store_true", help="report where the GUI thread spends its time")
    p.add_argument("--budget", type=float, default=130.0, help="seconds for the whole GUI script")
    p.add_argument("--worker-timeout", type=float, default=45.0)
    p.add_argument("--reply-timeout", type=float, default=40.0)
    p.add_argument("--store-timeout", type=float, default=60.0)
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    workdir = Path(args.workdir).resolve()
    for key, value in offline_env(workdir).items():
        os.environ.setdefault(key, value)
    os.environ["PYGPT_WORKDIR"] = str(workdir)
    os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"
    (Path.home() / ".config" / "pygpt-net").mkdir(parents=True, exist_ok=True)  # profile.json.lock

    isolated = hide_installed_memoryplus() if args.isolate else []
    if not args.no_seed:
        if not args.base_url and not args.install_zip:
            sys.exit("app_driver: --base-url is required to seed config.json")
        extra = {}
        for item in args.option:
            k, _, v = item.partition("=")
            extra[k] = json.loads(v)
        config = {}
        for item in args.config:
            k, _, v = item.partition("=")
            config[k] = json.loads(v)
        seed_config(workdir, args.base_url or "http://127.0.0.1:9/v1", model=args.model,
                    responses_api=not args.no_responses_api, options=extra, extra=config)

    plugin = None
    plugins = []
    if args.route == "launcher" and not args.install_zip:
        from memoryplus.plugin.plugin import Plugin
        plugin = Plugin()
        plugins = [plugin]
    driver = Driver(args, plugin)
    driver.report["isolated"] = isolated
    driver.mark("imports_done")
    driver.install_hooks()
    if args.sample_gui:
        driver.start_gui_sampler()
    driver.wrap_launcher()
    driver.write()
    sys.argv = [sys.argv[0]]   # PyGPT parses sys.argv itself
    from pygpt_net.app import run
    if plugins:
        run(plugins=plugins)
    else:
        run()
    # run() returns only when PyGPT failed before its event loop (it prints the reason)
    driver.report["error"] = driver.report["error"] or "pygpt_net.app.run() returned without exiting"
    driver.write()
    sys.exit(3)


if __name__ == "__main__":
    main()
