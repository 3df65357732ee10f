#!/usr/bin/env bash
# Installs every dependency at the floor setup.py declares (`name>=X` becomes `name==X`) into a
# separate virtual environment and runs the test suite there, so the floors are versions the
# tests have passed on. The tested sets are listed in docs/compatibility.md.
#
# Usage: bash scripts/check_floors.sh [pytest arguments]     (default: the whole suite, -x)
# Environment: FLOORS_VENV (default .venv-floors), PYTHON (default python3).
# It downloads TensorFlow and the rest (about 1.5 GB) and takes 15-30 minutes on two CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/usage.sh
script_usage "$0" "$@"
PYTHON=${PYTHON:-python3}
VENV=${FLOORS_VENV:-.venv-floors}

# The pins, read from setup.py's install_requires and its tensorboard and dev extras.
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
"$PYTHON" - "$constraints" <<'EOF'
import ast
import re
import sys

tree = ast.parse(open("setup.py", encoding="utf-8").read())
pins = []
for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # `name[extra]>=X` pins `name==X` (a constraints file takes no extras).
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?:\[[a-z0-9,]+\])?>=([0-9][0-9A-Za-z.]*)(,.*)?",
                             node.value)
        if match and f"{match[1]}=={match[2]}" not in pins:
            pins.append(f"{match[1]}=={match[2]}")
if not pins:
    sys.exit("error: no `name>=version` requirement found in setup.py")
open(sys.argv[1], "w").write("\n".join(pins) + "\n")
print("==> floors:", " ".join(pins))
EOF

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
echo "==> installing the package at its floors into $VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -c "$constraints" -e ".[dev,tensorboard]"
"$VENV/bin/python" --version
"$VENV/bin/python" -m pip list --format=freeze 2>/dev/null \
  | grep -iE "^(tensorflow|tensorflow-text|keras|keras-hub|sentencepiece|jax|jaxlib|numpy|pillow|pycocotools|pycocoevalcap|sacrebleu|matplotlib|tqdm|aiohttp|tensorboard|pytest|playwright|ruff)==" \
  || true

echo "==> pytest (floors)"
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
if [ "$#" -eq 0 ]; then
  set -- -x
fi
"$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
