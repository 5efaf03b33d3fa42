"""A small chaos run: the real plugin, worker and Kuzu through 40 turns with every kind of
fault injected (see cli/chaos.py); nothing lost, duplicated, leaked or left running."""
from __future__ import annotations

import json

from memoryplus.cli.chaos import FAULT_KEYS, run_chaos

ZERO = ("lost", "duplicated", "cross_bank_leaks", "unforgotten", "secret_leaks", "orphan_processes")


def test_small_chaos_run_loses_and_leaks_nothing(tmp_path):
    out = tmp_path / "chaos.json"
    result = run_chaos(40, 7, out, workdir=tmp_path / "w", log=lambda _: None)
    written = json.loads(out.read_text())
    for key in ("turns", "stored", "dropped_by_policy", "failed_final", *ZERO):
        assert isinstance(written[key], int), key
    assert set(FAULT_KEYS) <= set(written["faults"])
    summary = {k: result[k] for k in ("turns", "stored", "failed_final", *ZERO)}
    detail = f"{summary} faults={result['faults']} exceptions={result['exceptions'][:3]} events={result['events']}"
    assert result["turns"] >= 40
    for key in ZERO:
        assert result[key] == 0, f"{key}: {detail}"
    for kind in FAULT_KEYS:
        assert result["faults"][kind] >= 1, f"fault {kind} never injected: {detail}"
    # write faults hit the spool (this process) and the store (Kuzu writes in the worker)
    assert isinstance(written["store_write_errors_injected"], int)
    assert written["spool_write_errors_injected"] + written["store_write_errors_injected"] >= 1, detail
    accounted = result["stored"] + result["dropped_by_policy"] + result["skipped_by_mode"] + result["forgotten"]
    assert accounted == result["turns"], detail
