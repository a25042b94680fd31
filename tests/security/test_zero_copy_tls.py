"""Zero-copy fetch (issue 28) leaves TLS alone: one broker with a PLAINTEXT listener (whose
Fetch records go out with sendfile) and an SSL listener (which encrypts in user space, so
it reads the records into memory as before). confluent-kafka consumers on both read the
same records, in order, across several segments (small segment.bytes) and with small
fetches, so many responses hold records of more than one segment read.

A follower fetching over a TLS listener: tests/cluster/test_cluster_inter_broker_security.py
(replica fetches over SASL_SSL between three `yak serve` processes).
"""

from __future__ import annotations

import os
from typing import Any

from security.wire import consume, produce, rdkafka

SMALL_FETCHES = {"fetch.max.bytes": 65536, "message.max.bytes": 65536,
                 "max.partition.fetch.bytes": 16384}


def test_plaintext_and_tls_consumers_read_the_same_records(secured_broker: Any,
                                                           certs: Any) -> None:
    b = secured_broker(["PLAINTEXT", "SSL"], **{"log.segment.bytes": "16384",
                                                "num.partitions": "1"})
    plain = rdkafka(b.addr("PLAINTEXT"))
    tls = rdkafka(b.addr("SSL"), "SSL", certs)
    values = [b"%05d-" % i + os.urandom(300) for i in range(2000)]
    # Batches of at most 4 KiB: a batch over segment.bytes would be refused.
    assert set(produce({**plain, "batch.size": 4096, "linger.ms": 5}, "zc-tls", values)) \
        == {None}
    assert len(list(b.data_dir.rglob("*.log"))) > 3
    assert consume({**tls, **SMALL_FETCHES}, "zc-tls", len(values), timeout=60) == values
    assert consume({**plain, **SMALL_FETCHES}, "zc-tls", len(values), timeout=60) == values
