"""The `yak` Spark sink: batch and streaming writers, the streaming one exactly-once.

Exactly-once with broker transactions (the default when the cluster has them), one
transaction per streaming write task and micro-batch:

1. The task's transactional id is `<transactionalIdPrefix>-<queryId>-<partitionId>`, stable
   across attempts and restarts. InitProducerId with it fences any earlier attempt of the
   task (a crashed one, a retry still running) and aborts what it left open.
2. The task reads the offset its sink group (named like the transactional id) committed
   for `<sinkStateTopic>-0` with `require_stable` (never a value an open transaction may
   still undo). It holds the next batch id to write: if that is beyond this batch, an
   earlier attempt committed it, and the task writes nothing (a replay is skipped).
3. Otherwise, in one transaction: AddPartitionsToTxn for its target partitions,
   AddOffsetsToTxn for the sink group, the rows (transactional batches), TxnOffsetCommit of
   batch id + 1 to the sink group, EndTxn(commit). Rows and "batch done" become visible
   together or not at all; any failure aborts and Spark retries the task.

So read_committed consumers (librdkafka's default) see each row of each micro-batch exactly
once; read_uncommitted ones may also see an aborted attempt's rows.

Without transactions (`exactlyOnceMode=markers`, or `auto` on a cluster that lacks them),
exactly-once comes from markers in a state topic, fenced on (query id, batch id, task
partition):

1. A task materializes its rows, places them on (topic, partition) deterministically (the
   `partition` column, else murmur2 of the key, else a round-robin over the row index).
2. It reads the last state record of its fence key `queryId/task` from the state topic. If
   that record is for the same batch id, an earlier attempt of this very task already ran
   (crash, kill -9, task retry) and may have written some or all of its rows.
3. It takes a fresh producer id (InitProducerId) and appends a state record
   `{batch, pids: earlier pids + this one, starts: log end offsets before the first attempt}`
   before writing any data.
4. On a replay it scans each target partition from the recorded start offset, keeps the
   batches whose header carries one of the earlier attempts' producer ids (headers only,
   no decoding of others' data), and removes those already-written (key, value) pairs from
   what it is about to write, as a multiset. Then it writes the rest with its own producer id.

So a micro-batch that Spark replays after a crash adds exactly the rows that are missing,
whatever prefix of them the crashed attempt got in. Assumptions (Spark's own for exactly-once
sinks): the replayed micro-batch produces the same rows per task (a deterministic query over
a replayable source, such as this source), and no speculative execution.
"""

from __future__ import annotations

import json
import logging
import random
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from yak.client import EARLIEST, LATEST, KafkaClient
from yak.client.transactions import TransactionalClient
from yak.errors import UnknownTopicOrPartitionError
from yak.spark.options import SinkOptions, YakOptionError
from yak.spark.partitioner import partition_for
from yak.spark.record_decoder import decode, scan_batches
from yak.spark.record_encoder import encode_batches
from yak.spark.sink_load_aware import LoadAwarePlacement, value_sizes

log = logging.getLogger(__name__)

STATE_WINDOW = 5000  # state records scanned back from the end of the state topic


@dataclass
class YakCommitMessage(WriterCommitMessage):
    rows: int = 0
    skipped: int = 0
    partitions: dict[str, int] = field(default_factory=dict)


def validate_schema(names: list[str], opts: SinkOptions) -> None:
    if "value" not in names:
        raise YakOptionError("the DataFrame written to yak needs a 'value' column")
    if opts.topic is None and "topic" not in names:
        raise YakOptionError("set the option 'topic' or give the DataFrame a 'topic' column")
    allowed = {"key", "value", "topic", "partition", "headers"}
    extra = [c for c in names if c not in allowed]
    if extra:
        raise YakOptionError(
            f"column(s) {', '.join(extra)} cannot be written to yak "
            "(allowed: key, value, topic, partition, headers)"
        )


@dataclass
class _Group:
    topic: str
    partition: int
    rows: pa.Table


def _placed(
    table: pa.Table,
    opts: SinkOptions,
    client: KafkaClient,
    seed: int,
    counts: dict[str, int] | None = None,
    load_aware: LoadAwarePlacement | None = None,
) -> list[_Group]:
    """Split rows by target (topic, partition) without a Python loop over rows.

    `counts` caches partition counts across the Arrow batches of one task (one Metadata
    request per topic per task, not per 10k-row batch). `load_aware`: keyless rows go
    where their leader acknowledges soonest (`sink_load_aware.py`).
    """
    n = table.num_rows
    if opts.topic is not None:
        topics = np.zeros(n, np.int64)
        names = [opts.topic]
    else:
        col = table.column("topic").combine_chunks()
        if col.null_count:
            raise YakOptionError("the 'topic' column has nulls and no 'topic' option is set")
        enc = col.dictionary_encode()
        names = [str(x) for x in enc.dictionary.to_pylist()]
        topics = enc.indices.to_numpy().astype(np.int64)
    counts = {} if counts is None else counts
    for t in names:
        if t in counts:
            continue
        try:
            counts[t] = len(client.partitions_for(t, auto_create=True))
        except UnknownTopicOrPartitionError:
            raise UnknownTopicOrPartitionError(
                f"topic {t!r} does not exist and the broker did not auto-create it "
                "(sink option topic or the topic column)"
            ) from None
    part = np.full(n, -1, np.int64)
    if "partition" in table.column_names:
        pcol = table.column("partition").combine_chunks()
        part = np.where(
            pcol.is_valid().to_numpy(zero_copy_only=False),
            pcol.fill_null(0).to_numpy().astype(np.int64),
            -1,
        )
    nparts = np.asarray([counts[t] for t in names], np.int64)[topics]
    if (part >= nparts).any():
        raise YakOptionError("a 'partition' value is beyond the topic's partition count")
    need = part < 0
    if need.any():
        if "key" in table.column_names:
            key = table.column("key").combine_chunks()
            has_key = key.is_valid().to_numpy(zero_copy_only=False)
            for ti, t in enumerate(names):
                sel = need & has_key & (topics == ti)
                if sel.any():
                    idx = np.nonzero(sel)[0]
                    part[idx] = partition_for(key.take(pa.array(idx)), counts[t])
        need = part < 0
    if need.any() and load_aware is not None:
        sizes = value_sizes(table)
        for ti, t in enumerate(names):
            idx = np.nonzero(need & (topics == ti))[0]
            if len(idx):
                part[idx] = load_aware.place(client, t, sizes[idx])
    elif need.any():
        # no key: spread by row index in chunks, as sticky partitioners do
        part[need] = (np.nonzero(need)[0] // 4096 + seed) % nparts[need]
    gid = topics * 1_000_003 + part
    order = np.argsort(gid, kind="stable")
    sorted_gid = gid[order]
    cuts = np.nonzero(np.diff(sorted_gid))[0] + 1
    out = []
    for chunk in np.split(order, cuts):
        if not len(chunk):
            continue
        g = int(gid[chunk[0]])
        out.append(_Group(names[g // 1_000_003], g % 1_000_003, table.take(pa.array(chunk))))
    return out


def _encode_values(table: pa.Table, opts: SinkOptions, encoder: Any) -> tuple[pa.Table, Any]:
    """With valueFormat=avro: the struct `value` column becomes registry-framed Avro (the
    schema derived from the column's type, registered once per task as <topic>-value)."""
    if opts.value_format is None:
        return table, encoder
    value = table.column("value").combine_chunks()
    if encoder is None:
        from yak.spark.registry_codec import ValueEncoder

        if not pa.types.is_struct(value.type):
            raise YakOptionError("valueFormat=avro needs a struct 'value' column "
                                 f"(got {value.type})")
        encoder = ValueEncoder(str(opts.registry_url), opts.value_format, str(opts.topic),
                               value.type)
    idx = table.column_names.index("value")
    return table.set_column(idx, "value", encoder.encode(value)), encoder


def _column(t: pa.Table, name: str) -> pa.Array | None:
    if name not in t.column_names:
        return None
    return t.column(name).combine_chunks()


def _produce(
    client: KafkaClient, opts: SinkOptions, groups: list[_Group], pid: int = -1, epoch: int = -1,
    transactional_id: str | None = None, load_aware: LoadAwarePlacement | None = None,
) -> dict[str, int]:
    written: dict[str, int] = {}
    s = opts.client
    pending: dict[tuple[str, int], list[bytes]] = {}
    for g in groups:
        if g.rows.num_rows == 0:
            continue
        batches = encode_batches(
            _column(g.rows, "key"),
            g.rows.column("value").combine_chunks(),
            _column(g.rows, "headers"),
            max_batch_bytes=s.batch_size,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            compression=s.compression,
            transactional=transactional_id is not None,
        )
        pending[(g.topic, g.partition)] = [b.data for b in batches]
        written[f"{g.topic}-{g.partition}"] = g.rows.num_rows
    # one Produce per round carries the next batch of every partition (sequences in order)
    while pending:
        round_ = {tp: bs.pop(0) for tp, bs in pending.items()}
        how = {"acks": -1 if transactional_id else s.acks, "timeout_ms": s.request_timeout_ms,
               "transactional_id": transactional_id}
        if load_aware is not None:  # leader by leader, timed
            load_aware.produce(client, round_, {tp for tp, bs in pending.items() if not bs},
                               **how)
        else:
            client.produce(round_, **how)
        pending = {tp: bs for tp, bs in pending.items() if bs}
    return written


def _load_aware(opts: SinkOptions) -> LoadAwarePlacement | None:
    """A task's load-aware placement for `partitioner=load_aware` (never with markers:
    their replay must place every row where the first attempt did)."""
    if opts.partitioner != "load_aware":
        return None
    return LoadAwarePlacement(opts.client.batch_size)


def _tables(iterator: Iterator[pa.RecordBatch]) -> pa.Table | None:
    batches = list(iterator)
    if not batches:
        return None
    return pa.Table.from_batches(batches)


class YakBatchWriter(DataSourceArrowWriter):
    """DataFrame.write: at-least-once per task, like Spark's Kafka sink."""

    def __init__(self, opts: SinkOptions, names: list[str]) -> None:
        validate_schema(names, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        rows = 0
        parts: dict[str, int] = {}
        counts: dict[str, int] = {}
        seed = random.randrange(1 << 16)
        encoder = None
        placement = _load_aware(self.opts)
        with self.opts.client.client() as client:
            for i, batch in enumerate(iterator):
                table = pa.Table.from_batches([batch])
                table, encoder = _encode_values(table, self.opts, encoder)
                groups = _placed(table, self.opts, client, seed + i, counts, placement)
                for k, v in _produce(client, self.opts, groups,
                                     load_aware=placement).items():
                    parts[k] = parts.get(k, 0) + v
                rows += batch.num_rows
        return YakCommitMessage(rows=rows, partitions=parts)


class YakStreamWriter(DataSourceStreamArrowWriter):
    """writeStream: exactly-once per micro-batch (see the module docstring)."""

    def __init__(self, opts: SinkOptions, names: list[str]) -> None:
        validate_schema(names, opts)
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
        query_id = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
        task = ctx.partitionId() if ctx else 0
        table = _tables(iterator)
        if table is None or table.num_rows == 0:
            return YakCommitMessage()
        return write_fenced(self.opts, table, query_id, batch_id, task)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, YakCommitMessage))
        log.info("yak sink committed batch %d (%d rows)", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("yak sink batch %d aborted; its replay writes it exactly once", batchId)


def write_fenced(
    opts: SinkOptions, table: pa.Table, query_id: str | None, batch_id: str | int | None, task: int
) -> YakCommitMessage:
    """Write one task's rows of one micro-batch exactly once: in a transaction, or with
    the state-topic markers when the cluster has no transactions."""
    if opts.exactly_once and batch_id is not None and query_id is not None \
            and opts.exactly_once_mode != "markers":
        with opts.client.client(transactional=True) as client:
            if opts.exactly_once_mode == "transactions" or client.supports_transactions():
                return write_transactional(client, opts, table, query_id, int(batch_id), task)
    return _write_with_markers(opts, table, query_id, batch_id, task)


def sink_group(opts: SinkOptions, query_id: str, task: int) -> str:
    """The transactional id of a write task, also the group its batch ids are committed to."""
    return f"{opts.transactional_id_prefix}-{query_id}-{task}"


def write_transactional(
    client: TransactionalClient, opts: SinkOptions, table: pa.Table, query_id: str, batch: int,
    task: int,
) -> YakCommitMessage:
    """One task's rows of micro-batch `batch` in one transaction (module docstring)."""
    txn_id = group = sink_group(opts, query_id, task)
    done_tp = (opts.state_topic, 0)
    client.create_topic(opts.state_topic, 1)
    pid, epoch = client.init_transactions(txn_id, opts.transaction_timeout_ms)
    next_batch, _meta = client.committed_offsets(group, [done_tp], require_stable=True)[done_tp]
    if next_batch > batch:
        log.warning("batch %d task %d was committed by an earlier attempt; skipped", batch, task)
        return YakCommitMessage(rows=table.num_rows, skipped=table.num_rows)
    table, _ = _encode_values(table, opts, None)
    seed = zlib.crc32(f"{query_id}/{batch}/{task}".encode())
    placement = _load_aware(opts)  # an aborted attempt's rows are never seen: any place
    groups = _placed(table, opts, client, seed, load_aware=placement)
    client.add_partitions_to_txn(txn_id, pid, epoch, [(g.topic, g.partition) for g in groups])
    client.add_offsets_to_txn(txn_id, pid, epoch, group)
    try:
        parts = _produce(client, opts, groups, pid, epoch, transactional_id=txn_id,
                         load_aware=placement)
        meta = json.dumps({"batch": batch, "rows": table.num_rows})
        client.txn_offset_commit(txn_id, group, pid, epoch, {done_tp: (batch + 1, meta)})
        client.end_txn(txn_id, pid, epoch, True)
    except Exception:
        # whatever failed, nothing of this attempt may become visible: abort (a fenced
        # producer cannot; its successor's InitProducerId has aborted it already)
        try:
            client.end_txn(txn_id, pid, epoch, False)
        except Exception as e:  # noqa: BLE001 - the original error is the one to report
            log.warning("aborting %s failed: %s", txn_id, e)
        raise
    return YakCommitMessage(rows=table.num_rows, partitions=parts)


def _write_with_markers(
    opts: SinkOptions, table: pa.Table, query_id: str | None, batch_id: str | int | None, task: int
) -> YakCommitMessage:
    """Without transactions: skip what an earlier attempt wrote (state-topic markers)."""
    table, _ = _encode_values(table, opts, None)
    with opts.client.client() as client:
        seed = zlib.crc32(f"{query_id}/{batch_id}/{task}".encode())
        groups = _placed(table, opts, client, seed)
        if not opts.exactly_once or batch_id is None or query_id is None:
            return YakCommitMessage(rows=table.num_rows, partitions=_produce(client, opts, groups))
        fence = f"{query_id}/{task}"
        batch = int(batch_id)
        state_tp = (opts.state_topic, 0)
        client.create_topic(opts.state_topic, 1)
        prior = _last_state(client, state_tp, fence)
        pids: list[int] = []
        starts: dict[str, int] = {}
        if prior is not None and prior.get("batch") == batch:
            pids = [int(p) for p in prior["pids"]]
            starts = {k: int(v) for k, v in prior["starts"].items()}
        missing = [
            (g.topic, g.partition) for g in groups if f"{g.topic}-{g.partition}" not in starts
        ]
        if missing:
            for (t, p), off in client.list_offsets(dict.fromkeys(missing, LATEST)).items():
                starts[f"{t}-{p}"] = off
        try:
            pid, epoch = client.init_producer_id()
        except Exception:  # a broker without InitProducerId: a random id still marks batches
            pid, epoch = random.randrange(1 << 40, 1 << 62), 0
        state = {"batch": batch, "pids": pids + [pid], "starts": starts}
        client.produce(
            {state_tp: _state_record(fence, state)},
            acks=-1,
            timeout_ms=opts.client.request_timeout_ms,
        )
        skipped = 0
        if pids:
            groups, skipped = _skip_written(client, groups, set(pids), starts)
            log.warning(
                "replay of batch %d task %d: %d rows already written, skipped",
                batch,
                task,
                skipped,
            )
        parts = _produce(client, opts, groups, pid, epoch)
    return YakCommitMessage(rows=table.num_rows, skipped=skipped, partitions=parts)


def _state_record(fence: str, state: dict) -> bytes:
    return encode_batches(
        pa.array([fence.encode()], pa.binary()), pa.array([json.dumps(state).encode()], pa.binary())
    )[0].data


def _last_state(client: KafkaClient, tp: tuple[str, int], fence: str) -> dict | None:
    """The newest state record of this fence key among the last STATE_WINDOW records."""
    bounds = client.list_offsets({tp: EARLIEST})
    end = client.list_offsets({tp: LATEST})[tp]
    offset = max(bounds[tp], end - STATE_WINDOW)
    found = None
    want = fence.encode()
    while offset < end:
        resp = client.fetch({tp: offset}, max_bytes=8 << 20, partition_max_bytes=8 << 20)[tp]
        if resp.error:
            break
        cols = decode(resp.records, offset, end)
        if cols.next_offset <= offset:
            break
        offset = cols.next_offset
        keys = cols.key.to_pylist()
        for i in range(len(keys) - 1, -1, -1):
            if keys[i] == want:
                found = json.loads(cols.value[i].as_py())
                break
    return found


def _skip_written(
    client: KafkaClient, groups: list[_Group], pids: set[int], starts: dict[str, int]
) -> tuple[list[_Group], int]:
    """Drop rows an earlier attempt (one of `pids`) already appended to their partition."""
    out = []
    skipped = 0
    for g in groups:
        tp = (g.topic, g.partition)
        offset = starts[f"{g.topic}-{g.partition}"]
        end = client.list_offsets({tp: LATEST})[tp]
        seen: Counter[tuple[bytes | None, bytes | None]] = Counter()
        while offset < end:
            resp = client.fetch({tp: offset}, max_bytes=16 << 20, partition_max_bytes=16 << 20)[tp]
            if resp.error or not resp.records:
                break
            infos = scan_batches(resp.records)
            if not infos:
                break
            for b in infos:
                if b.producer_id in pids:
                    cols = decode(memoryview(resp.records)[b.pos : b.pos + b.size])
                    seen.update(zip(cols.key.to_pylist(), cols.value.to_pylist(), strict=True))
            offset = infos[-1].next_offset
        if not seen:
            out.append(g)
            continue
        keys = (
            g.rows.column("key").to_pylist()
            if "key" in g.rows.column_names
            else [None] * g.rows.num_rows
        )
        vals = g.rows.column("value").to_pylist()
        keep = []
        for i, (k, v) in enumerate(zip(keys, vals, strict=True)):
            k = k.encode() if isinstance(k, str) else k
            v = v.encode() if isinstance(v, str) else v
            if seen[(k, v)] > 0:
                seen[(k, v)] -= 1
                skipped += 1
            else:
                keep.append(i)
        out.append(_Group(g.topic, g.partition, g.rows.take(pa.array(keep, pa.int64()))))
    return out, skipped
