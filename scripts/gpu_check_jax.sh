#!/usr/bin/env bash
# The GPU measurements of issue 17 in one run on one H100/H200 that has JAX but no TensorFlow
# (about 12 minutes for all: train 4, mfu 8, so one part per device call; GPU_CHECK_BUDGET,
# default 560 seconds, caps a call):
#   1. the spa-eng Transformer trained by the project's JAX trainer in bf16
#      (scripts/gpu_train_jax.py): throughput, MFU, and the last and averaged weights, which
#      are imported, exported and scored on test.tsv back on a machine with TensorFlow;
#   2. Transformer-base at sequence 64 in bf16 (scripts/benchmarks/benchmark_transformer_jax.py):
#      MFU with the levers of the search added one at a time (see below; MFU_STEPS picks
#      steps), the last with a profile of the step by kernel and by the part of the model each
#      kernel computes (from the optimized HLO).
#
#   bash scripts/gpu_check_jax.sh [PART]          # on the GPU machine, from the repository
#   bash scripts/gpu_check_jax.sh --quick [PART]  # tiny sizes on CPU: the smoke test CI runs
# (--quick and PART in either order; anything else is exit 2).
# PART: all (default: 1 and 2), train (1 only), mfu (2 only) or seeds: 1 again for each seed of
# SEEDS (default "1 2"; 1 itself is seed 0), bringing back the averaged weights only
# (seedS.model.avgN.weights.h5.part-*; reports and histories in the archive, under seedS/).
#
# The train and seeds parts need a prepared spa-eng folder (PREPARED, default .gpu/spa-eng;
# `seq2seq prepare`, docs/jax.md) and, where keras and keras-hub are not installed, their wheels
# and those of their needs that the machine lacks (WHEELS, default .whl; docs/jax.md lists
# them): they are installed into a temporary folder, nothing else is touched. Everything comes
# back in at most 8 files under $OUT (default runs/gpu_check_jax): gpu_train_jax.json,
# history.jsonl, the weights in parts under 16 MiB (model.weights.h5.part-*,
# model.avg5.weights.h5.part-*), and results.tar.gz (the benchmark JSON, the profile summary,
# every log), written after each step, so that a run cut short still brings back what it
# measured.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/usage.sh
script_usage "$0" "$@"
QUICK=0
PART=
for ARG in "$@"; do  # --quick and PART, in either order
  case "$ARG" in
    --quick) QUICK=1 ;;
    all|train|mfu|seeds)
      [ -z "$PART" ] || { echo "error: more than one part ('$PART', '$ARG')" >&2; exit 2; }
      PART=$ARG ;;
    *) echo "error: unknown argument '$ARG'; expected --quick and one of all, train, mfu," \
         "seeds" >&2; exit 2 ;;
  esac
done
PART=${PART:-all}
SEEDS=${SEEDS:-1 2}
MFU_STEPS=${MFU_STEPS:-before closed paper paper_projections paper_norm paper_sizes}
MFU_STEPS=$(echo $MFU_STEPS)  # one space between names, whatever separated them
for S in $MFU_STEPS; do
  case "$S" in
    before|closed|paper|paper_projections|paper_norm|paper_sizes) ;;
    *) echo "error: unknown MFU_STEPS step '$S'; expected before, closed, paper," \
         "paper_projections, paper_norm, paper_sizes" >&2; exit 2 ;;
  esac
done
for S in $SEEDS; do
  [[ $S =~ ^[0-9]+$ ]] || { echo "error: SEEDS must be whole numbers, got '$S'" >&2; exit 2; }
done
OUT=${OUT:-runs/gpu_check_jax}
PREPARED=${PREPARED:-.gpu/spa-eng}
WHEELS=${WHEELS:-.whl}
PY=${PYTHON:-python3}
if [ "$PART" != mfu ] && [ ! -f "$PREPARED/prepared.json" ]; then
  echo "error: no prepared folder at $PREPARED; run 'seq2seq prepare' first (docs/jax.md)" >&2
  exit 2
fi
WORK=$(mktemp -d)
LOGS="$WORK/results"
mkdir -p "$OUT" "$LOGS"
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-560}  # seconds for the whole run: under a device call's 600 s limit
FAILED=()
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" \
    "$WHEELS"/*.whl || { echo "error: could not install the wheels of $WHEELS" >&2; exit 3; }
  export PYTHONPATH="$WORK/site:$PWD"
else
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
# Keras's version from its metadata: importing it here would only add seconds to every run.
{ nvidia-smi 2>&1 || true
  "$PY" -c 'import jax; from importlib.metadata import version
print(jax.devices(), jax.__version__, version("keras"))'; } > "$LOGS/machine.txt" 2>&1

# collect: what has come so far into $OUT (at most 8 files): the report, the history, the weight
# parts (4 for the spa-eng model) and one archive of everything else. Run after every step, so
# that a run cut short by the device's time limit still brings back what it measured.
collect() {
  if [ -f "$WORK/train/gpu_train_jax.json" ]; then
    cp "$WORK/train/gpu_train_jax.json" "$WORK/train/run/history.jsonl" "$OUT"/ 2>/dev/null
    cp "$WORK/train/run/"*.part-* "$OUT"/ 2>/dev/null
  fi
  local seed part
  for seed in "$WORK"/seed*; do
    [ -f "$seed/gpu_train_jax.json" ] || continue
    mkdir -p "$LOGS/${seed##*/}"
    cp "$seed/gpu_train_jax.json" "$seed/run/history.jsonl" "$LOGS/${seed##*/}"/
    for part in "$seed"/run/model.avg*.part-*; do
      [ -f "$part" ] && cp "$part" "$OUT/${seed##*/}.${part##*/}"
    done
  done
  rm -rf "$LOGS"/profile*/plugins  # the raw traces: summary.json holds what is read from them
  tar -czf "$OUT/results.tar.gz.tmp" -C "$WORK" results && mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
}

# step NAME SECONDS COMMAND...: run with a time limit (cut to what is left of BUDGET seconds;
# skipped under 30), log to results/NAME.log, collect, go on if it fails.
step() {
  local name=$1 limit=$2 left=$(( BUDGET - ($(date +%s) - START) ))
  shift 2
  if [ $left -lt 30 ]; then
    echo "==> $name skipped: ${left}s left of GPU_CHECK_BUDGET=${BUDGET}s"; FAILED+=("$name"); return
  fi
  [ $limit -gt $left ] && limit=$left
  echo "==> [$(( $(date +%s) - START ))s] $name (at most ${limit}s): $*"
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  grep -v '^\(I0000\|WARNING: All log\)' "$LOGS/$name.log" | tail -n 4
  [ $rc -eq 0 ] || { echo "    $name failed (exit $rc)"; FAILED+=("$name"); }
  collect
}

# The spa-eng training, then Transformer-base with the levers of the MFU search added one at a
# time, each in its own process (docs/benchmarks.md, runs 5 and 6): run 4's best (the paper's
# attention, no dropout on its weights, as cuDNN's fused kernel; rbg dropout bits; cuBLAS for
# every matrix product) with the loss's gradient by automatic differentiation as before
# (`before`); the same with the loss's closed-form gradient, the model's own now (`closed`);
# then the paper's feed-forward block, no dropout on its inner activations (`paper`); then each
# attention's projections as (B x T)-row products, QKV in one (`paper_projections`, also at
# twice the batch); then the layer norms' closed-form gradient (`paper_norm`, at both batches,
# profiled); and all of them at smaller batches (`paper_sizes`). MFU_STEPS names the steps to
# run (default: all six, about 8 minutes on an H200).
# --quick: tiny sizes, one step to compile and one timed, compiled with few optimizations
# (JAX's jax_disable_most_optimizations): on a CPU their speed is not what it checks, and
# compiling them is most of its time.
if [ $QUICK = 1 ]; then
  TRAIN=(--quick) BASE=(--size tiny --length 8 --steps 1 --warmup 1) ONE=16 BIG=(16 32)
  SMALL=(8) LIMIT=300 OPTIMIZE_LESS=1
else
  TRAIN=(--minutes 3) BASE=(--size base --length 64 --steps 20) ONE=1024 BIG=(1024 2048)
  SMALL=(256 512) LIMIT=100 OPTIMIZE_LESS=${JAX_DISABLE_MOST_OPTIMIZATIONS:-0}
fi
if [ "$PART" = seeds ]; then
  for S in $SEEDS; do
    step "train_seed$S" 300 "$PY" scripts/gpu_train_jax.py "${TRAIN[@]}" --seed "$S" \
      --prepared "$PREPARED" --out "$WORK/seed$S"
  done
elif [ "$PART" != mfu ]; then
  step train 300 "$PY" scripts/gpu_train_jax.py "${TRAIN[@]}" --prepared "$PREPARED" \
    --out "$WORK/train"
fi
if [ "$PART" = all ] || [ "$PART" = mfu ]; then
  # bench NAME LIMIT ARGS...: Transformer-base in bf16 with cuBLAS for every matrix product, the
  # paper's attention (no dropout on its weights) and rbg dropout bits, results in
  # results/NAME_bf16.json; skipped unless NAME is in MFU_STEPS.
  bench() {
    local name=$1 limit=$2
    shift 2
    [[ " $MFU_STEPS " == *" $name "* ]] || return 0
    step "$name" "$limit" env XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_enable_triton_gemm=false" \
      JAX_DISABLE_MOST_OPTIMIZATIONS=$OPTIMIZE_LESS \
      "$PY" scripts/benchmarks/benchmark_transformer_jax.py "${BASE[@]}" --attention-dropout 0 \
      --dropout-rng rbg "$@" --out "$LOGS/${name}_bf16.json"
  }
  bench before $LIMIT --batch-size $ONE --loss autodiff
  bench closed $LIMIT --batch-size $ONE
  bench paper $LIMIT --batch-size $ONE --activation-dropout 0
  bench paper_projections $((LIMIT * 3 / 2)) --batch-size "${BIG[@]}" --activation-dropout 0 \
    --fused-projections
  bench paper_norm $((LIMIT * 2)) --batch-size "${BIG[@]}" --activation-dropout 0 \
    --fused-projections --layer-norm closed --profile "$LOGS/profile_paper_norm" --hlo
  bench paper_sizes $((LIMIT * 3 / 2)) --batch-size "${SMALL[@]}" --activation-dropout 0 \
    --fused-projections --layer-norm closed
fi

collect
echo "==> [$(( $(date +%s) - START ))s] done; under $OUT: $(ls "$OUT" | tr '\n' ' ')"
rm -rf "$WORK"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "failed: ${FAILED[*]}"
  exit 1
fi
