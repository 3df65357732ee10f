#!/usr/bin/env bash
# The test command: installs what the tests need into .venv, lints, and runs the whole suite.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh tests/common -k beam`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh dev
# The HTML viewer is tested in a real headless Chromium (Debian's package, installed as root).
if ! bash scripts/install_browser.sh; then
  if [ "${CI:-}" = "true" ]; then
    echo "error: could not install chromium for the browser test" >&2
    exit 1
  fi
  echo "warning: chromium not installed; the browser test will be skipped" >&2
fi
# The caption metrics' PTB tokenizer and METEOR run on Java (Debian's default-jre-headless).
if ! bash scripts/install_java.sh; then
  if [ "${CI:-}" = "true" ]; then
    echo "error: could not install java for the caption-metric tests" >&2
    exit 1
  fi
  echo "warning: java not installed; the tests that need it will be skipped" >&2
fi
echo "==> ruff check"
.venv/bin/ruff check .
echo "==> pytest"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
.venv/bin/python -m pytest "$@"
