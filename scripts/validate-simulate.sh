#!/usr/bin/env bash
# The validation table of docs/simulate.md: each workload simulated on this host's calibrated
# profile and run for real (mlaserve serve + mlaserve bench-serving, the same flags and seed),
# side by side, with the prediction's error.
#   scripts/validate-simulate.sh MODEL_DIR [ROUNDS] [PORT]
# A round calibrates (simulate --hardware this-host --write-profile), then for each workload runs
# the simulation on that round's profile and the real benchmark. It prints one row per workload
# and round: output throughput, mean TPOT and mean TTFT, real and predicted, the relative errors
# (targets: 10%, 10%, 20%) and the retractions. After ROUNDS rounds (default 3) it prints, per
# workload, the median of the real figures against the median of the predictions: the host's
# speed moves 10-40% between minutes, so one real run against one calibration measures the host
# as much as the simulator; the medians and the rounds' spread are both printed.
# The KV-limited workload runs its own server with --max-total-tokens, so that it retracts.
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:?usage: scripts/validate-simulate.sh MODEL_DIR [ROUNDS] [PORT]}"
rounds="${2:-3}"
port="${3:-30177}"
bin=./build/mlaserve
work="$(mktemp -d /tmp/validate-simulate.XXXXXX)"
server_pid=""
stop_server() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""; fi; }
trap stop_server EXIT

start_server() {  # log file, extra serve flags...
  local log="$1"
  shift
  "$bin" serve --model-path "$model" --port "$port" --enable-metrics "$@" >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    grep -q "The server is fired up and ready to roll" "$log" && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
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

header() {
  printf "%-12s %5s %10s %10s %7s %9s %9s %7s %9s %9s %7s %10s\n" workload round "out tok/s" predicted error \
    "TPOT ms" predicted error "TTFT ms" predicted error retracted
}
# One row from a simulation's and a real run's JSON (or the medians' objects); $4: the retractions.
row() {  # name round sim-json real-json retracted
  local line
  line=$(jq -n -r --argjson s "$3" --argjson r "$4" --arg name "$1" --arg round "$2" --arg retracted "$5" '
    def err(p; m): if m == 0 then "n/a" else ((p - m) / m * 100 | . * 10 | round / 10 | tostring) + "%" end;
    def one(x): x * 10 | round / 10;
    [$name, $round,
     one($r.output_throughput), one($s.output_throughput), err($s.output_throughput; $r.output_throughput),
     one($r.mean_tpot_ms), one($s.mean_tpot_ms), err($s.mean_tpot_ms; $r.mean_tpot_ms),
     one($r.mean_ttft_ms), one($s.mean_ttft_ms), err($s.mean_ttft_ms; $r.mean_ttft_ms),
     $retracted] | @tsv')
  local f
  IFS=$'\t' read -r -a f <<<"$line"
  printf "%-12s %5s %10s %10s %7s %9s %9s %7s %9s %9s %7s %10s\n" "${f[@]}"
}

header
for round in $(seq "$rounds"); do
  profile="$work/this-host-$round.json"
  "$bin" simulate --model-path "$model" --hardware this-host --write-profile "$profile" --num-prompts 1 \
    --random-input-len 16 --random-output-len 4 >/dev/null 2>"$work/calibrate-$round.log"
  grep "this host's profile" "$work/calibrate-$round.log" | sed "s/^.*\[mlaserve\] /calibration $round: /" >&2
  for w in "${workloads[@]}"; do
    IFS='|' read -r name engine_flags workload_flags <<<"$w"
    # shellcheck disable=SC2086
    "$bin" simulate --model-path "$model" --hardware "$profile" $engine_flags $workload_flags \
      --output-file "$work/sim-$name.jsonl" >/dev/null 2>&1
    # shellcheck disable=SC2086
    start_server "$work/serve-$name-$round.log" $engine_flags
    # shellcheck disable=SC2086
    "$bin" bench-serving --port "$port" $workload_flags --disable-progress --output-file "$work/real-$name.jsonl" \
      >/dev/null 2>&1
    retracted=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^sglang:num_retracted_requests_total/ {print $2}')
    stop_server
    echo "${retracted:-?}" >>"$work/retracted-$name.txt"
    predicted_retracted=$(tail -n 1 "$work/sim-$name.jsonl" | jq .retracted_requests)
    echo "$predicted_retracted" >>"$work/predicted-retracted-$name.txt"
    row "$name" "$round" "$(tail -n 1 "$work/sim-$name.jsonl")" "$(tail -n 1 "$work/real-$name.jsonl")" \
      "${retracted:-?} / $predicted_retracted"
  done
done

# The medians over the rounds, and the spread of the real runs (max / min - 1).
if [ "$rounds" -gt 1 ]; then
  echo
  echo "medians over $rounds rounds (real spread: max/min - 1 of the rounds' real figures)"
  header
  for w in "${workloads[@]}"; do
    IFS='|' read -r name _ _ <<<"$w"
    median='def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;'
    pick='{output_throughput: (map(.output_throughput) | median), mean_tpot_ms: (map(.mean_tpot_ms) | median),
           mean_ttft_ms: (map(.mean_ttft_ms) | median)}'
    sim=$(jq -s -c "$median $pick" "$work/sim-$name.jsonl")
    real=$(jq -s -c "$median $pick" "$work/real-$name.jsonl")
    spread=$(jq -s -r 'def s(k): map(.[k]) | (max / min - 1) * 100 | round | tostring + "%";
      "throughput " + s("output_throughput") + ", TPOT " + s("mean_tpot_ms") + ", TTFT " + s("mean_ttft_ms")' \
      "$work/real-$name.jsonl")
    row "$name" median "$sim" "$real" \
      "$(paste -sd, "$work/retracted-$name.txt") / $(paste -sd, "$work/predicted-retracted-$name.txt")"
    echo "             real spread: $spread"
  done
fi
echo "(retracted: real / predicted; files in $work)"
