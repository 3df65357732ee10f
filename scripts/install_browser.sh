#!/usr/bin/env bash
# Installs what the headless-browser test of the HTML attention viewer needs, on a Debian
# machine as root: the distribution's chromium, and the Python `playwright` package in .venv.
# The pip package carries its own driver; no browser is ever downloaded by playwright (we never
# run `playwright install`), the test launches /usr/bin/chromium instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -x /usr/bin/chromium ]; then
  echo "==> chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
else
  if [ "$(id -u)" -ne 0 ]; then
    echo "error: installing chromium needs root (apt-get); run this script as root" >&2
    exit 2
  fi
  echo "==> installing chromium with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends chromium
fi
if [ ! -x .venv/bin/pip ]; then
  echo "error: .venv is missing; run scripts/setup_env.sh first" >&2
  exit 2
fi
if .venv/bin/python -c 'import playwright.sync_api' 2>/dev/null; then
  echo "==> playwright already installed in .venv"
else
  echo "==> installing playwright into .venv"
  .venv/bin/pip install --quiet playwright
fi
