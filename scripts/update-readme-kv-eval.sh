#!/usr/bin/env bash
# Regenerates the kv-eval table in README.md (between the kv-eval markers) from the command's
# own output, so the numbers there always come from `mlaserve kv-eval` on the bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
cmd=(./build/mlaserve kv-eval --model-path models/shakespeare-mla --json docs/kv-eval-shakespeare.json)
table=$("${cmd[@]}")
replace_block() {
  local begin='<!-- kv-eval:begin -->' end='<!-- kv-eval:end -->'
  BODY="$1" awk -v b="$begin" -v e="$end" '
    $0 == b { print; print ENVIRON["BODY"]; skip = 1; next }
    $0 == e { skip = 0 }
    !skip { print }' README.md > README.md.tmp
  mv README.md.tmp README.md
}
replace_block "$(printf '```\n$ %s\n```\n%s' "${cmd[*]}" "$table")"
echo "README.md: kv-eval table updated"
