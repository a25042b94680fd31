#!/usr/bin/env bash
# Issue 28's RF=1/RF=3 table and sendfile consume A/B on the lent 16-core device machine.
#
#   [BEFORE=COMMIT] benchmarks/device_rf.sh prepare   # here: wheels, etcd, tree of HEAD
#   benchmarks/device_rf.sh run [ARGS...]    # there (or here): install, run, results in $OUT
#
# The device machine has Python 3.12 with many packages but not Yak's own needs, no etcd
# and no network, and it runs a copy of the working tree, other helpers' uncommitted edits
# included. So `prepare` (on the development machine) puts what it needs in two ignored
# folders that the call names in `carry`:
#   .whl/     the wheels `yak serve --metadata etcd://` and the confluent-kafka producers
#             import that the device lacks or has at another version (found by listing
#             sys.modules of a running `yak serve`), pinned to pyproject.toml / the venv,
#             built for CPython 3.12 x86-64;
#   .devbin/  etcd.gz (the Debian etcd, compressed: the call carries at most 64 MiB), and
#             tree/, `git archive HEAD` of yak/ and the two benchmark modules it reuses,
#             with tree/COMMIT, so the brokers run exactly one commit; with BEFORE set,
#             before/, that commit's yak/ (the issue's 2ccc1c9, say), run for a few points
#             in the same run (device_rf.py --before).
# `run` installs the wheels into $SITE (/tmp/site), unpacks etcd, and runs
# benchmarks/device_rf.py (ARGS go to it) with its log teed to $OUT/log.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true

WHEELS=(
  # pyproject.toml's pins
  kio==0.6.5 confluent-kafka==2.16.1 cramjam==2.14.0 crc32c==2.9.post0 uvloop==0.23.0
  typer==0.29.1 rich==15.0.0 psutil==7.2.2 prometheus_client==0.26.0 sniffio==1.3.1
  obstore==0.12.1 scramp==1.5.0 hypothesis==6.155.2
  # their needs, at the venv's versions (pydantic: yak.gateway's models, imported by serve)
  asn1crypto==1.5.1 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0
  typing-inspection==0.4.5 typing_extensions==4.16.0 annotated-doc==0.0.7 tzdata==2026.6
)

case "$mode" in
prepare)
  PY=${PY:-.venv/bin/python}
  for p in /.whl/ /.devbin/; do
    grep -qxF "$p" .git/info/exclude 2>/dev/null || echo "$p" >>.git/info/exclude
  done
  mkdir -p .whl .devbin
  plats=()
  for n in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux2010 \
           manylinux_2_12 manylinux_2_5 manylinux1; do
    plats+=(--platform "${n}_x86_64")
  done
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${plats[@]}" -d .whl "${WHEELS[@]}" 2>&1 | grep -v '^WARNING' || true
  etcd=${YAK_ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
  gzip -9 -c "$etcd" >.devbin/etcd.gz
  rm -rf .devbin/tree && mkdir -p .devbin/tree
  git archive HEAD yak benchmarks/cluster_bench.py benchmarks/replication_rf.py \
    | tar -x -C .devbin/tree
  git log -1 --format='%H %cI %s' >.devbin/tree/COMMIT
  echo "tree: $(cat .devbin/tree/COMMIT)"
  rm -rf .devbin/before
  if [ -n "${BEFORE:-}" ]; then
    mkdir -p .devbin/before
    git archive "$BEFORE" yak | tar -x -C .devbin/before
    git log -1 --format='%H %cI %s' "$BEFORE" >.devbin/before/COMMIT
    echo "before: $(cat .devbin/before/COMMIT)"
  fi
  echo "travels (tracked + untracked-not-ignored + carried), must stay under 64 MiB:"
  { git ls-files -z; git ls-files -z --others --exclude-standard; } \
    | xargs -0 du -cb 2>/dev/null | tail -1
  du -cb .whl .devbin | tail -1
  ;;
run)
  PY=${PY:-python3}
  SITE=${SITE:-/tmp/site}
  OUT=${OUT:-/tmp/device-rf-out}
  mkdir -p "$OUT"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  # compile once, in parallel, so the first broker's start is not its imports' compilation
  # (cluster_bench gives a broker 60 s to be ready)
  "$PY" -m compileall -q -j 0 "$SITE" .devbin >/dev/null || true
  gunzip -c .devbin/etcd.gz >/tmp/yak-etcd && chmod +x /tmp/yak-etcd
  export YAK_ETCD=/tmp/yak-etcd
  echo "commit $(cat .devbin/tree/COMMIT)"
  before=()
  [ -d .devbin/before ] && before=(--before .devbin/before)
  "$PY" benchmarks/device_rf.py --tree .devbin/tree --out "$OUT" "${before[@]}" "$@" 2>&1 \
    | tee "$OUT/log.txt"
  ;;
*)
  echo "usage: benchmarks/device_rf.sh prepare | run [device_rf.py args]" >&2
  exit 2
  ;;
esac
