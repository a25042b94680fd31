#!/bin/bash
# A/B of a single broker's e2e latency at 10k msg/s with write.caching=false (acks=all waits
# for fdatasync), between two commits, rounds alternating, one broker at a time.
#   benchmarks/pipelining_ab.sh BEFORE_COMMIT AFTER_COMMIT [ROUNDS] [SECONDS]
# Each commit is exported clean (git archive) into a temporary directory; the benchmark
# client is the AFTER tree's `yak bench e2e`. Prints p50/p99, msg/s reached, broker CPU per
# message and the other processes' CPU (% of one core) per run.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY="$REPO/.venv/bin/python"
before=$1; after=$2; rounds=${3:-2}; secs=${4:-20}
work=$(mktemp -d /tmp/yak-pipelining-ab-XXXX)
trap 'rm -rf "$work"' EXIT
for v in before after; do
  mkdir -p "$work/$v"
  git -C "$REPO" archive "${!v}" | tar -x -C "$work/$v"
done
for r in $(seq 1 "$rounds"); do
  for v in before after; do
    port=$(( 20000 + RANDOM % 20000 ))
    d=$(mktemp -d "$work/run-$v-XXXX")
    (cd "$work/$v" && exec "$PY" -m yak.broker.server --data-dir "$d/data" \
        --listen "127.0.0.1:$port" > "$d/out" 2> "$d/err") &
    bpid=$!
    for _ in $(seq 1 100); do grep -q "ready on" "$d/out" 2>/dev/null && break; sleep 0.1; done
    (cd "$work/after" && "$PY" -c "from yak.cli.main import app; app()" bench e2e \
        -b "127.0.0.1:$port" --rate 10000 -d "$secs" --size 100 -c write.caching=false \
        --fetch-wait-ms 5 --json -o "$d/result.json" > "$d/bench.txt" 2>&1) || true
    "$PY" - "$d/result.json" "$r" "$v" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
lat = d["latency_ms"]
print(f"round {sys.argv[2]} {sys.argv[3]}: p50 {lat['p50']} ms, p99 {lat['p99']} ms, "
      f"{d['msgs_per_s']} msg/s, broker {d['broker']['cpu_us_per_msg']} us/msg, "
      f"other CPU {d['other_cpu_pct']}%")
PYEOF
    kill "$bpid"; wait "$bpid" 2>/dev/null || true
  done
done
