#!/usr/bin/env bash
# The test command: installs what the tests need into .venv, lints, and runs the whole suite.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/common -k beam`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh dev
echo "==> ruff check"
.venv/bin/ruff check .
echo "==> pytest"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
.venv/bin/python -m pytest "$@"
