"""Read and write a Yak topic over Spark Connect, shipping yak with addArtifacts (no jar).

Run as its own process by test_connect.py: a Connect session cannot share a JVM with the
classic session the other tests use.

    python connect_job.py BOOTSTRAP SRC DST
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path


def main() -> None:
    bootstrap, src, dst = sys.argv[1:4]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import yak
    from yak.spark import YakDataSource

    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    tmp = tempfile.mkdtemp()
    pkg_root = Path(yak.__file__).resolve().parent.parent
    archive = shutil.make_archive(f"{tmp}/yak", "zip", root_dir=pkg_root, base_dir="yak")
    spark.addArtifacts(archive, pyfile=True)
    spark.dataSource.register(YakDataSource)
    df = (
        spark.read.format("yak")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .load()
    )
    rows = df.selectExpr("key", "upper(cast(value as string)) as value").collect()
    spark.createDataFrame(rows).write.format("yak").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", dst).mode("append").save()
    print(json.dumps({"read": len(rows), "type": type(spark).__module__}), flush=True)
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
