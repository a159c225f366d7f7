#!/usr/bin/env bash
# Decode speed of a dense checkpoint and its GGUF quantizations against it (docs/benchmarks.md,
# "GGUF block types").
#   scripts/bench-gguf.sh MODEL_DIR [ROUNDS=4] [TYPES="q8_0 q6_k q4_k q4_0"] [BATCHES="1 8"]
# (a type TYPE-split, e.g. q6_k-split, writes kv_b_proj as the newer files' attn_k_b + attn_v_b)
# MODEL_DIR: a dense DeepSeek checkpoint with its tokenizer (e.g. `mlaserve init-random --out DIR
# --preset reference --set vocab_size=2048` plus the bundled model's tokenizer files; `--preset
# v3-layers` for DeepSeek-V3's own layer shapes, docs/benchmarks.md). The GGUF
# files are written next to it, as MODEL_DIR.TYPE.gguf, once.
# Batch 1: each round is one `bench --compare-model-path` process holding every file, their decode
# steps interleaved model after model, so that the host's drift hits every file alike within the
# same seconds; the GGUF files' order flips every round (the dense checkpoint stays first: the
# unit). Per round and file, bench's "share x": the weight products' share of the one read probe
# over the dense checkpoint's (every phase but attention over the cache: what the format changes),
# its "best x" (the same ratio from each model's quickest step: the least disturbed figure on a
# busy host) and "median x" (the median over the steps of step i's ratio: what a burst on a few
# steps does not move), and "decode x", the whole step's tokens/s over the dense one's. Batches
# above 1 (which bench does not interleave, nor time by phase): one process per file,
# alternating, the order flipping every round, and per round the file's tokens/s over the dense
# checkpoint's of that round.
# After the rounds, per batch and file: the median of each ratio over rounds.
set -euo pipefail
model=${1:?usage: scripts/bench-gguf.sh MODEL_DIR [ROUNDS] [TYPES] [BATCHES]}
rounds=${2:-4}  # even: as many rounds in each order
types=${3:-"q8_0 q6_k q4_k q4_0"}
batches=${4:-"1 8"}
bin=$(dirname "$0")/../build/mlaserve
files=("$model")
for t in $types; do files+=("${model%/}.$t.gguf"); done
# bench's tables label a model by its file name (its path where two names are the same), which
# the rows are matched by below: the names must differ and hold no space.
labels=$(for f in "${files[@]}"; do basename "$f"; done)
if [[ $(sort <<<"$labels" | uniq -d) != "" || $labels == *" "* ]]; then
  echo "bench-gguf.sh: the file names must differ and hold no space: $(tr '\n' ' ' <<<"$labels")" >&2
  exit 2
fi
for t in $types; do
  out="${model%/}.$t.gguf"
  # TYPE-split: the newer files' layout, kv_b_proj as attn_k_b and attn_v_b.
  layout=combined
  [[ $t == *-split ]] && layout=split
  [[ -f $out ]] || "$bin" quantize --model-path "$model" --out-format gguf --weights "${t%-split}" \
    --gguf-kv-layout "$layout" --out "$out"
done
# "MEDIANx (N pairs)" of a list of ratios (one per line), or "n/a (0 pairs)".
median() {
  sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a (0 pairs)"; else if (NR % 2) printf "%gx (%d pairs)\n", v[(NR + 1) / 2], NR; else printf "%gx (%d pairs)\n", (v[NR / 2] + v[NR / 2 + 1]) / 2, NR}'
}
# One interleaved batch-1 round: every file in one bench process; appends each GGUF file's
# "decode x", "share x", "best x" and "median x" to tps_ratios / share_ratios / best_ratios /
# median_ratios. $1: the round (odd: files in order).
interleaved_round() {
  local round=$1 args=() i out label
  local ggufs=("${files[@]:1}")
  if (( round % 2 == 0 )); then
    ggufs=()
    for ((i = ${#files[@]} - 1; i >= 1; i--)); do ggufs+=("${files[i]}"); done
  fi
  for f in "${ggufs[@]}"; do args+=(--compare-model-path "$f"); done
  if ! out=$("$bin" bench --model-path "$model" "${args[@]}" --prompt-len 256 --decode-tokens 64 2>&1); then
    printf 'batch=1 round=%s: bench failed:\n%s\n' "$round" "$out" >&2
    return
  fi
  for f in "${files[@]:1}"; do
    label=$(basename "$f")
    # The first table's row: label prefill decode MB GB/s of-peak decode-x ...; the products
    # table's (the lines after its header): label ms MB GB/s of-peak share-x best-ms best-x median-x.
    local decode_x share_x best_x median_x products
    decode_x=$(awk -v l="$label" '$1 == l && NF == 9 {sub("x", "", $7); print $7; exit}' <<<"$out")
    products=$(sed -n '/^decode weight products/,$p' <<<"$out")
    share_x=$(awk -v l="$label" '$1 == l && NF == 9 {sub("x", "", $6); print $6; exit}' <<<"$products")
    best_x=$(awk -v l="$label" '$1 == l && NF == 9 {sub("x", "", $8); print $8; exit}' <<<"$products")
    median_x=$(awk -v l="$label" '$1 == l && NF == 9 {sub("x", "", $9); print $9; exit}' <<<"$products")
    echo "batch=1 round=$round $f | decode x $decode_x | weight products' share x $share_x | best x $best_x | median x $median_x"
    if [[ -n $decode_x ]]; then tps_ratios[$f]+="$decode_x "; fi
    if [[ -n $share_x ]]; then share_ratios[$f]+="$share_x "; fi
    if [[ -n $best_x ]]; then best_ratios[$f]+="$best_x "; fi
    if [[ -n $median_x ]]; then median_ratios[$f]+="$median_x "; fi
  done
}
for batch in $batches; do
  declare -A tps_ratios=() share_ratios=() best_ratios=() median_ratios=()
  for round in $(seq 1 "$rounds"); do
    if (( batch == 1 )); then
      interleaved_round "$round"
      continue
    fi
    # Odd rounds run the files in order, even rounds in reverse (the dense checkpoint last): on a
    # host whose speed drifts within a round, neither side of a pair is always the later run.
    order=("${files[@]}")
    if (( round % 2 == 0 )); then
      order=()
      for ((i = ${#files[@]} - 1; i >= 0; i--)); do order+=("${files[i]}"); done
    fi
    declare -A tps_of=()
    for f in "${order[@]}"; do
      # A failed run is reported and leaves its round unpaired; the others go on.
      if ! out=$("$bin" bench --model-path "$f" --prompt-len 256 --decode-tokens 32 --batch "$batch" 2>&1); then
        printf 'batch=%s round=%s %s: bench failed:\n%s\n' "$batch" "$round" "$f" "$out" >&2
        continue
      fi
      echo "batch=$batch round=$round $f | $(grep -E '^(decode|bytes per decode step)' <<<"$out" | tr -s ' ' | tr '\n' ' ')"
      tps_of[$f]=$(sed -nE 's/^decode: .* = ([0-9.]+) tokens\/s.*/\1/p' <<<"$out")
    done
    dense_tps=${tps_of[$model]:-}
    for f in "${files[@]:1}"; do
      tps=${tps_of[$f]:-}
      if [[ -n $tps && -n $dense_tps ]]; then
        tps_ratios[$f]+="$(awk -v a="$tps" -v b="$dense_tps" 'BEGIN {if (b > 0) print a / b}') "
      fi
    done
    unset tps_of
  done
  for f in "${files[@]:1}"; do
    line="batch=$batch $f over $model, median over paired rounds: decode tokens/s"
    line+=" $(tr ' ' '\n' <<<"${tps_ratios[$f]:-}" | { grep . || true; } | median)"
    if (( batch == 1 )); then
      line+=", weight products' share of the read bandwidth $(tr ' ' '\n' <<<"${share_ratios[$f]:-}" | { grep . || true; } | median)"
      line+=", quickest steps' $(tr ' ' '\n' <<<"${best_ratios[$f]:-}" | { grep . || true; } | median)"
      line+=", steps' median $(tr ' ' '\n' <<<"${median_ratios[$f]:-}" | { grep . || true; } | median)"
    fi
    echo "$line"
  done
done
