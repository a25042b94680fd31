"""`YakDataSource`: the format name "yak", the schema, and which reader/writer to hand out."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from yak.spark.options import parse_sink_options, parse_source_options
from yak.spark.sink import YakBatchWriter, YakStreamWriter
from yak.spark.source import HEADERS_DDL, SCHEMA_DDL, YakBatchReader, YakStreamReader


class YakDataSource(DataSource):
    """Spark's Kafka source and sink, in Python: `spark.read.format("yak")`.

    Registered with `spark.dataSource.register(YakDataSource)`; no jar, so it also works over
    Spark Connect (ship the module with `spark.addArtifacts`).
    """

    @classmethod
    def name(cls) -> str:
        return "yak"

    def schema(self) -> str:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return SCHEMA_DDL + (HEADERS_DDL if headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        return YakBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return YakStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return YakBatchWriter(parse_sink_options(self.options), schema.fieldNames())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return YakStreamWriter(parse_sink_options(self.options), schema.fieldNames())
