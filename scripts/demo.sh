#!/usr/bin/env bash
# The main job: installs the package into .venv, trains the Show-Attend-Tell demo on the
# embedded `shapes` data (about 10 minutes on 2 CPU cores), evaluates it on the test split
# and captions the sample images in assets/samples/. As root it installs a Java runtime for
# the caption metrics if there is none (scripts/install_java.sh).
# Set RUN_DIR to choose where the run goes (default runs/demo; an existing run is resumed).
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
resume=()
[ -f "$RUN_DIR/config.json" ] && resume=(--resume)
echo "==> training the demo captioner into $RUN_DIR"
.venv/bin/captioner train --dataset shapes --preset demo --out "$RUN_DIR" "${resume[@]}"
echo "==> evaluating on the shapes test split"
.venv/bin/captioner evaluate "$RUN_DIR" --dataset shapes --split test --beam-size 3 \
  --json "$RUN_DIR/eval_test.json"
echo "==> captioning assets/samples/"
.venv/bin/captioner caption "$RUN_DIR" assets/samples/*.png assets/samples/*.jpg
