#!/usr/bin/env bash
# A Spark standalone cluster on this machine from pyspark's own sbin scripts: one master and
# N workers (spark-daemon.sh, which start-master.sh/start-worker.sh wrap; the pyspark wheel
# ships spark-daemon.sh but not those wrappers).
#
#   scripts/spark-standalone.sh start [RUN_DIR] [MASTER_PORT] [WORKERS]   (7077, 2 workers)
#   scripts/spark-standalone.sh stop  [RUN_DIR]
#
# Only the master's port is fixed (7077 by default, as Spark's); the web UIs take free
# ports and the REST submission server is off.
#
# Then: spark://127.0.0.1:MASTER_PORT, e.g.
#   PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/orders_pipeline.py ...
#   with SparkSession.builder.master("spark://127.0.0.1:7077")
# Executors run the workers' Python: the application sets spark.pyspark.python (or
# PYSPARK_PYTHON) to an interpreter that can import yak (.venv/bin/python).
# Logs, pids and executor work directories go to RUN_DIR (default ./spark-standalone).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$REPO/.venv/bin/python}"
SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
cmd="${1:-}"
RUN_DIR="$(mkdir -p "${2:-$REPO/spark-standalone}" && cd "${2:-$REPO/spark-standalone}" && pwd)"
PORT="${3:-7077}"
WORKERS="${4:-2}"
export SPARK_LOG_DIR="$RUN_DIR/logs" SPARK_PID_DIR="$RUN_DIR/pids" SPARK_LOCAL_IP=127.0.0.1
export SPARK_IDENT_STRING="yak" PYSPARK_PYTHON="$PY"
# no fixed ports besides the master's: the REST submission server (6066) stays off
export SPARK_MASTER_OPTS="${SPARK_MASTER_OPTS:-} -Dspark.master.rest.enabled=false"
DAEMON="$SPARK_HOME/sbin/spark-daemon.sh"
# spark-daemon.sh runs bin/spark-class, which must be executable (pip may drop the bit)
chmod +x "$SPARK_HOME"/bin/* "$SPARK_HOME"/sbin/* 2>/dev/null || true

case "$cmd" in
  start)
    mkdir -p "$SPARK_LOG_DIR" "$SPARK_PID_DIR"
    "$DAEMON" start org.apache.spark.deploy.master.Master 1 \
      --host 127.0.0.1 --port "$PORT" --webui-port 0
    for i in $(seq 1 "$WORKERS"); do
      mkdir -p "$RUN_DIR/work-$i"
      "$DAEMON" start org.apache.spark.deploy.worker.Worker "$i" \
        --host 127.0.0.1 --webui-port 0 --cores 1 --memory 1g \
        --work-dir "$RUN_DIR/work-$i" "spark://127.0.0.1:$PORT"
    done
    echo "spark://127.0.0.1:$PORT (logs in $SPARK_LOG_DIR)"
    ;;
  stop)
    # workers first (they kill their executors), then the master
    for pidfile in "$SPARK_PID_DIR"/*Worker*.pid; do
      [ -e "$pidfile" ] || continue
      n="$(basename "$pidfile" .pid)"; n="${n##*-}"
      "$DAEMON" stop org.apache.spark.deploy.worker.Worker "$n" || true
    done
    "$DAEMON" stop org.apache.spark.deploy.master.Master 1 || true
    ;;
  *)
    echo "usage: $0 start|stop [RUN_DIR] [MASTER_PORT] [WORKERS]" >&2
    exit 2
    ;;
esac
