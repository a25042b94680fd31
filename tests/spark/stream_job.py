"""A streaming job run as its own process by test_exactly_once.py, so it can be SIGKILLed.

python stream_job.py BOOTSTRAP SRC DST CHECKPOINT (continuous|available-now)
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    bootstrap, src, dst, checkpoint, mode = sys.argv[1:6]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from yak.spark import YakDataSource

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(YakDataSource)
    writer = (
        spark.readStream.format("yak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "2000")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("yak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
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
