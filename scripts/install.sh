#!/usr/bin/env bash
# Sets MemoryPlus up on a fresh Debian/Ubuntu machine: system packages (as root), a virtual
# environment in .venv with PyGPT and every dependency, and MemoryPlus itself (editable).
# Safe to run again: a run with nothing changed since the last one only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # portaudio19-dev: to build PyAudio (a pygpt-net dependency); the rest: Qt offscreen at run time
  # (the emoji font draws the browser's 👍/👎).
  need=""
  for p in portaudio19-dev libpulse0 libegl1 libgl1 libxkbcommon0 libfontconfig1 libdbus-1-3 libnss3 \
           fonts-noto-color-emoji; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
  done
  # PyInstaller (tests/test_frozen.py) needs objdump (binutils) and the shared libpython, which
  # Debian's own Python ships in a package of its own.
  dpkg -s binutils >/dev/null 2>&1 || need="$need binutils"
  if [ "$("$PYTHON" -c 'import sys; print(sys.base_prefix)')" = /usr ]; then
    lib="libpython$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    dpkg -s "$lib" >/dev/null 2>&1 || need="$need $lib"
  fi
  if [ -n "$need" ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  fi
fi

here="$(pwd -P)"
# What the last complete run installed from; a run with nothing changed since only checks.
stamp=.venv/.memoryplus-install
want="$(cat requirements.txt requirements-nodeps.txt pyproject.toml | sha256sum | cut -d' ' -f1) $here"
check() {
  .venv/bin/python -c "import memoryplus.engine.memory_engine, pygpt_net, kuzu, graphiti_core, wordllama"
}
editable_here() {   # memoryplus imports from this checkout (run from / so the cwd does not count)
  [ "$(cd / && "$here/.venv/bin/python" -c 'import memoryplus, os
print(os.path.dirname(os.path.realpath(memoryplus.__file__)))' 2>/dev/null)" = "$here" ]
}

if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && editable_here \
   && check 2>/dev/null; then
  mkdir -p "$HOME/.config/pygpt-net"
  echo "MemoryPlus is installed in $here/.venv (checked; nothing to do)"
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q -r requirements.txt 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt 2>&1 | grep -v "^WARNING: Location" || true
if ! editable_here; then
  # setuptools warns on every editable build about same-named folders in the working
  # directory; the repository root is the package itself, so the warning does not apply.
  PYTHONWARNINGS="ignore:Editable installation" \
    .venv/bin/python -m pip install -q --no-deps -e . 2>&1 | grep -v "^WARNING: Location" || true
fi
check || { echo "install.sh: the environment is incomplete (see the messages above)" >&2; exit 1; }
mkdir -p "$HOME/.config/pygpt-net"
echo "$want" > "$stamp"
echo "MemoryPlus is installed in $here/.venv"
