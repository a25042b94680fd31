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

from yak.spark.options import SourceOptions, parse_sink_options, parse_source_options
from yak.spark.sink import YakBatchWriter, YakStreamWriter
from yak.spark.source import HEADERS_DDL, SCHEMA_DDL, YakBatchReader, YakStreamReader


def _typed(opts: SourceOptions, schema: StructType) -> SourceOptions:
    if opts.value_format is not None:
        from pyspark.sql.pandas.types import to_arrow_type

        opts.value_type = to_arrow_type(schema["value"].dataType)
    return opts


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
        ddl = SCHEMA_DDL + (HEADERS_DDL if headers else "")
        opts = {str(k).lower(): v for k, v in self.options.items()}
        if "valueformat" in opts:
            # the value column takes the Spark type of the subject's latest schema
            from yak.spark.registry_codec import RegistryHttp, arrow_type, spark_ddl

            o = parse_source_options(self.options, streaming=False)
            _, parsed = RegistryHttp(str(o.registry_url)).latest(str(o.value_subject))
            ddl = ddl.replace("value binary", f"value {spark_ddl(arrow_type(parsed))}", 1)
        return ddl

    def reader(self, schema: StructType) -> DataSourceReader:
        return YakBatchReader(_typed(parse_source_options(self.options, streaming=False), schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return YakStreamReader(_typed(parse_source_options(self.options, streaming=True), schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return YakBatchWriter(parse_sink_options(self.options), schema.fieldNames())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return YakStreamWriter(parse_sink_options(self.options), schema.fieldNames())
