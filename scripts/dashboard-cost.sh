#!/usr/bin/env bash
# What an open dashboard costs the engine: bench-serving against the bundled model's server,
# alternating rounds without and with pollers of GET /dashboard/data (POLLERS clients, each one
# curl process on one kept-alive connection polling 5 times a second: 5 x POLLERS open pages'
# worth; a process per poll would measure fork and exec on a 2-core host, not the server),
# output tokens/s per round.
#   scripts/dashboard-cost.sh [ROUNDS=3] [POLLERS=2] [PORT=31777]
set -euo pipefail
rounds=${1:-3}
pollers=${2:-2}
port=${3:-31777}
bin=$(cd "$(dirname "$0")/.." && pwd)/build/mlaserve
model=$(cd "$(dirname "$0")/.." && pwd)/models/shakespeare-mla
log=$(mktemp)
"$bin" serve --model-path "$model" --port "$port" --max-total-tokens 65536 >"$log" 2>&1 &
server=$!
poll_pids=()
cleanup() { kill "${poll_pids[@]}" 2>/dev/null || true; kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT
until grep -q "ready to roll" "$log"; do kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }; sleep 0.2; done
bench() {
  "$bin" bench-serving --port "$port" --num-prompts 64 --random-input-len 128 --random-output-len 256 \
    --max-concurrency 16 --disable-progress 2>&1 | grep -E "Output token throughput" | tr -s ' '
}
for round in $(seq 1 "$rounds"); do
  echo "round $round, no dashboard: $(bench)"
  for _ in $(seq 1 "$pollers"); do
    curl -s --rate 5/s -o /dev/null "http://127.0.0.1:$port/dashboard/data?poll=[1-100000]" &
    poll_pids+=($!)
  done
  echo "round $round, $pollers pollers at 5/s: $(bench)"
  kill "${poll_pids[@]}" 2>/dev/null || true
  wait "${poll_pids[@]}" 2>/dev/null || true
  poll_pids=()
done
