#!/usr/bin/env bash
# Memory a server holds once a checkpoint is loaded, as the system sees it: /proc/meminfo's
# MemAvailable before `serve` starts, less MemAvailable once it logs that it is ready (what the
# system can no longer give: the process's own memory and any shared memory it filled; the
# file's page cache stays available), and its largest drop on the way (the load's peak, sampled
# every 50 ms). Each file is loaded ROUNDS times in turn; the medians are printed per file.
#   scripts/load-memory.sh [--bin BIN] ROUNDS MODEL...
# BIN defaults to this checkout's build/mlaserve (another build's binary measures its code).
# The host must be otherwise idle: another process's allocations count. LOAD_LIMIT_S (900): the
# longest a load may take.
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
pid=
# A server still running when the script ends (interrupted, an error, the time limit) is stopped.
trap 'if [[ -n $pid ]]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; fi; rm -f "$log"' EXIT
load_limit_s=${LOAD_LIMIT_S:-900}  # a load that takes longer is reported as failed
declare -A drops=() peaks=()
for round in $(seq 1 "$rounds"); do
  for model in "$@"; do
    port=$((20000 + RANDOM % 20000))
    before=$(avail_kb)
    "$bin" serve --model-path "$model" --port "$port" --log-level info >"$log" 2>&1 &
    pid=$!
    # Wait for the ready line (or the process's end: a failed load), sampling MemAvailable's
    # lowest point on the way (the load's peak, to the sampling's 50 ms).
    lowest=$before
    start_s=$SECONDS
    until grep -q "The server is fired up and ready to roll!" "$log"; do
      if ! kill -0 "$pid" 2>/dev/null || (( SECONDS - start_s > load_limit_s )); then
        cat "$log" >&2
        echo "load-memory.sh: $model: the server ended or was not ready within ${load_limit_s} s" >&2
        exit 1
      fi
      now=$(avail_kb)
      (( now < lowest )) && lowest=$now
      sleep 0.05
    done
    after=$(avail_kb)
    (( after < lowest )) && lowest=$after
    kill "$pid"
    wait "$pid" || true
    pid=
    drop_gb=$(awk -v b="$before" -v a="$after" 'BEGIN {printf "%.3f", (b - a) * 1024 / 1e9}')
    peak_gb=$(awk -v b="$before" -v a="$lowest" 'BEGIN {printf "%.3f", (b - a) * 1024 / 1e9}')
    echo "round $round $model: MemAvailable $((before / 1024)) -> $((after / 1024)) MiB, held $drop_gb GB, peak $peak_gb GB"
    drops[$model]+="$drop_gb "
    peaks[$model]+="$peak_gb "
  done
done
median() {
  tr ' ' '\n' | grep . | sort -g |
    awk '{v[NR] = $1} END {printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
for model in "$@"; do
  echo "$model: held $(median <<<"${drops[$model]}") GB, peak while loading $(median <<<"${peaks[$model]}") GB" \
    "(medians of $rounds)"
done
