"""What the plugin tells the user about itself: the status line (every second), the causes
of failures worth saying once (plugin/problems.py), the embedder in use on the settings page,
the worker's restart by hand, and the daily expiry.

A mixin of `plugin.plugin.Plugin`; widgets only from the GUI thread (on_post_update runs there).
"""
from __future__ import annotations

import logging
import threading
import time

from memoryplus.common.wording import plural
from memoryplus.plugin.chat import COMMAND_TIMEOUT_S

log = logging.getLogger("memoryplus.plugin")

EXPIRY_EVERY_S = 24 * 3600


class StatusMixin:
    def _problem(self, error: str | BaseException):
        """The fixable cause behind an error (see problems.py), or None."""
        from memoryplus.plugin.problems import diagnose
        st = self.service.status() if self.service is not None else {}
        return diagnose(error, python=st.get("python") or "", endpoints=self._endpoints(st))

    def _endpoints(self, st: dict) -> str:
        """Which servers MemoryPlus talks to, by host only (for the texts of problems)."""
        from memoryplus.common.redact import host_of
        s, c = self.settings, self._creds
        parts = []
        if st.get("extraction") == "llm":
            pygpt = c.ollama_base_url if c is not None and c.model_provider == "ollama" else \
                (c.openai_base_url if c is not None else "")
            parts.append(f"LLM at {host_of(s.override_base_url or pygpt or 'https://api.openai.com/v1')}")
        emb = ((st.get("embedder") or {}).get("new_banks") or {})
        if emb.get("provider") and emb.get("provider") not in ("local", "hash"):
            parts.append(f"embeddings {emb.get('id')}: {emb.get('why')}")
        return "; ".join(parts)

    def _say_problem(self, error: str, generic: str = "") -> None:
        """Tell the user once about a cause they can fix; `generic`: a cause key for an
        unrecognised error that must still be said (the worker cannot start)."""
        from memoryplus.plugin.problems import Problem
        problem = self._problem(error)
        if problem is None and generic:
            from memoryplus.common.redact import redact
            st = self.service.status() if self.service is not None else {}
            python = st.get("python") or "python"
            problem = Problem(f"worker:{generic}", redact(
                f"MemoryPlus's memory worker cannot run: {error[:400]}\n\nYour turns are kept on "
                f"disk, not stored. To see why: \"{python}\" -m memoryplus doctor; then use Restart "
                f"worker in the memory browser (MemoryPlus menu)."))
        if problem is not None:
            self._say_once(problem)

    def _storing_failed(self, error: str | BaseException) -> None:
        """A cause that may pass by itself (an unreachable server) is said once a turn has
        failed on it as many times as the queue tries (Ingestion Retry Attempts); one that will
        not (a missing package, a refused key, a bank in use) at once."""
        problem = self._problem(error)
        if problem is None:
            return
        n = self._streak[problem.cause] = self._streak.get(problem.cause, 0) + 1
        if problem.cause != "unreachable" or n >= self.settings.retry_attempts:
            self._say_once(problem)

    def _say_once(self, problem) -> None:
        with self._lock:
            if problem.cause in self._said:
                return
            self._said.add(problem.cause)
        log.warning("%s", problem.text.splitlines()[0])
        self._report(problem.text)      # an alert dialog in PyGPT (the text has several lines)

    def _watch_worker(self, st: dict) -> None:
        """A worker that cannot start (or keeps dying) is said once, with its reason."""
        state = st.get("state")
        if state in ("fallback", "broken") and st.get("last_error"):
            self._say_problem(str(st["last_error"]), generic=state)

    def embedder_text(self, st: dict) -> str:
        """The embedder in use for the current bank (else for new banks) and why."""
        info = st.get("embedder") or {}
        bank = self.current_bank()
        cur = (self._bank_embedders.get(bank) or (info.get("banks") or {}).get(bank)
               or info.get("new_banks") or {})
        ident, why = cur.get("id") or "", cur.get("why") or ""
        if not ident:
            return f"Embeddings: {why}" if why else ""
        if ident.startswith("hash") and "not installed" not in why:
            from memoryplus.config.install import local_embedder_hint
            why = (f"hashed word features: the offline embedder was not installed when this bank "
                   f"was built. {local_embedder_hint(st.get('python') or '')}")
        return f"Embeddings in use: {ident} — {why}" if why else f"Embeddings in use: {ident}"

    def _ask_embedder(self, bank: str) -> None:
        """The embedder an existing bank was built with (it keeps it), asked once (off the GUI
        thread: the answer arrives on the client's thread)."""
        if bank in self._asked_embedder or bank in self._bank_embedders or self.service is None:
            return
        self._asked_embedder.add(bank)

        def done(fut) -> None:
            try:
                st = fut.result()
                if st.embedder:
                    self._bank_embedders.setdefault(bank, {"id": st.embedder, "why": st.embedder_note or ""})
            except Exception:      # unknown bank (nothing stored yet): the new-bank choice shows
                pass
        from memoryplus.wire.protocol import BankParams
        self.service.stats(BankParams(bank=bank), timeout=COMMAND_TIMEOUT_S).add_done_callback(done)

    def _show_embedder(self, st: dict) -> None:
        """On the settings page, under Embedding Provider: the embedder in use and why."""
        if st.get("state") == "ready":
            self._ask_embedder(self.current_bank())
        text = self.embedder_text(st)
        if not text or text == self._embedder_shown:
            return
        self._embedder_shown = text
        from memoryplus.config.schema import options
        base = next((o.description for o in options() if o.id == "embedding_provider"), "")
        opt = self.options.get("embedding_provider")
        if opt is not None:
            opt["description"] = f"{base}\n\n{text}"
        try:
            node = self.window.ui.nodes.get(f"plugin.{self.id}.embedding_provider.desc")
            if node is not None:
                node.setText(f"{base}\n\n{text}")
        except Exception:   # the settings dialog is not built yet: it reads the option
            pass

    def on_post_update(self):
        """Every second on the GUI thread: the status line and the daily expiry check."""
        try:
            if not self._started or self.service is None:
                return
            self._maybe_expire()
            st = self.service.status()
            self._watch_worker(st)
            self._show_embedder(st)
            text = self.status_text()
            if text != self._status:
                self._status = text
                self.window.update_status(text)
        except Exception as exc:
            self._fail("status update", exc)

    def restart_worker(self):
        """*Restart worker* (the memory browser's button): start a new worker, which also closes
        an open crash-loop breaker, then requeue the turns that failed meanwhile. Returns the
        client's future (resolved once the worker is reachable); never blocks the GUI thread."""
        if self.service is None:
            return None
        fut = self.service.restart()

        def requeue(f) -> None:
            if f.exception() is None and self.queue is not None:
                n = self.queue.retry_failed()
                log.info("worker restarted by hand; %d failed turn(s) queued again", n)
        fut.add_done_callback(requeue)
        return fut

    def status_text(self) -> str:
        st = self.service.status() if self.service else {}
        counts = self.queue.counts() if self.queue else {}
        parts = [f"{counts.get('pending', 0)} pending"]
        if counts.get("failed"):
            parts.append(f"{counts['failed']} failed")
        if counts.get("skipped"):
            parts.append(f"{counts['skipped']} skipped by memory mode")
        if counts.get("corrupt_lines"):
            parts.append(f"{plural(counts['corrupt_lines'], 'corrupt spool line')} set aside")
        if counts.get("paused_reason"):
            parts.append(str(counts["paused_reason"]))
        parts.append(f"worker {st.get('state', 'starting')}")
        if st.get("state") == "broken":     # the crash-loop breaker is open
            parts.append("turns are kept; use Restart worker in the memory browser")
        if st.get("extraction"):
            parts.append(f"{st['extraction']} extraction")
        if self.embedder_text(st).startswith("Embeddings in use: hash"):
            parts.append("hashed embeddings: the offline embedder is missing (see the settings)")
        return "MemoryPlus: " + " · ".join(parts)

    def _maybe_expire(self) -> None:
        days = self.settings.memory_expiry_days
        now = time.monotonic()
        if days <= 0 or now - self._last_expiry < EXPIRY_EVERY_S:
            return
        self._last_expiry = now

        def run():
            from memoryplus.wire.protocol import ExpireParams
            try:
                for bank in self.service.banks(timeout=COMMAND_TIMEOUT_S).result():
                    self.service.expire(ExpireParams(bank=bank.name, days=days), timeout=COMMAND_TIMEOUT_S).result()
            except Exception as exc:
                self._fail("expiry check", exc)
        threading.Thread(target=run, daemon=True, name="memoryplus-expiry").start()
