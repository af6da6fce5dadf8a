#!/usr/bin/env bash
# Create (or refresh) the virtualenv from requirements.lock with a Python 3.10 interpreter.
# TFX 1.16 supports Python 3.9-3.10 only, so any other interpreter is refused.
set -euo pipefail
venv="${1:-.venv}"

find_python310() {
  local candidate
  for candidate in "${PYTHON:-}" python3.10 "$(type -P pyenv >/dev/null && pyenv root 2>/dev/null)/versions/3.10"*/bin/python3.10 python3; do
    [ -n "$candidate" ] || continue
    if type -P "$candidate" >/dev/null || [ -x "$candidate" ]; then
      if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))' 2>/dev/null; then
        echo "$candidate"; return 0
      fi
    fi
  done
  return 1
}

if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 10))'; then
  echo "setup: $venv uses $("$venv/bin/python" --version 2>&1), not 3.10; recreating it" >&2
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  if ! python=$(find_python310); then
    echo "setup: no Python 3.10 found (TFX 1.16 needs 3.9-3.10). Install one, e.g. 'pyenv install 3.10' or 'apt-get install python3.10', or set PYTHON=/path/to/python3.10" >&2
    exit 2
  fi
  echo "setup: creating $venv with $python ($("$python" --version 2>&1))"
  "$python" -m venv "$venv"
fi
if [ ! -x "$venv/bin/uv" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$(grep -E '^uv==' requirements.lock)"
fi
echo "setup: installing requirements.lock into $venv"
# sync makes the venv exactly the lock (no resolver run), then the project itself goes in editable.
# --compile-bytecode: uv, unlike pip, writes no .pyc by default, and a shell with
# PYTHONDONTWRITEBYTECODE=1 (set on these machines) never caches one either, so every process
# recompiled TensorFlow's sources: `import tensorflow` took 12.5 s here instead of 4.8 s, paid
# by every mptfx command, pipeline node and test worker. Compiling once takes about 50 s.
"$venv/bin/uv" pip sync --quiet --compile-bytecode --python "$venv/bin/python" requirements.lock
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" --no-deps -e .
echo "setup: done"
