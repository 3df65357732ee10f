#!/usr/bin/env bash
# Creates .venv (if missing) and installs this package into it, with extras given as $1
# (e.g. "dev"). Sourced by demo.sh and test.sh; needs only Python 3.11+ on the machine.
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
echo "==> installing the package into .venv (${target})"
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e "$target"
