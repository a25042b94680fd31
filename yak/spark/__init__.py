"""Yak's Spark connector: a Python data source named "yak" that mirrors Spark's Kafka one.

from yak.spark import YakDataSource
spark.dataSource.register(YakDataSource)
spark.read.format("yak").option("kafka.bootstrap.servers", "...").option("subscribe", "t")
"""

from yak.spark.datasource import YakDataSource

__all__ = ["YakDataSource"]
