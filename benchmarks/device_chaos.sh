#!/usr/bin/env bash
# Issue 27's availability numbers for kill and pause on the lent 16-core device machine:
# `yak chaos run -n 3 --duration 240 --faults kill,pause --seed 7`, away from the shared
# 2-core machine whose load (8 sessions) decides how long a broker's session survives.
#
#   benchmarks/device_chaos.sh prepare            # here: wheels, etcd, tree of HEAD
#   benchmarks/device_chaos.sh run [ARGS...]      # there (or here): install, run, $OUT
#
# Modelled on benchmarks/device_rf.sh. The device has Python 3.12, root, no network, and
# runs a copy of the working tree (other helpers' uncommitted edits included), so
# `prepare` puts what the run needs in two ignored folders the `run` call carries:
#   .whl-chaos/     every wheel the chaos driver and its brokers import, at the venv's
#                   versions, for CPython $PYVER (3.12) x86-64, dependencies included: the
#                   run installs them with --no-deps into an empty target, so it needs
#                   nothing the device may or may not have. Found by importing the driver
#                   and a broker in the venv and mapping sys.modules to distributions, then
#                   proved by a run in an empty target with `python -I` (see the doc of
#                   issue 27 in docs/reliability.md). matplotlib and its closure (the
#                   report's timeline.png) only with MPL=1: it is ~40 MB with numpy and
#                   pillow, so with etcd and the tree (36 MB) it passes the call's 64 MiB.
#                   Without it a device that lacks matplotlib still gives summary.md and
#                   summary.json, which the report writes before the PNG (see `run`);
#   .devbin-chaos/  etcd.gz (compressed) and tree/, `git archive HEAD` of yak/, with
#                   tree/COMMIT, so the brokers and the driver run exactly one commit.
# `run` installs the wheels into $SITE (/tmp/site-chaos), unpacks etcd, runs the chaos
# command (ARGS are appended to it, e.g. --duration 60) with its log in $OUT/log.txt, and
# copies summary.md and summary.json (and timeline.png when drawn) to $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true

WHL=${WHL:-.whl-chaos}
DEVBIN=${DEVBIN:-.devbin-chaos}

WHEELS=(
  # pyproject.toml's pins (those a broker or the chaos driver imports)
  kio==0.6.5 confluent-kafka==2.16.1 cramjam==2.14.0 crc32c==2.9.post0 uvloop==0.23.0
  typer==0.29.1 rich==15.0.0 psutil==7.2.2 prometheus_client==0.26.0 sniffio==1.3.1
  obstore==0.12.1 scramp==1.5.0 httpx==0.28.1
  # their needs, at the venv's versions
  hypothesis==6.155.2 sortedcontainers==2.4.0 asn1crypto==1.5.1 typing_extensions==4.16.0
  annotated-doc==0.0.7 tzdata==2026.6 click==8.5.1 shellingham==1.5.4
  markdown-it-py==4.3.0 mdurl==0.1.2 Pygments==2.21.0
  httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 idna==3.20 certifi==2026.10.19.post1
  # typer's option parsing imports pydantic at the first command (found by the empty-target
  # run: sys.modules of an imported CLI does not show it)
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
)
MPL_WHEELS=(
  matplotlib==3.11.2 numpy==2.4.6 contourpy==1.3.3 cycler==0.12.1 fonttools==4.68.0
  kiwisolver==1.5.1 packaging==26.4 pillow==13.0.0 pyparsing==3.3.3
  python-dateutil==4.0.0 six==1.17.0
)

case "$mode" in
prepare)
  PY=${PY:-.venv/bin/python}
  PYVER=${PYVER:-3.12}
  for p in "$WHL" "$DEVBIN"; do  # a folder in the checkout stays out of git
    case "$p" in /*) continue ;; esac
    grep -qxF "/$p/" .git/info/exclude 2>/dev/null || echo "/$p/" >>.git/info/exclude
  done
  rm -rf "$WHL" && mkdir -p "$WHL" "$DEVBIN"
  plats=()
  for n in manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux2010 \
           manylinux_2_12 manylinux_2_5 manylinux1; do
    plats+=(--platform "${n}_x86_64")
  done
  wheels=("${WHEELS[@]}")
  [ "${MPL:-0}" = 1 ] && wheels+=("${MPL_WHEELS[@]}")
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" \
    --implementation cp "${plats[@]}" -d "$WHL" "${wheels[@]}" 2>&1 \
    | grep -v '^WARNING' || true
  got=$(find "$WHL" -name '*.whl' | wc -l)
  if [ "$got" -ne "${#wheels[@]}" ]; then
    echo "prepare: ${#wheels[@]} wheels asked for, $got downloaded" >&2
    exit 1
  fi
  etcd=${YAK_ETCD:-$(command -v etcd || echo /usr/bin/etcd)}
  gzip -9 -c "$etcd" >"$DEVBIN/etcd.gz"
  rm -rf "$DEVBIN/tree" && mkdir -p "$DEVBIN/tree"
  git archive HEAD yak | tar -x -C "$DEVBIN/tree"
  git log -1 --format='%H %cI %s' >"$DEVBIN/tree/COMMIT"
  echo "tree: $(cat "$DEVBIN/tree/COMMIT")"
  echo "travels: the working tree (tracked + untracked-not-ignored), then the carried" \
       "folders; together under 64 MiB:"
  { git ls-files -z; git ls-files -z --others --exclude-standard; } \
    | xargs -0 du -cb 2>/dev/null | tail -1
  du -cb "$WHL" "$DEVBIN" | tail -1
  ;;
run)
  PY=${PY:-python3}
  PIP_PY=${PIP_PY:-$PY}  # a bare venv (a local test of this half) has no pip of its own
  SITE=${SITE:-/tmp/site-chaos}
  OUT=${OUT:-/tmp/device-chaos-out}
  mkdir -p "$OUT"
  "$PIP_PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHL"/*.whl
  # The tree first: the brokers (started as `sys.executable -m yak.cli.main serve`)
  # inherit PYTHONPATH, so they run the same commit as the driver.
  PYTHONPATH="$(cd "$DEVBIN/tree" && pwd):$(cd "$SITE" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH PYTHONUNBUFFERED=1
  # compile once, in parallel, so a broker's start is not its imports' compilation
  "$PY" -m compileall -q -j 0 "$SITE" "$DEVBIN/tree" >/dev/null || true
  gunzip -c "$DEVBIN/etcd.gz" >/tmp/yak-etcd-chaos && chmod +x /tmp/yak-etcd-chaos
  export YAK_ETCD=/tmp/yak-etcd-chaos
  {
    echo "commit $(cat "$DEVBIN/tree/COMMIT")"
    echo "python $("$PY" -c 'import sys; print(sys.version.split()[0])'), $(nproc) CPUs," \
         "load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$PY" -c 'import matplotlib' 2>/dev/null \
      || echo "matplotlib is missing: the report's timeline.png cannot be drawn" \
              "(prepare with MPL=1 to carry it)"
  } | tee "$OUT/log.txt"
  rc=0
  "$PY" -m yak.cli.main chaos run -n 3 --duration 240 --faults kill,pause --seed 7 \
    --title "device: kill,pause, seed 7" -o "$OUT/run" "$@" 2>&1 \
    | tee -a "$OUT/log.txt" || rc=$?
  for f in summary.md summary.json timeline.png; do
    [ -f "$OUT/run/$f" ] && cp "$OUT/run/$f" "$OUT/$f"
  done
  # The run folder holds the cluster's data and the history: too big to come back whole.
  tar -czf "$OUT/logs.tar.gz" -C "$OUT/run" cluster/logs 2>/dev/null || true
  rm -rf "$OUT/run"
  # The report writes summary.json and summary.md before it draws timeline.png, so a device
  # without matplotlib still gives the verdict (the run then exits 1 on the import).
  if [ -f "$OUT/summary.json" ]; then
    "$PY" -c 'import json, sys; s = json.load(open(sys.argv[1])); l = s["latency_ms"]
print("verdict", "PASS" if s["valid"] else "FAIL", "| anomalies", s["anomalies_found"],
      "| availability during faults", s["availability_during_faults"],
      "| victim-led", s["availability_during_faults_victim_led"],
      "| others", s["availability_during_faults_others"], "| write latency ms", l)' \
      "$OUT/summary.json" 2>&1 | tee -a "$OUT/log.txt"
  fi
  echo "chaos run exit status $rc" | tee -a "$OUT/log.txt"
  exit "$rc"
  ;;
*)
  echo "usage: benchmarks/device_chaos.sh prepare | run [yak chaos run args]" >&2
  exit 2
  ;;
esac
