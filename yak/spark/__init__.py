"""Yak's Spark connector: a Python data source named "yak" that mirrors Spark's Kafka one.

from yak.spark import YakDataSource
spark.dataSource.register(YakDataSource)
spark.read.format("yak").option("kafka.bootstrap.servers", "...").option("subscribe", "t")

Its libraries (pyspark, pyarrow, numpy, pandas; polars for valueFormat=avro) are the
`spark` extra, not the broker's dependencies: `pip install 'yak[spark]'`. Importing the
connector without them is one ImportError line naming the library and the extra, rather
than a ModuleNotFoundError from deep inside it.
"""

SPARK_EXTRA = "pip install 'yak[spark]'"
SPARK_LIBRARIES = frozenset({"pyspark", "py4j", "pyarrow", "numpy", "pandas", "polars"})


def missing_library(e: ModuleNotFoundError, needed_for: str = "Yak's Spark data source"
                    ) -> ImportError:
    """The one-line error for a library of the `spark` extra that is not installed."""
    name = (e.name or "").split(".")[0]
    return ImportError(f"{needed_for} needs {name}, which is not installed: {SPARK_EXTRA}")


try:
    from yak.spark.datasource import YakDataSource
except ModuleNotFoundError as e:
    if (e.name or "").split(".")[0] not in SPARK_LIBRARIES:
        raise
    raise missing_library(e) from None

__all__ = ["SPARK_EXTRA", "YakDataSource", "missing_library"]
