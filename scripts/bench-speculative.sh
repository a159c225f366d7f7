#!/bin/bash
# Speculative decoding figures (docs/benchmarks.md, issue 16 item 5): bench-offline with
# speculation off and on, at 1, 4 and 16 requests, alternating the settings so that a busy host
# slows both alike.
#   scripts/bench-speculative.sh MODEL_DIR "SETTINGS..." [OUTPUT_LEN] [REPEATS]
# SETTINGS: a '|'-separated list of flag sets, "off" for none; e.g.
#   "off|--speculative-algorithm NEXTN --speculative-num-steps 3"
# Prompts: with a tokenizer in MODEL_DIR and a heldout.txt beside it (the bundled model), the
# held-out text's speeches (paragraphs of at least 100 characters, in file order); otherwise
# random token ids of 64 tokens.
# Prints one line per run: requests, setting, output tok/s, accept length.
set -euo pipefail
model=${1:?model directory}
settings=${2:?settings}
output_len=${3:-256}
repeats=${4:-2}
bin=${MLASERVE:-./build/mlaserve}
dataset=""
if [ -f "$model/heldout.txt" ]; then
  dataset=$(mktemp /tmp/bench-speculative.XXXXXX.jsonl)
  trap 'rm -f "$dataset"' EXIT
  # One JSON line per paragraph: quotes, backslashes and newlines escaped.
  awk -v out_len="$output_len" 'BEGIN { RS = ""; n = 0 }
    length($0) >= 100 && n < 16 {
      s = $0; gsub(/\\/, "\\\\", s); gsub(/"/, "\\\"", s); gsub(/\n/, "\\n", s)
      printf("{\"prompt\": \"%s\\n\\n\", \"output_len\": %d}\n", s, out_len); n++
    }' "$model/heldout.txt" > "$dataset"
fi
IFS='|' read -r -a sets <<< "$settings"
for n in 1 4 16; do
  for rep in $(seq "$repeats"); do
    for s in "${sets[@]}"; do
      flags=$s
      [ "$s" = off ] && flags=""
      if [ -n "$dataset" ]; then
        input=(--dataset-path "$dataset")
      else
        input=(--random-input-len 64 --random-output-len "$output_len")
      fi
      # shellcheck disable=SC2086
      result=$("$bin" bench-offline --model-path "$model" --num-prompts "$n" "${input[@]}" $flags 2>&1)
      tps=$(echo "$result" | awk -F: '/Output token throughput/ { gsub(/ /, "", $2); print $2 }')
      accept=$(echo "$result" | awk -F: '/Accept length/ { gsub(/ /, "", $2); print $2 }')
      echo "requests=$n repeat=$rep setting=[$s] output_tok_s=$tps accept_length=${accept:--}"
    done
  done
done
