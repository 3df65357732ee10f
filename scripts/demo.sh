#!/usr/bin/env bash
# The main job: installs the package into .venv, trains the Show-Attend-Tell demo on the
# embedded `shapes` data in two stages (about 10 minutes on 2 CPU cores): cross-entropy
# (`--preset demo`, into RUN_DIR-xe), then self-critical fine-tuning whose reward checks what
# each caption states against its image's scene (`--preset demo-scst-facts`, into RUN_DIR);
# evaluates the result on the test split, captions the sample images in assets/samples/ and
# checks those captions against the samples' scenes (scripts/check_samples.py). As root it
# installs a Java runtime for the caption metrics if there is none (scripts/install_java.sh).
# Set RUN_DIR to choose where the run goes (default runs/demo; existing runs are resumed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/usage.sh
script_usage "$0" "$@"
refuse_arguments "$0" -- "$@"
bash scripts/setup_env.sh
# The caption metrics' PTB tokenizer and METEOR run on Java (Debian's default-jre-headless).
if ! bash scripts/install_java.sh; then
  echo "warning: java not installed: the evaluation uses a simple tokenizer (BLEU, ROUGE-L" \
    "and CIDEr shift; its JSON says \"tokenizer\": \"simple\") and skips METEOR" >&2
fi
RUN_DIR=${RUN_DIR:-runs/demo}
START_DIR=$RUN_DIR-xe
# `--resume` where a run is there already: a finished one returns at once.
resume() { [ -f "$1/config.json" ] && echo --resume || true; }
echo "==> stage 1 of 2: training the demo captioner by cross-entropy into $START_DIR"
.venv/bin/captioner train --dataset shapes --preset demo --out "$START_DIR" $(resume "$START_DIR")
echo "==> stage 2 of 2: self-critical fine-tuning on what its captions state, into $RUN_DIR"
.venv/bin/captioner train --dataset shapes --preset demo-scst-facts --init-from "$START_DIR" \
  --out "$RUN_DIR" $(resume "$RUN_DIR")
echo "==> evaluating on the shapes test split"
.venv/bin/captioner evaluate "$RUN_DIR" --dataset shapes --split test --beam-size 3 \
  --json "$RUN_DIR/eval_test.json"
echo "==> captioning assets/samples/, each caption checked against its image's scene"
.venv/bin/captioner caption "$RUN_DIR" assets/samples/*.png assets/samples/*.jpg \
  > "$RUN_DIR/samples.tsv"
# Exit status 1 says a caption is wrong (printed as such); the demo still ends here normally.
.venv/bin/python scripts/check_samples.py < "$RUN_DIR/samples.tsv" || [ $? -eq 1 ]
