"""Each option's proof can fail: remove the option's effect, and a test named for it fails.

For every option of config/schema.py, MUTATIONS below says where its value is read; the
script copies the package to a scratch directory, replaces those reads with the option's
default (so the setting is ignored, exactly as if its effect were removed), and runs the
tests marked `@pytest.mark.option("<id>")` (the ones docs/SETTINGS.md names). A proof holds
when at least one of them fails. A mutation whose code is no longer in the source is
reported as stale, so the table cannot silently rot; an option missing from the table is
reported too. Tests that need a server (`needs="NEO4J_URI"`) run only when it is set.

    .venv/bin/python scripts/check_option_proofs.py                 # every option
    .venv/bin/python scripts/check_option_proofs.py context_limit   # some
    .venv/bin/python scripts/check_option_proofs.py --baseline ...  # also: the tests pass unmutated
"""
from __future__ import annotations

import argparse
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]        # the package (the repository root)
sys.path.insert(0, str(ROOT.parent))

# The option's default, read from the schema at run time (no default is repeated here).
D = '__import__("memoryplus.config.schema", fromlist=["Settings"]).Settings().{id}'

# option -> [(file, code that reads the option, its replacement)]; every occurrence is replaced.
MUTATIONS: dict[str, list[tuple[str, str, str]]] = {
    "auto_ingest": [("plugin/turns.py", "if not self.settings.auto_ingest:", "if not {D}:")],
    "engine_mode": [("plugin/plugin.py", "mode=s.engine_mode, app=", "mode={D}, app="),
                    ("client/launcher.py", "return self.mode_arg or self.settings.engine_mode",
                     "return self.mode_arg or {D}")],
    "inject_context": [("plugin/turns.py", "if not s.inject_context or ctx is None", "if not {D} or ctx is None"),
                       ("plugin/turns.py", "or not self.settings.inject_context:", "or not {D}:")],
    "context_limit": [("plugin/turns.py", "query=query, limit=s.context_limit)", "query=query, limit={D})"),
                      ("plugin/turns.py", "limit=s.context_limit, max_tokens", "limit={D}, max_tokens")],
    "max_injected_tokens": [("plugin/turns.py", "max_tokens=s.max_injected_tokens", "max_tokens={D}")],
    "disable_default_vector_store": [("plugin/turns.py", "prefer_over_vector_store=s.disable_default_vector_store",
                                      "prefer_over_vector_store={D}")],
    "backend": [("engine/bank_pool.py", 'self.settings.backend == "kuzu"', '{D} == "kuzu"'),
                ("engine/admin_ops.py", 'pool.settings.backend == "kuzu"', '{D} == "kuzu"')],
    "link_db_to_preset": [("plugin/host.py", "if not settings.link_db_to_preset:", "if not {D}:")],
    "neo4j_uri": [("engine/bank_pool.py", "open_neo4j(s.neo4j_uri,", "open_neo4j({D},")],
    "neo4j_user": [("engine/bank_pool.py", "s.neo4j_uri, s.neo4j_user, s.neo4j_password", "s.neo4j_uri, {D}, s.neo4j_password")],
    "neo4j_password": [("engine/bank_pool.py", "s.neo4j_user, s.neo4j_password, s.neo4j_database",
                        "s.neo4j_user, {D}, s.neo4j_database")],
    "neo4j_database": [("engine/bank_pool.py", "s.neo4j_password, s.neo4j_database)", "s.neo4j_password, {D})")],
    "fallback_bank": [("plugin/host.py", "return settings.fallback_bank", "return {D}")],
    "kuzu_storage_path": [("plugin/plugin.py", "path = self.settings.kuzu_storage_path.strip()", "path = {D}.strip()"),
                          ("config/paths.py", "settings.kuzu_storage_path.strip()", "{D}.strip()")],
    "kuzu_buffer_pool_mb": [("engine/bank_pool.py", "buffer_pool_mb=self.settings.kuzu_buffer_pool_mb",
                             "buffer_pool_mb={D}"),
                            ("engine/admin_ops.py", "buffer_pool_mb=pool.settings.kuzu_buffer_pool_mb",
                             "buffer_pool_mb={D}")],
    "bank_idle_close_s": [("engine/bank_pool.py", "idle_s = self.settings.bank_idle_close_s", "idle_s = {D}")],
    "memory_mode": [("engine/bank_pool.py", "mode_spec(s.memory_mode,", "mode_spec({D},")],
    "extraction_engine": [("engine/bank_pool.py", "e = self.settings.extraction_engine", "e = {D}")],
    "llm_provider": [("engine/providers.py", "provider = settings.llm_provider\n", "provider = {D}\n")],
    "insight_model": [("engine/llm_calls.py", "model=settings.insight_model", "model={D}")],
    "graphiti_model": [("engine/providers.py", "model = model or settings.graphiti_model", "model = model or {D}")],
    "max_context_tokens": [("engine/providers.py", "settings.max_context_tokens // 4", "{D} // 4")],
    "graphiti_temperature": [("engine/providers.py", "temperature=settings.graphiti_temperature if",
                              "temperature={D} if")],
    "embedding_provider": [("engine/providers.py", "provider = settings.embedding_provider", "provider = {D}")],
    "embedding_model": [("engine/providers.py", "model = settings.embedding_model or", "model = {D} or")],
    "embedding_base_url": [("engine/providers.py", "settings.embedding_base_url", "{D}")],
    "embedding_api_key": [("engine/providers.py", "openai_key = settings.embedding_api_key or",
                           "openai_key = {D} or")],
    "override_base_url": [("engine/providers.py", "settings.override_base_url", "{D}")],
    "override_api_key": [("engine/providers.py", "key = settings.override_api_key", "key = {D}")],
    "sanitize_tool_calls": [("plugin/sanitize.py", "bool(settings.sanitize_tool_calls)", "bool({D})")],
    "sanitize_code_blocks": [("plugin/sanitize.py", "bool(settings.sanitize_code_blocks)", "bool({D})")],
    "preserve_tagged_code": [("plugin/sanitize.py", "bool(settings.preserve_tagged_code)", "bool({D})")],
    "max_memory_length": [("engine/ingest_ops.py", "truncate_tokens(turn.body(), s.max_memory_length)",
                           "truncate_tokens(turn.body(), {D})")],
    "emotion_tagging": [("engine/bank_pool.py", "emotion_tagging=s.emotion_tagging", "emotion_tagging={D}"),
                        ("engine/ingest_ops.py", "emotions=s.emotion_tagging", "emotions={D}")],
    "emotion_sensitivity": [("engine/bank_pool.py", "sensitivity=s.emotion_sensitivity", "sensitivity={D}"),
                            ("engine/ingest_ops.py", "sensitivity=s.emotion_sensitivity", "sensitivity={D}")],
    "topic_tagging": [("engine/bank_pool.py", "topic_tagging=s.topic_tagging", "topic_tagging={D}"),
                      ("engine/ingest_ops.py", "topics=s.topic_tagging", "topics={D}")],
    "vibe_scoring": [("engine/ingest_ops.py", "vibe=s.vibe_scoring", "vibe={D}"),
                     ("engine/ingest_ops.py", "if self.pool.settings.vibe_scoring:", "if {D}:")],
    "auto_prune": [("engine/ingest_ops.py", "if s.auto_prune and", "if {D} and")],
    "low_value_threshold": [("engine/ingest_ops.py", "is_low_value(body, s.low_value_threshold)", "is_low_value(body, {D})"),
                            ("engine/admin_ops.py", "threshold or self.pool.settings.low_value_threshold", "threshold or {D}")],
    "manual_flagging": [("plugin/chat.py", "flagging = self.settings.manual_flagging", "flagging = {D}")],
    # the four model tools share one read (each proof switches its own tool off)
    **{tool: [("plugin/tools.py", "return bool(getattr(self.settings, name))", "return bool({D})")]
       for tool in ("memory_search", "memory_timeline", "memory_remember", "memory_forget")},
    "mcp_forget": [("mcp_server/tools.py", "if not settings_now().mcp_forget:", "if not {D}:")],
    "memory_expiry_days": [("engine/admin_ops.py", "days = self.pool.settings.memory_expiry_days", "days = {D}"),
                           ("plugin/status.py", "days = self.settings.memory_expiry_days", "days = {D}")],
    "custom_sanitization_rules": [("plugin/sanitize.py", "split_rules(settings.custom_sanitization_rules)",
                                   "split_rules({D})")],
    "custom_memory_tags": [("engine/ingest_ops.py", "s.custom_memory_tags.split", "{D}.split")],
    "insight_temperature": [("engine/llm_calls.py", "temperature=settings.insight_temperature", "temperature={D}")],
    "review_interval_days": [("ui/review.py", 'int(self.plugin.get_option_value("review_interval_days") or 0)',
                              "int({D})"),
                             ("ui/review.py", "int(self.plugin.settings.review_interval_days)", "int({D})")],
    "memory_feedback": [("ui/browser.py", 'bool(self.plugin.get_option_value("memory_feedback"))', "bool({D})"),
                        ("ui/browser.py", "bool(self.plugin.settings.memory_feedback)", "bool({D})")],
    "search_depth": [("engine/search_ops.py", "depth = self.pool.settings.search_depth", "depth = {D}")],
    "search_cache": [("plugin/plugin.py", "enabled=s.search_cache)", "enabled={D})"),
                     ("plugin/cache.py", "settings.search_cache, clock=clock)", "{D}, clock=clock)"),
                     ("plugin/cache.py", "settings.search_cache_similarity, settings.search_cache)",
                      "settings.search_cache_similarity, {D})")],
    "search_cache_size": [("plugin/plugin.py", "(s.search_cache_size, s.search_cache_ttl", "({D}, s.search_cache_ttl"),
                          ("plugin/cache.py", "(settings.search_cache_size, settings.search_cache_ttl",
                           "({D}, settings.search_cache_ttl")],
    "search_cache_ttl": [("plugin/plugin.py", "s.search_cache_ttl, s.search_cache_similarity",
                          "{D}, s.search_cache_similarity"),
                         ("plugin/cache.py", "settings.search_cache_ttl,", "{D},")],
    "search_cache_similarity": [("plugin/plugin.py", "s.search_cache_similarity,\n", "{D},\n"),
                                ("plugin/cache.py", "settings.search_cache_similarity,", "{D},")],
    "queue_size": [("plugin/queue.py", "int(settings.queue_size)", "int({D})")],
    "overflow_policy": [("plugin/queue.py", "str(settings.overflow_policy)", "str({D})")],
    "batch_size": [("plugin/queue.py", "int(settings.batch_size)", "int({D})")],
    "batch_delay_ms": [("plugin/queue.py", "int(settings.batch_delay_ms)", "int({D})")],
    "retry_attempts": [("plugin/queue.py", "int(settings.retry_attempts)", "int({D})")],
    "retry_backoff_ms": [("plugin/queue.py", "int(settings.retry_backoff_ms)", "int({D})")],
    "runner_timeout_s": [("client/percall.py", "float(self.settings.runner_timeout_s)", "float({D})"),
                         ("plugin/turns.py", "self.settings.runner_timeout_s * len(turns)", "{D} * len(turns)")],
    "custom_analysis_prompt": [("engine/bank_pool.py", "mode_spec(s.memory_mode, s.custom_analysis_prompt,",
                                "mode_spec(s.memory_mode, {D},")],
    "max_llm_calls_per_hour": [("plugin/turns.py", "limit = self.settings.max_llm_calls_per_hour", "limit = {D}")],
    "worker_python": [("client/launcher.py", "self.settings.worker_python.strip()", "{D}.strip()")],
}

IGNORE = shutil.ignore_patterns(".git", "__pycache__", ".venv", ".venv-*", "dist", "*.pyc", ".pytest_cache")


def mutate(root: Path, option: str) -> list[str]:
    """Apply the option's mutation under `root`; returns the stale entries (code not found)."""
    stale = []
    for rel, old, new in MUTATIONS[option]:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        if old not in text:
            stale.append(f"{rel}: {old.strip()!r} not found")
            continue
        path.write_text(text.replace(old, new.replace("{D}", D.format(id=option))), encoding="utf-8")
        py_compile.compile(str(path), doraise=True)
    return stale


def run_tests(root: Path, tests: list[str], timeout: float) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(root.parent), "QT_QPA_PLATFORM": "offscreen",
           "GRAPHITI_TELEMETRY_ENABLED": "false", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                              cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timed out"
    last = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:] or [""]
    return proc.returncode, last[0]


def main(argv: list[str] | None = None) -> int:
    from memoryplus.config.docs import proofs
    from memoryplus.config.schema import options
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("options", nargs="*", help="option ids (default: every option)")
    ap.add_argument("--baseline", action="store_true", help="first check the named tests pass unmutated")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per option's test run")
    args = ap.parse_args(argv)
    ids = [o.id for o in options()]
    unknown = [i for i in args.options if i not in ids]
    if unknown:
        ap.error(f"unknown option(s): {', '.join(unknown)}")
    marked = proofs(ROOT / "tests")
    bad = 0
    for option in args.options or ids:
        t0 = time.monotonic()
        if option not in MUTATIONS:
            print(f"NO MUTATION  {option}: add where its value is read to MUTATIONS", flush=True)
            bad += 1
            continue
        named = marked.get(option, [])
        runnable = [t for t, needs in named if not needs or os.environ.get(needs)]
        if not runnable:
            what = "no test names it" if not named else \
                f"its tests need {', '.join(sorted({n for _, n in named if n}))}"
            print(f"{'UNPROVEN' if not named else 'SKIPPED':<12} {option}: {what}", flush=True)
            bad += not named
            continue
        with tempfile.TemporaryDirectory(prefix="option-proof-") as tmp:
            copy = Path(tmp) / "memoryplus"
            shutil.copytree(ROOT, copy, ignore=IGNORE)
            if args.baseline:
                rc, last = run_tests(copy, runnable, args.timeout)
                if rc != 0:
                    print(f"{'BASELINE':<12} {option}: the named tests fail unmutated ({last})", flush=True)
                    bad += 1
                    continue
            try:
                stale = mutate(copy, option)
            except (OSError, py_compile.PyCompileError) as exc:
                stale = [f"the mutated code does not compile: {exc}"]
            if stale:
                print(f"{'STALE':<12} {option}: " + "; ".join(stale), flush=True)
                bad += 1
                continue
            rc, last = run_tests(copy, runnable, args.timeout)
        verdict = "PROVEN" if rc == 1 else "NOT PROVEN" if rc == 0 else f"ERROR rc={rc}"
        bad += verdict != "PROVEN"
        print(f"{verdict:<12} {option}: {last} ({time.monotonic() - t0:.0f} s; {len(runnable)} test(s))",
              flush=True)
    print(f"{bad} option(s) not proven" if bad else "every option checked is proven", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
