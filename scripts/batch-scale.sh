#!/usr/bin/env bash
# Client start-up figures of `mlaserve batch` at scale, for docs/batch.md: peak RSS and time to
# the first request, for a dry run, a fresh job, a progress DB rebuilt from an 88%-done output,
# and a resume of that 88%-done job. N synthetic ShareGPT records of ~1.5 KB (as the issue's
# 100k-line, 151 MB file) and, for 88% of them, output lines as a run writes them.
# No server is needed: the endpoint is a closed port, so each run, after all of its start-up work,
# pauses at its first request ("no server answers /health"); the time to that line is reported,
# then the run is stopped with SIGTERM (the peak RSS is the whole run's).
# Usage: scripts/batch-scale.sh N [DIR]   (DIR defaults to /tmp/mlaserve-batch-scale-N; ~3 KB/record)
set -euo pipefail
N=$1
DIR=${2:-/tmp/mlaserve-batch-scale-$N}
BIN=$(cd "$(dirname "$0")/.." && pwd)/build/mlaserve
mkdir -p "$DIR"
cd "$DIR"
rm -f out.jsonl out.jsonl.*
if [ ! -f in.jsonl ] || [ "$(wc -l < in.jsonl)" != "$N" ]; then
  python3 - "$N" <<'PY'
import json, sys
n = int(sys.argv[1])
done = n * 88 // 100
words = "thou art more lovely and more temperate rough winds do shake the darling buds of may ".split()
def text(i, k):
    return " ".join(words[(i * 7 + j * k) % len(words)] for j in range(k))
with open("in.jsonl", "w") as fin, open("done.jsonl", "w") as fout:
    for i in range(n):
        conv = [{"from": "human", "value": text(i, 60)}, {"from": "gpt", "value": text(i + 1, 70)},
                {"from": "human", "value": text(i + 2, 40)}, {"from": "gpt", "value": text(i + 3, 70)}]
        rec = {"id": "rec-%d" % i, "conversations": conv}
        fin.write(json.dumps(rec, separators=(",", ":")) + "\n")
        if i < done:
            seg = [{"tokens": 200, "kv_cache_dtype": "bf16", "model": "bard", "server_id": "srv-0"}]
            out = dict(rec, conversations=[dict(c, value=text(i + 5, 70)) if c["from"] == "gpt" else c for c in conv])
            out["turns"] = [{"prompt_tokens": 90, "completion_tokens": 200, "finish_reason": "length", "segments": seg},
                            {"prompt_tokens": 400, "completion_tokens": 200, "finish_reason": "length", "segments": seg}]
            out["usage"] = {"prompt_tokens": 490, "completion_tokens": 400}
            out["settings"] = {"model": "bard", "kv_cache_dtype": "bf16", "seed": 0, "temperature": 0.0, "top_p": 1.0,
                               "max_new_tokens": 256}
            fout.write(json.dumps(out, separators=(",", ":")) + "\n")
PY
fi
measure() {
  local label=$1
  shift
  rm -f log.txt time.txt
  local t0 secs
  t0=$(date +%s.%N)
  /usr/bin/time -f "%e %M" -o time.txt "$BIN" batch "$@" >log.txt 2>&1 &
  local timer=$!
  until grep -q "no server answers /health" log.txt 2>/dev/null || ! kill -0 "$timer" 2>/dev/null; do sleep 0.01; done
  secs=$(echo "$(date +%s.%N) - $t0" | bc -l)
  local client
  client=$(pgrep -P "$timer" || true)
  [ -n "$client" ] && kill -TERM "$client"
  wait "$timer" || true
  local kib
  kib=$(tail -n 1 time.txt | cut -d' ' -f2)
  grep -q "no server answers /health" log.txt || secs=$(tail -n 1 time.txt | cut -d' ' -f1)  # it ended by itself
  printf "%-40s %7.2f s  %7.1f MiB peak RSS\n" "$label" "$secs" "$(echo "$kib / 1024" | bc -l)"
}
run=(--input in.jsonl --output out.jsonl --endpoint http://127.0.0.1:1 --max-new-tokens 256)
echo "$N records; input $(du -h in.jsonl | cut -f1); $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
measure "dry run" --dry-run --input in.jsonl
measure "fresh job: index + first request" "${run[@]}"
rm -f out.jsonl out.jsonl.*
cp done.jsonl out.jsonl
measure "DB rebuilt from an 88%-done output" "${run[@]}"
measure "resume of the 88%-done job" "${run[@]}"
grep -q "rebuilt\|nothing\|endpoint" log.txt || cat log.txt
echo "output $(du -h out.jsonl | cut -f1), progress DB $(du -ch out.jsonl.progress.db* | tail -1 | cut -f1)"
