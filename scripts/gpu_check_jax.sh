#!/usr/bin/env bash
# The GPU measurements of issue 17 in one run on one H100/H200 that has JAX but no TensorFlow
# (about 8 minutes; train 4, mfu 4):
#   1. the spa-eng Transformer trained by the project's JAX trainer in bf16
#      (scripts/gpu_train_jax.py): throughput, MFU, and the last and averaged weights, which
#      are imported, exported and scored on test.tsv back on a machine with TensorFlow;
#   2. Transformer-base at sequence 64 in bf16 (scripts/benchmark_transformer_jax.py): MFU by
#      batch size with a profile of the step (device time per kernel), the cost of dropout (the
#      same step with dropout 0), and the step as it was before issue 17's two changes.
#
#   bash scripts/gpu_check_jax.sh [PART]          # on the GPU machine, from the repository
#   bash scripts/gpu_check_jax.sh --quick [PART]  # tiny sizes on CPU: the smoke test CI runs
# PART: all (default), train (1 only) or mfu (2 only).
#
# It needs a prepared spa-eng folder (PREPARED, default .gpu/spa-eng; `seq2seq prepare`,
# docs/jax.md) and, where keras and keras-hub are not installed, their wheels and those of
# their needs that the machine lacks (WHEELS, default .whl; docs/jax.md lists them): they are
# installed into a temporary folder, nothing else is touched. Everything comes back in
# at most 8 files under $OUT (default runs/gpu_check_jax): gpu_train_jax.json, history.jsonl,
# the weights in parts under 16 MiB (model.weights.h5.part-*, model.avg5.weights.h5.part-*),
# and results.tar.gz (the benchmark JSON, the profile summary and HLO, every log).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
QUICK=0
[ "${1:-}" = "--quick" ] && { QUICK=1; shift; }
PART=${1:-all}
case "$PART" in
  all|train|mfu) ;;
  *) echo "error: unknown part '$PART'; expected all, train or mfu" >&2; exit 2 ;;
esac
OUT=${OUT:-runs/gpu_check_jax}
PREPARED=${PREPARED:-.gpu/spa-eng}
WHEELS=${WHEELS:-.whl}
PY=${PYTHON:-python3}
WORK=$(mktemp -d)
LOGS="$WORK/results"
mkdir -p "$OUT" "$LOGS"
START=$(date +%s)
FAILED=()

if [ ! -f "$PREPARED/prepared.json" ]; then
  echo "error: no prepared folder at $PREPARED; run 'seq2seq prepare' first (docs/jax.md)" >&2
  exit 2
fi
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
    "$WHEELS"/*.whl || { echo "error: could not install the wheels of $WHEELS" >&2; exit 3; }
  export PYTHONPATH="$WORK/site:$PWD"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
{ nvidia-smi 2>&1 || true; "$PY" -c 'import jax, keras; print(jax.devices(), jax.__version__, keras.__version__)'; } \
  > "$LOGS/machine.txt" 2>&1

# step NAME SECONDS COMMAND...: run with a time limit, log to results/NAME.log, go on if it fails.
step() {
  local name=$1 limit=$2
  shift 2
  echo "==> [$(( $(date +%s) - START ))s] $name: $*"
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  grep -v '^\(I0000\|WARNING: All log\)' "$LOGS/$name.log" | tail -n 4
  [ $rc -eq 0 ] || { echo "    $name failed (exit $rc)"; FAILED+=("$name"); }
}

# The spa-eng training, then Transformer-base: the model as it is at batch 256 and 512 (with a
# profile), without dropout, and with the output projection and loss as they were before
# issue 17 (float32 projection; log-softmax tensor), each at batch 256 in its own process.
if [ $QUICK = 1 ]; then
  TRAIN=(--quick) BASE=(--size tiny --length 8 --steps 3) SIZES=(8 16) ONE=8 LIMIT=300
else
  TRAIN=(--minutes 3) BASE=(--size base --length 64 --steps 20) SIZES=(256 512) ONE=256 LIMIT=100
fi
if [ "$PART" != mfu ]; then
  step train 300 "$PY" scripts/gpu_train_jax.py "${TRAIN[@]}" --prepared "$PREPARED" \
    --out "$WORK/train"
fi
if [ "$PART" != train ]; then
  step base $((LIMIT * 2)) "$PY" scripts/benchmark_transformer_jax.py "${BASE[@]}" \
    --batch-size "${SIZES[@]}" --profile "$LOGS/profile" --out "$LOGS/base_bf16.json"
  step base_no_dropout $LIMIT "$PY" scripts/benchmark_transformer_jax.py "${BASE[@]}" \
    --batch-size $ONE --dropout 0 --out "$LOGS/base_bf16_no_dropout.json"
  step base_f32_output $LIMIT "$PY" scripts/benchmark_transformer_jax.py "${BASE[@]}" \
    --batch-size $ONE --output-dtype float32 --out "$LOGS/base_bf16_f32_output.json"
  step base_before $LIMIT "$PY" scripts/benchmark_transformer_jax.py "${BASE[@]}" \
    --batch-size $ONE --output-dtype float32 --loss log-softmax --out "$LOGS/base_bf16_before.json"
fi

# At most 8 files come back from a device check: the report, the history, the weight parts
# (4 for the spa-eng model) and one archive of everything else.
if [ -d "$WORK/train/run" ]; then
  cp "$WORK/train/gpu_train_jax.json" "$WORK/train/run/history.jsonl" "$OUT"/ 2>/dev/null
  cp "$WORK/train/run/"*.part-* "$OUT"/ 2>/dev/null
fi
rm -rf "$LOGS/profile/plugins"  # the raw trace: summary.json holds what is read from it
tar -czf "$OUT/results.tar.gz" -C "$WORK" results
echo "==> [$(( $(date +%s) - START ))s] done; under $OUT: $(ls "$OUT" | tr '\n' ' ')"
rm -rf "$WORK"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "failed: ${FAILED[*]}"
  exit 1
fi
