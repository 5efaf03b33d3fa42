"""What the app driver observes in the running app: unhandled exceptions, MemoryPlus's
warnings, every Event PyGPT dispatches, which thread each reaches the plugin's handle() on,
the plugin's shutdown and start-ups, alert dialogs, the GUI thread's stack, the queue and
worker as the plugin reports them."""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback

# Run from its file (`python testing/app_driver.py`, maybe in an environment without memoryplus):
# the sibling files, and nothing of memoryplus imported before the add-on route hides it.
if __package__:
    from memoryplus.testing.app_env import PLUGIN_ID, _jsonable, _now, worker_processes
else:
    from app_env import PLUGIN_ID, _jsonable, _now, worker_processes

# Events the report's timeline keeps (every Event PyGPT dispatches, not AppEvent/KernelEvent/...).
MAX_TIMELINE = 4000


class _LogCapture(logging.Handler):
    def __init__(self, sink: list):
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if len(self.sink) < 200:
                self.sink.append({"t": _now(), "logger": record.name, "level": record.levelname,
                                  "thread": threading.current_thread().name,
                                  "message": record.getMessage()[:1000]})
        except Exception:
            pass



class Observer:
    """The driver's observing half (Driver holds the report, window, plugin and args)."""

    # hooks installed before the app starts
    def install_hooks(self) -> None:
        sink = self.report["unhandled_exceptions"]
        old_hook = sys.excepthook

        def excepthook(tp, val, tb):
            sink.append({"t": _now(), "thread": threading.current_thread().name, "type": tp.__name__,
                         "message": str(val)[:1000],
                         "traceback": "".join(traceback.format_exception(tp, val, tb))[-6000:]})
            old_hook(tp, val, tb)
        sys.excepthook = excepthook

        old_thook = threading.excepthook

        def thook(a):
            sink.append({"t": _now(), "thread": getattr(a.thread, "name", "?"),
                         "type": getattr(a.exc_type, "__name__", "?"), "message": str(a.exc_value)[:1000],
                         "traceback": "".join(traceback.format_exception(a.exc_type, a.exc_value,
                                                                         a.exc_traceback))[-6000:]})
            old_thook(a)
        threading.excepthook = thook
        capture = _LogCapture(self.report["log_warnings"])
        logging.getLogger("memoryplus").addHandler(capture)
        logging.getLogger("memoryplus").setLevel(logging.INFO)

    def start_gui_sampler(self, period: float = 0.1) -> None:
        """Sample the GUI thread's stack (what blocks it, and for how long) until the script ends."""
        import collections
        counts: collections.Counter = collections.Counter()
        main_id = threading.main_thread().ident
        stop = self._sampler_stop = threading.Event()

        def sample():
            while not stop.wait(period):
                frame = sys._current_frames().get(main_id)
                if frame is None:
                    continue
                where = []
                f = frame
                while f is not None and len(where) < 4:
                    code = f.f_code
                    where.append(f"{os.path.basename(os.path.dirname(code.co_filename))}/"
                                 f"{os.path.basename(code.co_filename)}:{f.f_lineno} {code.co_name}")
                    f = f.f_back
                del frame, f
                counts[" < ".join(where)] += 1
        threading.Thread(target=sample, name="driver-gui-sampler", daemon=True).start()

        def report():
            self.report["gui_samples"] = [{"s": round(n * period, 1), "at": k} for k, n in counts.most_common(15)]
        self._sampler_report = report

    # observation
    def _observe_dispatch(self) -> None:
        from pygpt_net.core.events import Event
        window = self.window
        original = window.dispatch
        events = self._events
        ctx_ends = self._ctx_ends

        def dispatch(event, *a, **kw):
            result = original(event, *a, **kw)
            try:
                if type(event) is Event:
                    data = event.data if isinstance(event.data, dict) else {}
                    rec = {"t": _now(), "name": event.name,
                           "thread": "main" if threading.current_thread() is threading.main_thread()
                           else threading.current_thread().name}
                    for key in ("silent", "preview", "stop", "internal"):
                        if data.get(key):
                            rec[key] = True
                    if len(events) < MAX_TIMELINE:
                        events.append(rec)
                    if event.name == Event.CTX_END and event.ctx is not None:
                        ctx = event.ctx
                        ctx_ends.append({"t": _now(), "input": str(ctx.input or "")[:500],
                                         "output": str(ctx.output or "")[:2000],
                                         "internal": bool(getattr(ctx, "internal", False)),
                                         "id": getattr(ctx, "id", None),
                                         "meta_id": getattr(getattr(ctx, "meta", None), "id", None),
                                         "preset": getattr(getattr(ctx, "meta", None), "preset", None)})
            except Exception:
                pass
            return result
        window.dispatch = dispatch

    def _observe_plugin_threads(self) -> None:
        """Which threads each event reaches MemoryPlus's handle() on."""
        plugin = self.plugin
        if plugin is None:
            return
        original = plugin.handle
        seen = self.report["memoryplus_thread_events"]
        calls = self.report.setdefault("memoryplus_calls", [])

        def handle(event, *a, **kw):
            try:
                th = "main" if threading.current_thread() is threading.main_thread() \
                    else threading.current_thread().name.split("-")[0]
                key = f"{event.name}@{th}"
                seen[key] = seen.get(key, 0) + 1
                data = event.data if isinstance(event.data, dict) else {}
                if not (data.get("silent") or data.get("preview")) and len(calls) < 500:
                    calls.append({"t": _now(), "event": event.name, "thread": th,
                                  "started_before": getattr(plugin, "_started", None)})
            except Exception:
                pass
            previous = getattr(self, "_current_event", None)
            try:
                data = event.data if isinstance(event.data, dict) else {}
                flags = "".join(f" {k}" for k in ("silent", "preview") if data.get(k))
                self._current_event = f"{event.name}{flags} ({type(event).__name__})"
            except Exception:
                self._current_event = "?"
            try:
                return original(event, *a, **kw)
            finally:
                self._current_event = previous
        plugin.handle = handle

        original_shutdown = plugin.shutdown

        def shutdown(*a, **kw):
            t = time.monotonic()
            self.report["plugin_shutdown_called_at"] = _now()
            calls.append({"t": _now(), "event": "<plugin.shutdown()>", "thread": "main"})
            try:
                return original_shutdown(*a, **kw)
            finally:
                self.report["plugin_shutdown_s"] = round(time.monotonic() - t, 3)
                self.report["workers_right_after_plugin_shutdown"] = worker_processes(self.args.workdir)
        plugin.shutdown = shutdown

        if callable(getattr(plugin, "destroy", None)):
            original_destroy = plugin.destroy

            def destroy(*a, **kw):
                calls.append({"t": _now(), "event": "<plugin.destroy()>", "thread": "main"})
                return original_destroy(*a, **kw)
            plugin.destroy = destroy

        starts = self.report.setdefault("memoryplus_machinery_starts", [])
        if callable(getattr(plugin, "_ensure_started", None)):
            original_start = plugin._ensure_started

            def ensure_started(*a, **kw):
                was = getattr(plugin, "_started", None)
                t = time.monotonic()
                result = original_start(*a, **kw)
                if not was and getattr(plugin, "_started", None):
                    starts.append({"t": _now(), "took_s": round(time.monotonic() - t, 3),
                                   "after_shutdown": "plugin_shutdown_called_at" in self.report,
                                   "in_handle_of": getattr(self, "_current_event", None),
                                   "thread": threading.current_thread().name,
                                   "stack": "".join(traceback.format_stack(limit=14)[:-1])[-2500:]})
                return result
            plugin._ensure_started = ensure_started

    @staticmethod
    def web_views() -> list:
        from PySide6.QtWebEngineWidgets import QWebEngineView
        from PySide6.QtWidgets import QApplication
        return [v for v in QApplication.allWidgets() if isinstance(v, QWebEngineView)]

    def record_alerts(self) -> None:
        """Every alert dialog PyGPT is asked to show from here on (still shown): what a user
        would read."""
        alerts = self.report.setdefault("alerts", [])
        dialogs = self.window.ui.dialogs
        original = dialogs.alert

        def alert(msg, *a, **k):
            alerts.append({"t": _now(), "text": str(msg)[:4000]})
            return original(msg, *a, **k)
        dialogs.alert = alert

    def plugin_enabled(self) -> bool:
        try:
            return bool(self.window.controller.plugins.is_enabled(PLUGIN_ID))
        except Exception:
            return False

    @staticmethod
    def worker_settled(plugin) -> bool:
        """The worker is up (or its start has failed for good: no point in waiting)."""
        client = getattr(plugin, "client", None)
        if client is None:
            return bool(getattr(plugin, "_started", False) and getattr(plugin, "last_error", ""))
        return client.status().get("state") not in ("stopped", "starting", "restarting")

    def queue_counts(self) -> dict:
        q = getattr(self.plugin, "queue", None)
        if q is None:
            return {"queue": None}
        try:
            return _jsonable(dict(q.counts()))
        except Exception as exc:
            return {"error": repr(exc)}

    def client_status(self) -> dict:
        c = getattr(self.plugin, "client", None)
        if c is None:
            return {"client": None}
        try:
            return _jsonable(dict(c.status()))
        except Exception as exc:
            return {"error": repr(exc)}
