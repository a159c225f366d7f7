#!/usr/bin/env bash
# The validation table of docs/simulate.md: each workload simulated on this host's calibrated
# profile and run for real (mlaserve serve + mlaserve bench-serving, the same flags and seed),
# side by side, with the prediction's error.
#   scripts/validate-simulate.sh MODEL_DIR [PORT]
# Calibrates first (simulate --hardware this-host --write-profile), then for each workload runs
# the simulation and the real benchmark. Prints one row per workload: output throughput, mean
# TPOT and mean TTFT, real and predicted, and the relative errors (targets: 10%, 10%, 20%).
# The KV-limited workload runs its own server with --max-total-tokens, so that it retracts.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: scripts/validate-simulate.sh MODEL_DIR [PORT]}"
port="${2:-30177}"
bin=./build/mlaserve
work="$(mktemp -d /tmp/validate-simulate.XXXXXX)"
server_pid=""
stop_server() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""; fi; }
trap stop_server EXIT

start_server() {  # extra serve flags...
  "$bin" serve --model-path "$model" --port "$port" --enable-metrics "$@" >"$work/serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    grep -q "The server is fired up and ready to roll" "$work/serve.log" && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 0.5
  done
  echo "validate-simulate: the server did not come up" >&2
  exit 1
}

# name | serve/simulate engine flags | workload flags
workloads=(
  "all-at-once|--max-total-tokens 65536|--num-prompts 16 --random-input-len 256 --random-output-len 64"
  "rate-1-per-s|--max-total-tokens 65536|--num-prompts 24 --random-input-len 256 --random-output-len 64 --request-rate 1"
  "retracting|--max-total-tokens 2048|--num-prompts 8 --random-input-len 128 --random-output-len 400"
)

profile="$work/this-host.json"
"$bin" simulate --model-path "$model" --hardware this-host --write-profile "$profile" --num-prompts 1 \
  --random-input-len 16 --random-output-len 4 >/dev/null 2>"$work/calibrate.log"
grep "this host's profile" "$work/calibrate.log" | sed 's/^.*\[mlaserve\] /calibration: /'

printf "%-12s %10s %10s %7s %9s %9s %7s %9s %9s %7s %10s\n" workload "out tok/s" predicted error \
  "TPOT ms" predicted error "TTFT ms" predicted error retracted
for w in "${workloads[@]}"; do
  IFS='|' read -r name engine_flags workload_flags <<<"$w"
  # shellcheck disable=SC2086
  "$bin" simulate --model-path "$model" --hardware "$profile" $engine_flags $workload_flags \
    --output-file "$work/sim-$name.jsonl" >/dev/null 2>&1
  # shellcheck disable=SC2086
  start_server $engine_flags
  # shellcheck disable=SC2086
  "$bin" bench-serving --port "$port" $workload_flags --disable-progress --output-file "$work/real-$name.jsonl" \
    >/dev/null 2>&1
  retracted=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^sglang:num_retracted_requests_total/ {print $2}')
  stop_server
  sim="$work/sim-$name.jsonl" real="$work/real-$name.jsonl"
  row=$(jq -n -r --slurpfile s "$sim" --slurpfile r "$real" --arg name "$name" --arg retracted "${retracted:-?}" '
    def err(p; m): if m == 0 then "n/a" else ((p - m) / m * 100 | . * 10 | round / 10 | tostring) + "%" end;
    $s[0] as $s | $r[0] as $r |
    [$name,
     ($r.output_throughput | . * 10 | round / 10), ($s.output_throughput | . * 10 | round / 10),
     err($s.output_throughput; $r.output_throughput),
     ($r.mean_tpot_ms | . * 10 | round / 10), ($s.mean_tpot_ms | . * 10 | round / 10),
     err($s.mean_tpot_ms; $r.mean_tpot_ms),
     ($r.mean_ttft_ms | . * 10 | round / 10), ($s.mean_ttft_ms | . * 10 | round / 10),
     err($s.mean_ttft_ms; $r.mean_ttft_ms),
     ($retracted + " / " + ($s.retracted_requests | tostring))] | @tsv')
  IFS=$'\t' read -r -a f <<<"$row"
  printf "%-12s %10s %10s %7s %9s %9s %7s %9s %9s %7s %10s\n" "${f[@]}"
done
echo "(retracted: real / predicted; files in $work)"
