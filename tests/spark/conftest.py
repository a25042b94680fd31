"""One local[2] Spark session for all Spark tests (the JVM costs 6-25 s and ~0.4 GiB)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


def spark_env() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # executors' Python workers must import yak, so they run this interpreter
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    spark_env()
    from pyspark.sql import SparkSession

    from yak.spark import YakDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("yak-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(YakDataSource)
    yield session
    session.stop()
