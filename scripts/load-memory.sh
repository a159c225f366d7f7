#!/usr/bin/env bash
# Memory a server holds once a checkpoint is loaded, as the system sees it: /proc/meminfo's
# MemAvailable before `serve` starts, less MemAvailable once it logs that it is ready (what the
# system can no longer give: the process's own memory and any shared memory it filled; the
# file's page cache stays available). Each file is loaded ROUNDS times in turn; the median drop is
# printed per file.
#   scripts/load-memory.sh [--bin BIN] ROUNDS MODEL...
# BIN defaults to this checkout's build/mlaserve (another build's binary measures its code).
# The host must be otherwise idle: another process's allocations count.
set -euo pipefail
bin=$(dirname "$0")/../build/mlaserve
if [[ ${1:-} == --bin ]]; then
  bin=$2
  shift 2
fi
rounds=${1:?usage: scripts/load-memory.sh [--bin BIN] ROUNDS MODEL...}
shift
avail_kb() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
declare -A drops=()
for round in $(seq 1 "$rounds"); do
  for model in "$@"; do
    port=$((20000 + RANDOM % 20000))
    before=$(avail_kb)
    "$bin" serve --model-path "$model" --port "$port" --log-level info >"$log" 2>&1 &
    pid=$!
    # Wait for the ready line (or the process's end: a failed load).
    until grep -q "The server is fired up and ready to roll!" "$log"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        cat "$log" >&2
        exit 1
      fi
      sleep 0.2
    done
    after=$(avail_kb)
    kill "$pid"
    wait "$pid" || true
    drop_gb=$(awk -v b="$before" -v a="$after" 'BEGIN {printf "%.3f", (b - a) * 1024 / 1e9}')
    echo "round $round $model: MemAvailable $((before / 1024)) -> $((after / 1024)) MiB, held $drop_gb GB"
    drops[$model]+="$drop_gb "
  done
done
for model in "$@"; do
  median=$(tr ' ' '\n' <<<"${drops[$model]}" | grep . | sort -g |
    awk '{v[NR] = $1} END {printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')
  echo "$model: held $median GB (median of $rounds)"
done
