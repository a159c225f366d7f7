#!/usr/bin/env bash
# Decode speed of a dense checkpoint and its GGUF quantizations, alternating rounds so that a noisy
# host's drift hits every file alike (docs/benchmarks.md, "GGUF block types").
#   scripts/bench-gguf.sh MODEL_DIR [ROUNDS=3] [TYPES="q8_0 q6_k q4_k q4_0"] [BATCHES="1 8"]
# MODEL_DIR: a dense DeepSeek checkpoint with its tokenizer (e.g. `mlaserve init-random --out DIR
# --preset reference --set vocab_size=2048` plus the bundled model's tokenizer files). The GGUF
# files are written next to it, as MODEL_DIR.TYPE.gguf, once. Batch 1 lines carry two lines of
# bench's decode phase table: the MLP products (the large products' own rate) and the weight products
# together (every product that reads weights: what the format changes, apart from attention over the cache).
set -euo pipefail
model=${1:?usage: scripts/bench-gguf.sh MODEL_DIR [ROUNDS] [TYPES] [BATCHES]}
rounds=${2:-3}
types=${3:-"q8_0 q6_k q4_k q4_0"}
batches=${4:-"1 8"}
bin=$(dirname "$0")/../build/mlaserve
files=("$model")
for t in $types; do
  out="${model%/}.$t.gguf"
  [[ -f $out ]] || "$bin" quantize --model-path "$model" --out-format gguf --weights "$t" --out "$out"
  files+=("$out")
done
for batch in $batches; do
  for round in $(seq 1 "$rounds"); do
    for f in "${files[@]}"; do
      out=$("$bin" bench --model-path "$f" --prompt-len 256 --decode-tokens 32 --batch "$batch" 2>&1)
      echo "batch=$batch round=$round $f | $(echo "$out" | grep -E '^(decode|weights read|  MLP products|  weight products)' | tr -s ' ' | tr '\n' ' ')"
    done
  done
done
