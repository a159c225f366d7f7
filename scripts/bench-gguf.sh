#!/usr/bin/env bash
# Decode speed of a dense checkpoint and its GGUF quantizations, alternating rounds so that a noisy
# host's drift hits every file alike (docs/benchmarks.md, "GGUF block types").
#   scripts/bench-gguf.sh MODEL_DIR [ROUNDS=3] [TYPES="q8_0 q6_k q4_k q4_0"] [BATCHES="1 8"]
# MODEL_DIR: a dense DeepSeek checkpoint with its tokenizer (e.g. `mlaserve init-random --out DIR
# --preset reference --set vocab_size=2048` plus the bundled model's tokenizer files). The GGUF
# files are written next to it, as MODEL_DIR.TYPE.gguf, once. Batch 1 lines carry two lines of
# bench's decode phase table: the MLP products (the large products' own rate) and the weight products
# together (every product that reads weights: what the format changes, apart from attention over the cache).
# After the rounds, per batch and file: the median over rounds of its decode tokens/s and of its
# weight products' share of the read bandwidth (batch 1), each over the dense checkpoint's in the
# same round: paired, so that the host's drift between rounds cancels.
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
# The median of a list of numbers (one per line).
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for batch in $batches; do
  declare -A tps_ratios=() share_ratios=()
  for round in $(seq 1 "$rounds"); do
    dense_tps="" dense_share=""
    for f in "${files[@]}"; do
      out=$("$bin" bench --model-path "$f" --prompt-len 256 --decode-tokens 32 --batch "$batch" 2>&1)
      echo "batch=$batch round=$round $f | $(echo "$out" | grep -E '^(decode|weights read|  MLP products|  weight products)' | tr -s ' ' | tr '\n' ' ')"
      tps=$(echo "$out" | sed -nE 's/^decode: .* = ([0-9.]+) tokens\/s.*/\1/p')
      share=$(echo "$out" | awk '/^  weight products together/ {gsub("%", "", $NF); print $NF; exit}')
      if [[ $f == "$model" ]]; then
        dense_tps=$tps dense_share=$share
      else
        [[ -n $tps && -n $dense_tps ]] && tps_ratios[$f]+="$(awk -v a="$tps" -v b="$dense_tps" 'BEGIN {print a / b}') "
        [[ -n $share && -n $dense_share ]] && share_ratios[$f]+="$(awk -v a="$share" -v b="$dense_share" 'BEGIN {print a / b}') "
      fi
    done
  done
  for f in "${files[@]:1}"; do
    echo "batch=$batch $f over $model, median of $rounds paired rounds: decode tokens/s" \
      "$(echo ${tps_ratios[$f]:-} | tr ' ' '\n' | grep . | median)x, weight products' share of the read bandwidth" \
      "$(echo ${share_ratios[$f]:-} | tr ' ' '\n' | grep . | median)x"
  done
  unset tps_ratios share_ratios
done
