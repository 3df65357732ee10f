#!/usr/bin/env bash
# The test command: installs what the tests need into .venv (once; later calls skip what is
# already installed), lints, and runs the whole pytest suite over all CPU cores (pytest-xdist).
#   bash scripts/test.sh              # everything, as CI runs it
#   bash scripts/test.sh --fast       # the fast tier (tests not marked slow): before each commit
#   bash scripts/test.sh tests/common -k beam    # extra arguments go to pytest
# TEST_WORKERS sets the pytest-xdist workers (default: one per core, at most 4, since each
# worker holds its own TensorFlow; 0 runs in-process).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/usage.sh
script_usage "$0" "$@"
fast=()
if [ "${1:-}" = "--fast" ]; then
  fast=(-m "not slow")
  shift
fi
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
# Files go to the workers whole (--dist loadfile), so a module's trained-model fixture is
# built once.
cores=$(nproc)
workers=${TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
.venv/bin/python -m pytest -n "$workers" --dist loadfile "${fast[@]}" "$@"
# CI runs the tests whose verdicts rest on floating-point arithmetic (decoding, and engines
# compared with one another) again on other kernels: oneDNN (under TensorFlow) and CTranslate2
# choose theirs by the CPU's instruction set, so these must hold on any CPU, not only the one
# they ran on first (docs/records/test_suite.md).
if [ "${CI:-}" = "true" ] && [ $# -eq 0 ] && [ ${#fast[@]} -eq 0 ]; then
  echo "==> pytest, the numeric tests again on other kernels (ONEDNN_MAX_CPU_ISA=SSE41 CT2_FORCE_CPU_ISA=GENERIC)"
  ONEDNN_MAX_CPU_ISA=SSE41 CT2_FORCE_CPU_ISA=GENERIC .venv/bin/python -m pytest -n "$workers" \
    --dist loadfile -p no:cacheprovider tests/common/decoding tests/helpers/test_ties.py \
    tests/seq2seq/test_ctranslate2.py tests/seq2seq/test_quantized_export.py
fi
