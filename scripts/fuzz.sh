#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (clang, AddressSanitizer + UndefinedBehaviorSanitizer,
# build-fuzz/) and runs each for SECONDS (default 60). First each target replays its regression
# inputs (fuzz/regressions/<target>/); then it fuzzes from its seeds (fuzz/seeds/<target>/, written
# once by fuzz/make_corpus.py and committed: nothing here needs Python) and the corpus earlier runs
# grew (fuzz/corpus/<target>/, not committed). Crash, timeout and out-of-memory inputs
# go to fuzz/crashes/<target>/. Prints a table (executions, coverage) and exits non-zero when any
# target failed. docs/fuzzing.md says more.
#
#   scripts/fuzz.sh [-j JOBS] [--no-build] [SECONDS] [TARGET...]
#     -j JOBS     targets run at once (default: FUZZ_JOBS, else 1)
#     --no-build  use build-fuzz/ as it is
#     TARGET      run only these (names as in fuzz/, e.g. jinja_fuzzer); default: all
#   FUZZ_TIMEOUT  seconds one input may take before it counts as a hang (default 25)
#   FUZZ_RSS_MB   memory limit in MiB (default 2048)
set -euo pipefail
cd "$(dirname "$0")/.."

jobs="${FUZZ_JOBS:-1}"
build=1
seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs="$2"; shift 2 ;;
    -j*) jobs="${1#-j}"; shift ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    [0-9]*) seconds="$1"; shift ;;
    *) targets+=("$1"); shift ;;
  esac
done
timeout_s="${FUZZ_TIMEOUT:-25}"
rss_mb="${FUZZ_RSS_MB:-2048}"

all_targets=()
for f in fuzz/*_fuzzer.cc; do all_targets+=("$(basename "$f" .cc)"); done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

# Builds share one lock with the other builds on this machine (a no-op where there are none).
lock=(); command -v flock >/dev/null && lock=(flock "${MLASERVE_BUILD_LOCK:-/tmp/mlaserve-build.lock}")
if [ "$build" = 1 ]; then
  bash scripts/setup.sh
  command -v clang++ >/dev/null || { echo "fuzz: clang++ is missing (scripts/setup.sh installs it)" >&2; exit 1; }
  [ -f build-fuzz/build.ninja ] || cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER=clang++ -DMLASERVE_FUZZ=ON >/dev/null
  "${lock[@]}" cmake --build build-fuzz --target fuzz -j "$(nproc)"
fi


# The dictionary each target uses (fuzz/dict/).
dict_of() {
  case "$1" in
    http_request_fuzzer) echo fuzz/dict/http.dict ;;
    jinja_fuzzer) echo fuzz/dict/jinja.dict ;;
    sse_fuzzer) echo "" ;;
    *) echo fuzz/dict/json.dict ;;
  esac
}

logs=build-fuzz/logs
mkdir -p "$logs"

# Runs one target; its outcome goes to $logs/<target>.result.
run_target() {
  local t="$1" bin="build-fuzz/fuzz/$1" log="$logs/$1.log"
  local result="ok"
  mkdir -p "fuzz/corpus/$t" "fuzz/crashes/$t"
  : >"$log"
  if [ ! -x "$bin" ]; then
    echo "missing" >"$logs/$t.result"
    return
  fi
  local flags=(-rss_limit_mb="$rss_mb" -timeout="$timeout_s" -artifact_prefix="fuzz/crashes/$t/")
  # Regressions: every input once (libFuzzer runs the files given as arguments).
  local regressions=()
  if [ -d "fuzz/regressions/$t" ]; then
    while IFS= read -r -d '' f; do regressions+=("$f"); done < <(find "fuzz/regressions/$t" -type f -print0)
  fi
  if [ ${#regressions[@]} -gt 0 ]; then
    if ! "$bin" "${flags[@]}" "${regressions[@]}" >>"$log" 2>&1; then result="regression"; fi
  fi
  if [ "$result" = ok ] && [ "$seconds" -gt 0 ]; then
    local dict; dict="$(dict_of "$t")"
    local dict_flag=(); [ -n "$dict" ] && dict_flag=(-dict="$dict")
    if ! "$bin" "${flags[@]}" "${dict_flag[@]}" -max_total_time="$seconds" -print_final_stats=1 \
        "fuzz/corpus/$t" "fuzz/seeds/$t" >>"$log" 2>&1; then
      result="crash"
    fi
  fi
  echo "$result" >"$logs/$t.result"
}

echo "fuzz: ${#targets[@]} targets, ${seconds} s each, $jobs at a time; logs in $logs/"
running=0
for t in "${targets[@]}"; do
  rm -f "$logs/$t.result"
  run_target "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=0
printf '%-24s %-11s %12s %8s %8s  %s\n' target result executions cov ft crashes
for t in "${targets[@]}"; do
  log="$logs/$t.log"
  result="$(cat "$logs/$t.result" 2>/dev/null || echo "not run")"
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" 2>/dev/null | tail -1 | grep -o '[0-9]*$' || true)"
  cov="$(grep -o 'cov: [0-9]*' "$log" 2>/dev/null | tail -1 | grep -o '[0-9]*' || true)"
  ft="$(grep -o 'ft: [0-9]*' "$log" 2>/dev/null | tail -1 | grep -o '[0-9]*' || true)"
  crashes="$(find "fuzz/crashes/$t" -type f 2>/dev/null | wc -l)"
  printf '%-24s %-11s %12s %8s %8s  %s\n' "$t" "$result" "${execs:--}" "${cov:--}" "${ft:--}" "$crashes"
  if [ "$result" != ok ]; then
    failed=1
    echo "  $log:" >&2
    grep -E 'ERROR: |SUMMARY: |runtime error|Test unit written to|^artifact_prefix' "$log" | head -8 | sed 's/^/    /' >&2 || true
  fi
done
if [ "$failed" != 0 ]; then
  echo "fuzz: FAILED (crashing inputs in fuzz/crashes/<target>/; after fixing, keep each as fuzz/regressions/<target>/<name>)" >&2
  exit 1
fi
echo "fuzz: all targets passed"
