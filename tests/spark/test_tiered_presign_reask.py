"""Expired presigned URLs are re-asked by the executor (`tiered.presign=true`, issue 25).

A long job, or a streaming batch planned long before it runs, reaches segments whose URLs
have expired. The executor-side reader asks the gateway again for that segment (the route
the driver planned with, narrowed to the segment's offsets, as the job's gateway user) and
retries once; it holds no store key throughout.

Real parts only: SeaweedFS with an identity (it checks signatures and expiry itself, as
S3 does), one broker process with tiering on and its embedded gateway on HTTP,
confluent-kafka producing. The reads run the executor's code in-process (what a Spark
task runs for a `TieredInputPartition`), so the wait between planning and reading is the
test's to choose: URLs valid 4 s, a read that starts after they expired. Not the route's
1 s minimum: SigV4's X-Amz-Date is to the second, so a URL signed late in a second lives
as little as `expires - 1` s, and the re-asked URL must outlive its first GET on a loaded
machine (a full-suite run failed with 1 s: the fresh URL had expired too).

- every row is read, in order, with its offset's value;
- the re-ask unable to succeed (the gateway stopped: nothing listens at its address) fails
  the read with one line naming the refusal and the gateway;
- a segment deleted by remote retention after planning is missing from the fresh answer
  and follows failOnDataLoss: a DataLossError naming it, or its rows skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from tests.conftest import YakBroker, free_port
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_presign import (
    authed_s3_fixture,
    create_topic,
    manifest,
    produce,
    tiered_broker,
    wait_tiered,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(300)

PREFIX = "rk"


s3 = authed_s3_fixture("seaweed-presign-reask")


@pytest.fixture(scope="module")
def broker(s3: SeaweedS3, tmp_path_factory: pytest.TempPathFactory) -> Iterator[YakBroker]:
    with tiered_broker(s3, tmp_path_factory.mktemp("yak-presign-reask"), PREFIX) as b:
        yield b


def tiered_topic(broker: YakBroker, s3: SeaweedS3, name: str) -> int:
    """A 1-partition tiered topic whose record at offset i has the value b"v%07d-" % i;
    the end of its remote log (at least 1,500 records in several segments)."""
    create_topic(AdminClient({"bootstrap.servers": broker.bootstrap}), name, 1)
    produce({"bootstrap.servers": broker.bootstrap}, name, 1, 3000)
    wait_tiered(broker, s3, PREFIX, name, 1, 1500)
    m = manifest(s3, PREFIX, name, 0)
    assert m is not None and len(m.copied) >= 3
    return m.copied_upto


EXPIRES_S = 4  # the plan's URLs and the re-asked ones (see the module docstring)


@pytest.fixture(scope="module")
def topic(broker: YakBroker, s3: SeaweedS3) -> tuple[str, int]:
    return "reask", tiered_topic(broker, s3, "reask")


def planned(broker: YakBroker, topic: str, end: int, **extra: str) -> tuple[object, list]:
    """(parsed options, the remote splits' task groups) as Spark's driver plans them, with
    URLs valid EXPIRES_S."""
    from yak.spark.options import parse_source_options
    from yak.spark.source import TieredInputPartition, YakBatchReader

    raw = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
           "endingOffsets": f'{{"{topic}":{{"0":{end}}}}}', "tiered.presign": "true",
           "tiered.gatewayUrl": broker.url, "tiered.presign.expires": f"{EXPIRES_S}s", **extra}
    opts = parse_source_options(raw, streaming=False)
    groups = [p.splits for p in YakBatchReader(opts).partitions()
              if isinstance(p, TieredInputPartition)]
    assert groups and all(s.urls for g in groups for s in g)
    return opts, groups


def read(settings, groups: list, fail_on_data_loss: bool = True) -> list[tuple[int, bytes]]:  # noqa: ANN001
    """(offset, value) of every row the executor-side reader gives for the groups."""
    from yak.spark.tiered_read import read_splits

    out = []
    for g in groups:
        for rb in read_splits(settings, g, include_headers=False,
                              fail_on_data_loss=fail_on_data_loss, read_committed=False):
            d = rb.to_pydict()
            out += list(zip(d["offset"], d["value"], strict=True))
    return out


def expire() -> None:
    time.sleep(EXPIRES_S + 1.5)  # SigV4 expiry is checked to the second


def test_expired_urls_are_reasked_and_every_row_is_read(broker, s3, topic) -> None:
    name, end = topic
    opts, groups = planned(broker, name, end)
    assert sum(len(g) for g in groups) >= 3  # several segments, each re-asked
    assert opts.tiered.access_key_id is None and opts.tiered.secret_access_key is None
    planned_urls = {k: u for g in groups for s in g for k, u in s.urls}
    expire()
    rows = read(opts.tiered, groups)
    assert [o for o, _ in rows] == list(range(end))
    assert all(v.startswith(b"v%07d-" % o) for o, v in rows)
    # the plan's URLs themselves are untouched (a task retried by Spark re-asks again)
    assert {k: u for g in groups for s in g for k, u in s.urls} == planned_urls


def test_a_reask_that_cannot_succeed_fails_the_read_in_one_line(broker, s3, topic) -> None:
    from yak.tiered.presign_http import PresignedUrlRefusedError

    name, end = topic
    opts, groups = planned(broker, name, end)
    gone = f"http://127.0.0.1:{free_port()}"  # the gateway stopped: nothing listens there
    settings = replace(opts.tiered, gateway_url=gone)
    expire()
    with pytest.raises(PresignedUrlRefusedError) as e:
        read(settings, groups[:1])
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert "403" in msg and "expired" in msg.lower(), msg
    assert "fresh URLs could not be asked" in msg and gone in msg, msg
    assert "tiered.presign.expires" in msg, msg


@pytest.mark.slow  # ~14 s each here (a topic of its own, retention, the wait to expire)
@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_segment_deleted_after_planning_follows_failondataloss(
        broker, s3, fail_on_data_loss, caplog) -> None:
    from yak.spark.offsets import DataLossError

    name = f"reask-gone-{str(fail_on_data_loss).lower()}"
    end = tiered_topic(broker, s3, name)
    opts, groups = planned(broker, name, end,
                           failOnDataLoss=str(fail_on_data_loss).lower())
    first = groups[0][0]
    assert first.start == 0
    # remote retention deletes the oldest segments: retention.bytes over the whole log
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource("topic", name, incremental_configs=[
        ConfigEntry("retention.bytes", str(300 << 10),
                    incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)

    def deleted() -> bool:
        m = manifest(s3, PREFIX, name, 0)
        return m is not None and all(s.segment_id != first.segment.segment_id
                                     for s in m.copied)
    wait_until(deleted, 60, f"{name}'s first remote segment deleted by retention", every=0.3)
    expire()
    if fail_on_data_loss:
        with pytest.raises(DataLossError) as e:
            read(opts.tiered, groups, fail_on_data_loss=True)
        msg = str(e.value)
        assert "\n" not in msg and first.segment.segment_id in msg, msg
        assert "no longer in the remote log" in msg and "failOnDataLoss=false" in msg, msg
        return
    survivors = {s.segment_id for s in manifest(s3, PREFIX, name, 0).copied}
    with caplog.at_level(logging.WARNING, logger="yak.spark.tiered_read"):
        rows = read(opts.tiered, groups, fail_on_data_loss=False)
    assert any(first.segment.segment_id in r.getMessage() and "skipped" in r.getMessage()
               for r in caplog.records)
    kept = [s for g in groups for s in g if s.segment.segment_id in survivors]
    assert kept and rows  # what survived is read, through fresh URLs
    assert all(v.startswith(b"v%07d-" % o) for o, v in rows)
    assert {o for o, _ in rows} >= {o for s in kept for o in range(s.start, s.end)}
    assert not any(first.start <= o < first.end for o, _ in rows)
