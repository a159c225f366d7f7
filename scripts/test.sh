#!/usr/bin/env bash
# Builds mlaserve and runs every test (ctest over the GoogleTest suite, which starts the real binary).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build && ctest --output-on-failure -j "$(nproc)" "$@"
