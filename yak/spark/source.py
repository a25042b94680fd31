"""The `yak` Spark source: batch and micro-batch readers over Yak (or any Kafka) topics.

Planning (offsets, partitions) runs on the driver with one cached client; reading runs in
executors, each task opening its own connection inside `read()` because readers are pickled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from yak.client import EARLIEST, LATEST, KafkaClient
from yak.spark.fetcher import read_range
from yak.spark.offsets import (
    TP,
    DataLossError,
    OffsetRange,
    check_data_loss,
    discover,
    ending_offsets,
    from_json,
    rate_limit,
    split_ranges,
    starting_offsets,
    to_json,
)
from yak.spark.options import SourceOptions

if TYPE_CHECKING:
    from yak.spark.tiered_read import RemoteSplit

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key:string,value:binary>>"


class YakInputPartition(InputPartition):
    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng


class TieredInputPartition(InputPartition):
    """Consecutive remote segments of one topic-partition, read from the bucket
    (`tiered.direct=true`), one after the other in one task."""

    def __init__(self, splits: tuple[RemoteSplit, ...]) -> None:
        super().__init__(splits)
        self.splits = splits


class _Planner:
    """Shared by the batch and stream readers; the client is never pickled to executors."""

    opts: SourceOptions
    _client: KafkaClient | None = None

    def client(self) -> KafkaClient:
        if self._client is None:
            self._client = self.opts.client.client()
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _partitions(self, start: dict[TP, int], end: dict[TP, int]) -> list[InputPartition]:
        """Input partitions for [start, end): with `tiered.direct`, the remote segments
        from the bucket (planned from the manifests) and the rest through the brokers."""
        if self.opts.tiered is None:
            return [YakInputPartition(r) for r in self._ranges(start, end)]
        from yak.spark.tiered_plan import group, plan

        remote: list[RemoteSplit] = []
        tail: list[OffsetRange] = []
        for item in plan(self.client(), self.opts, self._ranges(start, end, split=False)):
            if isinstance(item, OffsetRange):
                tail.append(item)
            else:
                remote.append(item)
        return [TieredInputPartition(g) for g in group(remote, self.opts.min_partitions)] + [
            YakInputPartition(r) for r in split_ranges(tail, self.opts.min_partitions)]

    def _ranges(self, start: dict[TP, int], end: dict[TP, int],
                split: bool = True) -> list[OffsetRange]:
        out = []
        for tp, e in sorted(end.items()):
            s = start[tp]
            if e < s:
                msg = f"{tp[0]}-{tp[1]}: end offset {e} is before start offset {s}"
                if self.opts.fail_on_data_loss:
                    raise DataLossError(msg + " (the partition was truncated or recreated)")
                continue
            out.append(OffsetRange(tp[0], tp[1], s, e))
        return split_ranges(out, self.opts.min_partitions) if split else out

    def _read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, TieredInputPartition):
            from yak.spark.tiered_read import read_splits

            assert self.opts.tiered is not None
            yield from read_splits(
                self.opts.tiered,
                partition.splits,
                include_headers=self.opts.include_headers,
                fail_on_data_loss=self.opts.fail_on_data_loss,
                read_committed=self.opts.client.isolation_level == 1,
                value_decoder=self._value_decoder(),
            )
            return
        assert isinstance(partition, YakInputPartition)
        yield from read_range(
            self.opts.client,
            partition.rng,
            include_headers=self.opts.include_headers,
            fail_on_data_loss=self.opts.fail_on_data_loss,
            value_decoder=self._value_decoder(),
        )

    def _value_decoder(self) -> Any:
        if self.opts.value_format is None:
            return None
        from yak.spark.registry_codec import ValueDecoder

        return ValueDecoder(str(self.opts.registry_url), self.opts.value_format,
                            self.opts.value_type)


class YakBatchReader(_Planner, DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        client = self.client()
        tps = discover(client, self.opts)
        start = check_data_loss(
            client, starting_offsets(client, self.opts, tps), self.opts.fail_on_data_loss
        )
        end = ending_offsets(client, self.opts, tps)
        parts = self._partitions(start, end)
        client.close()
        self._client = None
        return parts or [YakInputPartition(OffsetRange("", -1, 0, 0))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, YakInputPartition) and partition.rng.size <= 0:
            return iter(())
        return self._read(partition)


class YakStreamReader(_Planner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control, Trigger.AvailableNow and discovery."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._target: dict[TP, int] | None = None
        self._last_batch_ms = time.monotonic() * 1000

    def initialOffset(self) -> dict:
        client = self.client()
        tps = discover(client, self.opts)
        return to_json(starting_offsets(client, self.opts, tps))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        client = self.client()
        tps = discover(client, self.opts)
        self._target = client.list_offsets(dict.fromkeys(tps, LATEST))

    def _known(self, start: dict[TP, int]) -> tuple[dict[TP, int], dict[TP, int]]:
        """Start offsets for every partition now subscribed, and their latest offsets."""
        client = self.client()
        if self._target is not None:
            tps = sorted(set(self._target) | set(start))
        else:
            tps = discover(client, self.opts)
        gone = [tp for tp in start if tp not in tps]
        if gone and self.opts.fail_on_data_loss:
            names = ", ".join(f"{t}-{p}" for t, p in gone)
            raise DataLossError(f"partitions {names} disappeared (topic deleted?)")
        new = [tp for tp in tps if tp not in start]
        full = {tp: start[tp] for tp in tps if tp in start}
        if new:  # new partitions are read from their beginning, as in Spark
            full.update(client.list_offsets(dict.fromkeys(new, EARLIEST)))
        if self._target is not None:
            latest = {tp: self._target.get(tp, full[tp]) for tp in tps}
        else:
            latest = client.list_offsets(dict.fromkeys(tps, LATEST))
        full = check_data_loss(client, full, self.opts.fail_on_data_loss)
        latest = {tp: max(latest[tp], full[tp]) for tp in tps}
        return full, latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin, latest = self._known(from_json(start))
        if isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            end = latest
            now = time.monotonic() * 1000
            min_rows = self.opts.min_offsets_per_trigger
            if isinstance(limit, ReadMinRows):
                min_rows = limit.min_rows
            if min_rows is not None:
                lag = sum(latest[tp] - begin[tp] for tp in latest)
                if lag < min_rows and now - self._last_batch_ms < self.opts.max_trigger_delay_ms:
                    return start
            if isinstance(limit, ReadMaxRows):
                end = rate_limit(begin, latest, limit.max_rows)
        if end != begin:
            self._last_batch_ms = time.monotonic() * 1000
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        client = self.client()
        tps = discover(client, self.opts)
        return to_json(client.list_offsets(dict.fromkeys(tps, LATEST)))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = from_json(start)
        stop = from_json(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self.client().list_offsets(dict.fromkeys(new, EARLIEST)))
        begin = check_data_loss(
            self.client(), {tp: begin[tp] for tp in stop}, self.opts.fail_on_data_loss
        )
        return self._partitions(begin, stop)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._read(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
