"""The demo checks itself against the real bank: breaking forgetting or preset isolation on
purpose makes it fail (the CLI run of the healthy demo is in test_cli.py)."""
from __future__ import annotations

import io

from memoryplus.cli.demo import Out, run_demo
from memoryplus.plugin import host
from memoryplus.plugin.plugin import Plugin


def test_demo_fails_when_forgetting_is_broken(tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPT_WORKDIR", str(tmp_path))

    def pretend_to_forget(self, bank, cmd, say):
        self._forget_offer = None
        say("Forgot 1 memory (not really)")
    monkeypatch.setattr(Plugin, "_confirm_forget", pretend_to_forget)
    out = Out(io.StringIO())
    assert run_demo(out, tmp_path / "w") == 1
    assert any("Okafor" in f for f in out.failures)


def test_demo_fails_when_presets_share_a_bank(tmp_path, monkeypatch):
    monkeypatch.setenv("PYGPT_WORKDIR", str(tmp_path))
    from memoryplus.cli.demo import PERSONAL
    monkeypatch.setattr(host, "bank_for", lambda ctx, settings: PERSONAL)   # every preset, one bank
    out = Out(io.StringIO())
    assert run_demo(out, tmp_path / "w") == 1
    assert any("preset" in f for f in out.failures), out.failures
