"""A streaming job run as its own process by test_exactly_once.py, so it can be SIGKILLed.

python stream_job.py BOOTSTRAP SRC DST CHECKPOINT (continuous|available-now)
    [MAX_OFFSETS_PER_TRIGGER [SINK_BATCH_BYTES]]
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    bootstrap, src, dst, checkpoint, mode = sys.argv[1:6]
    per_trigger = sys.argv[6] if len(sys.argv) > 6 else "2000"
    batch_bytes = sys.argv[7] if len(sys.argv) > 7 else str(1 << 20)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from yak.spark import YakDataSource

    # YAK_SPARK_MASTER: a standalone cluster (spark://...) instead of local[2]; its
    # executors run on the workers with this interpreter (it imports yak)
    master = os.environ.get("YAK_SPARK_MASTER", "local[2]")
    builder = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if master.startswith("spark://"):
        builder = (builder.config("spark.pyspark.python", sys.executable)
                   .config("spark.cores.max", "2").config("spark.executor.cores", "1")
                   .config("spark.executor.memory", "512m")
                   .config("spark.driver.host", "127.0.0.1"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(YakDataSource)
    writer = (
        spark.readStream.format("yak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("yak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        # a transaction a killed run leaves open under a task id the restart does not
        # reuse is aborted at this timeout (the others at the restart's InitProducerId)
        .option("kafka.transaction.timeout.ms", "20000")
        .option("kafka.batch.size", batch_bytes)
    )
    if mode == "available-now":
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print("STARTED", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        print("FAILED", query.exception(), flush=True)
        sys.exit(1)
    print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
