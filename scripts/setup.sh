#!/usr/bin/env bash
# Installs what building and testing mlaserve need, from Debian's packages, when missing.
# Training the bundled model needs more: tools/train/setup.sh.
set -euo pipefail
pkgs=(cmake g++ ninja-build pkg-config ccache libpcre2-dev nlohmann-json3-dev libgtest-dev libsqlite3-dev
      libopenmpi-dev openmpi-bin
      jq  # scripts/validate-simulate.sh
      clang libclang-rt-14-dev  # clang's libFuzzer and sanitizer runtimes: scripts/fuzz.sh
      chromium)  # the dashboard's browser test (tests/node/dashboard.mjs, driven by playwright-core)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm run the tests against third-party clients and the reference Jinja renderer. Any
# install will do (NodeSource's nodejs carries its own npm, which Debian's npm would conflict with);
# without one, Debian's.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# npm packages for tests: openai (a real third-party client against the server),
# @huggingface/jinja (the reference renderer for chat templates) and playwright-core (drives
# Debian's chromium for the dashboard test; it downloads no browser).
node_tests="$(cd "$(dirname "$0")/.." && pwd)/tests/node"
if [ ! -d "$node_tests/node_modules/openai" ] || [ ! -d "$node_tests/node_modules/@huggingface/jinja" ] ||
   [ ! -d "$node_tests/node_modules/playwright-core" ]; then
  if ! (cd "$node_tests" && npm install --no-audit --no-fund --silent); then
    echo "setup: npm install in tests/node failed; without it the openai client and chat template reference" \
         "tests are skipped, so setup stops here" >&2
    exit 1
  fi
fi
