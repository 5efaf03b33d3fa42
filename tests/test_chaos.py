"""A small chaos run: the real plugin, worker and Kuzu through 40 turns with every kind of
fault injected (see cli/chaos.py); nothing lost, duplicated, leaked or left running, and the
counters that could hide a loss (drops, skips) each backed by a recorded cause."""
from __future__ import annotations

import json

from memoryplus.cli.chaos import FAULT_KEYS, MUST_BE_ZERO, ok, run_chaos


def test_small_chaos_run_loses_and_leaks_nothing(tmp_path):
    out = tmp_path / "chaos.json"
    result = run_chaos(40, 7, out, workdir=tmp_path / "w", log=lambda _: None)
    written = json.loads(out.read_text())
    for key in ("turns", "stored", "dropped_by_policy", "skipped_by_mode", "failed_final", *MUST_BE_ZERO):
        assert isinstance(written[key], int), key
    assert set(FAULT_KEYS) <= set(written["faults"])
    summary = {k: result[k] for k in ("turns", "stored", "skipped_by_mode", "failed_final", *MUST_BE_ZERO)}
    detail = (f"{summary} faults={result['faults']} gate={result['gate_decisions']} "
              f"exceptions={result['exceptions'][:3]} events={result['events']}")
    assert result["turns"] >= 40
    for key in MUST_BE_ZERO:
        assert result[key] == 0, f"{key}: {detail}"
    # a check that failed (a search, an export) is a failure, not a zero
    assert result["exceptions"] == [], detail
    for kind in FAULT_KEYS:
        assert result["faults"][kind] >= 1, f"fault {kind} never injected: {detail}"
    # write faults hit the spool (this process) and the store (Kuzu writes in the worker)
    assert isinstance(written["store_write_errors_injected"], int)
    assert written["spool_write_errors_injected"] + written["store_write_errors_injected"] >= 1, detail
    # MemoryGate ran through the LLM, which answered both ways: the skips are real decisions
    assert result["gate_decisions"]["keep"] >= 1 and result["gate_decisions"]["skip"] >= 1, detail
    assert result["skipped_by_mode"] >= 1, detail
    assert result["skipped_by_mode"] <= result["turns_by_kind"]["small_talk"], detail
    assert result["unanswered_schemas"] == {}, f"schemas the scripted LLM had no answer for: {detail}"
    accounted = result["stored"] + result["dropped_by_policy"] + result["skipped_by_mode"] + result["forgotten"]
    assert accounted == result["turns"], detail
    assert ok(result), detail
