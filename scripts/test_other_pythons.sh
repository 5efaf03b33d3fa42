#!/usr/bin/env bash
# Runs the tests that need no PyGPT and no Qt (the engine, worker, queue, cache, CLI...) on the other
# Pythons PyGPT ships on: the AppImage's 3.10, the Snap's 3.12, and 3.13. The main suite runs on
# 3.11 in .venv (scripts/install.sh); each version here gets its own .venv-<version> with
# requirements-engine.txt only, so no second PyGPT install.
#
#   scripts/test_other_pythons.sh [VERSION ...]      default: 3.10 3.12 3.13
#
# Interpreters are looked up as $PYENV_ROOT/versions/<VERSION>.*/bin/python (the newest patch
# release), then python<VERSION> on PATH; a missing one fails the run (CI must not pass a version
# it never tested). Extra pytest arguments: MEMORYPLUS_PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
export GRAPHITI_TELEMETRY_ENABLED=false

# Every test runs but those that need PyGPT or Qt, which are listed here (a new test file runs
# on these Pythons unless it is added below; tests/test_python_versions.py checks that every
# name listed still exists).
NEEDS_PYGPT=(
  tests/test_app_e2e.py        # the real PyGPT app
  tests/test_bench.py          # the bench loads the plugin in PyGPT's host
  tests/test_chaos.py          # the chaos run drives the plugin
  tests/test_demo.py           # the demo drives the plugin
  tests/test_defaults.py       # the common set-ups in PyGPT's host
  tests/test_defaults_e2e.py   # ... and in the real app
  tests/test_import_pygpt.py   # builds PyGPT's own history database
  tests/test_mcp.py            # the MCP SDK comes with PyGPT's pins (requirements.txt)
  tests/test_mcp_plugin.py     # the MCP server beside the plugin in PyGPT's host
  tests/test_plugin.py
  tests/test_reliability.py    # the plugin's retry and spool paths
  tests/test_sanitize.py       # compares with PyGPT's command parser
  tests/test_tools.py          # the model tools through PyGPT's plugin commands
  tests/test_shared_worker.py  # the plugin hears what other clients change
  tests/test_ui.py
)
NEEDS_PYGPT_TESTS=(
  tests/test_cli.py::test_demo_passes_every_check
  tests/test_cli.py::test_the_command_goes_through_pygpts_running_worker   # the plugin's worker holds the bank
  tests/test_cli.py::test_pygpt_starting_during_a_long_command_joins_its_worker_and_takes_over   # ... and joins the command's
  tests/test_doctor.py::test_healthy         # expects pygpt-net installed
  tests/test_fuzz.py::test_a_corrupt_spool_keeps_its_good_turns_and_sets_the_bad_lines_aside
)

find_python() {
  local version="$1" root="${PYENV_ROOT:-$HOME/.pyenv}" found=""
  # newest patch release first (sort -V); only directories named exactly <version>.<patch>
  for candidate in $(ls -d "$root/versions/$version".* 2>/dev/null | grep -E "/${version//./\\.}\.[0-9]+$" | sort -Vr); do
    if [ -x "$candidate/bin/python" ]; then found="$candidate/bin/python"; break; fi
  done
  if [ -z "$found" ] && command -v "python$version" >/dev/null; then found="$(command -v "python$version")"; fi
  [ -n "$found" ] || return 1
  # the interpreter must really be that version (a stray symlink must not pass for it)
  "$found" -c "import sys; sys.exit(0 if '%d.%d' % sys.version_info[:2] == '$version' else 1)" 2>/dev/null || return 1
  echo "$found"
}

# pip's output without its noise about the user site; pip's own exit code is kept (pipefail)
pip_quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }

versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(3.10 3.12 3.13)
failed=()
for version in "${versions[@]}"; do
  python="$(find_python "$version")" || {
    echo "test_other_pythons.sh: no Python $version found (looked in ${PYENV_ROOT:-$HOME/.pyenv}/versions/$version.* and for python$version on PATH)" >&2
    exit 2
  }
  venv=".venv-$version"
  echo "== Python $version ($python) in $venv"
  start=$(date +%s)
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  pip_quiet "$venv/bin/python" -m pip install -q --upgrade pip
  pip_quiet "$venv/bin/python" -m pip install -q -r requirements-engine.txt
  pip_quiet "$venv/bin/python" -m pip install -q --no-deps -r requirements-nodeps.txt
  PYTHONWARNINGS="ignore:Editable installation" pip_quiet "$venv/bin/python" -m pip install -q --no-deps -e .
  "$venv/bin/python" -c "import memoryplus.engine.memory_engine, kuzu, graphiti_core, wordllama" || {
    echo "test_other_pythons.sh: the Python $version environment is incomplete (see the messages above)" >&2
    exit 1
  }
  installed=$(date +%s)
  echo "-- installed in $((installed - start)) s"
  args=()
  for f in "${NEEDS_PYGPT[@]}"; do args+=(--ignore "$f"); done
  for t in "${NEEDS_PYGPT_TESTS[@]}"; do args+=(--deselect "$t"); done
  # shellcheck disable=SC2086  # MEMORYPLUS_PYTEST_ARGS is a list of words
  if "$venv/bin/python" -m pytest -q "${args[@]}" ${MEMORYPLUS_PYTEST_ARGS:-}; then
    echo "-- Python $version: tests passed in $(($(date +%s) - installed)) s"
  else
    echo "-- Python $version: TESTS FAILED (after $(($(date +%s) - installed)) s)" >&2
    failed+=("$version")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "test_other_pythons.sh: tests failed on Python ${failed[*]}" >&2
  exit 1
fi
