"""The chat commands /remember_this and /forget_that: parsed at INPUT_BEFORE (nothing goes to
the model), answered in the chat from whichever thread the answer arrives on.

A mixin of `plugin.plugin.Plugin`; see plugin/commands.py for the commands' grammar.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from memoryplus.common.wording import plural, readable, shorten
from memoryplus.plugin import commands as chat_commands
from memoryplus.plugin import host

if TYPE_CHECKING:
    from memoryplus.wire.records import Turn

COMMAND_TIMEOUT_S = 60.0
# How much of a memory a command's reply quotes (characters, cut at a word or sentence boundary)
REPLY_TEXT, OFFER_TEXT, CONFIRM_TEXT = 160, 240, 160


def why(exc: BaseException) -> str:
    """An error, for a chat reply: one line, secrets redacted."""
    from memoryplus.common.redact import redact
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return shorten(redact(text), 300)


class ChatCommandsMixin:
    # ── chat commands ──────────────────────────────────────────────────────────────────
    def current_bank(self) -> str:
        preset = ""
        try:
            preset = self.window.core.config.get("preset") or ""
        except Exception:
            pass

        class _Meta:  # the shape bank_for() reads
            pass
        meta = _Meta()
        meta.preset = preset
        ctx = _Meta()
        ctx.meta = meta
        return host.bank_for(ctx, self.settings)

    def _on_input(self, data: dict) -> None:
        flagging = self.settings.manual_flagging
        if self.queue is None:   # still starting: the saved value, not yet validated
            try:
                flagging = self.get_option_value("manual_flagging") is not False
            except Exception:
                pass
        if not flagging:
            return
        typed = str(data.get("value", "") or "")
        cmd = chat_commands.parse(typed)
        if cmd is None:
            return
        data["stop"] = True     # the command is ours: nothing goes to the model
        data["silent"] = True
        self.counters["commands"] += 1

        def say(text: str) -> None:   # from any thread: the reply shows in the chat
            self.replied.emit(typed.strip(), text)
        if self.service is None or self.queue is None:
            say("MemoryPlus is still starting; send the command again in a moment.")
            return
        bank = self.current_bank()
        if cmd.name == "invalid":
            say(cmd.error[:1].upper() + cmd.error[1:] + ".")
        elif cmd.name == "remember":
            self._remember(bank, cmd.text, say)
        elif cmd.name == "forget":
            self._forget(bank, cmd.text, say)
        elif cmd.name in ("confirm", "cancel"):
            self._confirm_forget(bank, cmd, say)

    def _remember(self, bank: str, text: str, say) -> None:
        if text:
            from memoryplus.wire.protocol import RememberParams
            fut = self.service.remember(RememberParams(bank=bank, text=text), timeout=COMMAND_TIMEOUT_S)
            fut.add_done_callback(lambda f: self._after(f, f"Remembered: {shorten(text, REPLY_TEXT)}",
                                                        bank, say))
            return
        turn = self._last_turn.get(bank)
        if turn is None:
            say("Nothing to remember yet: /remember_this needs a text or a previous turn.")
            return
        explicit = turn.model_copy(update={"explicit": True})
        self.queue.put(bank, explicit)
        say(f"Remembered the previous turn: {shorten(turn.user, REPLY_TEXT)}")

    def _forget(self, bank: str, text: str, say) -> None:
        if not text:
            turn = self._last_turn.get(bank)
            if turn is None:
                say("Nothing to forget: there is no previous turn in this conversation.")
                return
            where = self.queue.remove(bank, turn.id)
            if where is True or where == "removed":
                say(f"Forgotten before it was stored: {shorten(turn.user, REPLY_TEXT)}")
                return
            # stored, or being stored: forget it by its id once the queue is done with it
            threading.Thread(target=self._forget_stored_turn, args=(bank, turn, say), daemon=True).start()
            return

        def search_then_offer():
            # Turns still queued are stored first, so that they can be offered too.
            from memoryplus.wire.protocol import ForgetParams
            try:
                self.queue.flush(timeout=COMMAND_TIMEOUT_S)
                fut = self.service.forget(ForgetParams(bank=bank, text=text, confirm=False),
                                          timeout=COMMAND_TIMEOUT_S)
            except Exception as exc:
                say(f"Could not search the memories to forget: {why(exc)}")
                return
            fut.add_done_callback(lambda f: self._offer(bank, text, f, say))
        threading.Thread(target=search_then_offer, daemon=True, name="memoryplus-forget").start()

    def _forget_stored_turn(self, bank: str, turn: Turn, say) -> None:
        from memoryplus.wire.banks import episode_uuid, slug
        from memoryplus.wire.protocol import ForgetParams
        try:
            self.queue.flush(timeout=COMMAND_TIMEOUT_S)
            result = self.service.forget(ForgetParams(bank=bank, ids=[episode_uuid(slug(bank), turn.id)]),
                                         timeout=COMMAND_TIMEOUT_S).result()
            self.cache.invalidate(bank)
            self.forgotten(bank, result)
            gone = result.episodes_removed
            say(f"Forgot the last turn: {shorten(turn.user, REPLY_TEXT)}" if gone
                else "That turn was not stored, so there was nothing to forget.")
        except Exception as exc:
            say(f"Could not forget the last turn: {why(exc)}")

    def _offer(self, bank: str, text: str, future, say) -> None:
        try:
            report = future.result()
        except Exception as exc:
            say(f"Could not search the memories to forget: {why(exc)}")
            return
        matches = list(report.matches)
        if not matches:
            self._forget_offer = None
            say(f"Nothing matches “{shorten(text, REPLY_TEXT)}” strongly, so nothing was forgotten.")
            return
        self._forget_offer = (bank, matches)
        lines = [f"{i}. {shorten(readable(m.text), OFFER_TEXT)}" for i, m in enumerate(matches, 1)]
        them = "it" if len(matches) == 1 else "them all"
        some = ("" if len(matches) == 1 else
                ", /forget_that 1 3 to forget only some, /forget_that keep 2 to keep some")
        say(f"{plural(len(matches), 'memory matches', 'memories match')} “{shorten(text, REPLY_TEXT)}”:"
            "\n\n" + "\n".join(lines) +
            f"\n\nType /forget_that yes to forget {them}{some}, or /forget_that no to keep "
            f"{'it' if len(matches) == 1 else 'them'}.")

    def _confirm_forget(self, bank: str, cmd, say) -> None:
        offer, self._forget_offer = self._forget_offer, None
        if cmd.name == "cancel" or offer is None or offer[0] != bank:
            say("Nothing was forgotten." if cmd.name == "cancel" else
                "Nothing to confirm: use /forget_that TEXT first.")
            return
        _, matches = offer
        chosen = [m for i, m in enumerate(matches, 1)
                  if (not cmd.only or i in cmd.only) and i not in cmd.keep]
        if not chosen:
            say("Nothing was forgotten.")
            return
        from memoryplus.wire.protocol import ForgetParams
        fut = self.service.forget(ForgetParams(bank=bank, ids=[m.id for m in chosen]), timeout=COMMAND_TIMEOUT_S)
        what = "\n".join(f"- {shorten(readable(m.text), CONFIRM_TEXT)}" for m in chosen)
        fut.add_done_callback(lambda f: self._after(
            f, f"Forgot {plural(len(chosen), 'memory', 'memories')}:\n\n{what}", bank, say))

    def _after(self, future, message: str, bank: str, say) -> None:
        try:
            self.forgotten(bank, future.result())
            if self.cache is not None:
                self.cache.invalidate(bank)
            say(message)
        except Exception as exc:
            problem = self._problem(exc)
            if problem is not None:
                with self._lock:
                    self._said.add(problem.cause)
            say(f"MemoryPlus could not do that: {problem.text if problem else why(exc)}")

    def forgotten(self, bank: str, report) -> None:
        """After the worker forgot turns (a ForgetReport's `sources`; None for a cleared bank;
        another report, e.g. a remember's, forgot nothing): the queue's spool lets go of its
        copies, so no replay stores them again."""
        if self.queue is None:
            return
        if report is None:
            self.queue.forgotten(bank)
        elif getattr(report, "sources", None):
            self.queue.forgotten(bank, [str(s) for s in report.sources])
