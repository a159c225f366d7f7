#!/usr/bin/env bash
# Decode speed of a dense checkpoint and its GGUF quantizations, alternating rounds so that a noisy
# host's drift hits every file alike (docs/benchmarks.md, "GGUF block types").
#   scripts/bench-gguf.sh MODEL_DIR [ROUNDS=4] [TYPES="q8_0 q6_k q4_k q4_0"] [BATCHES="1 8"]
# (a type TYPE-split, e.g. q6_k-split, writes kv_b_proj as the newer files' attn_k_b + attn_v_b)
# MODEL_DIR: a dense DeepSeek checkpoint with its tokenizer (e.g. `mlaserve init-random --out DIR
# --preset reference --set vocab_size=2048` plus the bundled model's tokenizer files). The GGUF
# files are written next to it, as MODEL_DIR.TYPE.gguf, once. Batch 1 lines carry two lines of
# bench's decode phase table: the MLP products (the large products' own rate) and the weight products
# together (every product that reads weights: what the format changes, apart from attention over the cache).
# After the rounds, per batch and file: the median over rounds of its decode tokens/s and of its
# weight products' share of the read bandwidth (batch 1: bench prints it to the whole percent),
# each over the dense checkpoint's in the same round: paired, so that the host's drift between
# rounds cancels; the order within a round flips every round, so that drift within one does not
# favour the later runs.
set -euo pipefail
model=${1:?usage: scripts/bench-gguf.sh MODEL_DIR [ROUNDS] [TYPES] [BATCHES]}
rounds=${2:-4}  # even: as many rounds in each order
types=${3:-"q8_0 q6_k q4_k q4_0"}
batches=${4:-"1 8"}
bin=$(dirname "$0")/../build/mlaserve
files=("$model")
for t in $types; do
  out="${model%/}.$t.gguf"
  # TYPE-split: the newer files' layout, kv_b_proj as attn_k_b and attn_v_b.
  layout=combined
  [[ $t == *-split ]] && layout=split
  [[ -f $out ]] || "$bin" quantize --model-path "$model" --out-format gguf --weights "${t%-split}" \
    --gguf-kv-layout "$layout" --out "$out"
  files+=("$out")
done
# "MEDIANx (N pairs)" of a list of ratios (one per line), or "n/a (0 pairs)".
median() {
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a (0 pairs)"; else if (NR % 2) printf "%gx (%d pairs)\n", v[(NR + 1) / 2], NR; else printf "%gx (%d pairs)\n", (v[NR / 2] + v[NR / 2 + 1]) / 2, NR}'
}
for batch in $batches; do
  declare -A tps_ratios=() share_ratios=()
  for round in $(seq 1 "$rounds"); do
    # Odd rounds run the files in order, even rounds in reverse (the dense checkpoint last): on a
    # host whose speed drifts within a round, neither side of a pair is always the later run.
    order=("${files[@]}")
    if (( round % 2 == 0 )); then
      order=()
      for ((i = ${#files[@]} - 1; i >= 0; i--)); do order+=("${files[i]}"); done
    fi
    declare -A tps_of=() share_of=()
    for f in "${order[@]}"; do
      # A failed run is reported and leaves its round unpaired; the others go on.
      if ! out=$("$bin" bench --model-path "$f" --prompt-len 256 --decode-tokens 32 --batch "$batch" 2>&1); then
        printf 'batch=%s round=%s %s: bench failed:\n%s\n' "$batch" "$round" "$f" "$out" >&2
        continue
      fi
      echo "batch=$batch round=$round $f | $(grep -E '^(decode|weights read|  MLP products|  weight products)' <<<"$out" | tr -s ' ' | tr '\n' ' ')"
      tps=$(sed -nE 's/^decode: .* = ([0-9.]+) tokens\/s.*/\1/p' <<<"$out")
      share=$(awk '/^  weight products together/ {gsub("%", "", $NF); print $NF; exit}' <<<"$out")
      tps_of[$f]=$tps share_of[$f]=$share
    done
    dense_tps=${tps_of[$model]:-} dense_share=${share_of[$model]:-}
    for f in "${files[@]:1}"; do
      tps=${tps_of[$f]:-} share=${share_of[$f]:-}
      [[ -n $tps && -n $dense_tps ]] && tps_ratios[$f]+="$(awk -v a="$tps" -v b="$dense_tps" 'BEGIN {if (b > 0) print a / b}') "
      [[ -n $share && -n $dense_share ]] && share_ratios[$f]+="$(awk -v a="$share" -v b="$dense_share" 'BEGIN {if (b > 0) print a / b}') "
    done
    unset tps_of share_of
  done
  for f in "${files[@]:1}"; do
    echo "batch=$batch $f over $model, median over paired rounds: decode tokens/s" \
      "$(tr ' ' '\n' <<<"${tps_ratios[$f]:-}" | grep . | median), weight products' share of the read bandwidth" \
      "$(tr ' ' '\n' <<<"${share_ratios[$f]:-}" | grep . | median)"
  done
done
