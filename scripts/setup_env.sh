#!/usr/bin/env bash
# Creates .venv (if missing) and installs this package into it, with extras given as $1
# (e.g. "dev"). Sourced by demo.sh and test.sh; needs only Python 3.11+ on the machine.
# An install is skipped when .venv already holds one made from the same setup.py, pyproject.toml
# and extras (a stamp in .venv records their digest); set REINSTALL=1 to install regardless.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/usage.sh
script_usage "${BASH_SOURCE[0]}" "$@"
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: Python 3.11 or newer is needed (found $("$PYTHON" --version 2>&1))" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  "$PYTHON" -m venv .venv
fi
extras=${1:-}
target="."
[ -n "$extras" ] && target=".[$extras]"
stamp=.venv/.attention-models-installed
digest="$(cat setup.py pyproject.toml | sha256sum | cut -d' ' -f1) ${target}"
# A stamp for the "dev" extras also covers the plain install (a superset).
if [ "${REINSTALL:-0}" != "1" ] && [ -f "$stamp" ] \
  && { [ "$(cat "$stamp")" = "$digest" ] \
       || { [ -z "$extras" ] && [ "$(cut -d' ' -f1 "$stamp")" = "${digest%% *}" ]; }; } \
  && .venv/bin/python -c 'import common, captioner, seq2seq' 2>/dev/null; then
  echo "==> .venv is up to date (${target}; REINSTALL=1 installs again)"
  exit 0
fi
echo "==> installing the package into .venv (${target})"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e "$target"
echo "$digest" > "$stamp"
