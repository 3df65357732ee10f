#!/usr/bin/env bash
# The GPU measurements of issue 7 in one short run (a few minutes on one H100/H200):
#   1. Transformer-base training throughput and MFU, bf16 with XLA (and float32 for contrast)
#   2. captioner training throughput (demo size; the coco-like decoder on cached features)
#   3. decoding latency: greedy and beam 1/3/5, batch 1 and 32, cached vs uncached
#   4. mirrored over two GPUs (two logical GPUs split from one) == one device, for the
#      Transformer, Bahdanau and the captioner (the captioner also with XLA)
# Every result is a JSON file under $OUT (default runs/gpu_checks; 7 JSON files and
# logs.tar.gz, within the device tool's 8 files); timings are printed. The steps run in order
# of importance and share a time budget (GPU_CHECKS_BUDGET, default 330 s): a step that would
# start past it is skipped, and each is cut at what is left.
#
#   bash scripts/gpu_checks.sh            # on the GPU machine
#   bash scripts/gpu_checks.sh --quick    # tiny sizes: a smoke test that runs on a CPU too
#
# Python: the repository's .venv when it has TensorFlow; else a venv over the system's
# packages when the system Python has TensorFlow; else a new venv with `pip install -e .`
# (which needs the network, or PIP_FIND_LINKS pointing at a folder of wheels).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/usage.sh
script_usage "$0" "$@"
refuse_arguments "$0" --quick -- "$@"
QUICK=${GPU_CHECKS_QUICK:-0}
[ "${1:-}" = "--quick" ] && QUICK=1
OUT=${OUT:-runs/gpu_checks}
LOGS="$OUT/logs"
BUDGET=${GPU_CHECKS_BUDGET:-330}
mkdir -p "$OUT" "$LOGS"
export KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
# The scripts import the packages as installed; put this checkout first, so that it is
# what is measured (and importable under the system Python, where nothing is installed).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
START=$(date +%s)
elapsed() { echo "$(( $(date +%s) - START ))s"; }
FAILED=()

has_tf() { "$1" -c 'import tensorflow, keras, keras_hub' >/dev/null 2>&1; }
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ] && has_tf .venv/bin/python; then
    PY=.venv/bin/python
  elif has_tf python3; then
    PY=python3  # the system's TensorFlow; PYTHONPATH (above) holds the repository
  elif python3 -c 'import tensorflow' >/dev/null 2>&1; then
    echo "==> TensorFlow found; installing the rest into .venv-gpu over the system packages"
    python3 -m venv --system-site-packages .venv-gpu
    .venv-gpu/bin/python -m pip install --quiet --retries 0 --timeout 10 \
      --no-build-isolation -e . || exit 3
    PY=.venv-gpu/bin/python
  else
    echo "==> no TensorFlow here; installing the package into .venv-gpu (needs the network)"
    python3 -m venv .venv-gpu && .venv-gpu/bin/python -m pip install --quiet --retries 0 \
      --timeout 10 -e . || {
      echo "error: could not install TensorFlow (no network and no PIP_FIND_LINKS wheels?)" >&2
      exit 3
    }
    PY=.venv-gpu/bin/python
  fi
fi
"$PY" - <<'EOF' 2>/dev/null
import tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
names = [tf.config.experimental.get_device_details(g).get("device_name") for g in gpus]
print(f"python ok: tensorflow {tf.__version__}, GPUs: {names or 'none'}")
EOF
echo "==> environment ready after $(elapsed)"
GPUS=$("$PY" -c 'import tensorflow as tf; print(len(tf.config.list_physical_devices("GPU")))' 2>/dev/null || echo 0)

step() {  # step NAME TIMEOUT_S COMMAND...: run, time, keep going on failure
  local name=$1 limit=$2; shift 2
  local begin; begin=$(date +%s)
  local left=$(( BUDGET - (begin - START) ))
  if [ "$left" -lt 20 ]; then
    echo "==> $name: SKIPPED (the ${BUDGET}s budget is spent)"
    FAILED+=("$name(skipped)")
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "==> $name (at most ${limit}s)"
  if timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1; then
    echo "    ok in $(( $(date +%s) - begin ))s"
  else
    echo "    FAILED (exit $?) after $(( $(date +%s) - begin ))s; the end of its log:"
    tail -n 15 "$LOGS/$name.log" | sed 's/^/    /'
    FAILED+=("$name")
  fi
  grep -v '^[IWE]0000\|^WARNING\|^  warnings.warn\|UserWarning' "$LOGS/$name.log" | tail -n 12
}

if [ "$QUICK" = 1 ]; then
  BASE=(--size tiny --length 8 --batch-size 8 --steps 3 --warmup 1)
  CAPTIONER=(--size tiny --batch-size 8 --steps 3 --warmup 1)
  LATENCY=(--quick)
else
  BASE=(--size base --length 64 --batch-size 256 --steps 30 --warmup 5)
  CAPTIONER=(--size demo,coco-cached --batch-size 64 --steps 30 --warmup 5)
  LATENCY=(--repeats 3)
fi
DEVICE_FLAG=()
[ "$GPUS" -gt 0 ] && DEVICE_FLAG=(--gpu)

step train_base_bf16_xla 150 "$PY" scripts/benchmarks/benchmark_training.py "${BASE[@]}" \
  --precision mixed_bfloat16 --jit-compile --out "$OUT/train_base_bf16_xla.json"
step mirrored_translators 90 bash -c "\"$PY\" tests/seq2seq/distributed_check.py \
  transformer bahdanau ${DEVICE_FLAG[*]} | tail -n 1 > \"$OUT/mirrored_translators.json\""
step mirrored_captioner 90 bash -c "\"$PY\" tests/captioner/distributed_check.py \
  ${DEVICE_FLAG[*]} | tail -n 1 > \"$OUT/mirrored_captioner.json\" && \"$PY\" \
  tests/captioner/distributed_check.py --jit-compile ${DEVICE_FLAG[*]} | tail -n 1 \
  > \"$OUT/mirrored_captioner_xla.json\""
step train_captioner 100 "$PY" scripts/benchmarks/benchmark_training.py --model captioner \
  "${CAPTIONER[@]}" --precision mixed_bfloat16 --out "$OUT/train_captioner.json"
step latency 150 "$PY" scripts/benchmarks/benchmark_latency.py "${LATENCY[@]}" \
  --out "$OUT/latency.json"
step train_base_fp32 60 "$PY" scripts/benchmarks/benchmark_training.py "${BASE[@]}" \
  --precision float32 --steps 10 --warmup 2 --out "$OUT/train_base_fp32.json"

"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("mirrored_translators", "mirrored_captioner", "mirrored_captioner_xla"):
    path = out / f"{name}.json"
    if not path.exists() or not path.read_text().strip():
        continue
    data = json.loads(path.read_text())
    for key, result in (data.items() if "replicas" not in data else [("captioner", data)]):
        print(f"{name} {key}: replicas {result['replicas']}, losses {result['losses']}, "
              f"largest weight difference {result['max_weight_diff']:.2e} "
              f"(the step moved weights by {result['max_weight_change']:.2e})")
for name in ("train_base_bf16_xla", "train_base_fp32", "train_captioner"):
    path = out / f"{name}.json"
    if path.exists():
        for row in json.loads(path.read_text())["results"]:
            mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else "-"
            print(f"{name}: {row['model']} {row['size']} {row['precision']} jit={row['jit']}: "
                  f"{row['examples_per_s']:.1f} examples/s, {row['tokens_per_s']:.0f} tokens/s, "
                  f"input wait {row['input_wait_share']:.1%}, MFU {mfu}")
EOF
tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs && rm -rf "$LOGS"
echo "==> done in $(elapsed); results in $OUT"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "failed: ${FAILED[*]}" >&2
  exit 1
fi
