#!/usr/bin/env bash
# Trains the EAGLE-3 draft models/shakespeare-mla-eagle3/ for the bundled model, end to end:
#   1. prompts: windows of train.py's training split (tools/train/train_eagle3.py --write-prompts);
#   2. regenerate: the target's own greedy answers with `mlaserve batch`, dumping its hidden states
#      entering layers 1, 2, 3 (docs/batch.md, "Hidden states"): ~2.5 min on 2 cores;
#   3. train + measure on held-out text (tools/train/train_eagle3.py --data): ~15 + ~5 min on 2 cores.
# Usage: scripts/train-eagle3.sh [train_eagle3.py flags...]   (after scripts/build.sh)
# Environment: MLASERVE (default build/mlaserve), DATA (work directory, default
# /tmp/mlaserve-eagle3-data; emptied first), PYTHON (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
MLASERVE=${MLASERVE:-build/mlaserve}
DATA=${DATA:-/tmp/mlaserve-eagle3-data}
PYTHON=${PYTHON:-/usr/bin/python3}
rm -rf "$DATA"
mkdir -p "$DATA"
"$PYTHON" tools/train/train_eagle3.py --write-prompts "$DATA/prompts.jsonl"
# --chat-template: the prompt as `<|bos|>` + its text, as the target was trained (the built-in
# template would wrap it in <|user|> ... <|assistant|>, tokens the target never saw).
"$MLASERVE" batch --model-path models/shakespeare-mla --input "$DATA/prompts.jsonl" \
  --output "$DATA/answers.jsonl" --chat-template "$DATA/prompts.jsonl.jinja" \
  --dump-hidden-states "$DATA/dump" --hidden-layers 1,2,3 \
  --temperature 0 --max-new-tokens 160 --concurrency 64
"$PYTHON" tools/train/train_eagle3.py --data "$DATA/dump" "$@"
