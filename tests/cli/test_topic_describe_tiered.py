"""`yak topic describe` of a tiered topic (issue 25): per partition the leader's local log
start, the remote start, what is uploaded, local and remote bytes, against a real broker
process with a `file://` store; a plain topic keeps its plain columns."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.cli.test_cli import ok
from tests.conftest import YakBroker
from tests.tiered.test_broker_tiered import create_topic, local_segments, produce, wait_for
from tests.tiered.test_tiered_metrics import file_store_settings


def test_describe_shows_local_and_remote(tmp_path: Path,
                                         broker_factory: Callable[..., YakBroker]) -> None:
    store = tmp_path / "store"
    store.mkdir()
    b = broker_factory(**file_store_settings(store))
    create_topic(b, "split", **{"segment.bytes": str(256 << 10),
                                "remote.storage.enable": "true",
                                "local.retention.bytes": str(512 << 10)})
    create_topic(b, "plain")
    produce(b, "split", 0, 3000)
    wait_for(lambda: min(int(p.stem) for p in local_segments(b, "split")) > 1000, 60,
             "local segments deleted after upload")
    bs = ["--bootstrap", b.bootstrap]

    (p,) = json.loads(ok("topic", "describe", "split", "--format", "json", *bs))["partitions"]
    local_start = min(int(f.stem) for f in local_segments(b, "split"))
    assert p["log_start_offset"] == 0 and p["log_end_offset"] == 3000
    assert p["local_start"] == local_start
    assert p["remote_start"] == 0
    assert local_start <= p["uploaded_upto"] < 3000
    remote_logs = sorted(store.rglob("*.log"))
    assert p["remote_segments"] == len(remote_logs) > 4
    assert p["remote_bytes"] == sum(f.stat().st_size for f in remote_logs)
    assert p["local_bytes"] == sum(f.stat().st_size for f in local_segments(b, "split"))

    text = ok("topic", "describe", "split", *bs)
    head, row = text.splitlines()[1:3]
    assert head.split()[-6:] == ["LOCAL-START", "REMOTE-START", "UPLOADED-TO",
                                 "LOCAL-BYTES", "REMOTE-BYTES", "REMOTE-SEGS"]
    assert row.split()[6:9] == [str(local_start), "0", str(p["uploaded_upto"])]
    assert "Remote:" not in text

    (q,) = json.loads(ok("topic", "describe", "plain", "--format", "json", *bs))["partitions"]
    assert "local_start" not in q
    assert "LOCAL-START" not in ok("topic", "describe", "plain", *bs)
