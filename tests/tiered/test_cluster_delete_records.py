"""DeleteRecords on a tiered partition of a 3-broker cluster (issue 25): answered only once
the new log start offset is committed to the remote log metadata in etcd, so the leader
SIGKILLed right after the answer, before any of its rounds could commit it, does not undo
it: the new leader reads the committed start (ListOffsets EARLIEST, Fetch below it refused).

Real `yak serve` processes on a real etcd and SeaweedFS. The copy quota is small and more
segments wait to be uploaded when DeleteRecords comes, so the leader's round (which, in
the old code, committed the start after its uploads) is seconds away from any commit.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import YakCluster, cluster_factory, etcd, keys  # noqa: F401
from tests.tiered.seaweed import SeaweedS3
from tests.tiered.test_broker_tiered import (  # noqa: F401 - `s3` is a fixture
    consume_confluent,
    produce,
    s3,
    tiered_settings,
    wait_for,
)
from tests.tiered.test_delete_records_durable import _check_start, _delete_records

TOPIC = "cdel"
SEGMENT = 256 << 10


def _leader(c: YakCluster) -> int:
    md = AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(TOPIC, timeout=10)
    return int(md.topics[TOPIC].partitions[0].leader)


@pytest.mark.slow
def test_delete_records_answered_then_the_leader_killed_the_new_leader_keeps_the_start(
        s3: SeaweedS3, cluster_factory: Callable[..., YakCluster]) -> None:  # noqa: F811
    c = cluster_factory(3, **tiered_settings(s3, "cdel"), **{
        "remote.log.manager.copy.max.bytes.per.second": str(128 << 10)})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 3, config={
        "segment.bytes": str(SEGMENT), "remote.storage.enable": "true",
        "local.retention.bytes": str(SEGMENT)})])[TOPIC].result(30)
    produce(c, TOPIC, 0, 1000)  # type: ignore[arg-type]  # acks=all
    leader = _leader(c)

    def local_start() -> int:
        logs = sorted((c[leader].data_dir / f"{TOPIC}-0").glob("*.log"))
        return int(logs[0].stem) if logs else -1
    wait_for(lambda: local_start() > 500, 60, "uploaded segments deleted on the leader")
    produce(c, TOPIC, 1000, 800)  # type: ignore[arg-type]  # ~3 segments: a paced round
    assert _delete_records(c[leader], 300, TOPIC) == 300
    c[leader].kill()
    wait_for(lambda: _leader(c) not in (leader, -1), 30, "a new leader")
    new = c[_leader(c)]
    _check_start(new, 300, TOPIC)
    assert consume_confluent(new, TOPIC, 300, 1500) == list(range(300, 1800))
    for node in (1, 2, 3):
        assert "Traceback" not in c[node].log(), node
