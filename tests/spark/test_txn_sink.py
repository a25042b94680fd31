"""The exactly-once streaming sink on broker transactions, driven in-process through the
same function Spark's write tasks call (`write_fenced`), against a real broker; read back
with read_committed (confluent-kafka) as consumers of the output would."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from tests.txn.wire import read_all
from yak.client.transactions import TransactionalClient
from yak.spark.options import YakOptionError, parse_sink_options
from yak.spark.record_encoder import encode_batches
from yak.spark.sink import sink_group, write_fenced


def rows(prefix: str, n: int) -> pa.Table:
    return pa.table({"key": pa.array([b"k%d" % (i % 7) for i in range(n)], pa.binary()),
                     "value": pa.array([b"%s-%d" % (prefix.encode(), i) for i in range(n)],
                                       pa.binary())})


def committed_values(bootstrap: str, topic: str, partitions: int = 2) -> list[bytes]:
    return sorted(v for _p, _o, v in read_all(bootstrap, topic, range(partitions),
                                              "read_committed"))


def test_batches_commit_once_and_replays_are_skipped(module_broker) -> None:
    bs = module_broker.bootstrap
    topic = f"txs-{uuid.uuid4().hex[:6]}"
    TransactionalClient(bs).create_topic(topic, 2)
    opts = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": topic})
    assert opts.exactly_once_mode == "auto"
    qid = str(uuid.uuid4())
    first = write_fenced(opts, rows("b7", 500), qid, 7, 0)
    assert first.rows == 500 and first.skipped == 0 and sum(first.partitions.values()) == 500
    other_task = write_fenced(opts, rows("b7t1", 50), qid, 7, 1)
    assert other_task.skipped == 0
    # Spark replays batch 7 (a crash before its commit): already committed, nothing written
    again = write_fenced(opts, rows("b7", 500), qid, 7, 0)
    assert again.skipped == 500
    nxt = write_fenced(opts, rows("b8", 20), qid, 8, 0)
    assert nxt.skipped == 0
    expected = sorted([b"b7-%d" % i for i in range(500)] + [b"b7t1-%d" % i for i in range(50)]
                      + [b"b8-%d" % i for i in range(20)])
    assert committed_values(bs, topic) == expected
    # the sink group holds the next batch id per task
    with TransactionalClient(bs) as c:
        done = ("__yak_spark_sink_state", 0)
        assert c.committed_offsets(sink_group(opts, qid, 0), [done])[done][0] == 9
        assert c.committed_offsets(sink_group(opts, qid, 1), [done])[done][0] == 8


def test_a_crashed_attempt_is_aborted_and_its_rows_never_seen(module_broker) -> None:
    bs = module_broker.bootstrap
    topic = f"txc-{uuid.uuid4().hex[:6]}"
    opts = parse_sink_options({"kafka.bootstrap.servers": bs, "topic": topic,
                               "exactlyOnceMode": "transactions"})
    qid = str(uuid.uuid4())
    txn_id = sink_group(opts, qid, 3)
    with TransactionalClient(bs) as crashed:
        crashed.create_topic(topic, 2)
        pid, epoch = crashed.init_transactions(txn_id)
        crashed.add_partitions_to_txn(txn_id, pid, epoch, [(topic, 0)])
        batch = encode_batches(None, pa.array([b"ghost-%d" % i for i in range(30)], pa.binary()),
                               producer_id=pid, producer_epoch=epoch, transactional=True)
        crashed.produce({(topic, 0): batch[0].data}, transactional_id=txn_id)
        # ... and the attempt dies here, its transaction open
    assert committed_values(bs, topic) == []  # open: nothing visible, the LSO pinned
    retry = write_fenced(opts, rows("real", 100), qid, 4, 3)  # fences, aborts, writes
    assert retry.skipped == 0
    assert committed_values(bs, topic) == sorted(b"real-%d" % i for i in range(100))
    assert len(read_all(bs, topic, range(2), "read_uncommitted")) == 130  # ghosts aborted
    # the zombie can no longer commit anything
    with TransactionalClient(bs, retries=0) as zombie, pytest.raises(Exception) as exc:
        zombie.end_txn(txn_id, pid, epoch, True)
    assert "fenced" in str(exc.value).lower() or "epoch" in str(exc.value).lower()


def test_exactly_once_mode_option() -> None:
    with pytest.raises(YakOptionError, match="exactlyOnceMode"):
        parse_sink_options({"kafka.bootstrap.servers": "x:1", "topic": "t",
                            "exactlyOnceMode": "sometimes"})
    with pytest.raises(YakOptionError, match="transactionalIdPrefix"):
        parse_sink_options({"kafka.bootstrap.servers": "x:1", "topic": "t",
                            "transactionalIdPrefix": " "})
