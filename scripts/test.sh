#!/usr/bin/env bash
# Builds mlaserve and runs every test (ctest over the GoogleTest suite, which starts the real binary).
#   scripts/test.sh [CTEST_ARGS...]             build/, the normal build
#   scripts/test.sh --sanitize [CTEST_ARGS...]  build-asan/: the binary and the tests built with
#       AddressSanitizer + UndefinedBehaviorSanitizer (-O1 -g, any UB aborts). Every process's
#       sanitizer reports go to build-asan/sanitizer-logs/; the run fails if there is any, even
#       from a server whose exit status no test looks at. Leaks inside third-party libraries
#       (OpenMPI) are suppressed by tests/sanitize/lsan.supp.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--sanitize" ]; then
  bash scripts/build.sh
  cd build && ctest --output-on-failure -j "$(nproc)" "$@"
  exit
fi
shift
bash scripts/setup.sh
[ -f build-asan/build.ninja ] || cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLASERVE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$(nproc)"
logs="$PWD/build-asan/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:strict_string_checks=1:check_initialization_order=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitize/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
status=0
(cd build-asan && ctest --output-on-failure -j "$(nproc)" "$@") || status=$?
if [ -n "$(ls -A "$logs")" ]; then
  echo "test --sanitize: sanitizer reports in $logs:" >&2
  for f in "$logs"/*; do echo "== $f" >&2; head -60 "$f" >&2; done
  status=1
fi
exit "$status"
