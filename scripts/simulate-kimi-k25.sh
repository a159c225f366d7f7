#!/usr/bin/env bash
# The worked example of docs/simulate.md: Kimi-K2.5 (tests/fixtures/configs/kimi-k2.5.json, its
# int4 weights) on 8 x H200 (the built-in h200 profile), TP 8, regenerating ~88,000
# conversations, bf16 against fp8_e4m3 KV, at several --max-running-requests.
#   scripts/simulate-kimi-k25.sh [NUM_PROMPTS] [INPUT_LEN OUTPUT_LEN]
# Lengths: bench-serving's random dataset with --random-range-ratio 0, i.e. uniform in
# [1, INPUT_LEN] and [1, OUTPUT_LEN]; the defaults 450 and 400 give means of ~225 prompt and
# ~200 output tokens, the published means of ShareGPT as bench_serving samples it.
set -euo pipefail
cd "$(dirname "$0")/.."
prompts="${1:-88000}"
input_len="${2:-450}"
output_len="${3:-400}"
bin=./build/mlaserve
model=tests/fixtures/configs/kimi-k2.5.json
work="$(mktemp -d /tmp/simulate-kimi.XXXXXX)"
echo "plan (capacity per format, 141 GB per device, mem_fraction_static 0.88, TP 8):"
"$bin" plan --model-path "$model" --device-memory 141 --tp-size 8 --json "$work/plan.json" >/dev/null
jq -r '.formats[] | select(.format == "bf16" or .format == "fp8_e4m3") |
       "  \(.format): \(.max_total_num_tokens) tokens"' "$work/plan.json"
printf "%-9s %8s %12s %10s %10s %12s %10s %10s %10s %11s\n" kv "max-run" "KV tokens" "peak run" "mean run" \
  "out tok/s" "TPOT ms" "TTFT s" retracted "finish (h)"
for kv in bf16 fp8_e4m3; do
  for running in 256 1024 2048 4096; do
    "$bin" simulate --model-path "$model" --hardware h200 --tp-size 8 --kv-cache-dtype "$kv" \
      --max-running-requests "$running" --num-prompts "$prompts" --random-input-len "$input_len" \
      --random-output-len "$output_len" --random-range-ratio 0 --output-file "$work/$kv-$running.jsonl" \
      >/dev/null 2>"$work/$kv-$running.log"
    jq -r --arg kv "$kv" --arg running "$running" '
      [$kv, $running, .max_total_num_tokens, .max_running_requests_seen, (.mean_running_requests | round),
       (.output_throughput | round), (.mean_tpot_ms * 10 | round / 10), (.mean_ttft_ms / 1000 | . * 10 | round / 10),
       .retracted_requests, (.duration / 3600 | . * 100 | round / 100)] | @tsv' "$work/$kv-$running.jsonl" |
      while IFS=$'\t' read -r -a f; do
        printf "%-9s %8s %12s %10s %10s %12s %10s %10s %10s %11s\n" "${f[@]}"
      done
  done
done
echo "(files in $work)"
