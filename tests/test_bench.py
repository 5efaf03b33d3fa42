"""`memoryplus bench --smoke` runs end to end and writes every figure of issue 7 as a number.
No timing assertions: the benchmark reports whether targets hold, the tests do not."""
from __future__ import annotations

import json
import math
import subprocess
import sys

KEYS = ["gui_ms_per_turn_p99", "inject_ms_p50", "inject_ms_p95", "cache_hit_ms_p50",
        "search_overhead_ratio", "search_during_ingest_ratio", "local_ingest_turns_per_s",
        "llm_calls_per_turn", "llm_input_tokens_per_turn", "llm_calls_ratio_vs_graphiti",
        "worker_rss_mb", "rss_growth_ratio_vs_graphiti", "persistent_vs_subprocess_speedup",
        "plugin_load_ms", "recall_at_10", "recall_at_10_keyword_baseline",
        # issue 16, LLM: the token ratio, and what both paths stored per turn
        "llm_input_tokens_ratio_vs_graphiti", "llm_facts_per_turn", "llm_entities_per_turn",
        "graphiti_facts_per_turn", "graphiti_entities_per_turn", "llm_facts_ratio_vs_graphiti",
        "llm_entities_ratio_vs_graphiti",
        # the recall questions asked in chat and stored, before they are forgotten again
        "recall_at_10_with_chat_turns", "recall_at_10_keyword_baseline_with_chat_turns"]


def test_smoke_bench_writes_every_key_as_a_number(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "memoryplus.cli.main", "bench", "--smoke", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    for key in KEYS:
        value = data.get(key)
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value), (key, value)
