#!/bin/bash
# A/B of the produce path's cost of the order of effects (issue 21), between two commits,
# rounds alternating, one single broker at a time:
#   benchmarks/ordering_ab.sh BEFORE_COMMIT AFTER_COMMIT [ROUNDS] [MESSAGES]
# Workloads (the AFTER tree's `yak bench produce`, librdkafka):
#   two:  --producers 2, 4 partitions, acks=all (linger 5 ms, batch 1 MiB)
#   idem: one idempotent producer, max.in.flight=5, linger.ms=0, 4 partitions, acks=all
#         (many small pipelined Produce requests per connection)
# Prints msg/s and the broker's CPU time per message per run.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY="$REPO/.venv/bin/python"
before=$1; after=$2; rounds=${3:-3}; n=${4:-400000}
work=$(mktemp -d /tmp/yak-ordering-ab-XXXX)
trap 'rm -rf "$work"' EXIT
for v in before after; do
  mkdir -p "$work/$v"
  git -C "$REPO" archive "${!v}" | tar -x -C "$work/$v"
done
for r in $(seq 1 "$rounds"); do
  for w in two idem; do
    for v in before after; do
      port=$(( 20000 + RANDOM % 20000 ))
      d=$(mktemp -d "$work/run-$v-XXXX")
      (cd "$work/$v" && exec "$PY" -m yak.broker.server --data-dir "$d/data" \
          --listen "127.0.0.1:$port" > "$d/out" 2> "$d/err") &
      bpid=$!
      for _ in $(seq 1 100); do grep -q "ready on" "$d/out" 2>/dev/null && break; sleep 0.1; done
      if [ "$w" = two ]; then
        args=(--producers 2 -p 4 --acks all -n "$n")
      else
        args=(--producers 1 -p 4 --acks all -n "$((n / 4))" --linger-ms 0
              -X enable.idempotence=true -X max.in.flight=5)
      fi
      (cd "$work/after" && "$PY" -c "from yak.cli.main import app; app()" bench produce \
          -b "127.0.0.1:$port" --broker-pid "$bpid" "${args[@]}" --no-progress --json \
          -o "$d/result.json" > "$d/bench.txt" 2>&1) || { cat "$d/bench.txt"; }
      "$PY" - "$d/result.json" "$r" "$w" "$v" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
b = d.get("broker") or {}
print(f"round {sys.argv[2]} {sys.argv[3]:4} {sys.argv[4]:6}: {d['msgs_per_s']:>10} msg/s, "
      f"broker {b.get('cpu_us_per_msg')} us/msg")
PYEOF
      kill "$bpid"; wait "$bpid" 2>/dev/null || true
    done
  done
done
